// vxqa/arch/mbarrier.cuh — shared-memory mbarriers (sm_90; PTX ISA, "mbarrier"), for a
// producer warp that copies with cp.async and hands each stage to the computing threads:
// the copies arrive on the stage's "full" barrier when they land
// (arrive_when_copies_land), the computing threads on its "empty" barrier when they have
// read it (arrive), and each side waits for the other's phase (wait_parity). Unlike a named
// barrier, neither side stalls until the other is there, and unlike cp.async.wait_group a
// thread that did not copy can wait for the copies.
#pragma once
#include <vxqa/common.cuh>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define VXQA_HAS_MBARRIER 1

namespace vxqa {
namespace arch {
namespace mbarrier {

// One thread, before any other uses it (then a __syncthreads): `count` arrivals complete a
// phase.
VXQA_DEVICE void init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(uint32_t(__cvta_generic_to_shared(bar))),
               "r"(count)
               : "memory");
}

// One arrival of the calling thread, after its shared-memory accesses before it.
VXQA_DEVICE void arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(uint32_t(__cvta_generic_to_shared(bar)))
               : "memory");
}

// One arrival that happens when every cp.async the calling thread issued before it has
// landed (.noinc: `count` at init includes it).
VXQA_DEVICE void arrive_when_copies_land(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(
                   uint32_t(__cvta_generic_to_shared(bar)))
               : "memory");
}

// Waits until the phase of parity `parity` (0 for the first phase, then 1, 0, ...) has
// completed; what the arrivals ordered before it is then visible.
VXQA_DEVICE void wait_parity(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nvxqa_mbarrier_wait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra vxqa_mbarrier_wait;\n}\n" ::"r"(uint32_t(__cvta_generic_to_shared(bar))),
      "r"(parity)
      : "memory");
}

}  // namespace mbarrier
}  // namespace arch
}  // namespace vxqa

#else
#define VXQA_HAS_MBARRIER 0
#endif
