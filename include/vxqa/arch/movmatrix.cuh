// vxqa/arch/movmatrix.cuh — transposes an 8x8 matrix of 16-bit elements held across a warp
// (sm_75 and newer). Before: lane l holds row l/4, columns 2(l%4) and 2(l%4)+1 in one 32-bit
// word (the mma accumulator and operand layout); after: the same of the transpose.
#pragma once
#include <vxqa/common.cuh>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
#define VXQA_HAS_MOVMATRIX 1

namespace vxqa {
namespace arch {

VXQA_DEVICE uint32_t movmatrix_trans_b16(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

}  // namespace arch
}  // namespace vxqa

#else
#define VXQA_HAS_MOVMATRIX 0
#endif
