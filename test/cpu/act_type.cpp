// Activation conversions on the host: bf16 rounding (nearest even, NaN kept, overflow to
// inf) against a model in double written here, bf16 -> fp16 for the MMAs (exact over fp16's
// normal range, inf past it), and fp16 passing through untouched.
#include <vxqa/numeric/act_type.cuh>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

namespace {

using vxqa::ActType;
using vxqa::detail::act2_to_half2_bits;
using vxqa::detail::act_to_float;
using vxqa::detail::float_to_act;

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The bf16 nearest x by search over its two neighbours, ties to the even code.
uint16_t model_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint16_t down = uint16_t(bits >> 16);  // toward zero
  const uint16_t up = uint16_t(down + 1);      // away from zero (may reach inf)
  const double lo = double(from_bits(uint32_t(down) << 16));
  // Past the largest bf16, "up" is inf; IEEE rounds as if it were 2^128 (unbounded exponent).
  const bool up_is_inf = (up & 0x7f80u) == 0x7f80u && (down & 0x7f80u) != 0x7f80u;
  const double hi = up_is_inf ? std::copysign(0x1p128, double(x)) : double(from_bits(uint32_t(up) << 16));
  const double dl = std::fabs(double(x) - lo), dh = std::fabs(hi - double(x));
  if (dl < dh) return down;
  if (dh < dl) return up;
  return (down & 1u) ? up : down;
}

double half_bits_to_double(uint16_t bits) {
  const int exponent = (bits >> 10) & 31, mantissa = bits & 1023;
  const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
  if (exponent == 31) return mantissa ? std::nan("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

}  // namespace

TEST_CASE("float to bf16 rounds to nearest even, keeps NaN, overflows to inf", "[act_type]") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> any_bits;
  int checked = 0;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = any_bits(rng);
    if (i % 4 == 0) bits = (bits & 0xffff0000u) | 0x8000u;  // exact ties
    const float x = from_bits(bits);
    const uint16_t got = float_to_act<ActType::kBf16>(x);
    if (std::isnan(x)) {
      REQUIRE(std::isnan(act_to_float<ActType::kBf16>(got)));
      continue;
    }
    INFO("x bits " << std::hex << bits << " got " << got);
    REQUIRE(got == model_bf16(x));
    ++checked;
  }
  REQUIRE(checked > 1900000);
  REQUIRE(float_to_act<ActType::kBf16>(std::numeric_limits<float>::max()) == 0x7f80u);  // past bf16's max
  REQUIRE(float_to_act<ActType::kBf16>(-INFINITY) == 0xff80u);
  REQUIRE(float_to_act<ActType::kBf16>(1.0f) == 0x3f80u);
}

TEST_CASE("bf16 pairs become fp16 pairs: exact in fp16's normal range, inf past it", "[act_type]") {
  for (uint32_t code = 0; code < 0x10000u; ++code) {
    const uint16_t bf16 = uint16_t(code);
    const float x = act_to_float<ActType::kBf16>(bf16);
    const uint32_t pair = uint32_t(bf16) | (uint32_t(0x3f80u) << 16);  // high half: 1.0
    const uint32_t halves = act2_to_half2_bits<ActType::kBf16>(pair);
    REQUIRE((halves >> 16) == 0x3c00u);
    const double got = half_bits_to_double(uint16_t(halves & 0xffffu));
    INFO("bf16 " << std::hex << code);
    if (std::isnan(x)) {
      REQUIRE(std::isnan(got));
    } else if (std::fabs(x) > 65520.0) {  // rounds past fp16's largest finite value
      REQUIRE(std::isinf(got));
      REQUIRE(std::signbit(got) == std::signbit(x));
    } else if (std::fabs(x) >= 0x1p-14 || x == 0.f) {
      REQUIRE(got == double(x));
    } else {  // fp16 subnormal: within half its step
      REQUIRE(std::fabs(got - double(x)) <= 0x1p-25);
    }
  }
  REQUIRE(act2_to_half2_bits<ActType::kFp16>(0x12345678u) == 0x12345678u);
}

TEST_CASE("outputs round from fp32 to fp16 and bf16", "[act_type]") {
  REQUIRE(float_to_act<ActType::kFp16>(1.0f) == 0x3c00u);
  REQUIRE(float_to_act<ActType::kFp16>(65520.f) == 0x7c00u);  // the tie past 65504 goes to inf
  REQUIRE(std::isnan(half_bits_to_double(float_to_act<ActType::kFp16>(std::nanf("")))));
  REQUIRE(act_to_float<ActType::kFp16>(0xc000u) == -2.0f);
  REQUIRE(act_to_float<ActType::kBf16>(0xc000u) == -2.0f);
}
