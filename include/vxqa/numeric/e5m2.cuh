// vxqa/numeric/e5m2.cuh — E5M2 (OCP FP8) <-> fp16 / fp32 conversions.
//
// E5M2 is 1 sign, 5 exponent (bias 15) and 2 mantissa bits: exactly the top byte of an
// fp16, so decoding is a byte move (one PRMT makes a half2 from two codes) and is exact for
// every code, ±0, subnormals, ±inf and NaN included. NaN codes keep their payload:
// code c decodes to the fp16 bits c << 8 (cuda_fp8.h returns 0x7FFF for every NaN code, in
// software and through the sm_89+ cvt alike).
//
// Encoding rounds to nearest, ties to even, and matches cuda_fp8.h's
// __nv_cvt_float_to_fp8 / __nv_cvt_halfraw_to_fp8 (E5M2) bit for bit:
//   - |x| >= 61440 (the midpoint above the largest finite 57344, which ties up) and ±inf
//     give ±57344 (0x7B) under Saturation::kFinite (__NV_SATFINITE), ±inf (0x7C) under
//     Saturation::kNone (__NV_NOSAT);
//   - |x| <= 2^-17 (half the smallest subnormal 2^-16) gives ±0;
//   - every NaN gives 0x7F, whatever its sign or payload.
// On sm_89+ kFinite uses the hardware cvt (.satfinite), as cuda_fp8.h does; on an H200 it
// gives the same bits as the software path for every fp16 and 16M mixed fp32 inputs.
// fp32 is rounded straight to E5M2: going through fp16 first would round twice.
//
// Everything is __host__ __device__ and builds with nvcc, a plain host compiler and NVRTC.
#pragma once
#include <vxqa/common.cuh>
#include <cuda_fp16.h>
#include <vxqa/arch/cvt_e5m2.cuh>

