// E4M3 converter on the host: every code's bit-move decode (alone, in both halves of a
// half2 beside every other code, in both words of four) against the value the OCP FP8 spec
// gives it, computed here in double; and the encode against a model written here from the
// spec (nearest grid value by search, ties to the even code, saturation at 448) and
// against cuda_fp8.h's own host conversion, which the header promises to match bit for bit.
#include <vxqa/numeric/e4m3.cuh>
#include "e5m2_test_support.h"

#include <catch2/catch.hpp>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using vxqa_test::bits_float;
using vxqa_test::float_bits;
using vxqa_test::hex;
using vxqa_test::require_all_equal;
using vxqa_test::spec_half_value;

// --- The model, from the OCP FP8 spec ------------------------------------------------------

// E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits; S.1111.111 is NaN (no infinities);
// exponent 0 is zero or subnormal (mantissa/8 · 2^-6).
double spec_e4m3_value(uint8_t code) {
  const int exponent = (code >> 3) & 15, mantissa = code & 7;
  double magnitude;
  if (exponent == 15 && mantissa == 7) {
    magnitude = NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -9);
  } else {
    magnitude = std::ldexp(8 + mantissa, exponent - 7 - 3);
  }
  return (code & 0x80) ? -magnitude : magnitude;
}

// The magnitudes of codes 0x00..0x7E in increasing order (the index is the code).
const std::vector<double>& spec_grid() {
  static const std::vector<double> grid = [] {
    std::vector<double> g;
    for (int c = 0; c <= 0x7E; ++c) g.push_back(spec_e4m3_value(uint8_t(c)));
    return g;
  }();
  return grid;
}

// Round to nearest, ties to the even code (the even mantissa), saturating at 448; NaN ->
// 0x7F (OCP leaves the NaN encoding open; 0x7F is the one cuda_fp8.h returns).
uint8_t spec_encode(double x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double magnitude = std::fabs(x);
  const std::vector<double>& grid = spec_grid();
  if (magnitude >= grid.back()) return uint8_t(sign | 0x7E);
  size_t k = size_t(std::upper_bound(grid.begin(), grid.end(), magnitude) - grid.begin()) - 1;
  const double midpoint = (grid[k] + grid[k + 1]) / 2;  // exact: a few significant bits each
  if (magnitude > midpoint || (magnitude == midpoint && (k & 1))) ++k;
  return uint8_t(sign | k);
}

// fp32 inputs that reach every rounding case: every grid value and midpoint a few ulps either
// way (exact ties included), the saturation band, the subnormal range and below it, fp32
// subnormals, specials, and random bit patterns (fixed seed).
std::vector<uint32_t> e4m3_float_inputs(uint32_t seed) {
  std::vector<uint32_t> in;
  const std::vector<double>& grid = spec_grid();
  std::vector<double> points(grid.begin(), grid.end());
  for (size_t k = 0; k + 1 < grid.size(); ++k) points.push_back((grid[k] + grid[k + 1]) / 2);
  for (double p : {448.0, 464.0, 480.0, 512.0, 0x1p-10, 0x1p-11, 0x1p-6, 0x1p-9 * 1.5})
    points.push_back(p);
  for (double p : points) {
    const uint32_t b = float_bits(float(p));
    for (int d = -3; d <= 3; ++d) {
      in.push_back(b + uint32_t(d));
      in.push_back((b + uint32_t(d)) | 0x80000000u);
    }
  }
  for (uint32_t special : {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u,
                           0x7F800001u, 0xFFFFFFFFu, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu, 0x3F800000u})
    in.push_back(special);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> any_bits;
  // Magnitudes around E4M3's range (2^-12 .. 2^10), where the rounding happens.
  std::uniform_int_distribution<uint32_t> near_range(float_bits(0x1p-12f), float_bits(0x1p10f));
  for (int i = 0; i < (1 << 20); ++i) {
    in.push_back(any_bits(rng));
    in.push_back(near_range(rng) | (any_bits(rng) & 0x80000000u));
  }
  return in;
}

