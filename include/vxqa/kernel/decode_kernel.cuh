// vxqa/kernel/decode_kernel.cuh — the decode kernel, composed from the pieces by one Config:
// it only dispatches to the CTA body of the code being compiled, the SM80 one
// (kernel/decode_cta_sm80.cuh: mma.m16n8k16, cp.async) for sm_80 and newer with
// MmaAtom::kAuto, else the SM70 one (kernel/decode_cta_sm70.cuh: mma.m8n8k4,
// register-staged loads). What a CTA writes for a head: kernel/decode_cta_common.cuh.
#pragma once
#include <vxqa/arch/grid_dependency.cuh>
#include <vxqa/common.cuh>
#include <vxqa/kernel/config.cuh>
#include <vxqa/kernel/decode_args.cuh>
#include <vxqa/kernel/decode_cta_common.cuh>
#include <vxqa/kernel/decode_cta_sm70.cuh>
#include <vxqa/kernel/decode_cta_sm80.cuh>

namespace vxqa {

#if VXQA_IS_CUDA_COMPILER
// One kernel for every architecture: the body follows the code being compiled (sm_80+ and
// MmaAtom::kAuto: the SM80 body), so the host must give it that body's shared memory
// (decode_smem_bytes, from the code the device runs).
template <class Config>
__global__ void __launch_bounds__(Config::kThreads) decode_kernel(const DecodeKernelArgs args) {
  extern __shared__ __align__(16) uint8_t vxqa_decode_smem[];
  // On sm_90 decode() launches this kernel as the previous kernel's programmatic dependent:
  // nothing is read or written before that kernel is done.
  VXQA_TIMELINE_PROBE(args, kProbeDecodeEntry);
  arch::grid_dependency_wait();
  VXQA_TIMELINE_PROBE(args, kProbeDecodeReleased);
  // With several chunks no memset zeroes the error word before the step: this kernel does,
  // and the combine, which starts after it, ORs the chunks' bits into it.
  if (args.chunk_errors && (blockIdx.x | blockIdx.y | blockIdx.z | threadIdx.x) == 0) *args.errors = 0u;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (Config::kHasSm80Path) {
    DecodeCtaSm80<Config>::run(args, vxqa_decode_smem);
    return;
  }
#endif
  // A Config without an SM70 body (a bf16 cache) is never launched where this code runs:
  // decode_smem_bytes refuses it.
  if constexpr (Config::kHasSm70Body) DecodeCtaSm70<Config>::run(args, vxqa_decode_smem);
}

// One-chunk steps of decode_kernel<Config>: the step's error word starts as the scales'
// bits, and the decode CTAs OR theirs into it (decode() launches it before the decode
// kernel, where a memset was: in the decode kernel these few instructions made ptxas spill
// on sm_70). A template, as every kernel of these headers, so that it links once.
template <class Config>
__global__ void reset_errors_kernel(const DecodeKernelArgs a) {
  if (threadIdx.x == 0) *a.errors = device_scale_errors(a);
}
#endif

}  // namespace vxqa
