// vxqa/arch/fast_float.cuh — float operations of the score path (the SM80 softmax step, the
// soft-cap's tanh), each one instruction where the hardware has it.
//
// exp2f compiles (without fast math) to MUFU.EX2 wrapped in a rescale for subnormal results:
// four more instructions an exponential. The softmax rounds p into fp16, whose smallest
// subnormal is 2^-24, and a rescale factor below 2^-126 scales a sum the new terms dwarf by
// as much, so the flush to zero changes no result: ex2.approx.ftz alone (same MUFU, same
// error in the normal range). ex2(-inf) = +0 and ex2(NaN) = NaN, as exp2f.
//
// max.NaN (sm_80+) is softmax::max_keep_nan in one instruction instead of three: NaN when
// either operand is NaN.
#pragma once
#include <vxqa/common.cuh>

namespace vxqa {
namespace arch {

#if VXQA_IS_CUDA_COMPILER
VXQA_DEVICE float exp2_ftz(float x) {
#ifdef __CUDA_ARCH__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);  // the host pass only parses device code
#endif
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define VXQA_HAS_MAX_NAN 1
VXQA_DEVICE float max_nan(float a, float b) {
  float y;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
#else
#define VXQA_HAS_MAX_NAN 0
#endif
#endif

}  // namespace arch
}  // namespace vxqa
