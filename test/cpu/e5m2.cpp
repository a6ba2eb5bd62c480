// E5M2 converter on the host: every decode and every fp16 encode, and millions of fp32
// encodes, against a model written here from the OCP FP8 spec (values in double, nearest
// grid point by search, ties to the even code) — not from the header's bit arithmetic —
// and against cuda_fp8.h's own host conversions, which the header promises to match.
#include <vxqa/numeric/e5m2.cuh>
#include "e5m2_test_support.h"

#include <catch2/catch.hpp>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using vxqa::Saturation;

using vxqa_test::bits_float;
using vxqa_test::float_bits;
using vxqa_test::hex;
using vxqa_test::mode_name;
using vxqa_test::mixed_float_inputs;
using vxqa_test::require_all_equal;
using vxqa_test::spec_half_value;
using vxqa_test::spec_e5m2_value;
using vxqa_test::spec_grid;
constexpr const auto& kModes = vxqa_test::kSaturationModes;


uint16_t half_bits(__half h) { return static_cast<__half_raw>(h).x; }

// --- The model, from the OCP FP8 spec ------------------------------------------------------

// Round to nearest, ties to the even code (the even mantissa), overflow per `mode`.
// NaN -> 0x7F: OCP leaves the NaN encoding open; 0x7F is the one cuda_fp8.h returns.
uint8_t spec_encode(double x, Saturation mode) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double magnitude = std::fabs(x);
  const std::vector<double>& grid = spec_grid();
  size_t k = size_t(std::upper_bound(grid.begin(), grid.end(), magnitude) - grid.begin()) - 1;
  if (k + 1 < grid.size()) {
    const double midpoint = (grid[k] + grid[k + 1]) / 2;  // exact: 3 significant bits each
    if (magnitude > midpoint || (magnitude == midpoint && (k & 1))) ++k;
  }
  if (k > 0x7B) return uint8_t(sign | (mode == Saturation::kFinite ? 0x7B : 0x7C));
  return uint8_t(sign | k);
}



}  // namespace

TEST_CASE("e5m2: every code decodes to its OCP value", "[e5m2]") {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = uint8_t(c);
    const double want = spec_e5m2_value(code);
    INFO("code " << hex(code, 2));
    REQUIRE(vxqa::e5m2_to_half_bits(code) == uint16_t(c << 8));  // the top byte of an fp16
    REQUIRE(half_bits(vxqa::e5m2_to_half(code)) == uint16_t(c << 8));
    const float got = vxqa::e5m2_to_float(code);
    const double got_via_half = spec_half_value(vxqa::e5m2_to_half_bits(code));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
      REQUIRE(std::isnan(got_via_half));
    } else {
      REQUIRE(float_bits(got) == float_bits(float(want)));  // value and the sign of zero
      REQUIRE(double(got) == want);
      REQUIRE(float_bits(float(got_via_half)) == float_bits(float(want)));
    }
  }
}

TEST_CASE("e5m2: the decode grid has the documented landmarks", "[e5m2]") {
  CHECK(vxqa::e5m2_to_float(0x01) == std::ldexp(1.0f, -16));  // smallest subnormal
  CHECK(vxqa::e5m2_to_float(0x04) == std::ldexp(1.0f, -14));  // smallest normal
  CHECK(vxqa::e5m2_to_float(0x3C) == 1.0f);
  CHECK(vxqa::e5m2_to_float(0x7B) == 57344.0f);
  CHECK(vxqa::e5m2_to_float(0xFB) == -57344.0f);
  CHECK(std::isinf(vxqa::e5m2_to_float(0x7C)));
  CHECK(vxqa::e5m2_to_float(0xFC) < 0.0f);
  CHECK(std::signbit(vxqa::e5m2_to_float(0x80)));
  int nans = 0;
  for (int c = 0; c < 256; ++c) nans += std::isnan(vxqa::e5m2_to_float(uint8_t(c))) ? 1 : 0;
  CHECK(nans == 6);
}

