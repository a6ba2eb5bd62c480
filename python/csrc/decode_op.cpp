// vxqa's decode on torch tensors (schemas in ops.cpp):
//   plan_decode     once per model shape: vxqa::Decoder::choose (Config and DecodePlan) as ints
//   decode_planned  every layer and step: that plan with the caller's workspace; validation and
//                   launches only (no device query, no allocation)
//   decode_out      the slow path: plans (device queries) and allocates its workspace every call
// The torch-side checks name the argument; vxqa's validation then names the DecodeParams
// field. Plans come from shapes only (batch capacity and max_context, never this step's
// lengths), so every op here can be captured in a CUDA graph and replayed as lengths change.
// Their fake kernels, for meta tensors and torch.compile, are in vxqa_torch/_fake.py.
// The attention variant (sliding_window, logit_softcap, sinks: vxqa::DecodeParams' fields)
// is a keyword argument of both decode ops; a plan says which of them its runs may use
// (plan_decode's variant bits) and the largest window (max_window).
// Multi-token queries (speculative-decoding verification, MTP): q_indptr (vxqa's
// DecodeParams::q_indptr, vLLM's query_start_loc) and max_q_len, keyword arguments of both
// decode ops; q, out and lse then have a row a query token, [num_tokens, ...], and the batch
// is the block table's. A plan says the most tokens a sequence its runs may have (max_q_len).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>
#include "launch.h"
#include "tensor_checks.h"

