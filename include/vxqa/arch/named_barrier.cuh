// vxqa/arch/named_barrier.cuh — a barrier for some whole warps of a CTA (bar.sync with a
// thread count), on an id other than __syncthreads' 0: the SM80 body's warps that share a
// K/V tile wait for one another on it, the CTA's other warps go on.
#pragma once
#include <vxqa/common.cuh>

namespace vxqa {
namespace arch {

#if VXQA_IS_CUDA_COMPILER
// Waits until `threads` threads (a multiple of 32) have arrived at barrier `id` (1..15);
// orders their shared-memory accesses as __syncthreads does.
VXQA_DEVICE void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrives at barrier `id` without waiting: a producer tells the consumers that wait there
// with named_barrier_sync (the same count: producers and consumers together) that its
// writes before it are done.
VXQA_DEVICE void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
#endif

}  // namespace arch
}  // namespace vxqa
