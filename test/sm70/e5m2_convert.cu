// test/sm70/e5m2_convert.cu — SM70 audit TU: vectorised E5M2 -> fp16 decode.
//
// Device-only and NVRTC-compatible (no host code, no host standard headers): it is compiled
// to sm_70 cubins by nvcc 11.8 and by NVRTC 12.8 and its SASS is checked by
// scripts/sass_audit.py against the `vxqa-audit:` lines below (see test/sm70/CMakeLists.txt).
//
// Each thread loads 16 E5M2 codes with one 128-bit load (LDG.E.128), decodes them with
// vxqa::e5m2x4_to_half2x2 (one PRMT per half2) and stores 16 fp16 with two 128-bit stores.
// Nothing may go to local memory: e5m2x16_to_half2x8 returns through an array reference,
// which must stay in registers.
//
// vxqa-audit: kernel=^vxqa_audit_e5m2 require=LDG.E.128,PRMT,STG.E.128
// vxqa-audit: kernel=^vxqa_audit_e5m2 forbid=LDL,STL max-registers=32
// vxqa-audit: kernel=^vxqa_audit_e5m2x16_to_half2x8_scaled$ require=HMUL2
#include <vxqa/numeric/e5m2.cuh>

namespace {

__device__ __forceinline__ uint32_t bits_of(__half2 h) {
  return vxqa::bit_cast<uint32_t>(__half2_raw(h));
}

__device__ __forceinline__ uint4 pack(__half2 a, __half2 b, __half2 c, __half2 d) {
  uint4 v;
  v.x = bits_of(a);
  v.y = bits_of(b);
  v.z = bits_of(c);
  v.w = bits_of(d);
  return v;
}

}  // namespace

// in: n16 groups of 16 E5M2 codes; out: 2 * n16 groups of 8 fp16.
extern "C" __global__ void __launch_bounds__(256)
    vxqa_audit_e5m2x4_to_half2x2(const uint4* __restrict__ in, uint4* __restrict__ out,
                                 uint32_t n16) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n16) return;
  const uint4 codes = in[i];
  __half2 h[8];
  vxqa::e5m2x4_to_half2x2(codes.x, h[0], h[1]);
  vxqa::e5m2x4_to_half2x2(codes.y, h[2], h[3]);
  vxqa::e5m2x4_to_half2x2(codes.z, h[4], h[5]);
  vxqa::e5m2x4_to_half2x2(codes.w, h[6], h[7]);
  out[2 * i] = pack(h[0], h[1], h[2], h[3]);
  out[2 * i + 1] = pack(h[4], h[5], h[6], h[7]);
}

// As above through e5m2x16_to_half2x8, then times `scale` (the per-tensor dequant scale).
extern "C" __global__ void __launch_bounds__(256)
    vxqa_audit_e5m2x16_to_half2x8_scaled(const uint4* __restrict__ in, uint4* __restrict__ out,
                                         uint32_t n16, __half2 scale) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n16) return;
  __half2 h[8];
  vxqa::e5m2x16_to_half2x8(in[i], h);
#pragma unroll
  for (int j = 0; j < 8; ++j) h[j] = __hmul2(h[j], scale);
  out[2 * i] = pack(h[0], h[1], h[2], h[3]);
  out[2 * i + 1] = pack(h[4], h[5], h[6], h[7]);
}