TEST_CASE("e5m2: vector decodes equal the scalar decode", "[e5m2]") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int trial = 0; trial < 4096; ++trial) {
    uint4 codes;
    codes.x = any_bits(rng);
    codes.y = any_bits(rng);
    codes.z = any_bits(rng);
    codes.w = any_bits(rng);
    const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
    auto code_at = [&](int i) { return uint8_t(words[i / 4] >> (8 * (i % 4))); };
    auto want_half2 = [&](int i) {  // half2 number i holds codes 2i (.x) and 2i+1 (.y)
      return uint32_t(vxqa::e5m2_to_half_bits(code_at(2 * i))) |
             (uint32_t(vxqa::e5m2_to_half_bits(code_at(2 * i + 1))) << 16);
    };
    auto bits_of = [](__half2 h) {
      const __half2_raw raw = h;
      return uint32_t(raw.x) | (uint32_t(raw.y) << 16);
    };
    INFO("codes " << hex(codes.x, 8) << " " << hex(codes.y, 8) << " " << hex(codes.z, 8) << " "
                  << hex(codes.w, 8));

    REQUIRE(vxqa::e5m2x2_to_half2_bits(uint16_t(codes.x)) == want_half2(0));
    REQUIRE(bits_of(vxqa::e5m2x2_to_half2(uint16_t(codes.x))) == want_half2(0));

    const uint2 pair = vxqa::e5m2x4_to_half2x2_bits(codes.x);
    REQUIRE(pair.x == want_half2(0));
    REQUIRE(pair.y == want_half2(1));
    __half2 lo, hi;
    vxqa::e5m2x4_to_half2x2(codes.x, lo, hi);
    REQUIRE(bits_of(lo) == want_half2(0));
    REQUIRE(bits_of(hi) == want_half2(1));

    uint2 eight;
    eight.x = codes.x;
    eight.y = codes.y;
    __half2 out4[4];
    vxqa::e5m2x8_to_half2x4(eight, out4);
    for (int i = 0; i < 4; ++i) REQUIRE(bits_of(out4[i]) == want_half2(i));

    __half2 out8[8];
    vxqa::e5m2x16_to_half2x8(codes, out8);
    for (int i = 0; i < 8; ++i) REQUIRE(bits_of(out8[i]) == want_half2(i));
  }
}

TEST_CASE("e5m2: scaled decode is decode times the scale", "[e5m2]") {
  const float scales[] = {1.0f, 0.5f, 3.0f, 0.0123f, 1e-4f, 7.5e3f, -2.0f};
  for (float scale : scales) {
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = uint8_t(c);
      const float want = vxqa::e5m2_to_float(code) * scale;
      const float got = vxqa::e5m2_to_float(code, scale);
      INFO("code " << hex(code, 2) << " scale " << scale);
      if (std::isnan(want)) {
        REQUIRE(std::isnan(got));
      } else {
        REQUIRE(float_bits(got) == float_bits(want));
      }
    }
  }
}

TEST_CASE("e5m2: every fp16 encodes as the reference rounds it", "[e5m2]") {
  for (Saturation mode : kModes) {
    INFO("mode " << mode_name(mode));
    require_all_equal(
        65536, [&](size_t h) { return vxqa::half_bits_to_e5m2(uint16_t(h), mode); },
        [&](size_t h) { return spec_encode(spec_half_value(uint16_t(h)), mode); },
        [](size_t h) { return "fp16 " + hex(uint32_t(h), 4); });
    // The fp16 and fp32 encoders agree wherever the input is an fp16 value.
    require_all_equal(
        65536, [&](size_t h) { return vxqa::half_to_e5m2(__half(__half_raw{uint16_t(h)}), mode); },
        [&](size_t h) { return vxqa::float_to_e5m2(float(spec_half_value(uint16_t(h))), mode); },
        [](size_t h) { return "fp16 " + hex(uint32_t(h), 4); });
  }
}

TEST_CASE("e5m2: 4M mixed fp32 inputs encode as the reference rounds them", "[e5m2]") {
  const std::vector<uint32_t> inputs = mixed_float_inputs(size_t(1) << 22, 20240601u);
  for (Saturation mode : kModes) {
    INFO("mode " << mode_name(mode));
    require_all_equal(
        inputs.size(), [&](size_t i) { return vxqa::float_to_e5m2(bits_float(inputs[i]), mode); },
        [&](size_t i) { return spec_encode(double(bits_float(inputs[i])), mode); },
        [&](size_t i) { return "fp32 " + hex(inputs[i], 8); });
  }
}

