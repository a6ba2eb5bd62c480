// bench/globaltimer.cuh — the GPU's nanosecond clock (%globaltimer), one clock for every SM,
// which the benchmarks' per-CTA stamps and busy waits read.
#pragma once

namespace vxqa_bench {

__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace vxqa_bench
