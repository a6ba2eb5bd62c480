// vxqa/api/validate.cuh — every check of a decode step that the host can make without
// touching device memory, each naming the field at fault. Lengths live on the device:
// pass a host copy to have them checked here too; the kernel checks them regardless
// (a bad one sets an error bit and yields NaN for that sequence, never a silent answer).
#pragma once
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vxqa/api/params.cuh>
#include <vxqa/kernel/config.cuh>
#include <vxqa/kernel/split_plan.cuh>
#include <vxqa/numeric/fast_divmod.cuh>

namespace vxqa {
namespace detail {

inline bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}
inline std::string str(long long v) { return std::to_string(v); }

// Rows of `d` elements at offsets i1*stride1 + i2*stride2 (i1 < n1, i2 < n2) never share
// an element: the smaller stride (by size, over an extent > 1) spans at least d, the larger
// at least the whole inner extent. Returns 0 when they are disjoint, else which stride
// (1 or 2) is too small.
inline int overlapping_stride(int64_t stride1, int64_t n1, int64_t stride2, int64_t n2, int64_t d) {
  struct Dim { int64_t stride, n; int which; };
  Dim dims[2];
  int count = 0;
  if (n1 > 1) dims[count++] = Dim{stride1 < 0 ? -stride1 : stride1, n1, 1};
  if (n2 > 1) dims[count++] = Dim{stride2 < 0 ? -stride2 : stride2, n2, 2};
  if (count == 2 && dims[1].stride < dims[0].stride) std::swap(dims[0], dims[1]);
  if (count >= 1 && dims[0].stride < d) return dims[0].which;
  if (count == 2 && dims[1].stride < dims[0].stride * dims[0].n) return dims[1].which;
  return 0;
}

// A per-tensor scale given as a value or as a device fp32 scalar (which wins): the value
// must then be finite and > 0, the pointer 4-byte aligned. `name` is "k_scale" or "v_scale".
inline Status check_scale(const char* name, float value, const float* device_value) {
  if (device_value) {
    return aligned(device_value, 4) ? Status() : Status::invalid(std::string(name) + "_ptr", "must be 4-byte aligned");
  }
  return std::isfinite(value) && value > 0.f ? Status() : Status::invalid(name, "must be finite and > 0");
}

// A cache format is stated, never assumed: kUnset is refused (decode, append_kv, Decoder).
inline Status check_cache_type_set(KvType t) {
  return t != KvType::kUnset ? Status()
                             : Status::invalid("cache_type", "is not set: say the cache's element format "
                                                             "(KvType::kE5M2, kE4M3, kFp16 or kBf16); a byte cache "
                                                             "may hold E5M2 or E4M3 codes, a 2-byte one fp16 or "
                                                             "bf16, and vxqa never guesses");
}

}  // namespace detail

