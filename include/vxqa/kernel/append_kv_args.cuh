// vxqa/kernel/append_kv_args.cuh — what the KV writer's kernel receives (by value), and the
// types and error bits it shares with the host API. Host-usable: no kernels in here.
#pragma once
#include <vxqa/common.cuh>
#include <vxqa/kernel/error_bits.cuh>
#include <vxqa/numeric/act_type.cuh>

namespace vxqa {

struct AppendKvArgs {
  const void* key;  // [num_tokens, Hkv, D] of ActType, D contiguous
  const void* value;
  int64_t key_token_stride, key_head_stride;  // elements
  int64_t value_token_stride, value_head_stride;
  const int64_t* slot_mapping;  // [num_tokens]
  int num_tokens, num_kv_heads, head_dim;
  uint8_t* k_cache;  // bytes; strides below in elements of the cache type
  uint8_t* v_cache;
  int64_t page_stride, token_stride, head_stride;
  int page_size;
  int64_t num_slots;  // num_pages * page_size
  float k_scale, v_scale;                    // stored = round(x / scale)
  const float* k_scale_ptr;                  // device scalars: used instead when not null
  const float* v_scale_ptr;
  uint32_t* errors;  // ErrorBit bits, or null
};

}  // namespace vxqa
