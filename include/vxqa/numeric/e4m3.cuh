// vxqa/numeric/e4m3.cuh — E4M3 (OCP FP8, torch's float8_e4m3fn) in software: the decode to
// fp16 that the decode CTAs can use where no hardware converts it (SM70, SM75, sm_80/86), an
// exact decode to fp32, and the encode of the cache writer.
//
// E4M3 is 1 sign, 4 exponent (bias 7) and 3 mantissa bits, with no infinities: S.1111.111
// is NaN (two codes), the largest finite ±448 (S.1111.110), subnormals m · 2^-9.
//
// Decode by moving bits: a code's 7 magnitude bits shifted left by 7 are the fp16 of its
// value times 2^-8, for every finite code, subnormals included: a normal (1 + m/8) · 2^(e-7)
// becomes (1 + m/8) · 2^(e-15), a subnormal m · 2^-9 the fp16 subnormal m · 2^7 · 2^-24.
// The missing 2^8 (kE4m3HalfScale) joins the dequantisation scale (k_scale, v_scale), so it
// costs nothing a code. The two NaN codes would land on ±1.875 (magnitude bits 0x3F80), which
// no finite code reaches. Two codes make a half2 in four instructions (E5M2 takes one PRMT):
// PRMT (each code to the low byte of a half, zeros above), a shift by 7 (the code at bits
// 14:7, its sign at 14), an IADD of 0xC080 a half, and one LOP3 that takes bits 13:0 from
// the shifted codes and bits 15:14 from the XNOR of both (e4m3_pair_to_half2_bits_scaled says
// why that puts the sign at 15, clears 14, and makes the NaN codes 0xFF80, an fp16 NaN).
//
// Encode rounds to nearest, ties to even, saturating: |x| >= 448 and ±inf give ±448 (0x7E /
// 0xFE), every NaN gives 0x7F, as cuda_fp8.h's __nv_cvt_float_to_fp8(x, __NV_SATFINITE,
// __NV_E4M3) does, bit for bit (test/cpu/e4m3.cpp checks it against that function).
//
// Everything is __host__ __device__ and builds with nvcc, a plain host compiler and NVRTC.
#pragma once
#include <cuda_fp16.h>
#include <vxqa/common.cuh>

namespace vxqa {

// The factor an E4M3 code's fp16 from the bit-move decode is short of: its value is the
// fp16's times this. Fold it into the scale that dequantises the cache.
inline constexpr float kE4m3HalfScale = 256.f;

namespace detail {

// prmt.b32 in its default mode: result byte n is byte (s >> 4n) & 7 of {hi, lo}, or that
// byte's sign replicated over 8 bits where bit 3 of the nibble is set. (__byte_perm takes
// only the 3 low bits of each nibble.)
VXQA_HD uint32_t byte_perm_signed(uint32_t lo, uint32_t hi, uint32_t selector) {
#if defined(__CUDA_ARCH__)
  uint32_t out;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(out) : "r"(lo), "r"(hi), "r"(selector));
  return out;
#else
  const uint64_t bytes = (uint64_t(hi) << 32) | lo;
  uint32_t out = 0;
  for (int n = 0; n < 4; ++n) {
    const uint32_t nibble = (selector >> (4 * n)) & 0xFu;
    uint32_t byte = uint32_t(bytes >> (8 * (nibble & 7u))) & 0xFFu;
    if (nibble & 8u) byte = (byte & 0x80u) ? 0xFFu : 0u;
    out |= byte << (8 * n);
  }
  return out;
#endif
}

// lop3.b32: each result bit is bit (a << 2 | b << 1 | c) of kLut, where a, b and c are that
// bit of the three operands (kLut = the function applied to 0xF0, 0xCC and 0xAA). ptxas
// does not always fold such an expression written in C++ into one LOP3; this does.
template <uint32_t kLut>
VXQA_HD uint32_t lop3(uint32_t a, uint32_t b, uint32_t c) {
  static_assert(kLut <= 0xFFu, "lop3: the table is 8 bits");
#if defined(__CUDA_ARCH__)
  uint32_t out;
  asm("lop3.b32 %0, %1, %2, %3, %4;\n" : "=r"(out) : "r"(a), "r"(b), "r"(c), "n"(kLut));
  return out;
#else
  uint32_t out = 0;
  for (int bit = 0; bit < 32; ++bit) {
    const uint32_t index = ((a >> bit) & 1u) << 2 | ((b >> bit) & 1u) << 1 | ((c >> bit) & 1u);
    out |= ((kLut >> index) & 1u) << bit;
  }
  return out;
#endif
}

// Codes kLo and kLo + 1 of `word` as the bits of a half2, each the code's value / 256 (the
// NaN codes: 0xFF80, NaN whatever their sign bit).
template <int kLo>
VXQA_HD uint32_t e4m3_pair_to_half2_bits_scaled(uint32_t word) {
  static_assert(kLo == 0 || kLo == 2, "e4m3: a pair is bytes 0,1 or bytes 2,3 of a word");
  // Byte kLo in byte 0, byte kLo + 1 in byte 2, zeros (byte 4 of {0, word}) in bytes 1 and 3.
  constexpr uint32_t kSelector = kLo == 0 ? 0x4140u : 0x4342u;
  // Each half: magnitude m at bits 13:7, sign s at 14, zeros elsewhere.
  const uint32_t shifted = byte_perm_signed(word, 0u, kSelector) << 7;
  // Adding 0x80 carries into bit 14 only where m = 0x7F (the NaN codes: n = 1); with 1 more
  // at bits 14 and 15, bits 15:14 of a half become NOT(s | n), NOT(s ^ n) (the low half's
  // carry out lands on bit 16, one of the zeros bits 22:16 keep, the high half's drops off).
  const uint32_t sum = shifted + 0xC080C080u;
  // XNOR with the shifted bits 15:14 (0, s): bit 15 = s | n, bit 14 = n. A finite code keeps
  // its sign at 15 and a clear 14; a NaN code gets 0xFF80. Bits 13:0 are the shifted ones.
  constexpr uint32_t kTop = 0xC000C000u;
  constexpr uint32_t kXnorUnderTop = (0xAAu & ~(0xF0u ^ 0xCCu)) | (~0xAAu & 0xF0u);  // c ? ~(a ^ b) : a
  return lop3<kXnorUnderTop & 0xFFu>(shifted, sum, kTop);
}

}  // namespace detail

