// vxqa/kernel/append_kv_kernel.cuh — writes one step's new K and V rows into the paged
// cache (vLLM's reshape_and_cache_flash contract): token t goes to slot slot_mapping[t] =
// page * page_size + offset; a negative slot skips it. Each thread moves 8 elements of one
// (token, head) row of K and of V: one 16-byte load of the fp16 / bf16 input, x / scale rounded into the
// cache's type (E5M2: nearest-even, saturating to ±57344 as cuda_fp8.h's __NV_SATFINITE; fp16:
// nearest-even), one 8- or 16-byte store. Composed from the E5M2 converter and the cache's
// NHD strides; a slot outside the pool is never written: it sets kAppendErrorBadSlot.
#pragma once
#include <cuda_fp16.h>
#include <vxqa/common.cuh>
#include <vxqa/kernel/append_kv_args.cuh>
#include <vxqa/numeric/e5m2.cuh>

namespace vxqa {

#if VXQA_IS_CUDA_COMPILER
inline constexpr int kAppendThreads = 256;

namespace detail {

// 8 input elements (one uint4) / scale, into the cache's bytes at dst.
template <ActType kAct, int kCacheBytes>
VXQA_DEVICE void store_row_piece(const uint4 in, float scale, uint8_t* dst) {
  const uint32_t w[4] = {in.x, in.y, in.z, in.w};
  float x[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = act_to_float<kAct>(uint16_t(w[i] & 0xFFFFu)) / scale;
    x[2 * i + 1] = act_to_float<kAct>(uint16_t(w[i] >> 16)) / scale;
  }
  if constexpr (kCacheBytes == 1) {
    *reinterpret_cast<uint2*>(dst) =
        make_uint2(float4_to_e5m2x4(make_float4(x[0], x[1], x[2], x[3]), Saturation::kFinite),
                   float4_to_e5m2x4(make_float4(x[4], x[5], x[6], x[7]), Saturation::kFinite));
  } else {
    uint32_t halves[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      halves[i] = detail::half2_to_bits(__floats2half2_rn(x[2 * i], x[2 * i + 1]));
    *reinterpret_cast<uint4*>(dst) = make_uint4(halves[0], halves[1], halves[2], halves[3]);
  }
}

}  // namespace detail

// Grid-stride over (token, head, 8-element piece); kCacheBytes 1 = E5M2, 2 = fp16.
template <ActType kAct, int kCacheBytes>
__global__ void __launch_bounds__(kAppendThreads) append_kv_kernel(const AppendKvArgs a) {
  const int pieces = a.head_dim / 8;
  const int64_t total = int64_t(a.num_tokens) * a.num_kv_heads * pieces;
  // A device scale that is not finite or not > 0 writes its rows as NaN codes (x / NaN),
  // never a finite number, and sets its bit (validate_append_kv checked the host values).
  const float k_given = a.k_scale_ptr ? *a.k_scale_ptr : a.k_scale;
  const float v_given = a.v_scale_ptr ? *a.v_scale_ptr : a.v_scale;
  const float k_scale = valid_scale_or_nan(k_given), v_scale = valid_scale_or_nan(v_given);
  if ((blockIdx.x | threadIdx.x) == 0 && a.errors) {
    const uint32_t scale_errors = scale_error_bits(k_given, v_given);
    if (scale_errors) atomicOr(a.errors, scale_errors);
  }
  bool bad_slot = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int piece = int(i % pieces);
    const int64_t row = i / pieces;
    const int head = int(row % a.num_kv_heads);
    const int64_t token = row / a.num_kv_heads;
    const int64_t slot = a.slot_mapping[token];
    if (slot < 0) continue;  // vLLM's padding: every negative slot is skipped
    if (slot >= a.num_slots) {  // never written: outside the pool
      bad_slot = true;
      continue;
    }
    const int64_t page = slot / a.page_size, offset = slot % a.page_size;
    const int64_t dst = (page * a.page_stride + offset * a.token_stride + head * a.head_stride + piece * 8) * kCacheBytes;
    const uint16_t* key = static_cast<const uint16_t*>(a.key) + token * a.key_token_stride + head * a.key_head_stride;
    const uint16_t* value =
        static_cast<const uint16_t*>(a.value) + token * a.value_token_stride + head * a.value_head_stride;
    detail::store_row_piece<kAct, kCacheBytes>(*reinterpret_cast<const uint4*>(key + piece * 8), k_scale,
                                               a.k_cache + dst);
    detail::store_row_piece<kAct, kCacheBytes>(*reinterpret_cast<const uint4*>(value + piece * 8), v_scale,
                                               a.v_cache + dst);
  }
  if (bad_slot && a.errors) atomicOr(a.errors, uint32_t(kAppendErrorBadSlot));
}
#endif

}  // namespace vxqa
