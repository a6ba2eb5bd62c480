// vxqa/arch/mma_m16n8k16.cuh — the SM80+ tensor-core instruction, f16 or bf16 inputs, f32
// accumulators (HMMA.16816.F32, .BF16). mma/fragments_m16n8k16.cuh says which element each
// lane holds. sm_80 and newer only; elsewhere this header declares nothing.
#pragma once
#include <vxqa/common.cuh>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define VXQA_HAS_MMA_M16N8K16 1

namespace vxqa {
namespace arch {

// D = A(16x16, row-major) * B(16x8, col-major) + C. a: four f16x2 words, b: two, c/d: four f32.
VXQA_DEVICE void mma_m16n8k16_row_col(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                      const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}

// The same with bf16x2 words in a and b.
VXQA_DEVICE void mma_m16n8k16_row_col_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                           const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}

}  // namespace arch
}  // namespace vxqa

#else
#define VXQA_HAS_MMA_M16N8K16 0
#endif
