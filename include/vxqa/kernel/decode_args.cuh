// vxqa/kernel/decode_args.cuh — what the decode and combine kernels receive (by value).
// Filled by the host API from DecodeParams and a DecodePlan; no host-side types in here.
#pragma once
#include <vxqa/common.cuh>
#include <vxqa/kernel/error_bits.cuh>
#include <vxqa/numeric/fast_divmod.cuh>
#include <vxqa/paged/paged_kv.cuh>

namespace vxqa {

struct DecodeKernelArgs {
  const void* q;  // [rows, Hq, D] of the Config's q/out type (fp16 or bf16)
  int64_t q_batch_stride, q_head_stride;  // elements (batch: between rows)
  void* out;      // [rows, Hq, D], same type
  int64_t out_batch_stride, out_head_stride;
  float* lse;       // [rows, Hq] or null

  PagedKvLayout kv;
  int page_size;
  PageSize<0> page_divmod;  // prepared on the host: no divisor set-up in every thread
  int max_pages_per_seq;
  int num_pages;  // ids outside [0, num_pages) are never dereferenced
  const int32_t* seq_lens;  // [B], device

  int batch;
  int num_kv_heads;
  int group_size;
  int m_tiles;  // CTAs a (sequence, KV head) along gridDim.y (row_tiling)
  // Multi-token queries (a kMultiToken Config): sequence b's rows of q, out and lse are
  // q_indptr[b] .. q_indptr[b + 1] - 1 (null: row b, one token); at most max_q_len of them.
  // A CTA takes rows_per_cta (token, head) rows of its KV head, row_warps warps sharing each
  // K/V tile (the SM80 body; 1 in the SM70 body).
  const int32_t* q_indptr;
  int max_q_len;
  int row_warps;
  int rows_per_cta;

  int max_context;   // capacity the grid was planned for
  int chunk_tokens;  // split-KV chunk, aligned to absolute token positions
  int num_chunks;    // ceil(max_context / chunk_tokens); 1 = no combine

  float qk_scale_log2;  // softmax_scale * log2(e), times k_scale unless k_scale_ptr is given
  float v_scale;
  const float* k_scale_ptr;  // device scalars read at each launch (a captured graph follows
  const float* v_scale_ptr;  // their updates), or null: the values above

  float* partial_o;    // [max_batch * max_q_len, Hq, num_chunks, D], O of a chunk divided by its sum
  float* partial_lse;  // [max_batch * max_q_len, Hq, num_chunks], base-2 log-sum-exp of a chunk
  uint32_t* errors;    // ErrorBit bits of the step
  // With several chunks: [max_batch, Hq, num_chunks] beside partial_lse, the ErrorBit
  // bits of the CTA that computed the chunk, written with its partial; the decode kernel
  // zeroes `errors` and the combine ORs these into it, so no memset comes before the step.
  // Null with one chunk: decode() zeroes `errors` and the CTAs OR into it.
  uint32_t* chunk_errors;

  // The variant's run-time values (kernel/attention_variant.cuh), read only by a Config
  // whose variant has the flag.
  int window;          // sliding window in tokens; 0: none
  float softcap_log2;  // logit soft-cap · log2(e); 0: none
  const float* sinks;  // [Hq] fp32 sink logits (natural log), or null
};

#if VXQA_IS_CUDA_COMPILER
// The scales a launch uses: from the device scalars when given. A device scale that is not
// finite or not > 0 gives NaN, so every output it touches is NaN (its error bit:
// device_scale_errors); validate() has checked the host values.
VXQA_DEVICE float qk_scale_log2_of(const DecodeKernelArgs& a) {
  // Written as a select of the product (not the product of a selected scale): this form
  // keeps every main loop's instruction count (sass.phases) as it was before the check.
  if (!a.k_scale_ptr) return a.qk_scale_log2;
  const float k_scale = *a.k_scale_ptr;
  return scale_is_valid(k_scale) ? a.qk_scale_log2 * k_scale : quiet_nan();
}
VXQA_DEVICE float v_scale_of(const DecodeKernelArgs& a) {
  return a.v_scale_ptr ? valid_scale_or_nan(*a.v_scale_ptr) : a.v_scale;
}
// The step's kErrorBadKScale / kErrorBadVScale bits (0 where the scales are host values),
// set by the combine (several chunks) or reset_errors_kernel (one chunk): in the decode
// kernel these few instructions made ptxas spill on sm_70 (D128 with 2 stages, and D128
// with ConvertAt::kPublish, under NVRTC 12.8).
VXQA_DEVICE uint32_t device_scale_errors(const DecodeKernelArgs& a) {
  return scale_error_bits(a.k_scale_ptr ? *a.k_scale_ptr : 1.f, a.v_scale_ptr ? *a.v_scale_ptr : 1.f);
}
#endif

// A length the kernels may use; anything else is flagged and yields NaN outputs.
VXQA_HD bool length_is_valid(int len, const DecodeKernelArgs& a) {
  return len >= 0 && len <= a.max_context &&
         int64_t(len) <= int64_t(a.max_pages_per_seq) * a.page_size;
}

// A sequence's query tokens: rows first .. first + count - 1 of q, out and lse. `valid`:
// count is in 0..max_q_len (else nothing of the sequence is written, and its rows' indices
// are not trusted).
struct SeqQueries {
  int first, count;
  bool valid;
};
template <bool kMultiToken>
VXQA_HD SeqQueries seq_queries(const DecodeKernelArgs& a, int seq_index) {
  if constexpr (kMultiToken) {
    if (a.q_indptr) {
      const int first = a.q_indptr[seq_index], count = a.q_indptr[seq_index + 1] - first;
      return SeqQueries{first, count, first >= 0 && count >= 0 && count <= a.max_q_len};
    }
  }
  return SeqQueries{seq_index, 1, true};
}

}  // namespace vxqa
