// vxqa/numeric/act_type.cuh — the element types of activations (decode's q and out,
// append_kv's new K/V) and their conversions. The MMAs take fp16: bf16 q is converted once,
// where it is loaded, and outputs are rounded from fp32 once, where they are stored.
#pragma once
#include <vxqa/common.cuh>
#include <cuda_fp16.h>
#include <vxqa/numeric/e5m2.cuh>

namespace vxqa {

enum class ActType { kFp16, kBf16 };

template <ActType kAct>
struct ActTraits;
template <>
struct ActTraits<ActType::kFp16> {
  static constexpr const char* kName = "fp16";
};
template <>
struct ActTraits<ActType::kBf16> {
  static constexpr const char* kName = "bf16";
};

// The name of a type known only at run time (messages).
VXQA_HD const char* act_type_name(ActType t) {
  return t == ActType::kBf16 ? ActTraits<ActType::kBf16>::kName : ActTraits<ActType::kFp16>::kName;
}

namespace detail {

template <ActType kAct>
VXQA_HD float act_to_float(uint16_t bits) {
  if constexpr (kAct == ActType::kFp16) {
    __half_raw h;
    h.x = bits;
    return __half2float(__half(h));
  } else {
    return bit_cast<float>(uint32_t(bits) << 16);  // bf16 is the top half of an fp32
  }
}

// Round to nearest even; NaN stays a (quiet) NaN. Our own bf16 rounding: cuda_bf16.h's
// conversions are not all there for sm_70 in CUDA 11.8.
template <ActType kAct>
VXQA_HD uint16_t float_to_act(float x) {
  if constexpr (kAct == ActType::kFp16) {
    return __half_raw(__float2half_rn(x)).x;
  } else {
    const uint32_t bits = bit_cast<uint32_t>(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);
    return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
}

// Two packed activations as an fp16x2 word, as the MMAs take them. bf16 beyond fp16's range
// (|x| > 65504) becomes ±inf, and below 2^-14 an fp16 subnormal (docs/api.md, qo_type).
template <ActType kAct>
VXQA_HD uint32_t act2_to_half2_bits(uint32_t word) {
  if constexpr (kAct == ActType::kFp16) {
    return word;
  } else {
    return half2_to_bits(__floats2half2_rn(act_to_float<kAct>(uint16_t(word & 0xffffu)),
                                           act_to_float<kAct>(uint16_t(word >> 16))));
  }
}

}  // namespace detail
}  // namespace vxqa