// Checks a plan against the Config it will launch.
template <class Config>
Status validate_plan(const DecodePlan& plan) {
  if (plan.max_batch < 1) return Status::invalid("plan.max_batch", "must be >= 1");
  if (plan.max_context < 1) return Status::invalid("plan.max_context", "must be >= 1");
  if (plan.chunk_tokens < Config::kChunkMultiple || plan.chunk_tokens % Config::kChunkMultiple != 0)
    return Status::invalid("plan.chunk_tokens", "must be a positive multiple of " +
                                                    detail::str(Config::kChunkMultiple) + " for this Config");
  if (!chunk_end_fits(plan.max_context, plan.chunk_tokens))
    return Status::invalid("plan.max_context", "plus plan.chunk_tokens must fit in an int");
  if (plan.max_window < 0) return Status::invalid("plan.max_window", "must be >= 0");
  if (plan.max_window > 0 && !Config::Variant::kWindow)
    return Status::invalid("plan.max_window", "is set, but the Config has no sliding window");
  if (plan.max_q_len < 1 || plan.max_q_len > Config::kMaxQueryLen)
    return Status::invalid("plan.max_q_len", detail::str(plan.max_q_len) + " is outside 1..the Config's "
                                             "opt::MaxQueryLen (" + detail::str(Config::kMaxQueryLen) + ")");
  const int span = plan_span(plan.max_context, plan.max_window, plan.max_q_len);
  if (int64_t(plan.num_chunks) != (int64_t(span) + plan.chunk_tokens - 1) / plan.chunk_tokens)
    return Status::invalid("plan.num_chunks", "does not match the plan's span (max_context, or max_window + max_q_len + " +
                                                  detail::str(kWindowChunkAlign - 2) + ") / chunk_tokens");
  if (plan.max_batch > 65535) return Status::invalid("plan.max_batch", "must be <= 65535 (grid limit)");
  if (int64_t(plan.max_batch) * plan.max_q_len > 65535)
    return Status::invalid("plan.max_q_len", "times plan.max_batch must be <= 65535 (grid limit)");
  if (plan.num_kv_heads < 1 || plan.group_size < 1)
    return Status::invalid("plan.num_kv_heads", "plan heads and group must be >= 1");
  // The most CTAs a KV head's rows take, whichever body runs (the SM70 body's 8 rows a CTA).
  if (int64_t(plan.num_kv_heads) * row_tiling<Config>(plan.group_size, plan.max_q_len, false).m_tiles > 65535)
    return Status::invalid("plan.num_kv_heads", "times the CTAs a KV head's rows take must be <= 65535 (grid limit)");
  // A plan made for another head dim would size the partials wrongly.
  const size_t needed = plan_workspace_bytes(plan.max_batch * plan.max_q_len, plan.num_kv_heads * plan.group_size,
                                             plan.num_chunks, Config::kHeadDim);
  if (plan.workspace_bytes < needed)
    return Status::invalid("plan.workspace_bytes", detail::str(static_cast<long long>(plan.workspace_bytes)) +
                                                       " is less than this Config needs (" +
                                                       detail::str(static_cast<long long>(needed)) + ")");
  return Status();
}

