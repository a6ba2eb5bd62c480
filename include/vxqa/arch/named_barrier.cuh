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

// named_barrier_sync that also tells every thread whether any of them passed `pred` true
// (bar.red.or): a vote that costs no barrier of its own where one is needed anyway.
VXQA_DEVICE bool named_barrier_sync_any(int id, int threads, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(uint32_t(pred)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}
#endif

}  // namespace arch
}  // namespace vxqa