namespace vxqa_torch {
namespace {

// plan_decode's ints, in this order (vxqa_torch.DecodePlan names them: PLAN_FIELDS).
enum PlanField : int {
  kTag,  // kPlanTag: these ints came from plan_decode of this layout
  kDevice,
  kHeadDim,
  kCacheType,  // vxqa::KvType
  kQoType,     // vxqa::ActType
  kPageSize,
  kNumKvHeads,
  kGroupSize,
  kConfig,   // the Config's index in its family (decode_family.cuh)
  kVariant,  // vxqa::VariantFlag bits the runs may use (the plan was made for)
  kMaxBatch,
  kMaxContext,
  kMaxWindow,  // vxqa::DecodePlan::max_window: > 0, every run's window is 1..max_window
  kMaxQLen,    // vxqa::DecodePlan::max_q_len: the most query tokens a sequence of a run (1..kMaxQueryLen)
  kChunkTokens,
  kNumChunks,
  kWorkspaceBytes,
  kPlanFields
};
constexpr int64_t kPlanTag = 0x76787161'03;  // "vxqa", layout 3
// The tags of older layouts, refused by name: layout 1 had no variant and no max_window,
// layout 2 no max_q_len.
constexpr int64_t kPlanTagLayout1 = 0x76787161'01, kPlanTagLayout2 = 0x76787161'02;

const char* dtype_name(vxqa::ActType t) { return t == vxqa::ActType::kBf16 ? "BFloat16" : "Half"; }

// "an e5m2 cache", "a bf16 cache".
const char* article(vxqa::KvType t) { return t == vxqa::KvType::kBf16 ? "a " : "an "; }

// The attention variant's values, for both decode ops (vxqa_torch/_fake.py's check_variant):
// a window >= 0 that fits an int, a soft-cap finite and >= 0 that stays so (and nonzero) in
// fp32, sinks fp32 [num_q_heads] contiguous. vxqa's validate checks the rest (a soft-cap so
// small that softmax_scale * k_scale / cap overflows fp32), naming the same field.
void check_variant(int64_t sliding_window, double logit_softcap, const std::optional<at::Tensor>& sinks,
                   int64_t q_heads) {
  TORCH_CHECK_VALUE(sliding_window >= 0, "sliding_window: ", num(sliding_window),
                    " must be >= 0 (0: the whole context; W > 0: the last W keys)");
  to_int(sliding_window, "sliding_window");
  TORCH_CHECK_VALUE(logit_softcap >= 0 && logit_softcap < std::numeric_limits<double>::infinity(),
                    "logit_softcap: ", flt(logit_softcap), " must be finite and >= 0 (0: off)");
  const float cap = static_cast<float>(logit_softcap);
  TORCH_CHECK_VALUE(std::isfinite(cap * 1.4426950408889634f), "logit_softcap: ", flt(logit_softcap),
                    " is past fp32's range (logit_softcap * log2(e) must be finite in fp32)");
  TORCH_CHECK_VALUE(logit_softcap == 0 || cap > 0.f, "logit_softcap: ", flt(logit_softcap),
                    " rounds to 0 in fp32, which would turn the soft-cap off");
  if (!sinks) return;
  check_dtype(*sinks, "sinks", {at::kFloat});
  TORCH_CHECK_VALUE(sinks->dim() == 1 && sinks->size(0) == q_heads, "sinks: must be [num_q_heads] = [", num(q_heads),
                    "], got shape ", dims(sinks->sizes()));
  check_contiguous(*sinks, "sinks");
}

// The query tokens' layout, for both decode ops (vxqa_torch/_fake.py's check_queries):
// max_q_len 0 (the default) or 1..kMaxQueryLen; without q_indptr at most 1 (row b of q is
// sequence b's one token); q_indptr int32 [batch + 1], contiguous. Its values live on the
// device: the kernel checks each sequence's count (0..max_q_len, at most its length).
void check_queries(const std::optional<at::Tensor>& q_indptr, int64_t max_q_len, int64_t batch) {
  TORCH_CHECK_VALUE(max_q_len >= 0 && max_q_len <= kMaxQueryLen, "max_q_len: ", num(max_q_len), " must be in 0..",
                    num(kMaxQueryLen), " (the most query tokens of a sequence; 0: the default)");
  if (!q_indptr) {
    TORCH_CHECK_VALUE(max_q_len <= 1, "max_q_len: ", num(max_q_len), " query tokens a sequence need q_indptr (the "
                      "rows of each sequence's tokens); without it row b of q is sequence b's one token");
    return;
  }
  check_dtype(*q_indptr, "q_indptr", {at::kInt});
  TORCH_CHECK_VALUE(q_indptr->dim() == 1 && q_indptr->size(0) == batch + 1, "q_indptr: must be [batch + 1] = [",
                    num(batch + 1), "] (batch = block_table.size(0)), got shape ", dims(q_indptr->sizes()));
  check_contiguous(*q_indptr, "q_indptr");
}

// Everything the shapes, dtypes and strides tell, for both decode ops (vxqa_torch/_fake.py
// makes the same checks on fake tensors). Returns the cache's format.
vxqa::KvType check_decode(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                          const at::Tensor& block_table, const at::Tensor& seq_lens, const std::string& kv_cache_dtype,
                          const std::optional<at::Tensor>& k_scale_tensor,
                          const std::optional<at::Tensor>& v_scale_tensor, const at::Tensor& out,
                          const std::optional<at::Tensor>& lse, const std::optional<at::Tensor>& errors,
                          int64_t sliding_window, double logit_softcap, const std::optional<at::Tensor>& sinks,
                          const std::optional<at::Tensor>& q_indptr, int64_t max_q_len) {
  // With q_indptr a row of q is a query token and the batch is the block table's.
  const bool multi = q_indptr.has_value();
  check_dim(q, "q", 3, multi ? "[num_tokens, num_q_heads, head_dim]" : "[batch, num_q_heads, head_dim]");
  check_dtype(q, "q", {at::kHalf, at::kBFloat16});
  check_rows_contiguous(q, "q");
  const vxqa::KvType cache_type = check_cache_pair(k_cache, v_cache, kv_cache_dtype);
  check_q_for_cache(q.scalar_type(), cache_type, "q", "k_cache");
  const int64_t rows = q.size(0), q_heads = q.size(1), head_dim = q.size(2), kv_heads = k_cache.size(2);
  check_size(q, "q", 2, k_cache.size(3), "the cache's head_dim");
  TORCH_CHECK_VALUE(head_dim == 64 || head_dim == 128 || head_dim == 256 || head_dim == 512, "q: head_dim ",
                    num(head_dim), " is not supported (64, 128, 256 or 512)");
  TORCH_CHECK_VALUE(!multi || head_dim <= 256, "q_indptr: head_dim ", num(head_dim),
                    " takes one query token a sequence and no q_indptr (multi-token queries stop at head_dim 256)");
  TORCH_CHECK_VALUE(kv_heads >= 1 && q_heads % kv_heads == 0, "q: ", num(q_heads),
                    " query heads are not a multiple of the cache's ", num(kv_heads), " KV heads");

  check_dim(block_table, "block_table", 2, "[batch, max_pages_per_seq]");
  check_dtype(block_table, "block_table", {at::kInt});
  const int64_t batch = multi ? block_table.size(0) : rows;
  if (!multi) check_size(block_table, "block_table", 0, batch, "q's batch");
  check_rows_contiguous(block_table, "block_table");
  TORCH_CHECK_VALUE(block_table.size(1) >= 1, "block_table: needs at least one page per sequence");
  check_dim(seq_lens, "seq_lens", 1, "[batch]");
  check_dtype(seq_lens, "seq_lens", {at::kInt});
  check_size(seq_lens, "seq_lens", 0, batch, multi ? "block_table's batch" : "q's batch");
  check_contiguous(seq_lens, "seq_lens");

  TORCH_CHECK_VALUE(out.sizes() == q.sizes(), "out: shape ", dims(out.sizes()), " differs from q's ", dims(q.sizes()));
  TORCH_CHECK_VALUE(out.scalar_type() == q.scalar_type(), "out: dtype ", out.scalar_type(), " differs from q's ",
                    q.scalar_type());
  check_rows_contiguous(out, "out");
  if (lse) {
    check_dtype(*lse, "lse", {at::kFloat});
    TORCH_CHECK_VALUE(lse->dim() == 2 && lse->size(0) == rows && lse->size(1) == q_heads, "lse: must be ",
                      multi ? "[num_tokens, num_q_heads]" : "[batch, num_q_heads]", " = [", num(rows), ", ",
                      num(q_heads), "], got shape ", dims(lse->sizes()));
    check_contiguous(*lse, "lse");
  }
  check_errors(errors);
  check_scale_tensor(k_scale_tensor, "k_scale");
  check_scale_tensor(v_scale_tensor, "v_scale");
  check_variant(sliding_window, logit_softcap, sinks, q_heads);
  check_queries(q_indptr, max_q_len, batch);
  return cache_type;
}

// The sequences of a call: q's rows, or with q_indptr the block table's.
int64_t batch_of(const at::Tensor& q, const at::Tensor& block_table, const std::optional<at::Tensor>& q_indptr) {
  return q_indptr ? block_table.size(0) : q.size(0);
}

// A row stride for the kernel: the tensor's, or where it has at most one row (a size-1
// dimension's stride is free, and vxqa checks q_batch_stride with up to batch * max_q_len
// rows) that of rows of its heads laid end to end.
int64_t row_stride(const at::Tensor& t) {
  if (t.size(0) > 1) return t.stride(0);
  return t.size(1) > 1 ? t.size(1) * t.stride(1) : t.size(2);
}

at::Device check_decode_devices(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                const at::Tensor& block_table, const at::Tensor& seq_lens, const at::Tensor& out,
                                const std::optional<at::Tensor>& lse, const std::optional<at::Tensor>& errors,
                                const std::optional<at::Tensor>& k_scale_tensor,
                                const std::optional<at::Tensor>& v_scale_tensor,
                                const std::optional<at::Tensor>& sinks, const std::optional<at::Tensor>& q_indptr,
                                const at::Tensor* workspace) {
  return check_devices({{&q, "q"},
                        {&k_cache, "k_cache"},
                        {&v_cache, "v_cache"},
                        {&block_table, "block_table"},
                        {&seq_lens, "seq_lens"},
                        {&out, "out"},
                        {given(lse), "lse"},
                        {given(errors), "errors"},
                        {given(k_scale_tensor), "k_scale"},
                        {given(v_scale_tensor), "v_scale"},
                        {given(sinks), "sinks"},
                        {given(q_indptr), "q_indptr"},
                        {workspace, "workspace"}});
}

vxqa::DecodeParams make_params(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                               const at::Tensor& block_table, const at::Tensor& seq_lens, vxqa::KvType cache_type,
                               std::optional<double> softmax_scale, double k_scale, double v_scale,
                               const std::optional<at::Tensor>& k_scale_tensor,
                               const std::optional<at::Tensor>& v_scale_tensor, const at::Tensor& out,
                               const std::optional<at::Tensor>& lse, int64_t sliding_window, double logit_softcap,
                               const std::optional<at::Tensor>& sinks, const std::optional<at::Tensor>& q_indptr,
                               int64_t max_q_len) {
  vxqa::DecodeParams p;
  p.q = q.data_ptr();
  p.qo_type = q.scalar_type() == at::kBFloat16 ? vxqa::ActType::kBf16 : vxqa::ActType::kFp16;
  p.q_batch_stride = q.stride(0);
  p.q_head_stride = q.stride(1);
  p.out = out.data_ptr();
  p.out_batch_stride = out.stride(0);
  p.out_head_stride = out.stride(1);
  p.lse = lse ? lse->data_ptr<float>() : nullptr;
  p.cache_type = cache_type;
  p.k_cache = k_cache.data_ptr();
  p.v_cache = v_cache.data_ptr();
  p.page_stride = k_cache.stride(0);
  p.token_stride = k_cache.stride(1);
  p.head_stride = k_cache.stride(2);
  p.page_size = to_int(k_cache.size(1), "k_cache");
  p.num_pages = to_int(k_cache.size(0), "k_cache");
  p.block_table = block_table.data_ptr<int32_t>();
  p.block_table_stride = block_table.stride(0);
  p.max_pages_per_seq = to_int(block_table.size(1), "block_table");
  p.seq_lens = seq_lens.data_ptr<int32_t>();
  p.batch = to_int(q.size(0), "q");
  p.num_kv_heads = to_int(k_cache.size(2), "k_cache");
  p.group_size = to_int(q.size(1) / k_cache.size(2), "q");
  p.head_dim = to_int(q.size(2), "q");
  p.k_scale = static_cast<float>(k_scale);
  p.v_scale = static_cast<float>(v_scale);
  p.k_scale_ptr = k_scale_tensor ? k_scale_tensor->data_ptr<float>() : nullptr;
  p.v_scale_ptr = v_scale_tensor ? v_scale_tensor->data_ptr<float>() : nullptr;
  p.softmax_scale = static_cast<float>(softmax_scale ? *softmax_scale : 1.0 / std::sqrt(double(q.size(2))));
  p.sliding_window = static_cast<int>(sliding_window);
  p.logit_softcap = static_cast<float>(logit_softcap);
  p.sinks = sinks ? sinks->data_ptr<float>() : nullptr;
  if (q_indptr) {  // a row a query token; the sequences are the block table's
    p.q_batch_stride = row_stride(q);
    p.out_batch_stride = row_stride(out);
    p.batch = to_int(block_table.size(0), "block_table");
    p.q_indptr = q_indptr->data_ptr<int32_t>();
    p.max_q_len = static_cast<int>(max_q_len);
  }
  return p;
}

// The kernels leave the step's error bits in the workspace's first word.
void or_errors(const std::optional<at::Tensor>& errors, const at::Tensor& workspace) {
  if (errors) errors->view({1}).bitwise_or_(workspace.narrow(0, 0, 4).view(at::kInt));
}

// ---- the slow path: plan and workspace every call ----

void decode_out(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                const at::Tensor& block_table, const at::Tensor& seq_lens, const std::string& kv_cache_dtype,
                std::optional<double> softmax_scale, double k_scale, double v_scale,
                const std::optional<at::Tensor>& k_scale_tensor, const std::optional<at::Tensor>& v_scale_tensor,
                int64_t max_context, const at::Tensor& out, const std::optional<at::Tensor>& lse,
                const std::optional<at::Tensor>& errors, int64_t sliding_window, double logit_softcap,
                const std::optional<at::Tensor>& sinks, const std::optional<at::Tensor>& q_indptr,
                int64_t max_q_len) {
  const vxqa::KvType cache_type = check_decode(q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype,
                                               k_scale_tensor, v_scale_tensor, out, lse, errors, sliding_window,
                                               logit_softcap, sinks, q_indptr, max_q_len);
  const int64_t table_tokens = block_table.size(1) * k_cache.size(1);
  if (max_context == 0) max_context = table_tokens;
  TORCH_CHECK_VALUE(max_context >= 1 && max_context <= table_tokens, "max_context: ", num(max_context),
                    " must be in 1..block_table.size(1) * page_size (", num(table_tokens), ")");
  const at::Device device = check_decode_devices(q, k_cache, v_cache, block_table, seq_lens, out, lse, errors,
                                                 k_scale_tensor, v_scale_tensor, sinks, q_indptr, nullptr);
  // Batch 0, or no query rows: nothing to do (vxqa's decode launches nothing for batch 0 either).
  if (q.size(0) == 0 || batch_of(q, block_table, q_indptr) == 0) return;

  // With q_indptr the default max_q_len: as many as q has rows, up to kMaxQueryLen.
  if (q_indptr && max_q_len == 0) max_q_len = std::min<int64_t>(q.size(0), kMaxQueryLen);
  const vxqa::DecodeParams p = make_params(q, k_cache, v_cache, block_table, seq_lens, cache_type, softmax_scale,
                                           k_scale, v_scale, k_scale_tensor, v_scale_tensor, out, lse,
                                           sliding_window, logit_softcap, sinks, q_indptr, max_q_len);
  const c10::cuda::CUDAGuard guard(device);
  Shape shape;
  shape.head_dim = p.head_dim;
  shape.cache_type = cache_type;
  shape.qo_type = p.qo_type;
  shape.page_size = p.page_size;
  shape.num_kv_heads = p.num_kv_heads;
  shape.group_size = p.group_size;
  shape.max_batch = p.batch;
  shape.max_context = static_cast<int>(max_context);
  // This call's variant only (none: a plain Config, as before); a window plans its chunks
  // over that window.
  shape.variant = (p.sliding_window > 0 ? vxqa::kSlidingWindow : 0u) |
                  (p.logit_softcap > 0.f ? vxqa::kLogitSoftCap : 0u) | (p.sinks ? vxqa::kAttentionSinks : 0u);
  shape.max_window = p.sliding_window;
  // With q_indptr a multi-token Config (the one kind that takes q_indptr): a plan for at least
  // 2 tokens a sequence, which runs steps of max_q_len 1 as well.
  shape.max_q_len = q_indptr ? std::max(p.max_q_len, 2) : 1;
  Choice choice;
  check_status(choose_decode(shape, &choice));
  // From torch's caching allocator on the current stream: legal inside a graph capture.
  const at::Tensor workspace =
      at::empty({static_cast<int64_t>(choice.plan.workspace_bytes)}, q.options().dtype(at::kByte));
  check_status(decode_with(p.head_dim, cache_type, choice, p, workspace.data_ptr(), choice.plan.workspace_bytes,
                           at::cuda::getCurrentCUDAStream(device.index()).stream()));
  or_errors(errors, workspace);
}

// ---- plan once ----

std::vector<int64_t> plan_decode(int64_t num_kv_heads, int64_t group_size, int64_t head_dim, int64_t page_size,
                                 int64_t max_batch, int64_t max_context, at::ScalarType q_dtype,
                                 const std::string& kv_cache_dtype, at::ScalarType cache_dtype, at::Device device,
                                 int64_t variant, int64_t max_window, int64_t max_q_len) {
  Shape shape;
  shape.cache_type = cache_format(kv_cache_dtype, cache_dtype, "cache_dtype");
  TORCH_CHECK_VALUE(q_dtype == at::kHalf || q_dtype == at::kBFloat16, "q_dtype: ", q_dtype,
                    " is not supported (Half or BFloat16)");
  check_q_for_cache(q_dtype, shape.cache_type, "q_dtype", "cache_dtype");
  shape.qo_type = q_dtype == at::kBFloat16 ? vxqa::ActType::kBf16 : vxqa::ActType::kFp16;
  shape.head_dim = to_int(head_dim, "head_dim");
  shape.page_size = to_int(page_size, "page_size");
  shape.num_kv_heads = to_int(num_kv_heads, "num_kv_heads");
  shape.group_size = to_int(group_size, "group_size");
  shape.max_batch = to_int(max_batch, "max_batch");
  shape.max_context = to_int(max_context, "max_context");
  TORCH_CHECK_VALUE(variant >= 0 && variant <= vxqa::kAllVariantFlags, "variant: ", num(variant),
                    " has bits that are not vxqa::VariantFlag values (1 sliding window, 2 logit soft-cap, 4 sinks)");
  TORCH_CHECK_VALUE(max_window >= 0, "max_window: ", num(max_window), " must be >= 0");
  TORCH_CHECK_VALUE(max_window == 0 || (variant & vxqa::kSlidingWindow), "max_window: ", num(max_window),
                    " is set, but variant has no sliding window (bit 1)");
  shape.variant = static_cast<unsigned>(variant);
  shape.max_window = to_int(max_window, "max_window");
  TORCH_CHECK_VALUE(max_q_len >= 1 && max_q_len <= kMaxQueryLen, "max_q_len: ", num(max_q_len), " is outside 1..",
                    num(kMaxQueryLen), " (the most query tokens of a sequence in a run)");
  shape.max_q_len = static_cast<int>(max_q_len);
  TORCH_CHECK_VALUE(device.is_cuda(), "device: must be a CUDA device, got ", device.str());
  const c10::cuda::CUDAGuard guard(device);
  Choice choice;
  check_status(choose_decode(shape, &choice));  // the device's SMs and occupancy, asked here once
  const vxqa::DecodePlan& plan = choice.plan;
  std::vector<int64_t> ints(kPlanFields);
  ints[kTag] = kPlanTag;
  ints[kDevice] = c10::cuda::current_device();
  ints[kHeadDim] = shape.head_dim;
  ints[kCacheType] = static_cast<int64_t>(shape.cache_type);
  ints[kQoType] = static_cast<int64_t>(shape.qo_type);
  ints[kPageSize] = shape.page_size;
  ints[kNumKvHeads] = plan.num_kv_heads;
  ints[kGroupSize] = plan.group_size;
  ints[kConfig] = choice.index;
  ints[kVariant] = shape.variant;  // what the runs may use (the Config may have more flags)
  ints[kMaxBatch] = plan.max_batch;
  ints[kMaxContext] = plan.max_context;
  ints[kMaxWindow] = plan.max_window;
  ints[kMaxQLen] = plan.max_q_len;
  ints[kChunkTokens] = plan.chunk_tokens;
  ints[kNumChunks] = plan.num_chunks;
  ints[kWorkspaceBytes] = static_cast<int64_t>(plan.workspace_bytes);
  return ints;
}

// The plan's ints back into a Choice, refused unless plan_decode made them (layout and tag);
// vxqa's validate then checks the plan itself against the Config it names.
struct Planned {
  int head_dim;
  vxqa::KvType cache_type;
  vxqa::ActType qo_type;
  int page_size;
  int device;
  unsigned variant;  // vxqa::VariantFlag bits the runs may use
  Choice choice;
};

Planned read_plan(c10::IntArrayRef ints) {
  const int64_t tag = ints.empty() ? 0 : ints[kTag];
  TORCH_CHECK_VALUE(tag != kPlanTagLayout1 && tag != kPlanTagLayout2, "plan: made by an older vxqa_torch (plan layout ",
                    num(tag & 0xff), "; this one reads layout 3, which adds max_q_len): make the plan again with "
                    "vxqa_torch.DecodePlan");
  TORCH_CHECK_VALUE(ints.size() == kPlanFields && tag == kPlanTag,
                    "plan: not made by torch.ops.vxqa.plan_decode (", num(int64_t(ints.size())),
                    " ints; use vxqa_torch.DecodePlan)");
  for (int64_t v : ints) TORCH_CHECK_VALUE(v >= 0, "plan: holds a negative field: not made by plan_decode");
  Planned p;
  p.head_dim = to_int(ints[kHeadDim], "plan");
  const int64_t cache_type = ints[kCacheType];
  TORCH_CHECK_VALUE(cache_type == int64_t(vxqa::KvType::kE5M2) || cache_type == int64_t(vxqa::KvType::kE4M3) ||
                        cache_type == int64_t(vxqa::KvType::kFp16) || cache_type == int64_t(vxqa::KvType::kBf16),
                    "plan: cache type ", num(cache_type), " is not e5m2, e4m3, fp16 or bf16");
  p.cache_type = static_cast<vxqa::KvType>(cache_type);
  TORCH_CHECK_VALUE(ints[kQoType] <= int64_t(vxqa::ActType::kBf16), "plan: q type ", num(ints[kQoType]), " is unknown");
  p.qo_type = static_cast<vxqa::ActType>(ints[kQoType]);
  p.page_size = to_int(ints[kPageSize], "plan");
  p.device = to_int(ints[kDevice], "plan");
  p.choice.index = to_int(ints[kConfig], "plan");
  vxqa::DecodePlan& plan = p.choice.plan;
  plan.num_kv_heads = to_int(ints[kNumKvHeads], "plan");
  plan.group_size = to_int(ints[kGroupSize], "plan");
  plan.max_batch = to_int(ints[kMaxBatch], "plan");
  plan.max_context = to_int(ints[kMaxContext], "plan");
  plan.chunk_tokens = to_int(ints[kChunkTokens], "plan");
  plan.num_chunks = to_int(ints[kNumChunks], "plan");
  plan.max_window = to_int(ints[kMaxWindow], "plan");
  plan.max_q_len = to_int(ints[kMaxQLen], "plan");
  plan.workspace_bytes = static_cast<size_t>(ints[kWorkspaceBytes]);
  TORCH_CHECK_VALUE(ints[kVariant] <= vxqa::kAllVariantFlags, "plan.variant: ", num(ints[kVariant]),
                    " has bits that are not vxqa::VariantFlag values");
  p.variant = static_cast<unsigned>(ints[kVariant]);
  TORCH_CHECK_VALUE(plan.max_window == 0 || (p.variant & vxqa::kSlidingWindow), "plan.max_window: ",
                    num(plan.max_window), " is set, but the plan's variant has no sliding window");
  TORCH_CHECK_VALUE(plan.max_q_len >= 1 && plan.max_q_len <= kMaxQueryLen, "plan.max_q_len: ", num(plan.max_q_len),
                    " is outside 1..", num(kMaxQueryLen));
  // The plan's chunk arithmetic (vxqa::make_decode_plan; vxqa's validate_plan checks it too,
  // on the GPU): its chunks cover plan_span(max_context, max_window, max_q_len) keys.
  TORCH_CHECK_VALUE(plan.chunk_tokens >= 1, "plan.chunk_tokens: ", num(plan.chunk_tokens), " must be >= 1");
  const int64_t span = vxqa::plan_span(plan.max_context, plan.max_window, plan.max_q_len);
  const int64_t chunks = (span + plan.chunk_tokens - 1) / plan.chunk_tokens;
  TORCH_CHECK_VALUE(plan.num_chunks == chunks, "plan.num_chunks: ", num(plan.num_chunks), " does not match the ",
                    num(chunks), " chunks of ", num(plan.chunk_tokens), " tokens that cover the plan's span of ",
                    num(span), " keys (max_context, or max_window + max_q_len + ", num(vxqa::kWindowChunkAlign - 2),
                    ")");
  return p;
}

// A run's variant against the plan's: each value the plan was made for (a window within
// its max_window), each mismatch naming the argument (vxqa_torch/_fake.py's).
void check_variant_against_plan(const Planned& pl, int64_t sliding_window, double logit_softcap,
                                const std::optional<at::Tensor>& sinks) {
  const int max_window = pl.choice.plan.max_window;
  if (!(pl.variant & vxqa::kSlidingWindow)) {
    TORCH_CHECK_VALUE(sliding_window == 0, "sliding_window: ", num(sliding_window),
                      " given to a plan made without a window: make the plan with "
                      "DecodePlan(..., sliding_window=W), W the largest window its runs pass");
  } else if (max_window > 0) {
    TORCH_CHECK_VALUE(sliding_window >= 1 && sliding_window <= max_window, "sliding_window: ", num(sliding_window),
                      " is outside 1..", num(max_window), ", the windows of this plan (DecodePlan(sliding_window=",
                      num(max_window), "): its chunks cover no more keys",
                      sliding_window == 0 ? "; layers of full attention need a plan without sliding_window" : "");
  }
  TORCH_CHECK_VALUE(logit_softcap == 0 || (pl.variant & vxqa::kLogitSoftCap), "logit_softcap: ", flt(logit_softcap),
                    " given to a plan made without a soft-cap: make the plan with DecodePlan(..., logit_softcap=True)");
  TORCH_CHECK_VALUE(!sinks || (pl.variant & vxqa::kAttentionSinks),
                    "sinks: given to a plan made without sinks: make the plan with DecodePlan(..., sinks=True)");
}

// A run's query tokens against the plan's max_q_len (vxqa_torch/_fake.py's): q_indptr needs a
// plan for several tokens a sequence (its multi-token Config), max_q_len at most the plan's.
void check_queries_against_plan(const Planned& pl, const std::optional<at::Tensor>& q_indptr, int64_t max_q_len) {
  const int plan_q_len = pl.choice.plan.max_q_len;
  TORCH_CHECK_VALUE(!q_indptr || plan_q_len > 1, "q_indptr: given to a plan made for one query token a sequence: "
                    "make the plan with DecodePlan(..., max_q_len=N), N the most query tokens of a sequence its "
                    "runs pass");
  TORCH_CHECK_VALUE(max_q_len <= plan_q_len, "max_q_len: ", num(max_q_len), " is above the plan's ", num(plan_q_len),
                    " (DecodePlan(max_q_len=", num(plan_q_len), "): its workspace holds no more rows)");
}

// The tensors against the shape the plan was made for, each mismatch naming its tensor.
void check_against_plan(const Planned& pl, const at::Tensor& q, const at::Tensor& k_cache,
                        const at::Tensor& block_table, vxqa::KvType cache_type, const at::Tensor& workspace,
                        const std::optional<at::Tensor>& q_indptr) {
  const char* remedy = " (a DecodePlan serves one model shape: make one per shape)";
  TORCH_CHECK_VALUE(cache_type == pl.cache_type, "k_cache: ", article(cache_type), vxqa::kv_type_name(cache_type),
                    " cache, the plan was made for ", vxqa::kv_type_name(pl.cache_type), remedy);
  TORCH_CHECK_VALUE(q.size(2) == pl.head_dim, "q: head_dim ", num(q.size(2)), " differs from the plan's ",
                    num(pl.head_dim), remedy);
  const vxqa::ActType qo = q.scalar_type() == at::kBFloat16 ? vxqa::ActType::kBf16 : vxqa::ActType::kFp16;
  TORCH_CHECK_VALUE(qo == pl.qo_type, "q: dtype ", q.scalar_type(), " differs from the plan's ", dtype_name(pl.qo_type),
                    remedy);
  TORCH_CHECK_VALUE(k_cache.size(1) == pl.page_size, "k_cache: page_size ", num(k_cache.size(1)),
                    " differs from the plan's ", num(pl.page_size), remedy);
  TORCH_CHECK_VALUE(k_cache.size(2) == pl.choice.plan.num_kv_heads, "k_cache: ", num(k_cache.size(2)),
                    " KV heads differ from the plan's ", num(pl.choice.plan.num_kv_heads), remedy);
  TORCH_CHECK_VALUE(q.size(1) == int64_t(pl.choice.plan.num_kv_heads) * pl.choice.plan.group_size, "q: ",
                    num(q.size(1)), " query heads differ from the plan's ",
                    num(int64_t(pl.choice.plan.num_kv_heads) * pl.choice.plan.group_size), remedy);
  const int64_t batch = batch_of(q, block_table, q_indptr);
  TORCH_CHECK_VALUE(batch <= pl.choice.plan.max_batch, q_indptr ? "block_table" : "q", ": batch ", num(batch),
                    " is above the plan's max_batch ", num(pl.choice.plan.max_batch));
  TORCH_CHECK_VALUE(block_table.size(1) * k_cache.size(1) >= pl.choice.plan.max_context, "block_table: ",
                    num(block_table.size(1)), " pages of ", num(k_cache.size(1)),
                    " tokens hold less than the plan's max_context ", num(pl.choice.plan.max_context));
  check_dtype(workspace, "workspace", {at::kByte});
  TORCH_CHECK_VALUE(workspace.dim() == 1 && workspace.is_contiguous(), "workspace: must be a contiguous 1-D uint8 tensor");
  TORCH_CHECK_VALUE(workspace.numel() >= int64_t(pl.choice.plan.workspace_bytes), "workspace: ",
                    num(workspace.numel()), " bytes, the plan needs ", num(int64_t(pl.choice.plan.workspace_bytes)));
}

void decode_planned(c10::IntArrayRef plan, const at::Tensor& workspace, const at::Tensor& q, const at::Tensor& k_cache,
                    const at::Tensor& v_cache, const at::Tensor& block_table, const at::Tensor& seq_lens,
                    const std::string& kv_cache_dtype, std::optional<double> softmax_scale, double k_scale,
                    double v_scale, const std::optional<at::Tensor>& k_scale_tensor,
                    const std::optional<at::Tensor>& v_scale_tensor, const at::Tensor& out,
                    const std::optional<at::Tensor>& lse, const std::optional<at::Tensor>& errors,
                    int64_t sliding_window, double logit_softcap, const std::optional<at::Tensor>& sinks,
                    const std::optional<at::Tensor>& q_indptr, int64_t max_q_len) {
  const Planned pl = read_plan(plan);
  const vxqa::KvType cache_type = check_decode(q, k_cache, v_cache, block_table, seq_lens, kv_cache_dtype,
                                               k_scale_tensor, v_scale_tensor, out, lse, errors, sliding_window,
                                               logit_softcap, sinks, q_indptr, max_q_len);
  check_against_plan(pl, q, k_cache, block_table, cache_type, workspace, q_indptr);
  check_variant_against_plan(pl, sliding_window, logit_softcap, sinks);
  check_queries_against_plan(pl, q_indptr, max_q_len);
  const at::Device device = check_decode_devices(q, k_cache, v_cache, block_table, seq_lens, out, lse, errors,
                                                 k_scale_tensor, v_scale_tensor, sinks, q_indptr, &workspace);
  TORCH_CHECK_VALUE(device.index() == pl.device, "q: is on ", device.str(), ", the plan was made for cuda:",
                    num(pl.device), " (make a DecodePlan on each device)");
  // Batch 0, or no query rows: nothing to do.
  if (q.size(0) == 0 || batch_of(q, block_table, q_indptr) == 0) return;

  // With q_indptr the default max_q_len: as many as q has rows, up to the plan's.
  if (q_indptr && max_q_len == 0) max_q_len = std::min<int64_t>(q.size(0), pl.choice.plan.max_q_len);
  const vxqa::DecodeParams p = make_params(q, k_cache, v_cache, block_table, seq_lens, cache_type, softmax_scale,
                                           k_scale, v_scale, k_scale_tensor, v_scale_tensor, out, lse,
                                           sliding_window, logit_softcap, sinks, q_indptr, max_q_len);
  const c10::cuda::CUDAGuard guard(device);
  check_status(decode_with(pl.head_dim, pl.cache_type, pl.choice, p, workspace.data_ptr(),
                           static_cast<size_t>(workspace.numel()),
                           at::cuda::getCurrentCUDAStream(device.index()).stream()));
  or_errors(errors, workspace);
}

// The Config a plan names, e.g. "D128 e5m2 fp16 W4 page16".
std::string describe_plan(c10::IntArrayRef plan) {
  const Planned pl = read_plan(plan);
  return config_name(pl.head_dim, pl.cache_type, pl.choice);
}

}  // namespace

TORCH_LIBRARY_IMPL(vxqa, CUDA, m) {
  m.impl("decode_out", &decode_out);
  m.impl("decode_planned", &decode_planned);
}
// On CPU tensors the same checks run, then the device check names the argument.
TORCH_LIBRARY_IMPL(vxqa, CPU, m) {
  m.impl("decode_out", &decode_out);
  m.impl("decode_planned", &decode_planned);
}
// No tensor arguments: these run wherever they are called.
TORCH_LIBRARY_IMPL(vxqa, CompositeExplicitAutograd, m) {
  m.impl("plan_decode", &plan_decode);
  m.impl("describe_plan", &describe_plan);
}

}  // namespace vxqa_torch
