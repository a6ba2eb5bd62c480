// What the FP8 tests share (test/cpu/e5m2.cpp, test/gpu/e5m2.cu, test/cpu/e4m3.cpp): the value
// of an E5M2 code and of an fp16 from their specs (independent of vxqa's converters), float
// bit moves, the fp32 inputs, names and the all-inputs comparison.
#pragma once
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include <vxqa/numeric/e5m2.cuh>

namespace vxqa_test {

constexpr vxqa::Saturation kSaturationModes[] = {vxqa::Saturation::kFinite, vxqa::Saturation::kNone};

inline uint32_t float_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

inline float bits_float(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// IEEE binary16: sign, 5 exponent bits (bias 15), 10 mantissa bits.
inline double spec_half_value(uint16_t bits) {
  const int exponent = (bits >> 10) & 31;
  const int mantissa = bits & 0x3FF;
  double magnitude;
  if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);
  } else {
    magnitude = std::ldexp(1024 + mantissa, exponent - 15 - 10);
  }
  return (bits & 0x8000) ? -magnitude : magnitude;
}

// E5M2: sign, 5 exponent bits (bias 15), 2 mantissa bits; exponent 31 is inf (mantissa 0)
// or NaN; exponent 0 is zero or subnormal (mantissa/4 * 2^-14).
inline double spec_e5m2_value(uint8_t code) {
  const int exponent = (code >> 2) & 31;
  const int mantissa = code & 3;
  double magnitude;
  if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -16);
  } else {
    magnitude = std::ldexp(4 + mantissa, exponent - 15 - 2);
  }
  return (code & 0x80) ? -magnitude : magnitude;
}

// The magnitudes of codes 0x00..0x7B in increasing order (so the index is the code), then
// 2^16: the value code 0x7C would have with an unbounded exponent. Rounding to it is overflow.
inline const std::vector<double>& spec_grid() {
  static const std::vector<double> grid = [] {
    std::vector<double> values;
    for (int code = 0; code <= 0x7B; ++code) values.push_back(spec_e5m2_value(uint8_t(code)));
    values.push_back(65536.0);
    return values;
  }();
  return grid;
}

// A fixed-seed mix of fp32 bit patterns that hits every rounding case: anything, the E5M2
// grid and its midpoints (exact ties) a few ulps either way, the overflow band, the
// subnormal range, and special values.
inline std::vector<uint32_t> mixed_float_inputs(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<int> code(0, 0x7B);
  std::uniform_int_distribution<int> ulps(-3, 3);
  std::uniform_real_distribution<float> overflow_band(49152.0f, 131072.0f);
  std::uniform_int_distribution<uint32_t> small_exponent(0, 114);  // fp32 subnormals .. 2^-12
  const std::vector<double>& grid = spec_grid();

  const uint32_t specials[] = {
      0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,  // ±0, ±inf
      0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu,  // NaNs
      0x47600000u, 0x475FFFFFu, 0x47600001u,  // 57344 and its neighbours
      0x47700000u, 0x476FFFFFu, 0x47700001u,  // 61440 (overflow midpoint) and neighbours
      0x47800000u, 0x7F7FFFFFu,               // 65536, FLT_MAX
      0x37000000u, 0x37000001u, 0x36FFFFFFu,  // 2^-17 (half the smallest subnormal)
      0x37800000u, 0x37C00000u, 0x38000000u,  // 2^-16, 3*2^-17 (tie to 2^-15), 2^-15
      0x38800000u, 0x387FFFFFu, 0x00000001u, 0x007FFFFFu, 0x00800000u,
  };
  std::vector<uint32_t> inputs;
  inputs.reserve(count);
  for (uint32_t s : specials) inputs.push_back(s);
  while (inputs.size() < count) {
    const uint32_t sign = any_bits(rng) & 0x80000000u;
    uint32_t bits = 0;
    switch (kind(rng)) {
      case 0:
      case 1:
      case 2:  // anything: every exponent, NaN payloads, infinities
        inputs.push_back(any_bits(rng));
        continue;
      case 3:
      case 4:
      case 5:
      case 6: {  // a grid value or a midpoint (an exact tie), then a few ulps either way
        const int k = code(rng);
        const double value = (any_bits(rng) & 1) ? grid[k] : (grid[k] + grid[k + 1]) / 2;
        const int step = ulps(rng);
        bits = float_bits(float(value));
        bits = (step < 0 && uint32_t(-step) > bits) ? bits + uint32_t(-step) : bits + step;
        break;
      }
      case 7: {  // around the overflow threshold
        bits = float_bits(overflow_band(rng));
        break;
      }
      default:  // E5M2 subnormals and underflow, fp32 subnormals included
        bits = (small_exponent(rng) << 23) | (any_bits(rng) & 0x007FFFFFu);
        break;
    }
    inputs.push_back(sign | bits);
  }
  return inputs;
}

inline const char* mode_name(vxqa::Saturation mode) {
  return mode == vxqa::Saturation::kFinite ? "kFinite" : "kNone";
}

inline std::string hex(uint32_t value, int digits) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%0*X", digits, static_cast<unsigned>(value));
  return text;
}

// Counts mismatches of `got(i)` against `want(i)` over `count` inputs; the first one is
// described by `describe(i)`.
template <class Got, class Want, class Describe>
void require_all_equal(size_t count, Got got, Want want, Describe describe) {
  size_t mismatches = 0;
  std::string first;
  for (size_t i = 0; i < count; ++i) {
    const auto g = got(i);
    const auto w = want(i);
    if (g != w && mismatches++ == 0) {
      first = describe(i) + ": got " + hex(uint32_t(g), 2 * sizeof(g)) + ", want " +
              hex(uint32_t(w), 2 * sizeof(w));
    }
  }
  INFO(mismatches << " mismatches of " << count << "; first: " << first);
  REQUIRE(mismatches == 0);
}

}  // namespace vxqa_test
