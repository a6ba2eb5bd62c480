// vxqa/arch/prefetch_l2.cuh — hints that bring global memory into L2 ahead of its copy into
// shared memory (sm_90 and a CUDA 12+ compiler: the bulk form needs PTX ISA 8.0). They hold
// no register and no shared memory while in flight, so they add bytes in flight where the
// stages cannot. Nothing waits for them: a hint that is dropped costs only its issue.
#pragma once
#include <vxqa/common.cuh>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 12
#define VXQA_HAS_L2_PREFETCH 1

namespace vxqa {
namespace arch {

// `bytes` (a multiple of 16) from `src` (16-byte aligned) into L2. One request whatever the
// size: issue it from one lane.
VXQA_DEVICE void prefetch_l2_bulk(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}

// The cache line holding `src` into L2 (every lane its own address).
VXQA_DEVICE void prefetch_l2_line(const void* src) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(src));
}

}  // namespace arch
}  // namespace vxqa

#else
#define VXQA_HAS_L2_PREFETCH 0
#endif
