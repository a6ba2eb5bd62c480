// vxqa/kernel/append_kv_kernel.cuh — writes one step's new K and V rows into the paged
// cache (vLLM's reshape_and_cache_flash contract): token t goes to slot slot_mapping[t] =
// page * page_size + offset; a negative slot skips it. Each thread moves 8 elements of one
// (token, head) row of K and of V: one 16-byte load of the fp16 / bf16 input, x / scale
// rounded into the cache's type (nearest-even; E5M2 saturating to ±57344 as cuda_fp8.h's
// __NV_SATFINITE, E4M3 to ±448 with NaN -> 0x7F, likewise; fp16 as __float2half_rn; bf16 as
// detail::float_to_act, overflowing to ±inf), one 8- or 16-byte store.
// Composed from the FP8 encoders and the cache's NHD strides; a slot outside the pool is
// never written: it sets kAppendErrorBadSlot.
#pragma once
#include <cuda_fp16.h>
#include <vxqa/common.cuh>
#include <vxqa/kernel/append_kv_args.cuh>
#include <vxqa/numeric/e4m3.cuh>
#include <vxqa/numeric/e5m2.cuh>
#include <vxqa/numeric/kv_type.cuh>

namespace vxqa {

#if VXQA_IS_CUDA_COMPILER
inline constexpr int kAppendThreads = 256;

namespace detail {

// 8 input elements (one uint4) / scale, into the cache's bytes at dst.
template <ActType kAct, KvType kKv>
VXQA_DEVICE void store_row_piece(const uint4 in, float scale, uint8_t* dst) {
  const uint32_t w[4] = {in.x, in.y, in.z, in.w};
  float x[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = act_to_float<kAct>(uint16_t(w[i] & 0xFFFFu)) / scale;
    x[2 * i + 1] = act_to_float<kAct>(uint16_t(w[i] >> 16)) / scale;
  }
  if constexpr (kKv == KvType::kE5M2) {
    *reinterpret_cast<uint2*>(dst) =
        make_uint2(float4_to_e5m2x4(make_float4(x[0], x[1], x[2], x[3]), Saturation::kFinite),
                   float4_to_e5m2x4(make_float4(x[4], x[5], x[6], x[7]), Saturation::kFinite));
  } else if constexpr (kKv == KvType::kE4M3) {
    // Software on every arch: sm_89's cvt.rn.satfinite.e4m3x2 is not used. float_to_e4m3 is
    // the encoder the CPU tests check against cuda_fp8.h, and this kernel is memory-bound.
    uint32_t codes[2] = {0u, 0u};
#pragma unroll
    for (int i = 0; i < 8; ++i) codes[i / 4] |= uint32_t(float_to_e4m3(x[i])) << (8 * (i % 4));
    *reinterpret_cast<uint2*>(dst) = make_uint2(codes[0], codes[1]);
  } else if constexpr (kKv == KvType::kBf16) {
    // Our own rounding, not cuda_bf16.h's: it is there on every arch (the writer is not
    // sm_80-only, only the bf16 cache's reader is) and it is what the CPU tests check.
    uint32_t pairs[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      pairs[i] = uint32_t(float_to_act<ActType::kBf16>(x[2 * i])) |
                 (uint32_t(float_to_act<ActType::kBf16>(x[2 * i + 1])) << 16);
    *reinterpret_cast<uint4*>(dst) = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
  } else {  // fp16: append_kv_kernel admits no other type
    uint32_t halves[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      halves[i] = detail::half2_to_bits(__floats2half2_rn(x[2 * i], x[2 * i + 1]));
    *reinterpret_cast<uint4*>(dst) = make_uint4(halves[0], halves[1], halves[2], halves[3]);
  }
}

}  // namespace detail

// Grid-stride over (token, head, 8-element piece); kKv (not its size) picks the encoder.
template <ActType kAct, KvType kKv>
__global__ void __launch_bounds__(kAppendThreads) append_kv_kernel(const AppendKvArgs a) {
  static_assert(kKv == KvType::kE5M2 || kKv == KvType::kE4M3 || kKv == KvType::kFp16 || kKv == KvType::kBf16,
                "append_kv_kernel: the cache is E5M2, E4M3, fp16 or bf16 (kUnset is never launched)");
  constexpr int kCacheBytes = KvTraits<kKv>::kElemBytes;  // the paged addressing is in bytes
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
    detail::store_row_piece<kAct, kKv>(*reinterpret_cast<const uint4*>(key + piece * 8), k_scale, a.k_cache + dst);
    detail::store_row_piece<kAct, kKv>(*reinterpret_cast<const uint4*>(value + piece * 8), v_scale, a.v_cache + dst);
  }
  if (bad_slot && a.errors) atomicOr(a.errors, uint32_t(kAppendErrorBadSlot));
}
#endif

}  // namespace vxqa
