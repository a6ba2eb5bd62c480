// vxqa/api/append_kv_params.cuh — what a user passes to append_kv, and its validation:
// host code only (no kernels), so plain C++ translation units can check parameters too.
// The contract is in api/append_kv.cuh.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vxqa/api/params.cuh>
#include <vxqa/api/validate.cuh>
#include <vxqa/kernel/append_kv_args.cuh>
#include <vxqa/kernel/config.cuh>
#include <vxqa/numeric/kv_type.cuh>

namespace vxqa {

struct AppendKvParams {
  // New rows: [num_tokens, num_kv_heads, head_dim], fp16 or bf16, D contiguous.
  const void* key = nullptr;
  const void* value = nullptr;
  int64_t key_token_stride = 0, key_head_stride = 0;  // elements
  int64_t value_token_stride = 0, value_head_stride = 0;
  ActType input_type = ActType::kFp16;
  const int64_t* slot_mapping = nullptr;  // int64 [num_tokens], device
  int num_tokens = 0;
  int num_kv_heads = 0;
  int head_dim = 0;

  // The cache (as DecodeParams: elements of cache_type, K and V sharing the strides).
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  KvType cache_type = KvType::kUnset;  // must be set: never assumed from the element size
                                       // (fp16 and bf16 share 2 bytes; E5M2 and E4M3 one)
  int64_t page_stride = 0, token_stride = 0, head_stride = 0;
  int page_size = 0;
  int num_pages = 0;

  // stored = x / scale. A device pointer, when given, is read by the kernel instead, so a
  // captured graph follows scale updates.
  float k_scale = 1.f, v_scale = 1.f;
  const float* k_scale_ptr = nullptr;
  const float* v_scale_ptr = nullptr;
  uint32_t* errors = nullptr;  // optional device word: ErrorBit bits are OR-ed into it
};

// Every check the host can make without touching device memory, each naming its field.
inline Status validate_append_kv(const AppendKvParams& p) {
  using detail::aligned;
  using detail::str;
  if (p.num_tokens < 0) return Status::invalid("num_tokens", "must be >= 0");
  if (p.num_kv_heads < 1) return Status::invalid("num_kv_heads", "must be >= 1");
  if (p.head_dim < 8 || p.head_dim % 8)
    return Status::invalid("head_dim", str(p.head_dim) + " must be a positive multiple of 8");
  if (const Status set = detail::check_cache_type_set(p.cache_type); !set.ok()) return set;
  if (p.num_tokens == 0) return Status();
  if (!p.key) return Status::invalid("key", "is null");
  if (!p.value) return Status::invalid("value", "is null");
  if (!aligned(p.key, 16)) return Status::invalid("key", "must be 16-byte aligned");
  if (!aligned(p.value, 16)) return Status::invalid("value", "must be 16-byte aligned");
  // The stride of a dimension of one row is never used (index 0): framework views of size-1
  // dimensions carry any stride, here and in the cache.
  const struct { const char* name; int64_t stride; int extent; } input_strides[] = {
      {"key_token_stride", p.key_token_stride, p.num_tokens}, {"key_head_stride", p.key_head_stride, p.num_kv_heads},
      {"value_token_stride", p.value_token_stride, p.num_tokens},
      {"value_head_stride", p.value_head_stride, p.num_kv_heads}};
  for (const auto& s : input_strides)
    if (s.extent > 1 && (s.stride < 0 || s.stride % 8))
      return Status::invalid(s.name, str(s.stride) + " must be >= 0 and a multiple of 8 elements (16 bytes)");
  if (!p.slot_mapping) return Status::invalid("slot_mapping", "is null");
  if (!aligned(p.slot_mapping, 8)) return Status::invalid("slot_mapping", "must be 8-byte aligned");

  const int eb = kv_type_is_fp8(p.cache_type) ? 1 : 2;  // E5M2 and E4M3 one byte; fp16 and bf16 two
  if (!p.k_cache) return Status::invalid("k_cache", "is null");
  if (!p.v_cache) return Status::invalid("v_cache", "is null");
  if (!aligned(p.k_cache, 16)) return Status::invalid("k_cache", "must be 16-byte aligned");
  if (!aligned(p.v_cache, 16)) return Status::invalid("v_cache", "must be 16-byte aligned");
  if (p.page_size < 1) return Status::invalid("page_size", "must be >= 1");
  if (p.num_pages < 1) return Status::invalid("num_pages", "must be >= 1: the pages in the K/V pool");
  const struct { const char* name; int64_t stride; int extent; } cache_strides[] = {
      {"page_stride", p.page_stride, p.num_pages}, {"token_stride", p.token_stride, p.page_size},
      {"head_stride", p.head_stride, p.num_kv_heads}};
  for (const auto& s : cache_strides)  // signed, as DecodeParams allows
    if (s.extent > 1 && (s.stride * eb) % 16)
      return Status::invalid(s.name, str(s.stride) + " must be a multiple of 16 bytes");
  if (const int bad = detail::overlapping_stride(p.token_stride, p.page_size, p.head_stride, p.num_kv_heads,
                                                  p.head_dim))
    return Status::invalid(bad == 1 ? "token_stride" : "head_stride",
                           "token rows of one page overlap (stride too small, or 0)");
  // Pages must not share bytes either: a write to one slot would land in another's row.
  const int64_t page_extent = (p.page_size - 1) * std::llabs(p.token_stride) +
                              int64_t(p.num_kv_heads - 1) * std::llabs(p.head_stride) + p.head_dim;
  if (p.num_pages > 1 && std::llabs(p.page_stride) < page_extent)
    return Status::invalid("page_stride", str(p.page_stride) + " is smaller than a page's extent (" +
                                              str(page_extent) + " elements): pages would overlap");
  for (const Status& scale : {detail::check_scale("k_scale", p.k_scale, p.k_scale_ptr),
                              detail::check_scale("v_scale", p.v_scale, p.v_scale_ptr)})
    if (!scale.ok()) return scale;
  if (p.errors && !aligned(p.errors, 4)) return Status::invalid("errors", "must be 4-byte aligned");
  return Status();
}

}  // namespace vxqa
