// vxqa::append_kv — this step's new K/V rows into the paged cache (schema in ops.cpp),
// vLLM's reshape_and_cache_flash contract: slot = page * page_size + offset; every negative
// slot skips its token; num_tokens = slot_mapping.size(0), which may be less than key's rows
// (vLLM pads key and value for CUDA graphs, not slot_mapping): rows past it are not read.
// The torch-side checks name the argument; vxqa's validation then names the field. The fake
// kernel, for meta tensors and torch.compile, is in vxqa_torch/_fake.py.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include "launch.h"
#include "tensor_checks.h"

namespace vxqa_torch {
namespace {

// Everything the shapes, dtypes and strides tell (vxqa_torch/_fake.py makes the same checks).
vxqa::KvType check_append_kv(const at::Tensor& key, const at::Tensor& value, const at::Tensor& slot_mapping,
                             const at::Tensor& k_cache, const at::Tensor& v_cache, const std::string& kv_cache_dtype,
                             const std::optional<at::Tensor>& k_scale_tensor,
                             const std::optional<at::Tensor>& v_scale_tensor,
                             const std::optional<at::Tensor>& errors) {
  check_dim(key, "key", 3, "[num_tokens, num_kv_heads, head_dim]");
  check_dtype(key, "key", {at::kHalf, at::kBFloat16});
  check_rows_contiguous(key, "key");
  TORCH_CHECK_VALUE(value.sizes() == key.sizes(), "value: shape ", dims(value.sizes()), " differs from key's ",
                    dims(key.sizes()));
  TORCH_CHECK_VALUE(value.scalar_type() == key.scalar_type(), "value: dtype ", value.scalar_type(),
                    " differs from key's ", key.scalar_type());
  check_rows_contiguous(value, "value");
  check_dim(slot_mapping, "slot_mapping", 1, "[num_tokens]");
  check_dtype(slot_mapping, "slot_mapping", {at::kLong});
  TORCH_CHECK_VALUE(slot_mapping.size(0) <= key.size(0), "slot_mapping: ", num(slot_mapping.size(0)),
                    " tokens, more than key's ", num(key.size(0)), " rows (num_tokens = slot_mapping.size(0) must be "
                    "<= key.size(0): key and value may be padded, slot_mapping not)");
  check_contiguous(slot_mapping, "slot_mapping");
  const vxqa::KvType cache_type = check_cache_pair(k_cache, v_cache, kv_cache_dtype);
  check_size(key, "key", 1, k_cache.size(2), "the cache's num_kv_heads");
  check_size(key, "key", 2, k_cache.size(3), "the cache's head_dim");
  TORCH_CHECK_VALUE(key.size(2) >= 8 && key.size(2) % 8 == 0, "key: head_dim ", num(key.size(2)),
                    " must be a positive multiple of 8");
  check_errors(errors);
  check_scale_tensor(k_scale_tensor, "k_scale");
  check_scale_tensor(v_scale_tensor, "v_scale");
  return cache_type;
}

void append_kv(const at::Tensor& key, const at::Tensor& value, const at::Tensor& slot_mapping,
               const at::Tensor& k_cache, const at::Tensor& v_cache, const std::string& kv_cache_dtype, double k_scale,
               double v_scale,
               const std::optional<at::Tensor>& k_scale_tensor, const std::optional<at::Tensor>& v_scale_tensor,
               const std::optional<at::Tensor>& errors) {
  const vxqa::KvType cache_type =
      check_append_kv(key, value, slot_mapping, k_cache, v_cache, kv_cache_dtype, k_scale_tensor, v_scale_tensor, errors);
  const at::Device device = check_devices({{&key, "key"},
                                           {&value, "value"},
                                           {&slot_mapping, "slot_mapping"},
                                           {&k_cache, "k_cache"},
                                           {&v_cache, "v_cache"},
                                           {given(errors), "errors"},
                                           {given(k_scale_tensor), "k_scale"},
                                           {given(v_scale_tensor), "v_scale"}});

  vxqa::AppendKvParams p;
  p.key = key.data_ptr();
  p.value = value.data_ptr();
  p.key_token_stride = key.stride(0);
  p.key_head_stride = key.stride(1);
  p.value_token_stride = value.stride(0);
  p.value_head_stride = value.stride(1);
  p.input_type = key.scalar_type() == at::kBFloat16 ? vxqa::ActType::kBf16 : vxqa::ActType::kFp16;
  p.slot_mapping = slot_mapping.data_ptr<int64_t>();
  p.num_tokens = to_int(slot_mapping.size(0), "slot_mapping");  // key's rows past it are padding
  p.num_kv_heads = to_int(key.size(1), "key");
  p.head_dim = to_int(key.size(2), "key");
  p.k_cache = k_cache.data_ptr();
  p.v_cache = v_cache.data_ptr();
  p.cache_type = cache_type;
  p.page_stride = k_cache.stride(0);
  p.token_stride = k_cache.stride(1);
  p.head_stride = k_cache.stride(2);
  p.page_size = to_int(k_cache.size(1), "k_cache");
  p.num_pages = to_int(k_cache.size(0), "k_cache");
  p.k_scale = static_cast<float>(k_scale);
  p.v_scale = static_cast<float>(v_scale);
  p.k_scale_ptr = k_scale_tensor ? k_scale_tensor->data_ptr<float>() : nullptr;
  p.v_scale_ptr = v_scale_tensor ? v_scale_tensor->data_ptr<float>() : nullptr;
  // vxqa ORs ErrorBit bits into this word; int32 and uint32 share the bits.
  p.errors = errors ? reinterpret_cast<uint32_t*>(errors->data_ptr<int32_t>()) : nullptr;

  const c10::cuda::CUDAGuard guard(device);
  check_status(vxqa_torch::run_append_kv(p, at::cuda::getCurrentCUDAStream(device.index()).stream()));
}

}  // namespace

TORCH_LIBRARY_IMPL(vxqa, CUDA, m) { m.impl("append_kv", &append_kv); }
// On CPU tensors the same checks run, then the device check names the argument.
TORCH_LIBRARY_IMPL(vxqa, CPU, m) { m.impl("append_kv", &append_kv); }

}  // namespace vxqa_torch
