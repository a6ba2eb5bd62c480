// vxqa/arch/mma_m8n8k4.cuh — the SM70 tensor-core instruction, one thin wrapper per form.
//
// mma.sync.aligned.m8n8k4 with f16 inputs and f32 accumulators. Each quad pair of a warp
// (lanes 4q..4q+3 and 16+4q..16+4q+3) computes its own 8x8x4 product; mma/fragments.cuh
// says which element each lane holds. On sm_70 this is HMMA.884; on sm_80+ it still
// compiles (emulated with shuffles and FMAs: right answers, no speed).
#pragma once
#include <vxqa/common.cuh>

#if VXQA_IS_CUDA_COMPILER
namespace vxqa {
namespace arch {

// D = A(8x4, row-major) * B(4x8, col-major) + C. a/b: two f16x2 words each; c/d: eight f32.
VXQA_DEVICE void mma_m8n8k4_row_col(float (&d)[8], const uint32_t (&a)[2], const uint32_t (&b)[2],
                                    const float (&c)[8]) {
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, {%12,%13,%14,%15,%16,%17,%18,%19};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
        "=f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]),
        "f"(c[4]), "f"(c[5]), "f"(c[6]), "f"(c[7]));
}

// D = A(8x4, row-major) * B(4x8, row-major) + C.
VXQA_DEVICE void mma_m8n8k4_row_row(float (&d)[8], const uint32_t (&a)[2], const uint32_t (&b)[2],
                                    const float (&c)[8]) {
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.row.f32.f16.f16.f32 "
      "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, {%12,%13,%14,%15,%16,%17,%18,%19};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
        "=f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]),
        "f"(c[4]), "f"(c[5]), "f"(c[6]), "f"(c[7]));
}

}  // namespace arch
}  // namespace vxqa
#endif
