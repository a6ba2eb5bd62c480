// vxqa/api/params.cuh — what a user passes for one decode step, and what comes back.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vxqa/kernel/config.cuh>
#include <vxqa/numeric/act_type.cuh>

namespace vxqa {

// One decode step of a GQA model over a paged KV cache. All pointers are device pointers;
// the host never dereferences any of them.
struct DecodeParams {
  // q: [rows, Hq, D] of qo_type, Hq = num_kv_heads * group_size; query head h uses KV
  // head h / G. A row is one query token: sequence b's is row b, or with q_indptr its
  // tokens' rows. bf16 q is rounded to fp16 for the MMAs: |q| above 65504 becomes inf (and
  // the output NaN), below 2^-14 loses precision.
  const void* q = nullptr;
  int64_t q_batch_stride = 0, q_head_stride = 0;  // elements (q_batch_stride: between rows); D is contiguous
  ActType qo_type = ActType::kFp16;  // of q and out; must be the Config's Qo
  // out: [rows, Hq, D] of qo_type; lse: optional fp32 [rows, Hq] (natural log), contiguous.
  void* out = nullptr;
  int64_t out_batch_stride = 0, out_head_stride = 0;
  float* lse = nullptr;

  // Cache: logical [num_pages, page_size, Hkv, D] (vLLM NHD), any strides (elements),
  // K and V as two pointers sharing the strides. 1-byte E5M2 or 2-byte fp16 elements.
  // cache_type says which, and must be the Config's: it has no default, because a byte
  // cache may hold E5M2 or E4M3 codes (vLLM's "fp8" is E4M3) and is never assumed to be one.
  KvType cache_type = KvType::kUnset;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  int64_t page_stride = 0, token_stride = 0, head_stride = 0;
  int page_size = 0;
  // Pages in the K/V pool: every block-table id must lie in [0, num_pages). The kernel
  // checks each id it uses; a bad one sets kDecodeErrorBadPage and yields NaN for that
  // sequence, and nothing outside the pool is read.
  int num_pages = 0;
  // block_table: int32 [batch, max_pages_per_seq] with a row stride (elements).
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  int max_pages_per_seq = 0;
  // seq_lens: int32 [batch], read by the kernel only (CUDA-graph safe).
  const int32_t* seq_lens = nullptr;

  int batch = 0;
  int num_kv_heads = 0;
  int group_size = 0;
  int head_dim = 0;
  float k_scale = 1.f;  // real K = stored K * k_scale
  float v_scale = 1.f;
  // Device fp32 scalars, read by the kernels at every launch instead of k_scale / v_scale
  // when given: a captured graph then follows scale updates.
  const float* k_scale_ptr = nullptr;
  const float* v_scale_ptr = nullptr;
  float softmax_scale = 0.f;

  // Attention variant. A value other than off needs a Config whose opt::Variant has its
  // flag (kernel/attention_variant.cuh); a Config with the flag takes off as well.
  // sliding_window > 0: the query at position p (len - 1) sees the keys p - W + 1 .. p only
  // (vLLM's sliding_window; FlashInfer's window_left + 1); 0: the whole context. At most the
  // plan's max_window when the plan has one.
  int sliding_window = 0;
  // logit_softcap > 0: each scaled score s = softmax_scale · q·k becomes cap · tanh(s / cap)
  // (Gemma 2; FlashInfer's logits_soft_cap); 0: off.
  float logit_softcap = 0.f;
  // sinks: fp32 [Hq], device: one logit (natural log) a query head that joins its softmax
  // denominator with no value row (gpt-oss), and its LSE; null: none. A head's -inf: that
  // head has none (a sequence without tokens then gives it LSE -inf, as without sinks).
  const float* sinks = nullptr;

  // Multi-token queries (a Config with opt::MaxQueryLen<N>, N > 1: speculative-decoding
  // verification, MTP, chunked decode). q_indptr: int32 [batch + 1], device, non-decreasing
  // from 0: sequence b's n = q_indptr[b + 1] - q_indptr[b] query tokens (0..max_q_len) are
  // rows q_indptr[b] .. q_indptr[b + 1] - 1 of q, out and lse (vLLM's query_start_loc,
  // FlashInfer's qo_indptr). They are the sequence's last n tokens, already in the cache:
  // token i (0-based) of a sequence of length len sees keys 0 .. len - n + i, and with a
  // window the sliding_window keys ending there. len < n, or n outside 0..max_q_len, is a
  // bad length (kDecodeErrorBadLength; that sequence's rows NaN where n is in range).
  // null: one query token a sequence (row b), max_q_len 1.
  const int32_t* q_indptr = nullptr;
  int max_q_len = 1;  // the most query tokens of any sequence: 1..plan.max_q_len
};

enum class StatusCode { kOk, kInvalidArgument, kCudaError };

class Status {
 public:
  Status() = default;
  static Status invalid(std::string field, std::string why) {
    return Status(StatusCode::kInvalidArgument, std::move(field), std::move(why));
  }
  static Status cuda(std::string what, std::string why) {
    return Status(StatusCode::kCudaError, std::move(what), std::move(why));
  }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // The offending field (e.g. "page_size"), empty when ok.
  const std::string& field() const { return field_; }
  // "field: why", empty when ok.
  std::string message() const { return ok() ? std::string() : field_ + ": " + why_; }

 private:
  Status(StatusCode code, std::string field, std::string why)
      : code_(code), field_(std::move(field)), why_(std::move(why)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string field_, why_;
};

}  // namespace vxqa
