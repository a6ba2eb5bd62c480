// vxqa/common.cuh — the few macros and types every layer shares.
//
// Three kinds of translation unit include vxqa headers:
//   - nvcc (.cu): host and device code;
//   - a plain host compiler (g++ .cpp): the numeric, paged and reference layers only, so the
//     host-side math is tested without nvcc (VXQA_HD expands to `inline`);
//   - NVRTC (the CUDA 12.8 sm_70 audit): device code only, no host standard library, so the
//     fixed-width integer types come from libcu++ there.
#pragma once

#if defined(__CUDACC_RTC__)
#include <cuda/std/cstdint>
typedef cuda::std::int8_t int8_t;
typedef cuda::std::uint8_t uint8_t;
typedef cuda::std::int16_t int16_t;
typedef cuda::std::uint16_t uint16_t;
typedef cuda::std::int32_t int32_t;
typedef cuda::std::uint32_t uint32_t;
typedef cuda::std::int64_t int64_t;
typedef cuda::std::uint64_t uint64_t;
#else
#include <cmath>
#include <cstdint>
#include <cstring>
#endif

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define VXQA_HD __host__ __device__ __forceinline__
#define VXQA_DEVICE __device__ __forceinline__
#define VXQA_IS_CUDA_COMPILER 1
#else
#define VXQA_HD inline
#define VXQA_IS_CUDA_COMPILER 0
#endif

// A point of a CTA's timeline: nothing, unless a translation unit defines it before its
// first vxqa include (bench/cta_timeline.cu records %globaltimer there). `args` are the
// kernel's DecodeKernelArgs; `point` is one of TimelinePoint.
#ifndef VXQA_TIMELINE_PROBE
#define VXQA_TIMELINE_PROBE(args, point) ((void)0)
#endif

namespace vxqa {

// The points VXQA_TIMELINE_PROBE marks: a decode CTA's (SM80 body), then a combine CTA's.
enum TimelinePoint : int {
  kProbeDecodeEntry,      // the kernel starts, before it waits for its predecessor
  kProbeDecodeReleased,   // its predecessor is done
  kProbeDecodeWork,       // the sequence length is known and the CTA has tokens
  kProbeDecodeFirstTile,  // warp 0's first tile has landed in shared memory
  kProbeDecodeStreamed,   // every warp is done with its tiles
  kProbeDecodeGathered,   // every warp's (m, l, O) is in shared memory for the merge
  kProbeDecodeWritten,    // thread 0's outputs are stored
  kProbeCombineEntry,
  kProbeCombineReleased,
  kProbeCombineWritten,
  kProbePoints
};

// Reinterprets the bits of a trivially copyable value (std::bit_cast is C++20).
template <class To, class From>
VXQA_HD To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast: sizes differ");
  To to;
  memcpy(&to, &from, sizeof(To));  // NVRTC declares memcpy itself; compilers fold it away
  return to;
}

// -infinity and a quiet NaN, spelled so that host compilers, nvcc and NVRTC all accept them
// (nanf("") parses its argument at run time in device code).
VXQA_HD float negative_infinity() { return bit_cast<float>(0xff800000u); }
VXQA_HD float quiet_nan() { return bit_cast<float>(0x7fc00000u); }

}  // namespace vxqa