TEST_CASE("e5m2: encode edge cases", "[e5m2]") {
  const float nan = std::nanf("");
  const float inf = INFINITY;
  for (Saturation mode : kModes) {
    const uint8_t overflow = mode == Saturation::kFinite ? 0x7B : 0x7C;
    INFO("mode " << mode_name(mode));
    CHECK(vxqa::float_to_e5m2(57344.0f, mode) == 0x7B);
    CHECK(vxqa::float_to_e5m2(std::nextafter(61440.0f, 0.0f), mode) == 0x7B);
    CHECK(vxqa::float_to_e5m2(61440.0f, mode) == overflow);  // the tie goes to the even 2^16
    CHECK(vxqa::float_to_e5m2(-61440.0f, mode) == (0x80 | overflow));
    CHECK(vxqa::float_to_e5m2(inf, mode) == overflow);
    CHECK(vxqa::float_to_e5m2(-inf, mode) == (0x80 | overflow));
    CHECK(vxqa::half_bits_to_e5m2(0x7C00, mode) == overflow);
    CHECK(vxqa::half_bits_to_e5m2(0xFC00, mode) == (0x80 | overflow));
    CHECK(vxqa::half_bits_to_e5m2(0x7B80, mode) == overflow);  // fp16 61440
    CHECK(vxqa::half_bits_to_e5m2(0x7B7F, mode) == 0x7B);
    // Every NaN, whatever its sign or payload, gives 0x7F.
    CHECK(vxqa::float_to_e5m2(nan, mode) == 0x7F);
    CHECK(vxqa::float_to_e5m2(-nan, mode) == 0x7F);
    CHECK(vxqa::float_to_e5m2(bits_float(0xFF800001u), mode) == 0x7F);
    CHECK(vxqa::half_bits_to_e5m2(0xFC01, mode) == 0x7F);
    CHECK(vxqa::half_bits_to_e5m2(0x7E00, mode) == 0x7F);
    // Underflow keeps the sign; 2^-17 ties to 0; 3 * 2^-17 ties to the even 2^-15.
    CHECK(vxqa::float_to_e5m2(-0.0f, mode) == 0x80);
    CHECK(vxqa::float_to_e5m2(std::ldexp(1.0f, -17), mode) == 0x00);
    CHECK(vxqa::float_to_e5m2(-std::ldexp(1.0f, -17), mode) == 0x80);
    CHECK(vxqa::float_to_e5m2(std::nextafter(std::ldexp(1.0f, -17), 1.0f), mode) == 0x01);
    CHECK(vxqa::float_to_e5m2(3 * std::ldexp(1.0f, -17), mode) == 0x02);
    CHECK(vxqa::float_to_e5m2(5 * std::ldexp(1.0f, -17), mode) == 0x02);
    CHECK(vxqa::float_to_e5m2(bits_float(0x00000001u), mode) == 0x00);
    CHECK(vxqa::float_to_e5m2(std::nextafter(std::ldexp(1.0f, -14), 0.0f), mode) == 0x04);
    // One rounding, not two: 1.125 + 2^-13 lies above the 1.0 / 1.25 midpoint, but an fp16
    // step would round it to the midpoint 1.125, whose tie then goes to the even 1.0.
    CHECK(vxqa::float_to_e5m2(1.125f + std::ldexp(1.0f, -13), mode) == 0x3D);
    CHECK(vxqa::float_to_e5m2(1.125f, mode) == 0x3C);
    CHECK(vxqa::float_to_e5m2(1.375f, mode) == 0x3E);
  }
}

TEST_CASE("e5m2: vector encodes equal the scalar encode", "[e5m2]") {
  const std::vector<uint32_t> inputs = mixed_float_inputs(size_t(1) << 16, 77u);
  std::mt19937 rng(9);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (Saturation mode : kModes) {
    INFO("mode " << mode_name(mode));
    for (size_t i = 0; i + 4 <= inputs.size(); i += 4) {
      float4 v;
      v.x = bits_float(inputs[i]);
      v.y = bits_float(inputs[i + 1]);
      v.z = bits_float(inputs[i + 2]);
      v.w = bits_float(inputs[i + 3]);
      INFO("fp32 " << hex(inputs[i], 8) << " " << hex(inputs[i + 1], 8) << " "
                   << hex(inputs[i + 2], 8) << " " << hex(inputs[i + 3], 8));
      const uint32_t want = uint32_t(vxqa::float_to_e5m2(v.x, mode)) |
                            (uint32_t(vxqa::float_to_e5m2(v.y, mode)) << 8) |
                            (uint32_t(vxqa::float_to_e5m2(v.z, mode)) << 16) |
                            (uint32_t(vxqa::float_to_e5m2(v.w, mode)) << 24);
      float2 xy;
      xy.x = v.x;
      xy.y = v.y;
      REQUIRE(vxqa::float2_to_e5m2x2(xy, mode) == uint16_t(want));
      REQUIRE(vxqa::float4_to_e5m2x4(v, mode) == want);
    }
    for (int trial = 0; trial < 65536; ++trial) {
      const uint32_t lo_bits = any_bits(rng);
      const uint32_t hi_bits = any_bits(rng);
      const __half2 lo(__half2_raw{uint16_t(lo_bits), uint16_t(lo_bits >> 16)});
      const __half2 hi(__half2_raw{uint16_t(hi_bits), uint16_t(hi_bits >> 16)});
      INFO("half2 words " << hex(lo_bits, 8) << " " << hex(hi_bits, 8));
      const uint32_t want = uint32_t(vxqa::half_bits_to_e5m2(uint16_t(lo_bits), mode)) |
                            (uint32_t(vxqa::half_bits_to_e5m2(uint16_t(lo_bits >> 16), mode)) << 8) |
                            (uint32_t(vxqa::half_bits_to_e5m2(uint16_t(hi_bits), mode)) << 16) |
                            (uint32_t(vxqa::half_bits_to_e5m2(uint16_t(hi_bits >> 16), mode)) << 24);
      REQUIRE(vxqa::half2_to_e5m2x2(lo, mode) == uint16_t(want));
      REQUIRE(vxqa::half2x2_to_e5m2x4(lo, hi, mode) == want);
    }
  }
}

