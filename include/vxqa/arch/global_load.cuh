// vxqa/arch/global_load.cuh — 16-byte read-only global loads (LDG.E.128 through the
// non-coherent path). The KV cache is never written while a decode kernel runs, so .nc is
// safe and lets the loads use the texture path.
#pragma once
#include <vxqa/common.cuh>

namespace vxqa {
namespace arch {

struct Bytes16 {
  uint32_t w[4];
};

#if VXQA_IS_CUDA_COMPILER
VXQA_DEVICE Bytes16 ldg_nc_16(const void* ptr) {
  Bytes16 r;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.w[0]), "=r"(r.w[1]), "=r"(r.w[2]), "=r"(r.w[3])
               : "l"(ptr));
  return r;
}
#endif

}  // namespace arch
}  // namespace vxqa
