// test/sm70/e4m3_convert.cu — SM70 audit TU: the software E4M3 -> fp16 decode
// (numeric/e4m3.cuh), for the issue-21 cache format on GPUs without a hardware convert.
//
// Device-only and NVRTC-compatible, compiled to sm_70 (and sm_80, sm_90) cubins by nvcc 11.8
// and to sm_70 by NVRTC 12.8; scripts/sass_audit.py checks the `vxqa-audit:` lines below.
//
// Each thread loads 16 E4M3 codes with one 128-bit load, decodes them with
// vxqa::e4m3x4_to_half2x2_bits_scaled (a pair: PRMT, a shift, IADD, LOP3) and stores 16 fp16
// with two 128-bit stores: 47 instructions on sm_70 (nvcc 11.8 and NVRTC 12.8 alike: 8 PRMT,
// 8 shifts as IMAD, 8 IADD3, 8 LOP3, and the load, stores and index), 50 on sm_90. The bound
// holds the decode to its four a pair: five would be 55.
//
// vxqa-audit: kernel=^vxqa_audit_e4m3 require=LDG.E.128,PRMT,LOP3,STG.E.128
// vxqa-audit: kernel=^vxqa_audit_e4m3 forbid=LDL,STL max-registers=32 max-instructions=50
#include <vxqa/numeric/e4m3.cuh>

// in: n16 groups of 16 E4M3 codes; out: 2 * n16 groups of 8 fp16 (each value / 256).
extern "C" __global__ void __launch_bounds__(256)
    vxqa_audit_e4m3x4_to_half2x2_bits_scaled(const uint4* __restrict__ in, uint4* __restrict__ out,
                                             uint32_t n16) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n16) return;
  const uint4 codes = in[i];
  const uint2 a = vxqa::e4m3x4_to_half2x2_bits_scaled(codes.x), b = vxqa::e4m3x4_to_half2x2_bits_scaled(codes.y);
  const uint2 c = vxqa::e4m3x4_to_half2x2_bits_scaled(codes.z), d = vxqa::e4m3x4_to_half2x2_bits_scaled(codes.w);
  out[2 * i] = make_uint4(a.x, a.y, b.x, b.y);
  out[2 * i + 1] = make_uint4(c.x, c.y, d.x, d.y);
}
