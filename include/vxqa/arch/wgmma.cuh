// vxqa/arch/wgmma.cuh — sm_90a's warpgroup MMA: the 128 threads of a warpgroup (4 whole,
// consecutive warps, the first a multiple of 4) multiply a 64 x 16 A by a 16 x N B (N 64 or
// 32 with A from shared memory; 8 to 64 in steps of 8 with A in registers: MmaRs) into
// 64 x N f32 accumulators, f16 inputs, asynchronously. B is read from shared memory
// through a descriptor, A from shared memory too or from registers (mma/wgmma_layout.cuh:
// the layouts, the descriptor, which thread holds which element).
//
// The protocol (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
//   fence_operands()   before the first wgmma, and after registers that a wgmma reads or
//                      accumulates into were written by other instructions;
//   fence_shared_for_async()  after threads stored an operand into shared memory with plain
//                      stores, before a wgmma reads it;
//   commit() then wait<N>()   close the wgmmas issued so far into a group, and wait until at
//                      most N groups are in flight: only then may their accumulators, their
//                      A registers or their shared memory be touched;
//   fence_registers(d)  after wait(), on the accumulators read next.
// Compiled for sm_90a only (the "a" features); elsewhere this header declares nothing.
#pragma once
#include <vxqa/common.cuh>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define VXQA_HAS_WGMMA 1

namespace vxqa {
namespace arch {
namespace wgmma {

VXQA_DEVICE void fence_operands() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
VXQA_DEVICE void fence_shared_for_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
VXQA_DEVICE void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
VXQA_DEVICE void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Ties registers to this point of the program: a wgmma's accumulators (or A registers) go
// through the asm statements that issue it as if written at once, so without this after
// wait() the compiler could move their reads above it. Volatile asm keeps its order.
template <int kCount>
VXQA_DEVICE void fence_registers(float (&r)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// d (+)= A·B, m64n64k16: A and B from shared memory. kTransposeB: B is MN-major (else
// K-major). accumulate false: d = A·B, its old values ignored.
template <bool kTransposeB>
VXQA_DEVICE void mma_m64n64k16_ss(float (&d)[32], uint64_t a_desc, uint64_t b_desc, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, %35;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransposeB)));
}

// The same, m64n32k16 (16 accumulators a thread): B is 32 columns.
template <bool kTransposeB>
VXQA_DEVICE void mma_m64n32k16_ss(float (&d)[16], uint64_t a_desc, uint64_t b_desc, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, %19;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransposeB)));
}

// d (+)= A·B, m64nNk16 with A in registers (four f16x2 words a thread: mma/wgmma_layout.cuh,
// a_row/a_col) and B from shared memory; N 8 to 64 in steps of 8 (the rows of a tokens-on-M
// tile: mma/wgmma_tokens_layout.cuh), N / 2 accumulators a thread.
template <int kN, bool kTransposeB>
struct MmaRs {
  static_assert(kN % 8 == 0 && kN >= 8 && kN <= 64, "wgmma::MmaRs: N is 8, 16, ... or 64");
};
#define VXQA_WGMMA_ACC4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
template <bool kTransposeB>
struct MmaRs<8, kTransposeB> {
  VXQA_DEVICE static void run(float (&d)[4], const uint32_t (&a)[4], uint64_t b_desc, bool accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, "
                 "{%4, %5, %6, %7}, %8, p, 1, 1, %10;\n}\n"
                 : VXQA_WGMMA_ACC4(0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransposeB)));
  }
};
template <bool kTransposeB>
struct MmaRs<16, kTransposeB> {
  VXQA_DEVICE static void run(float (&d)[8], const uint32_t (&a)[4], uint64_t b_desc, bool accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, "
                 "{%8, %9, %10, %11}, %12, p, 1, 1, %14;\n}\n"
                 : VXQA_WGMMA_ACC4(0), VXQA_WGMMA_ACC4(4)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransposeB)));
  }
};
template <bool kTransposeB>
struct MmaRs<24, kTransposeB> {
  VXQA_DEVICE static void run(float (&d)[12], const uint32_t (&a)[4], uint64_t b_desc, bool accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %17, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n24k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}, "
                 "{%12, %13, %14, %15}, %16, p, 1, 1, %18;\n}\n"
                 : VXQA_WGMMA_ACC4(0), VXQA_WGMMA_ACC4(4), VXQA_WGMMA_ACC4(8)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransposeB)));
  }
};
template <bool kTransposeB>
struct MmaRs<32, kTransposeB> {
  VXQA_DEVICE static void run(float (&d)[16], const uint32_t (&a)[4], uint64_t b_desc, bool accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
                 "{%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
                 : VXQA_WGMMA_ACC4(0), VXQA_WGMMA_ACC4(4), VXQA_WGMMA_ACC4(8), VXQA_WGMMA_ACC4(12)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransposeB)));
  }
};
template <bool kTransposeB>
struct MmaRs<40, kTransposeB> {
  VXQA_DEVICE static void run(float (&d)[20], const uint32_t (&a)[4], uint64_t b_desc, bool accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %25, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n40k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19}, "
                 "{%20, %21, %22, %23}, %24, p, 1, 1, %26;\n}\n"
                 : VXQA_WGMMA_ACC4(0), VXQA_WGMMA_ACC4(4), VXQA_WGMMA_ACC4(8), VXQA_WGMMA_ACC4(12), VXQA_WGMMA_ACC4(16)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransposeB)));
  }
};
template <bool kTransposeB>
struct MmaRs<48, kTransposeB> {
  VXQA_DEVICE static void run(float (&d)[24], const uint32_t (&a)[4], uint64_t b_desc, bool accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n48k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, "
                 "{%24, %25, %26, %27}, %28, p, 1, 1, %30;\n}\n"
                 : VXQA_WGMMA_ACC4(0), VXQA_WGMMA_ACC4(4), VXQA_WGMMA_ACC4(8), VXQA_WGMMA_ACC4(12), VXQA_WGMMA_ACC4(16), VXQA_WGMMA_ACC4(20)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransposeB)));
  }
};
template <bool kTransposeB>
struct MmaRs<56, kTransposeB> {
  VXQA_DEVICE static void run(float (&d)[28], const uint32_t (&a)[4], uint64_t b_desc, bool accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %33, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n56k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27}, "
                 "{%28, %29, %30, %31}, %32, p, 1, 1, %34;\n}\n"
                 : VXQA_WGMMA_ACC4(0), VXQA_WGMMA_ACC4(4), VXQA_WGMMA_ACC4(8), VXQA_WGMMA_ACC4(12), VXQA_WGMMA_ACC4(16), VXQA_WGMMA_ACC4(20), VXQA_WGMMA_ACC4(24)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransposeB)));
  }
};
template <bool kTransposeB>
struct MmaRs<64, kTransposeB> {
  VXQA_DEVICE static void run(float (&d)[32], const uint32_t (&a)[4], uint64_t b_desc, bool accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
                 "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : VXQA_WGMMA_ACC4(0), VXQA_WGMMA_ACC4(4), VXQA_WGMMA_ACC4(8), VXQA_WGMMA_ACC4(12), VXQA_WGMMA_ACC4(16), VXQA_WGMMA_ACC4(20), VXQA_WGMMA_ACC4(24), VXQA_WGMMA_ACC4(28)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)), "n"(int(kTransposeB)));
  }
};
#undef VXQA_WGMMA_ACC4

}  // namespace wgmma
}  // namespace arch
}  // namespace vxqa

#else
#define VXQA_HAS_WGMMA 0
#endif
