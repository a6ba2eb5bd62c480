// vxqa/arch/cvt_e4m3.cuh — the hardware E4M3 -> fp16 conversion (sm_89 and newer).
//
// One thin wrapper a PTX instruction; numeric/kv_decode.cuh decides when to use it. It
// exists only in device code for sm_89+; elsewhere this header declares nothing.
#pragma once
#include <vxqa/common.cuh>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define VXQA_HAS_CVT_E4M3 1

namespace vxqa {
namespace arch {

// Two E4M3 codes (bits 7:0 -> .x, 15:8 -> .y) -> the bits of a half2 of their exact values.
VXQA_DEVICE uint32_t cvt_rn_f16x2_e4m3x2(uint16_t codes) {
  uint32_t half2_bits;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(half2_bits) : "h"(codes));
  return half2_bits;
}

}  // namespace arch
}  // namespace vxqa

#else
#define VXQA_HAS_CVT_E4M3 0
#endif