TEST_CASE("e5m2: scaled encode equals encoding x / scale", "[e5m2]") {
  const std::vector<uint32_t> inputs = mixed_float_inputs(size_t(1) << 16, 31u);
  const float scales[] = {1.0f, 0.5f, 3.0f, 0.0123f, 1e-4f, 7.5e3f, -2.0f};
  for (Saturation mode : kModes) {
    for (float scale : scales) {
      INFO("mode " << mode_name(mode) << " scale " << scale);
      require_all_equal(
          inputs.size(),
          [&](size_t i) { return vxqa::float_to_e5m2(bits_float(inputs[i]), scale, mode); },
          [&](size_t i) { return spec_encode(double(bits_float(inputs[i]) / scale), mode); },
          [&](size_t i) { return "fp32 " + hex(inputs[i], 8); });
    }
  }
}

TEST_CASE("e5m2: code -> fp16/fp32 -> code is the identity (NaN stays NaN)", "[e5m2]") {
  for (Saturation mode : kModes) {
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = uint8_t(c);
      INFO("mode " << mode_name(mode) << " code " << hex(code, 2));
      const uint8_t via_half = vxqa::half_to_e5m2(vxqa::e5m2_to_half(code), mode);
      const uint8_t via_float = vxqa::float_to_e5m2(vxqa::e5m2_to_float(code), mode);
      const bool is_nan = (c & 0x7C) == 0x7C && (c & 0x03) != 0;
      const bool is_inf = (c & 0x7F) == 0x7C;
      if (is_nan) {
        REQUIRE(via_half == 0x7F);
        REQUIRE(via_float == 0x7F);
      } else if (is_inf && mode == Saturation::kFinite) {  // satfinite clamps inf too
        REQUIRE(via_half == uint8_t((c & 0x80) | 0x7B));
        REQUIRE(via_float == uint8_t((c & 0x80) | 0x7B));
      } else {
        REQUIRE(via_half == code);
        REQUIRE(via_float == code);
      }
    }
  }
}

TEST_CASE("e5m2: host conversions match cuda_fp8.h bit for bit", "[e5m2][cuda_fp8]") {
  for (int c = 0; c < 256; ++c) {  // cuda_fp8.h decodes every NaN to 0x7FFF; vxqa keeps c<<8
    const bool is_nan = (c & 0x7C) == 0x7C && (c & 0x03) != 0;
    const uint16_t cuda_bits = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E5M2).x;
    INFO("code " << hex(uint32_t(c), 2));
    REQUIRE(vxqa::e5m2_to_half_bits(uint8_t(c)) == (is_nan ? c << 8 : cuda_bits));
  }
  const std::vector<uint32_t> inputs = mixed_float_inputs(size_t(1) << 20, 4242u);
  for (Saturation mode : kModes) {
    const __nv_saturation_t cuda_mode = mode == Saturation::kFinite ? __NV_SATFINITE : __NV_NOSAT;
    INFO("mode " << mode_name(mode));
    require_all_equal(
        65536, [&](size_t h) { return vxqa::half_bits_to_e5m2(uint16_t(h), mode); },
        [&](size_t h) {
          return uint8_t(__nv_cvt_halfraw_to_fp8(__half_raw{uint16_t(h)}, cuda_mode, __NV_E5M2));
        },
        [](size_t h) { return "fp16 " + hex(uint32_t(h), 4); });
    require_all_equal(
        inputs.size(), [&](size_t i) { return vxqa::float_to_e5m2(bits_float(inputs[i]), mode); },
        [&](size_t i) {
          return uint8_t(__nv_cvt_float_to_fp8(bits_float(inputs[i]), cuda_mode, __NV_E5M2));
        },
        [&](size_t i) { return "fp32 " + hex(inputs[i], 8); });
  }
}