template <class Config>
Status validate(const DecodeParams& p, const DecodePlan& plan, const void* workspace,
                size_t workspace_bytes, const int32_t* host_seq_lens = nullptr) {
  using detail::aligned;
  using detail::str;
  const Status plan_status = validate_plan<Config>(plan);
  if (!plan_status.ok()) return plan_status;

  // Shapes against the Config and the plan.
  if (p.head_dim != Config::kHeadDim)
    return Status::invalid("head_dim", str(p.head_dim) + " does not match the Config's " +
                                           str(Config::kHeadDim));
  if (p.qo_type != Config::kQo)
    return Status::invalid("qo_type", std::string(act_type_name(p.qo_type)) + " q/out given to a Config built for " +
                                          ActTraits<Config::kQo>::kName + " (DecodeConfig's Qo)");
  if (const Status set = detail::check_cache_type_set(p.cache_type); !set.ok()) return set;
  if (p.cache_type != Config::kKv)
    return Status::invalid("cache_type", std::string(kv_type_name(p.cache_type)) +
                                             " cache given to a Config built for " + KvTraits<Config::kKv>::kName +
                                             " (DecodeConfig's Kv)");
  if (p.group_size < 1) return Status::invalid("group_size", str(p.group_size) + " must be >= 1");
  if (p.group_size != plan.group_size)
    return Status::invalid("group_size", "differs from the plan's " + str(plan.group_size));
  if (p.num_kv_heads < 1) return Status::invalid("num_kv_heads", "must be >= 1");
  if (p.num_kv_heads != plan.num_kv_heads)
    return Status::invalid("num_kv_heads", "differs from the plan's " + str(plan.num_kv_heads));
  if (p.batch < 0 || p.batch > plan.max_batch)
    return Status::invalid("batch", str(p.batch) + " is outside 0..plan.max_batch (" + str(plan.max_batch) + ")");
  if (p.batch == 0) return Status();  // nothing to do: decode() launches nothing, uses no pointer
  // Query tokens a sequence.
  if (p.max_q_len < 1 || p.max_q_len > plan.max_q_len)
    return Status::invalid("max_q_len", str(p.max_q_len) + " is outside 1..plan.max_q_len (" + str(plan.max_q_len) +
                                            ")");
  if (p.q_indptr && !Config::kMultiToken)
    return Status::invalid("q_indptr", "is set, but the Config takes one query token a sequence "
                                       "(opt::MaxQueryLen<N>, N > 1, takes several)");
  if (!p.q_indptr && p.max_q_len > 1)
    return Status::invalid("q_indptr", "is null, but max_q_len is " + str(p.max_q_len) +
                                           ": several query tokens a sequence need their rows");
  if (p.q_indptr && !aligned(p.q_indptr, 4)) return Status::invalid("q_indptr", "must be 4-byte aligned");
  if (p.page_size < 1) return Status::invalid("page_size", "must be >= 1");
  if (!PageSize<Config::kPageSize>::matches(p.page_size))
    return Status::invalid("page_size", str(p.page_size) + " does not match the Config's compile-time " +
                                            str(Config::kPageSize));

  // Pointers: all needed but lse; 16-byte loads need 16-byte aligned rows.
  const int eb = Config::kElemBytes;
  if (!p.q) return Status::invalid("q", "is null");
  if (!aligned(p.q, 16)) return Status::invalid("q", "must be 16-byte aligned");
  // A stride only matters where its dimension has more than one row (framework views of
  // size-1 dimensions carry any stride).
  const int64_t q_heads = int64_t(p.num_kv_heads) * p.group_size;
  if (q_heads > 1 && (p.q_head_stride * 2) % 16)
    return Status::invalid("q_head_stride", "q rows must start 16-byte aligned (a multiple of 8)");
  // Rows of q, out and lse: one a sequence, or up to max_q_len a sequence with q_indptr.
  const int64_t rows = int64_t(p.batch) * p.max_q_len;
  if (rows > 1 && (p.q_batch_stride * 2) % 16)
    return Status::invalid("q_batch_stride", "q rows must start 16-byte aligned (a multiple of 8)");
  if (const int bad = detail::overlapping_stride(p.q_head_stride, q_heads, p.q_batch_stride, rows,
                                                  Config::kHeadDim))
    return Status::invalid(bad == 1 ? "q_head_stride" : "q_batch_stride",
                           "q rows of different heads or sequences overlap (stride too small, or 0)");
  if (!p.out) return Status::invalid("out", "is null");
  if (!aligned(p.out, 2)) return Status::invalid("out", "must be 2-byte aligned");
  if (const int bad = detail::overlapping_stride(p.out_head_stride, q_heads, p.out_batch_stride, rows,
                                                  Config::kHeadDim))
    return Status::invalid(bad == 1 ? "out_head_stride" : "out_batch_stride",
                           "out rows of different heads or sequences overlap (stride too small, or 0)");
  if (p.lse && !aligned(p.lse, 4)) return Status::invalid("lse", "must be 4-byte aligned");
  if (!p.k_cache) return Status::invalid("k_cache", "is null");
  if (!p.v_cache) return Status::invalid("v_cache", "is null");
  if (!aligned(p.k_cache, 16)) return Status::invalid("k_cache", "must be 16-byte aligned");
  if (!aligned(p.v_cache, 16)) return Status::invalid("v_cache", "must be 16-byte aligned");
  // The stride of a dimension of one row is never used (index 0): framework views of size-1
  // dimensions carry any stride.
  if (p.num_pages > 1 && (p.page_stride * eb) % 16)
    return Status::invalid("page_stride", "must be a multiple of 16 bytes");
  if (p.page_size > 1 && (p.token_stride * eb) % 16)
    return Status::invalid("token_stride", "must be a multiple of 16 bytes");
  if (p.num_kv_heads > 1 && (p.head_stride * eb) % 16)
    return Status::invalid("head_stride", "must be a multiple of 16 bytes");
  if (const int bad = detail::overlapping_stride(p.token_stride, p.page_size, p.head_stride, p.num_kv_heads,
                                                  Config::kHeadDim))
    return Status::invalid(bad == 1 ? "token_stride" : "head_stride",
                           "token rows of one page overlap (stride too small, or 0)");
  if (p.page_stride == 0 && p.max_pages_per_seq > 1 && p.num_pages > 1)
    return Status::invalid("page_stride", "is 0: every page would be the same memory");
  if (p.num_pages < 1)
    return Status::invalid("num_pages", "must be >= 1: the pages in the K/V pool, against which "
                                        "the kernel checks every block-table id");
  if (!p.block_table) return Status::invalid("block_table", "is null");
  if (!aligned(p.block_table, 4)) return Status::invalid("block_table", "must be 4-byte aligned");
  if (p.max_pages_per_seq < 1) return Status::invalid("max_pages_per_seq", "must be >= 1");
  if (p.batch > 1 && p.block_table_stride < p.max_pages_per_seq)
    return Status::invalid("block_table_stride", "is smaller than max_pages_per_seq");
  if (int64_t(p.max_pages_per_seq) * p.page_size < plan.max_context)
    return Status::invalid("max_pages_per_seq",
                           "block table too short: " + str(p.max_pages_per_seq) + " pages of " +
                               str(p.page_size) + " tokens hold less than plan.max_context (" +
                               str(plan.max_context) + ")");
  if (!p.seq_lens) return Status::invalid("seq_lens", "is null");
  if (!aligned(p.seq_lens, 4)) return Status::invalid("seq_lens", "must be 4-byte aligned");

  // Scales.
  for (const Status& scale : {detail::check_scale("k_scale", p.k_scale, p.k_scale_ptr),
                              detail::check_scale("v_scale", p.v_scale, p.v_scale_ptr)})
    if (!scale.ok()) return scale;
  if (!std::isfinite(p.softmax_scale) || p.softmax_scale <= 0.f)
    return Status::invalid("softmax_scale", "must be finite and > 0");
  const float qk_scale = p.softmax_scale * (p.k_scale_ptr ? 1.f : p.k_scale) * 1.4426950408889634f;  // as the kernel
  if (!std::isfinite(qk_scale) || qk_scale <= 0.f)
    return Status::invalid("softmax_scale", "softmax_scale * k_scale must be finite and > 0 in fp32");

  // The variant's values: each off, or on with a Config that has its flag.
  using Variant = typename Config::Variant;
  if (p.sliding_window < 0) return Status::invalid("sliding_window", "must be >= 0 (0: the whole context)");
  if (p.sliding_window > 0 && !Variant::kWindow)
    return Status::invalid("sliding_window", "is set, but the Config has no sliding window "
                                             "(opt::Variant<kSlidingWindow>)");
  if (plan.max_window > 0 && (p.sliding_window < 1 || p.sliding_window > plan.max_window))
    return Status::invalid("sliding_window", str(p.sliding_window) + " is outside 1..plan.max_window (" +
                                                 str(plan.max_window) + "): the plan's chunks cover no more");
  if (!std::isfinite(p.logit_softcap) || p.logit_softcap < 0.f)
    return Status::invalid("logit_softcap", "must be finite and >= 0 (0: off)");
  if (p.logit_softcap > 0.f && !Variant::kSoftCap)
    return Status::invalid("logit_softcap", "is set, but the Config has no soft-cap (opt::Variant<kLogitSoftCap>)");
  if (p.logit_softcap > 0.f && !(std::isfinite(p.logit_softcap * 1.4426950408889634f) &&
                                 std::isfinite(qk_scale / (p.logit_softcap * 1.4426950408889634f))))
    return Status::invalid("logit_softcap", "is too small: softmax_scale * k_scale / logit_softcap must be "
                                            "finite in fp32");
  if (p.sinks && !Variant::kSinks)
    return Status::invalid("sinks", "is set, but the Config has no sinks (opt::Variant<kAttentionSinks>)");
  if (p.sinks && !aligned(p.sinks, 4)) return Status::invalid("sinks", "must be 4-byte aligned");

  // Workspace.
  if (!workspace) return Status::invalid("workspace", "is null");
  if (!aligned(workspace, 256)) return Status::invalid("workspace", "must be 256-byte aligned");
  if (workspace_bytes < plan.workspace_bytes)
    return Status::invalid("workspace_bytes", str(static_cast<long long>(workspace_bytes)) +
                                                  " is less than the plan's " +
                                                  str(static_cast<long long>(plan.workspace_bytes)));

  if (host_seq_lens) {
    for (int b = 0; b < p.batch; ++b) {
      const int len = host_seq_lens[b];
      if (len < 0) return Status::invalid("seq_lens", "seq_lens[" + str(b) + "] = " + str(len) + " is negative");
      if (len > plan.max_context)
        return Status::invalid("seq_lens", "seq_lens[" + str(b) + "] = " + str(len) +
                                               " is above plan.max_context (" + str(plan.max_context) + ")");
    }
  }
  return Status();
}

}  // namespace vxqa