bool is_nan_code(int c) { return (c & 0x7F) == 0x7F; }

}  // namespace

TEST_CASE("e4m3: every code's bit-move decode is its OCP value / 256, NaN codes NaN", "[e4m3]") {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = uint8_t(c);
    const double want = spec_e4m3_value(code);
    const uint16_t half = vxqa::e4m3_to_half_bits_scaled(code);
    const double got = spec_half_value(half) * vxqa::kE4m3HalfScale;
    INFO("code " << hex(code, 2) << " fp16 " << hex(half, 4));
    if (std::isnan(want)) {
      REQUIRE(is_nan_code(c));
      REQUIRE(std::isnan(got));
      REQUIRE(std::isnan(vxqa::e4m3_to_float(code)));
    } else {
      REQUIRE(got == want);
      REQUIRE(std::signbit(got) == std::signbit(want));  // -0 stays -0
      REQUIRE(double(vxqa::e4m3_to_float(code)) == want);
      REQUIRE(std::signbit(vxqa::e4m3_to_float(code)) == std::signbit(want));
    }
  }
}

TEST_CASE("e4m3: the decode grid has the documented landmarks", "[e4m3]") {
  CHECK(vxqa::e4m3_to_float(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(vxqa::e4m3_to_float(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(vxqa::e4m3_to_float(0x38) == 1.0f);
  CHECK(vxqa::e4m3_to_float(0x7E) == 448.0f);
  CHECK(vxqa::e4m3_to_float(0xFE) == -448.0f);
  CHECK(vxqa::e4m3_to_half_bits_scaled(0x7F) == 0xFF80);  // NaN (its sign bit set), not the 0x3F80 the bits give
  CHECK(vxqa::e4m3_to_half_bits_scaled(0xFF) == 0xFF80);
  int nans = 0;
  for (int c = 0; c < 256; ++c) nans += std::isnan(vxqa::e4m3_to_float(uint8_t(c))) ? 1 : 0;
  CHECK(nans == 2);
}

// The pair and the quad decodes shift and add across a 32-bit word: each half must come
// out the same beside every other code (no carry or shifted bit from its neighbour).
TEST_CASE("e4m3: a code decodes the same in every half of a half2 and word of four", "[e4m3]") {
  for (uint32_t lo = 0; lo < 256; ++lo) {
    for (uint32_t hi = 0; hi < 256; ++hi) {
      const uint32_t pair = vxqa::e4m3x2_to_half2_bits_scaled(uint16_t(lo | (hi << 8)));
      const uint32_t want = vxqa::e4m3_to_half_bits_scaled(uint8_t(lo)) |
                            (uint32_t(vxqa::e4m3_to_half_bits_scaled(uint8_t(hi))) << 16);
      if (pair != want) {
        INFO("codes " << hex(lo, 2) << " " << hex(hi, 2));
        REQUIRE(pair == want);
      }
    }
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int trial = 0; trial < 65536; ++trial) {
    const uint32_t word = any_bits(rng);
    const uint2 got = vxqa::e4m3x4_to_half2x2_bits_scaled(word);
    INFO("word " << hex(word, 8));
    REQUIRE(got.x == vxqa::e4m3x2_to_half2_bits_scaled(uint16_t(word & 0xFFFFu)));
    REQUIRE(got.y == vxqa::e4m3x2_to_half2_bits_scaled(uint16_t(word >> 16)));
  }
}

TEST_CASE("e4m3: every fp16 and 2M mixed fp32 inputs encode as the spec rounds them", "[e4m3]") {
  require_all_equal(
      65536,
      [](size_t h) {
        return vxqa::float_to_e4m3(float(spec_half_value(uint16_t(h))));
      },
      [](size_t h) { return spec_encode(spec_half_value(uint16_t(h))); },
      [](size_t h) { return "fp16 " + hex(uint32_t(h), 4); });
  const std::vector<uint32_t> inputs = e4m3_float_inputs(4343u);
  require_all_equal(
      inputs.size(), [&](size_t i) { return vxqa::float_to_e4m3(bits_float(inputs[i])); },
      [&](size_t i) { return spec_encode(double(bits_float(inputs[i]))); },
      [&](size_t i) { return "fp32 " + hex(inputs[i], 8); });
}

TEST_CASE("e4m3: encode edge cases", "[e4m3]") {
  CHECK(vxqa::float_to_e4m3(448.f) == 0x7E);
  CHECK(vxqa::float_to_e4m3(463.99f) == 0x7E);
  CHECK(vxqa::float_to_e4m3(464.f) == 0x7E);  // would tie up to 480: saturates
  CHECK(vxqa::float_to_e4m3(INFINITY) == 0x7E);
  CHECK(vxqa::float_to_e4m3(-INFINITY) == 0xFE);
  CHECK(vxqa::float_to_e4m3(NAN) == 0x7F);
  CHECK(vxqa::float_to_e4m3(-NAN) == 0x7F);
  CHECK(vxqa::float_to_e4m3(0x1p-10f) == 0x00);        // half the smallest subnormal: tie to 0
  CHECK(vxqa::float_to_e4m3(0x1p-10f * 1.0001f) == 0x01);
  CHECK(vxqa::float_to_e4m3(0x1p-9f * 1.5f) == 0x02);  // tie between 1 and 2: even
  CHECK(vxqa::float_to_e4m3(0x1p-9f * 2.5f) == 0x02);  // tie between 2 and 3: even
  CHECK(vxqa::float_to_e4m3(0x1p-9f * 7.5f) == 0x08);  // to the smallest normal
  CHECK(vxqa::float_to_e4m3(1.0f + 0x1p-4f) == 0x38);  // tie between 1 and 1.125: even
  CHECK(vxqa::float_to_e4m3(1.0f + 0x1p-4f * 3.f) == 0x3A);  // tie 1.125 / 1.25: even
  CHECK(vxqa::float_to_e4m3(-0.0f) == 0x80);
  CHECK(vxqa::float_to_e4m3(0x1p-140f) == 0x00);  // an fp32 subnormal
  for (int c = 0; c < 256; ++c) {  // every finite code round-trips
    if (is_nan_code(c)) continue;
    INFO("code " << hex(uint32_t(c), 2));
    REQUIRE(vxqa::float_to_e4m3(vxqa::e4m3_to_float(uint8_t(c))) == uint8_t(c));
  }
}

TEST_CASE("e4m3: host conversions match cuda_fp8.h bit for bit", "[e4m3][cuda_fp8]") {
  for (int c = 0; c < 256; ++c) {  // decode: the same value (cuda_fp8.h: every NaN 0x7FFF)
    const __half_raw cuda = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3);
    const double cuda_value = spec_half_value(cuda.x);
    const double ours = double(vxqa::e4m3_to_float(uint8_t(c)));
    INFO("code " << hex(uint32_t(c), 2));
    if (is_nan_code(c)) {
      REQUIRE(std::isnan(cuda_value));
      REQUIRE(std::isnan(ours));
    } else {
      REQUIRE(ours == cuda_value);
    }
  }
  require_all_equal(
      65536, [](size_t h) { return vxqa::float_to_e4m3(float(spec_half_value(uint16_t(h)))); },
      [](size_t h) { return uint8_t(__nv_cvt_halfraw_to_fp8(__half_raw{uint16_t(h)}, __NV_SATFINITE, __NV_E4M3)); },
      [](size_t h) { return "fp16 " + hex(uint32_t(h), 4); });
  const std::vector<uint32_t> inputs = e4m3_float_inputs(4444u);
  require_all_equal(
      inputs.size(), [&](size_t i) { return vxqa::float_to_e4m3(bits_float(inputs[i])); },
      [&](size_t i) { return uint8_t(__nv_cvt_float_to_fp8(bits_float(inputs[i]), __NV_SATFINITE, __NV_E4M3)); },
      [&](size_t i) { return "fp32 " + hex(inputs[i], 8); });
}