// Two codes (bits 7:0 -> .x, 15:8 -> .y) as the bits of a half2 of their values / 256.
VXQA_HD uint32_t e4m3x2_to_half2_bits_scaled(uint16_t two_codes) {
  return detail::e4m3_pair_to_half2_bits_scaled<0>(two_codes);
}

// Four codes as the bits of two half2 of their values / 256: bytes 0,1 -> .x, 2,3 -> .y.
VXQA_HD uint2 e4m3x4_to_half2x2_bits_scaled(uint32_t four_codes) {
  uint2 words;
  words.x = detail::e4m3_pair_to_half2_bits_scaled<0>(four_codes);
  words.y = detail::e4m3_pair_to_half2_bits_scaled<2>(four_codes);
  return words;
}

// One code's fp16 bits (its value / 256).
VXQA_HD uint16_t e4m3_to_half_bits_scaled(uint8_t code) {
  return uint16_t(e4m3x2_to_half2_bits_scaled(code) & 0xFFFFu);
}

// The code's value, exactly (fp32 holds every E4M3 value); NaN for the two NaN codes.
VXQA_HD float e4m3_to_float(uint8_t code) {
  __half_raw raw;  // as e5m2_to_half: __half is made from its plain raw struct
  raw.x = e4m3_to_half_bits_scaled(code);
  return __half2float(__half(raw)) * kE4m3HalfScale;  // exact: a power of two
}

// x rounded to nearest E4M3, ties to even, saturating at ±448; NaN -> 0x7F.
VXQA_HD uint8_t float_to_e4m3(float x) {
  const uint32_t bits = bit_cast<uint32_t>(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return 0x7Fu;                  // NaN, whatever its sign
  if (magnitude >= 0x43E00000u) return uint8_t(sign | 0x7Eu);  // |x| >= 448, inf: 448
  const int exponent = int(magnitude >> 23);                   // biased by 127
  const uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
  // Keep the bits down to E4M3's step (2^-9 below 2^-6, 2^(e-3) above); round the rest.
  // Normals: the code is (e + 7) · 8 + the top 3 mantissa bits, and a carry out of the
  // mantissa bumps the exponent as it should. Below 2^-6 the step is fixed, and the
  // rounded count of 2^-9 steps is the code (8 of them: the smallest normal).
  int shift;
  uint32_t base;
  if (exponent >= 127 - 6) {
    shift = 20;
    base = (uint32_t(exponent - 120) << 3) | ((magnitude >> 20) & 7u);
  } else {
    shift = 141 - exponent;  // significand · 2^(exponent - 150) in steps of 2^-9
    if (exponent == 0 || shift > 24) return uint8_t(sign);  // |x| < 2^-10 (or an fp32 subnormal)
    base = significand >> shift;
  }
  const uint32_t rest = significand & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (base & 1u))) ++base;
  return uint8_t(sign | base);
}

}  // namespace vxqa
