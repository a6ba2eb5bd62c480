// vxqa/kernel/decode_args.cuh — what the decode and combine kernels receive (by value).
// Filled by the host API from DecodeParams and a DecodePlan; no host-side types in here.
#pragma once
#include <vxqa/common.cuh>
#include <vxqa/numeric/fast_divmod.cuh>
#include <vxqa/paged/paged_kv.cuh>

namespace vxqa {

// Bits the kernels set in the workspace's error word.
enum DecodeError : uint32_t {
  kDecodeErrorBadLength = 1u,  // a length < 0, above max_context or past the block table
  kDecodeErrorBadPage = 2u,    // a block-table id that a valid length uses is outside [0, num_pages)
};

struct DecodeKernelArgs {
  const void* q;  // [B, Hq, D] of the Config's q/out type (fp16 or bf16)
  int64_t q_batch_stride, q_head_stride;  // elements
  void* out;      // [B, Hq, D], same type
  int64_t out_batch_stride, out_head_stride;
  float* lse;       // [B, Hq] or null

  PagedKvLayout kv;
  int page_size;
  PageSize<0> page_divmod;  // prepared on the host: no divisor set-up in every thread
  int max_pages_per_seq;
  int num_pages;  // ids outside [0, num_pages) are never dereferenced
  const int32_t* seq_lens;  // [B], device

  int batch;
  int num_kv_heads;
  int group_size;
  int m_tiles;  // ceil(group_size / 8)

  int max_context;   // capacity the grid was planned for
  int chunk_tokens;  // split-KV chunk, aligned to absolute token positions
  int num_chunks;    // ceil(max_context / chunk_tokens); 1 = no combine

  float qk_scale_log2;  // softmax_scale * log2(e), times k_scale unless k_scale_ptr is given
  float v_scale;
  const float* k_scale_ptr;  // device scalars read at each launch (a captured graph follows
  const float* v_scale_ptr;  // their updates), or null: the values above

  float* partial_o;    // [max_batch, Hq, num_chunks, D], O of a chunk divided by its sum
  float* partial_lse;  // [max_batch, Hq, num_chunks], base-2 log-sum-exp of a chunk
  uint32_t* errors;    // DecodeError bits of the step
  // With several chunks: [max_batch, Hq, num_chunks] beside partial_lse, the DecodeError
  // bits of the CTA that computed the chunk, written with its partial; the decode kernel
  // zeroes `errors` and the combine ORs these into it, so no memset comes before the step.
  // Null with one chunk: decode() zeroes `errors` and the CTAs OR into it.
  uint32_t* chunk_errors;
};

#if VXQA_IS_CUDA_COMPILER
// The scales a launch uses: from the device scalars when given.
VXQA_DEVICE float qk_scale_log2_of(const DecodeKernelArgs& a) {
  return a.k_scale_ptr ? a.qk_scale_log2 * *a.k_scale_ptr : a.qk_scale_log2;
}
VXQA_DEVICE float v_scale_of(const DecodeKernelArgs& a) { return a.v_scale_ptr ? *a.v_scale_ptr : a.v_scale; }
#endif

// A length the kernels may use; anything else is flagged and yields NaN outputs.
VXQA_HD bool length_is_valid(int len, const DecodeKernelArgs& a) {
  return len >= 0 && len <= a.max_context &&
         int64_t(len) <= int64_t(a.max_pages_per_seq) * a.page_size;
}

}  // namespace vxqa