namespace vxqa {

// What an encode does with values past the largest finite E5M2 (57344), ±inf included.
enum class Saturation {
  kFinite,  // clamp to ±57344 (cuda_fp8.h's __NV_SATFINITE)
  kNone,    // give ±inf (__NV_NOSAT)
};

static_assert(sizeof(__half2_raw) == sizeof(uint32_t),
              "e5m2: a __half2_raw must be one 32-bit word for the bit moves below");

// ---------------------------------------------------------------------------------------
// Decode
// ---------------------------------------------------------------------------------------

VXQA_HD uint16_t e5m2_to_half_bits(uint8_t code) { return uint16_t(uint16_t(code) << 8); }

// __half and __half2 are made from and read through their plain __half_raw / __half2_raw
// structs, not bit_cast: they have non-public members (g++ rejects a memcpy into them) and
// __half2 is not even trivially copyable on the host.
VXQA_HD __half e5m2_to_half(uint8_t code) {
  __half_raw raw;
  raw.x = e5m2_to_half_bits(code);
  return __half(raw);
}

VXQA_HD float e5m2_to_float(uint8_t code) { return __half2float(e5m2_to_half(code)); }

// The decoded value times `scale` (the per-tensor dequantisation scale), rounded once.
VXQA_HD float e5m2_to_float(uint8_t code, float scale) { return e5m2_to_float(code) * scale; }

namespace detail {

// Byte kFromLo of `word` to bits 15:8 of the result, byte kFromHi to bits 31:24, zeros
// elsewhere: two E5M2 codes become the bits of a half2.
// __byte_perm selector: nibble i names the source byte of result byte i, 4 being a zero byte
// of the second operand; <0, 1> is 0x1404 and <2, 3> is 0x3424, one PRMT each.
template <int kFromLo, int kFromHi>
VXQA_HD uint32_t spread_bytes(uint32_t word) {
  static_assert(kFromLo >= 0 && kFromLo < 4 && kFromHi >= 0 && kFromHi < 4,
                "spread_bytes: byte indices are 0..3");
#if defined(__CUDA_ARCH__)
  return __byte_perm(word, 0u, 0x0404u | (kFromLo << 4) | (kFromHi << 12));
#else
  return (((word >> (8 * kFromLo)) & 0xFFu) << 8) | (((word >> (8 * kFromHi)) & 0xFFu) << 24);
#endif
}

VXQA_HD __half2 half2_from_bits(uint32_t bits) { return __half2(bit_cast<__half2_raw>(bits)); }

VXQA_HD uint32_t half2_to_bits(__half2 h) { return bit_cast<uint32_t>(__half2_raw(h)); }

}  // namespace detail

// Two codes (bits 7:0 -> .x, 15:8 -> .y) as the bits of a half2.
VXQA_HD uint32_t e5m2x2_to_half2_bits(uint16_t two_codes) {
  return detail::spread_bytes<0, 1>(two_codes);
}

VXQA_HD __half2 e5m2x2_to_half2(uint16_t two_codes) {
  return detail::half2_from_bits(e5m2x2_to_half2_bits(two_codes));
}

// Four codes as the bits of two half2: bytes 0,1 -> words.x, bytes 2,3 -> words.y.
VXQA_HD uint2 e5m2x4_to_half2x2_bits(uint32_t four_codes) {
  uint2 words;
  words.x = detail::spread_bytes<0, 1>(four_codes);
  words.y = detail::spread_bytes<2, 3>(four_codes);
  return words;
}

// Four codes: bytes 0,1 -> lo.x, lo.y; bytes 2,3 -> hi.x, hi.y.
VXQA_HD void e5m2x4_to_half2x2(uint32_t four_codes, __half2& lo, __half2& hi) {
  const uint2 words = e5m2x4_to_half2x2_bits(four_codes);
  lo = detail::half2_from_bits(words.x);
  hi = detail::half2_from_bits(words.y);
}

// Eight codes (word .x holds codes 0..3): code 2i -> out[i].x, code 2i+1 -> out[i].y.
VXQA_HD void e5m2x8_to_half2x4(uint2 eight_codes, __half2 (&out)[4]) {
  e5m2x4_to_half2x2(eight_codes.x, out[0], out[1]);
  e5m2x4_to_half2x2(eight_codes.y, out[2], out[3]);
}

// Sixteen codes (one 16-byte load; word .x holds codes 0..3): code 2i -> out[i].x,
// code 2i+1 -> out[i].y.
VXQA_HD void e5m2x16_to_half2x8(uint4 sixteen_codes, __half2 (&out)[8]) {
  e5m2x4_to_half2x2(sixteen_codes.x, out[0], out[1]);
  e5m2x4_to_half2x2(sixteen_codes.y, out[2], out[3]);
  e5m2x4_to_half2x2(sixteen_codes.z, out[4], out[5]);
  e5m2x4_to_half2x2(sixteen_codes.w, out[6], out[7]);
}

// ---------------------------------------------------------------------------------------
// Encode
// ---------------------------------------------------------------------------------------

namespace detail {

// Enumerators, not constexpr variables: a variable used in device code can become a global
// (NVRTC emits one), an enumerator is always an immediate.
enum E5m2Code : uint8_t {
  kE5m2MaxFinite = 0x7B,  // 1.75 * 2^15 = 57344
  kE5m2Inf = 0x7C,
  kE5m2NaN = 0x7F,  // the NaN cuda_fp8.h (and the sm_89+ cvt) returns for every NaN
};

VXQA_HD uint8_t e5m2_overflow(uint32_t sign, Saturation saturation) {
  return uint8_t(sign | (saturation == Saturation::kFinite ? kE5m2MaxFinite : kE5m2Inf));
}

// fp32 bits -> E5M2, rounding once from the fp32 value.
VXQA_HD uint8_t float_bits_to_e5m2_soft(uint32_t bits, Saturation saturation) {
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return kE5m2NaN;
  if (magnitude >= 0x47700000u) return e5m2_overflow(sign, saturation);  // >= 61440, inf
  if (magnitude >= 0x38800000u) {
    // >= 2^-14, a normal E5M2: drop 21 mantissa bits with ties-to-even (adding half an ulp
    // minus one plus the kept lsb), then rebias the exponent from 127 to 15. A carry out of
    // the mantissa correctly bumps the exponent; below 61440 it cannot reach 0x7C.
    const uint32_t kept_lsb = (magnitude >> 21) & 1u;
    const uint32_t rounded = (magnitude + 0x000FFFFFu + kept_lsb) >> 21;
    return uint8_t(sign | (rounded - ((127u - 15u) << 2)));
  }
  // Below 2^-14: a multiple of the subnormal step 2^-16, or zero. fp32 exponents below 110
  // (values under 2^-17, fp32 subnormals included) round to zero; 2^-17 itself ties to 0.
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 110u) return uint8_t(sign);
  // value = significand * 2^(exponent - 150) = (significand >> (134 - exponent)) * 2^-16.
  const uint32_t significand = (magnitude & 0x007FFFFFu) | 0x00800000u;
  const uint32_t shift = 134u - exponent;  // 22..24
  const uint32_t quotient = significand >> shift;
  const uint32_t remainder = significand & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  const uint32_t round_up = (remainder > half || (remainder == half && (quotient & 1u))) ? 1u : 0u;
  return uint8_t(sign | (quotient + round_up));  // may carry into 4 = 2^-14, the smallest normal
}

// fp16 bits -> E5M2. E5M2 shares fp16's exponent field and bias, so dropping the low 8
// mantissa bits with ties-to-even is the whole conversion, subnormals included.
VXQA_HD uint8_t half_bits_to_e5m2_soft(uint16_t bits, Saturation saturation) {
  const uint32_t sign = (bits >> 8) & 0x80u;
  const uint32_t magnitude = bits & 0x7FFFu;
  if (magnitude > 0x7C00u) return kE5m2NaN;
  const uint32_t rounded = (magnitude + 0x7Fu + ((magnitude >> 8) & 1u)) >> 8;
  if (rounded >= kE5m2Inf) return e5m2_overflow(sign, saturation);  // >= 61440, inf
  return uint8_t(sign | rounded);
}

}  // namespace detail

