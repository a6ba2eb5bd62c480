// vxqa::decode_out — one decode step on torch tensors (schema in ops.cpp). The torch-side
// checks name the argument; vxqa's validation then names the DecodeParams field. The plan
// comes from shapes only (batch = q.size(0), max_context from the block table unless
// given) and the workspace from torch's caching allocator on the current stream, so the op
// can be captured in a CUDA graph, its first call included, and replayed as lengths change.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include "launch.h"
#include "tensor_checks.h"

namespace vxqa_torch {
namespace {

struct DecodeShape {
  vxqa::KvType cache_type;
  int max_context;  // the plan's capacity
};

// Everything the shapes, dtypes and strides tell (the Meta kernel stops here).
DecodeShape check_decode(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                         const at::Tensor& block_table, const at::Tensor& seq_lens,
                         const std::optional<at::Tensor>& k_scale_tensor,
                         const std::optional<at::Tensor>& v_scale_tensor, int64_t max_context, const at::Tensor& out,
                         const std::optional<at::Tensor>& lse, const std::optional<at::Tensor>& errors) {
  check_dim(q, "q", 3, "[batch, num_q_heads, head_dim]");
  check_dtype(q, "q", {at::kHalf, at::kBFloat16});
  check_rows_contiguous(q, "q");
  const vxqa::KvType cache_type = check_cache_pair(k_cache, v_cache);
  const int64_t batch = q.size(0), q_heads = q.size(1), page_size = k_cache.size(1), kv_heads = k_cache.size(2);
  check_size(q, "q", 2, k_cache.size(3), "the cache's head_dim");
  TORCH_CHECK_VALUE(batch >= 1, "q: batch (size(0)) must be >= 1");
  TORCH_CHECK_VALUE(kv_heads >= 1 && q_heads % kv_heads == 0, "q: ", num(q_heads),
                    " query heads are not a multiple of the cache's ", num(kv_heads), " KV heads");

  check_dim(block_table, "block_table", 2, "[batch, max_pages_per_seq]");
  check_dtype(block_table, "block_table", {at::kInt});
  check_size(block_table, "block_table", 0, batch, "q's batch");
  check_rows_contiguous(block_table, "block_table");
  TORCH_CHECK_VALUE(block_table.size(1) >= 1, "block_table: needs at least one page per sequence");
  check_dim(seq_lens, "seq_lens", 1, "[batch]");
  check_dtype(seq_lens, "seq_lens", {at::kInt});
  check_size(seq_lens, "seq_lens", 0, batch, "q's batch");
  check_contiguous(seq_lens, "seq_lens");

  TORCH_CHECK_VALUE(out.sizes() == q.sizes(), "out: shape ", dims(out.sizes()), " differs from q's ", dims(q.sizes()));
  TORCH_CHECK_VALUE(out.scalar_type() == q.scalar_type(), "out: dtype ", out.scalar_type(), " differs from q's ",
                    q.scalar_type());
  check_rows_contiguous(out, "out");
  if (lse) {
    check_dtype(*lse, "lse", {at::kFloat});
    TORCH_CHECK_VALUE(lse->dim() == 2 && lse->size(0) == batch && lse->size(1) == q_heads,
                      "lse: must be [batch, num_q_heads] = [", num(batch), ", ", num(q_heads), "], got shape ", dims(lse->sizes()));
    check_contiguous(*lse, "lse");
  }
  check_errors(errors);
  check_scale_tensor(k_scale_tensor, "k_scale");
  check_scale_tensor(v_scale_tensor, "v_scale");

  const int64_t table_tokens = block_table.size(1) * page_size;
  if (max_context == 0) max_context = table_tokens;
  TORCH_CHECK_VALUE(max_context >= 1 && max_context <= table_tokens, "max_context: ", num(max_context),
                    " must be in 1..block_table.size(1) * page_size (", num(table_tokens), ")");
  return DecodeShape{cache_type, to_int(max_context, "max_context")};
}

void decode_out_meta(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                     const at::Tensor& block_table, const at::Tensor& seq_lens, double /*softmax_scale*/,
                     double /*k_scale*/, double /*v_scale*/, const std::optional<at::Tensor>& k_scale_tensor,
                     const std::optional<at::Tensor>& v_scale_tensor, int64_t max_context, const at::Tensor& out,
                     const std::optional<at::Tensor>& lse, const std::optional<at::Tensor>& errors) {
  check_decode(q, k_cache, v_cache, block_table, seq_lens, k_scale_tensor, v_scale_tensor, max_context, out, lse,
               errors);
}

void decode_out(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                const at::Tensor& block_table, const at::Tensor& seq_lens, double softmax_scale, double k_scale,
                double v_scale, const std::optional<at::Tensor>& k_scale_tensor,
                const std::optional<at::Tensor>& v_scale_tensor, int64_t max_context, const at::Tensor& out,
                const std::optional<at::Tensor>& lse, const std::optional<at::Tensor>& errors) {
  const DecodeShape shape = check_decode(q, k_cache, v_cache, block_table, seq_lens, k_scale_tensor, v_scale_tensor,
                                         max_context, out, lse, errors);
  const at::Device device = check_devices({{&q, "q"},
                                           {&k_cache, "k_cache"},
                                           {&v_cache, "v_cache"},
                                           {&block_table, "block_table"},
                                           {&seq_lens, "seq_lens"},
                                           {&out, "out"},
                                           {given(lse), "lse"},
                                           {given(errors), "errors"},
                                           {given(k_scale_tensor), "k_scale"},
                                           {given(v_scale_tensor), "v_scale"}});

  vxqa::DecodeParams p;
  p.q = q.data_ptr();
  p.qo_type = q.scalar_type() == at::kBFloat16 ? vxqa::ActType::kBf16 : vxqa::ActType::kFp16;
  p.q_batch_stride = q.stride(0);
  p.q_head_stride = q.stride(1);
  p.out = out.data_ptr();
  p.out_batch_stride = out.stride(0);
  p.out_head_stride = out.stride(1);
  p.lse = lse ? lse->data_ptr<float>() : nullptr;
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
  p.softmax_scale = static_cast<float>(softmax_scale);

  const c10::cuda::CUDAGuard guard(device);
  at::Tensor workspace;
  const WorkspaceFn allocate = [&](size_t bytes) {
    workspace = at::empty({static_cast<int64_t>(bytes)}, q.options().dtype(at::kByte));
    return workspace.data_ptr();
  };
  check_status(run_decode(p, shape.cache_type, shape.max_context, allocate,
                          at::cuda::getCurrentCUDAStream(device.index()).stream()));
  // The kernels leave their error bits in the workspace's first word.
  if (errors) errors->view({1}).bitwise_or_(workspace.narrow(0, 0, 4).view(at::kInt));
}

}  // namespace

TORCH_LIBRARY_IMPL(vxqa, CUDA, m) { m.impl("decode_out", &decode_out); }
// On CPU tensors the same checks run, then the device check names the argument.
TORCH_LIBRARY_IMPL(vxqa, CPU, m) { m.impl("decode_out", &decode_out); }
TORCH_LIBRARY_IMPL(vxqa, Meta, m) { m.impl("decode_out", &decode_out_meta); }

}  // namespace vxqa_torch
