// vxqa/api/plan.cuh — a DecodePlan for a Config, made once at setup from capacity. Host
// code only (no kernels), so plain C++ translation units can plan and validate too.
#pragma once
#include <cstdint>
#include <string>
#include <vxqa/api/params.cuh>
#include <vxqa/kernel/config.cuh>
#include <vxqa/kernel/split_plan.cuh>

namespace vxqa {

// chunk_tokens = 0 picks one: the largest multiple of the SM70 body's round (kCtaTokens)
// that still gives about `ctas_per_sm` CTAs per SM at full capacity, and at least
// `min_chunk_rounds` rounds long (4 suits the SM70 path; make_decode_plan without sm_count,
// in api/decode.cuh, asks the device and picks for the path it runs). An explicit chunk is
// a multiple of kChunkMultiple, which either body runs.
// max_window > 0: every step's sliding window will be 1..max_window keys, and the chunks
// cover only what a window reaches (plan_span): a windowed step costs what a step over
// max_window keys costs. The Config must have the window (opt::Variant<kSlidingWindow>).
// max_q_len > 1: steps may have up to that many query tokens a sequence (DecodeParams::
// q_indptr); the Config's opt::MaxQueryLen must allow it. The rows of a (sequence, KV head),
// G · q_len, are cut into CTAs of rows_per_cta (row_tiling).
template <class Config>
Status make_decode_plan(int max_batch, int max_context, int num_kv_heads, int group_size,
                        int sm_count, DecodePlan* plan, int chunk_tokens = 0, int ctas_per_sm = 4,
                        int min_chunk_rounds = 1, int max_window = 0, int max_q_len = 1,
                        bool sm80_body = false) {
  if (!plan) return Status::invalid("plan", "is null");
  if (max_batch < 1) return Status::invalid("max_batch", "must be >= 1");
  if (max_context < 1) return Status::invalid("max_context", "must be >= 1");
  if (num_kv_heads < 1) return Status::invalid("num_kv_heads", "must be >= 1");
  if (group_size < 1) return Status::invalid("group_size", "must be >= 1");
  if (sm_count < 1) return Status::invalid("sm_count", "must be >= 1");
  if (ctas_per_sm < 1) return Status::invalid("ctas_per_sm", "must be >= 1");
  if (min_chunk_rounds < 1 || min_chunk_rounds > 64)
    return Status::invalid("min_chunk_rounds", "must be in 1..64");
  if (max_window < 0) return Status::invalid("max_window", "must be >= 0 (0: no window)");
  if (max_window > 0 && !Config::Variant::kWindow)
    return Status::invalid("max_window", "needs a Config with the sliding window (opt::Variant<kSlidingWindow>)");
  if (chunk_tokens < 0 || chunk_tokens % Config::kChunkMultiple != 0)
    return Status::invalid("chunk_tokens", "must be 0 (auto) or a multiple of " +
                                               std::to_string(Config::kChunkMultiple));
  if (max_q_len < 1 || max_q_len > Config::kMaxQueryLen)
    return Status::invalid("max_q_len", std::to_string(max_q_len) + " is outside 1..the Config's opt::MaxQueryLen (" +
                                            std::to_string(Config::kMaxQueryLen) + ")");
  const int m_tiles = row_tiling<Config>(group_size, max_q_len, sm80_body).m_tiles;
  // Grid limits: sequences run along gridDim.z, heads along y; the combine's y is
  // (sequence, query token).
  if (max_batch > 65535) return Status::invalid("max_batch", "must be <= 65535 (grid limit)");
  if (int64_t(max_batch) * max_q_len > 65535)
    return Status::invalid("max_q_len", "times max_batch must be <= 65535 (grid limit)");
  if (int64_t(num_kv_heads) * m_tiles > 65535)
    return Status::invalid("num_kv_heads", "times the CTAs a KV head's rows take must be <= 65535 (grid limit)");
  const int span = plan_span(max_context, max_window, max_q_len);
  const int chunk = chunk_tokens ? chunk_tokens
                                 : choose_chunk_tokens(max_batch, span, num_kv_heads * m_tiles,
                                                       Config::kCtaTokens, ctas_per_sm * sm_count, min_chunk_rounds);
  if (!chunk_end_fits(max_context, chunk))
    return Status::invalid("max_context", std::to_string(max_context) + " plus the chunk (" +
                                              std::to_string(chunk) + " tokens) must fit in an int");
  DecodePlan p;
  p.max_batch = max_batch;
  p.max_context = max_context;
  p.num_kv_heads = num_kv_heads;
  p.group_size = group_size;
  p.chunk_tokens = chunk;
  p.num_chunks = static_cast<int>((int64_t(span) + p.chunk_tokens - 1) / p.chunk_tokens);
  p.max_window = max_window;
  p.max_q_len = max_q_len;
  p.workspace_bytes = plan_workspace_bytes(max_batch * max_q_len, num_kv_heads * group_size, p.num_chunks,
                                           Config::kHeadDim);
  *plan = p;
  return Status();
}

}  // namespace vxqa
