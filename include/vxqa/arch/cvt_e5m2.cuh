// vxqa/arch/cvt_e5m2.cuh — the hardware fp32/fp16 -> E5M2 conversions (sm_89 and newer).
//
// One thin wrapper per PTX instruction; numeric/e5m2.cuh decides when to use them. Both round
// to nearest even and saturate to ±57344 (only the .satfinite form exists for E5M2 targets),
// so they serve vxqa::Saturation::kFinite only. They exist only in device code for sm_89+;
// elsewhere this header declares nothing.
#pragma once
#include <vxqa/common.cuh>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define VXQA_HAS_CVT_E5M2 1

namespace vxqa {
namespace arch {

// Two floats -> two E5M2 codes: `hi` goes to bits 15:8, `lo` to bits 7:0.
VXQA_DEVICE uint16_t cvt_rn_satfinite_e5m2x2_f32(float hi, float lo) {
  uint16_t codes;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(codes) : "f"(hi), "f"(lo));
  return codes;
}

// A packed half2 (bits 15:0 = .x) -> two E5M2 codes (bits 7:0 from .x, 15:8 from .y).
VXQA_DEVICE uint16_t cvt_rn_satfinite_e5m2x2_f16x2(uint32_t half2_bits) {
  uint16_t codes;
  asm("cvt.rn.satfinite.e5m2x2.f16x2 %0, %1;" : "=h"(codes) : "r"(half2_bits));
  return codes;
}

}  // namespace arch
}  // namespace vxqa

#else
#define VXQA_HAS_CVT_E5M2 0
#endif