VXQA_HD uint8_t float_to_e5m2(float x, Saturation saturation) {
#if VXQA_HAS_CVT_E5M2
  if (saturation == Saturation::kFinite) {
    return uint8_t(arch::cvt_rn_satfinite_e5m2x2_f32(0.0f, x));
  }
#endif
  return detail::float_bits_to_e5m2_soft(bit_cast<uint32_t>(x), saturation);
}

// Encodes x / scale (the per-tensor quantisation scale): one division, then one rounding.
VXQA_HD uint8_t float_to_e5m2(float x, float scale, Saturation saturation) {
  return float_to_e5m2(x / scale, saturation);
}

VXQA_HD uint8_t half_bits_to_e5m2(uint16_t bits, Saturation saturation) {
#if VXQA_HAS_CVT_E5M2
  if (saturation == Saturation::kFinite) {
    return uint8_t(arch::cvt_rn_satfinite_e5m2x2_f16x2(bits));
  }
#endif
  return detail::half_bits_to_e5m2_soft(bits, saturation);
}

VXQA_HD uint8_t half_to_e5m2(__half x, Saturation saturation) {
  return half_bits_to_e5m2(__half_raw(x).x, saturation);
}

// Two floats -> two codes: .x -> bits 7:0, .y -> bits 15:8.
VXQA_HD uint16_t float2_to_e5m2x2(float2 v, Saturation saturation) {
#if VXQA_HAS_CVT_E5M2
  if (saturation == Saturation::kFinite) return arch::cvt_rn_satfinite_e5m2x2_f32(v.y, v.x);
#endif
  return uint16_t(detail::float_bits_to_e5m2_soft(bit_cast<uint32_t>(v.x), saturation) |
                  (detail::float_bits_to_e5m2_soft(bit_cast<uint32_t>(v.y), saturation) << 8));
}

// A half2 -> two codes: .x -> bits 7:0, .y -> bits 15:8.
VXQA_HD uint16_t half2_to_e5m2x2(__half2 v, Saturation saturation) {
  const uint32_t bits = detail::half2_to_bits(v);
#if VXQA_HAS_CVT_E5M2
  if (saturation == Saturation::kFinite) return arch::cvt_rn_satfinite_e5m2x2_f16x2(bits);
#endif
  return uint16_t(detail::half_bits_to_e5m2_soft(uint16_t(bits & 0xFFFFu), saturation) |
                  (detail::half_bits_to_e5m2_soft(uint16_t(bits >> 16), saturation) << 8));
}

// Four floats -> four codes: .x -> byte 0, .y -> byte 1, .z -> byte 2, .w -> byte 3.
VXQA_HD uint32_t float4_to_e5m2x4(float4 v, Saturation saturation) {
  float2 lo;
  lo.x = v.x;
  lo.y = v.y;
  float2 hi;
  hi.x = v.z;
  hi.y = v.w;
  return uint32_t(float2_to_e5m2x2(lo, saturation)) |
         (uint32_t(float2_to_e5m2x2(hi, saturation)) << 16);
}

// The inverse layout of e5m2x4_to_half2x2: lo.x, lo.y, hi.x, hi.y -> bytes 0, 1, 2, 3.
VXQA_HD uint32_t half2x2_to_e5m2x4(__half2 lo, __half2 hi, Saturation saturation) {
  return uint32_t(half2_to_e5m2x2(lo, saturation)) |
         (uint32_t(half2_to_e5m2x2(hi, saturation)) << 16);
}

}  // namespace vxqa
