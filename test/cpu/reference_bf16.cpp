// The float64 reference's bf16: its decode of every code against the fp32 whose top half the
// code is and against the format's formula written out here, and against the library's
// vxqa::detail::act_to_float (two independent routes must agree); its encoder on ties,
// subnormals, overflow, zeros and NaN, straight from a double (no rounding twice), and bit
// for bit against vxqa::detail::float_to_act<ActType::kBf16> on fp32 inputs; and the random
// problem, the reference's cache reads and problem_params with a bf16 cache.
#include <catch2/catch.hpp>
#include "cpu/rounding_checks.h"

#include <vxqa/numeric/act_type.cuh>
#include <vxqa/testing/decode_reference.h>
#include <vxqa/testing/problem_params.cuh>
#include <vxqa/testing/random_problem.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace vxqa::reference;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

uint64_t double_bits(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

float float_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint32_t float_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// The format's value, spelled as it reads: (-1)^S · (1 + M/128) · 2^(E-127), or (-1)^S ·
// (M/128) · 2^-126 when E = 0; E = 255 is ±inf (M = 0) or NaN.
double spec_value(int code) {
  const int s = code >> 15, e = (code >> 7) & 0xFF, m = code & 0x7F;
  if (e == 255) return m ? std::nan("") : (s ? -kInf : kInf);
  const double magnitude = e == 0 ? (m / 128.0) * std::pow(2.0, -126) : (1.0 + m / 128.0) * std::pow(2.0, e - 127);
  return s ? -magnitude : magnitude;
}

bool is_nan_code(int code) { return (code & 0x7F80) == 0x7F80 && (code & 0x7F) != 0; }

}  // namespace

TEST_CASE("reference_bf16: every code decodes to the fp32 whose top half it is", "[reference_bf16]") {
  int nans = 0;
  for (int c = 0; c < 0x10000; ++c) {
    const double got = bf16_to_double(static_cast<uint16_t>(c));
    const float top_half = float_from_bits(static_cast<uint32_t>(c) << 16);
    const double want = spec_value(c);
    INFO("code " << c);
    REQUIRE(std::isnan(got) == is_nan_code(c));
    if (std::isnan(got)) {
      REQUIRE(std::signbit(got) == ((c & 0x8000) != 0));
      ++nans;
      continue;
    }
    REQUIRE(double_bits(got) == double_bits(static_cast<double>(top_half)));  // bitwise: -0 is not +0
    REQUIRE(double_bits(got) == double_bits(want));
  }
  REQUIRE(nans == 2 * 127);
  // Anchors that don't go through any formula.
  CHECK(bf16_to_double(0x3F80) == 1.0);
  CHECK(bf16_to_double(0xBF80) == -1.0);
  CHECK(bf16_to_double(0x4049) == 3.140625);
  CHECK(bf16_to_double(0x7F7F) == 0x1.FEp127);  // largest finite
  CHECK(bf16_to_double(0x0080) == 0x1p-126);    // smallest normal
  CHECK(bf16_to_double(0x007F) == 0x1.FCp-127);  // largest subnormal, 127 · 2^-133
  CHECK(bf16_to_double(0x0001) == 0x1p-133);    // smallest subnormal
  CHECK(bf16_to_double(0x7F80) == kInf);
  CHECK(bf16_to_double(0xFF80) == -kInf);
  CHECK(std::isnan(bf16_to_double(0x7FC0)));
  CHECK(bf16_to_double(0x0000) == 0.0);
  CHECK_FALSE(std::signbit(bf16_to_double(0x0000)));
  CHECK(std::signbit(bf16_to_double(0x8000)));
  // The finite codes 0x0000..0x7F7F are the magnitudes in increasing order.
  for (int c = 0; c < 0x7F7F; ++c)
    REQUIRE(bf16_to_double(static_cast<uint16_t>(c)) < bf16_to_double(static_cast<uint16_t>(c + 1)));
}

TEST_CASE("reference_bf16: the reference's decode agrees with vxqa::detail::act_to_float", "[reference_bf16]") {
  for (int c = 0; c < 0x10000; ++c) {
    const double ours = bf16_to_double(static_cast<uint16_t>(c));
    const float library = vxqa::detail::act_to_float<vxqa::ActType::kBf16>(static_cast<uint16_t>(c));
    INFO("code " << c << " reference " << ours << " library " << library);
    if (std::isnan(ours)) {
      REQUIRE(std::isnan(library));
    } else {
      REQUIRE(double_bits(static_cast<double>(library)) == double_bits(ours));
    }
  }
}

TEST_CASE("reference_bf16: bf16_from_double rounds to nearest even, overflows to inf", "[reference_bf16]") {
  // Every finite code round-trips with either sign (0x8000: -0); midpoints go to the even
  // code, just off them to the nearer (the subnormal/normal step is 0x007F | 0x0080).
  vxqa_test::check_nearest_even_encoder(
      0x7F7F, 0x8000, [](int c) { return bf16_to_double(static_cast<uint16_t>(c)); },
      [](double x) { return bf16_from_double(x); });
  CHECK(bf16_from_double(1.0 + 0x1p-8) == 0x3F80);      // 1 | 1 + 2^-7: to 1 (mantissa even)
  CHECK(bf16_from_double(1.0 + 3 * 0x1p-8) == 0x3F82);  // 1 + 2^-7 | 1 + 2^-6: to 1 + 2^-6
  // Straight from the double: a tie plus 2^-40 is above the tie, so it rounds up; rounding
  // to fp32 first (which drops the 2^-40) would make it a tie and round down.
  CHECK(bf16_from_double(1.0 + 0x1p-8 + 0x1p-40) == 0x3F81);
  CHECK(bf16_from_double(-(1.0 + 0x1p-8 + 0x1p-40)) == 0xBF81);
  // Subnormals and below: 2^-134, half the smallest subnormal, is a tie with 0.
  CHECK(bf16_from_double(0x1p-134) == 0x0000);
  CHECK(bf16_from_double(std::nextafter(0x1p-134, kInf)) == 0x0001);
  CHECK(bf16_from_double(3 * 0x1p-134) == 0x0002);  // 1.5 · 2^-133: tie, to 2 · 2^-133
  CHECK(bf16_from_double(5 * 0x1p-134) == 0x0002);  // 2.5 · 2^-133: tie, to 2 · 2^-133
  CHECK(bf16_from_double(-0x1p-300) == 0x8000);
  CHECK(bf16_from_double(std::numeric_limits<double>::denorm_min()) == 0x0000);
  CHECK(bf16_from_double(-std::numeric_limits<double>::denorm_min()) == 0x8000);
  // Overflow: from the midpoint between the largest finite (odd mantissa) and 2^128, as an
  // ordinary cast; just below it, the largest finite.
  const double past_max = (0x1.FEp127 + 0x1p128) / 2;
  CHECK(bf16_from_double(std::nextafter(past_max, 0.0)) == 0x7F7F);
  CHECK(bf16_from_double(-std::nextafter(past_max, 0.0)) == 0xFF7F);
  for (double big : {past_max, 0x1p128, 1e39, 1e300, std::numeric_limits<double>::max(), kInf}) {
    INFO(big);
    REQUIRE(bf16_from_double(big) == 0x7F80);
    REQUIRE(bf16_from_double(-big) == 0xFF80);
  }
  // Zeros keep their sign; every NaN is the quiet 0x7FC0.
  CHECK(bf16_from_double(0.0) == 0x0000);
  CHECK(bf16_from_double(-0.0) == 0x8000);
  CHECK(bf16_from_double(std::nan("")) == 0x7FC0);
  CHECK(bf16_from_double(-std::nan("")) == 0x7FC0);
  CHECK(bf16_from_double(std::numeric_limits<double>::signaling_NaN()) == 0x7FC0);
}

TEST_CASE("reference_bf16: bf16_from_double matches vxqa::detail::float_to_act on fp32 inputs", "[reference_bf16]") {
  std::mt19937_64 rng(0xBF16);
  auto check = [](uint32_t bits) {
    const float f = float_from_bits(bits);
    const uint16_t ours = bf16_from_double(static_cast<double>(f));
    const uint16_t library = vxqa::detail::float_to_act<vxqa::ActType::kBf16>(f);
    // A NaN: the library keeps the sign and payload (quieted), the reference gives 0x7FC0.
    const bool same = std::isnan(f) ? is_nan_code(ours) && is_nan_code(library) : ours == library;
    if (!same) {
      INFO("fp32 bits " << bits << " reference " << ours << " library " << library);
      REQUIRE(ours == library);
    }
  };
  for (int i = 0; i < 150000; ++i) {
    const uint64_t r = rng();
    check(static_cast<uint32_t>(r));  // any pattern: NaNs, infs, fp32 subnormals, huge
    // Exact ties (the low half 0x8000) and one fp32 ulp either side, with a random top half.
    const uint32_t tie = (static_cast<uint32_t>(r >> 32) & 0xFFFF0000u) | 0x8000u;
    for (uint32_t b : {tie - 1, tie, tie + 1}) check(b);
  }
  // Every code's value and midpoint as fp32 (exact: 9 significant bits), and one fp32 ulp
  // either side, with either sign; the overflow edge is among them (0x7F7F's midpoint).
  for (int c = 0; c <= 0x7F7F; ++c) {
    const double lo = bf16_to_double(static_cast<uint16_t>(c));
    const double hi = c < 0x7F7F ? bf16_to_double(static_cast<uint16_t>(c + 1)) : 0x1p128;
    for (double x : {lo, (lo + hi) / 2}) {
      const uint32_t bits = float_bits(static_cast<float>(x));
      for (uint32_t b : {bits - 1, bits, bits + 1}) {  // 0's "- 1" is a NaN pattern: checked too
        check(b);
        check(b | 0x80000000u);
      }
    }
  }
}

TEST_CASE("reference_bf16: a random bf16 problem", "[reference_bf16]") {
  RandomProblemOptions o;
  o.batch = 3, o.kv_heads = 2, o.group = 2, o.head_dim = 16, o.page_size = 5, o.max_seq_len = 40;
  o.format = KvFormat::kBf16;
  const RandomProblem bf16 = make_random_problem(o, 11);
  o.format = KvFormat::kFp16;
  const RandomProblem fp16 = make_random_problem(o, 11);
  REQUIRE(element_bytes(KvFormat::kBf16) == 2);
  REQUIRE(std::string(format_name(KvFormat::kBf16)) == "bf16");

  // The same draws as fp16: the same shape and table, and the garbage bit for bit, but where
  // fp16 drew NaN, +inf, -inf or its largest finite, bf16 has its own.
  REQUIRE(bf16.cache.size() == fp16.cache.size());
  REQUIRE(bf16.block_table == fp16.block_table);
  REQUIRE(bf16.seq_lens == fp16.seq_lens);
  REQUIRE(bf16.q == fp16.q);
  REQUIRE((bf16.page_stride == fp16.page_stride && bf16.token_stride == fp16.token_stride &&
           bf16.head_stride == fp16.head_stride && bf16.k_offset == fp16.k_offset &&
           bf16.v_offset == fp16.v_offset));
  auto bits_at = [](const RandomProblem& p, int64_t element) {
    uint16_t bits;
    std::memcpy(&bits, &p.cache[element * 2], 2);
    return bits;
  };
  const size_t elements = bf16.cache.size() / 2;
  std::vector<bool> written(elements, false);
  for (int b = 0; b < bf16.batch; ++b)
    for (int t = 0; t < bf16.seq_lens[b]; ++t)
      for (int h = 0; h < bf16.kv_heads; ++h)
        for (int d = 0; d < bf16.head_dim; ++d) {
          const int64_t i = bf16.element_index(b, t, h, d);
          written[bf16.k_offset + i] = written[bf16.v_offset + i] = true;
          // K and V are U[-2, 2] rounded to bf16, read back through the cache bytes.
          for (const double x : {bf16.k_at(b, t, h, d), bf16.v_at(b, t, h, d)}) {
            REQUIRE(std::isfinite(x));
            REQUIRE(std::fabs(x) <= 2.0);
          }
          REQUIRE(bf16.k_at(b, t, h, d) == bf16_to_double(bits_at(bf16, bf16.k_offset + i)));
          REQUIRE(bf16.v_at(b, t, h, d) == bf16_to_double(bits_at(bf16, bf16.v_offset + i)));
          // Both formats rounded the same draw: at most half a step of each apart (2^-8 and
          // 2^-11 below 2).
          REQUIRE(std::fabs(bf16.k_at(b, t, h, d) - fp16.k_at(b, t, h, d)) <= 0x1p-8 + 0x1p-11);
          REQUIRE(std::fabs(bf16.v_at(b, t, h, d) - fp16.v_at(b, t, h, d)) <= 0x1p-8 + 0x1p-11);
        }
  std::set<int> seen;
  for (size_t i = 0; i < elements; ++i) {
    if (written[i]) continue;
    const int a = bits_at(bf16, i), b = bits_at(fp16, i);
    INFO("garbage element " << i << ": bf16 " << a << " fp16 " << b);
    REQUIRE((a == b || (b == 0xFFFF && a == 0x7FC0) || (b == 0x7C00 && a == 0x7F80) || (b == 0xFC00 && a == 0xFF80) ||
             (b == 0x7BFF && a == 0x7F7F)));
    seen.insert(a);
  }
  for (int code : {0x7FC0, 0x7F80, 0xFF80, 0x7F7F}) CHECK(seen.count(code) == 1);

  // set_k rounds to nearest even and overflows to inf.
  RandomProblem p = bf16;
  p.set_k(0, 0, 0, 0, 1001.0);  // 1000 | 1004: to 1000
  CHECK(p.k_at(0, 0, 0, 0) == 1000.0);
  p.set_k(0, 0, 0, 0, 1e39);
  CHECK(p.k_at(0, 0, 0, 0) == kInf);
  p.set_k(0, 0, 0, 0, -1e39);
  CHECK(p.k_at(0, 0, 0, 0) == -kInf);

  // The library's name for it, and byte offsets of two bytes per element.
  vxqa::DeviceProblemBuffers d;
  const unsigned char* base = reinterpret_cast<const unsigned char*>(0x10000);
  d.cache = base;
  const vxqa::DecodeParams params = vxqa::problem_params(bf16, d);
  CHECK(params.cache_type == vxqa::KvType::kBf16);
  CHECK(static_cast<const unsigned char*>(params.k_cache) == base + 2 * bf16.k_offset);
  CHECK(static_cast<const unsigned char*>(params.v_cache) == base + 2 * bf16.v_offset);
  CHECK(vxqa::problem_kv_type(KvFormat::kE5M2) == vxqa::KvType::kE5M2);
  CHECK(vxqa::problem_kv_type(KvFormat::kE4M3) == vxqa::KvType::kE4M3);
  CHECK(vxqa::problem_kv_type(KvFormat::kFp16) == vxqa::KvType::kFp16);
}

TEST_CASE("reference_bf16: the reference reads a bf16 cache as the same values in fp16", "[reference_bf16]") {
  // U[-2, 2] rounded to bf16 (8 significant bits) is exact in fp16 (11) unless it is tiny,
  // which this seed's draws are not (required below), so the same cache recoded to fp16,
  // with the same element strides, must give bit-identical results; the garbage is
  // recoded too (inexactly: bf16's range is wider), and stays unread.
  RandomProblemOptions o;
  o.batch = 4, o.kv_heads = 2, o.group = 3, o.head_dim = 32, o.page_size = 7, o.max_seq_len = 60;
  o.format = KvFormat::kBf16;
  o.k_scale = 1.5f, o.v_scale = 0.75f;
  const RandomProblem p = make_random_problem(o, 5);
  std::vector<uint16_t> narrow(p.cache.size() / 2), wide(narrow.size());
  std::memcpy(narrow.data(), p.cache.data(), p.cache.size());
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = fp16_from_double(bf16_to_double(narrow[i]));
  for (int b = 0; b < p.batch; ++b)
    for (int t = 0; t < p.seq_lens[b]; ++t)
      for (int h = 0; h < p.kv_heads; ++h)
        for (int d = 0; d < p.head_dim; ++d)
          for (const int64_t i : {p.k_offset + p.element_index(b, t, h, d), p.v_offset + p.element_index(b, t, h, d)})
            REQUIRE(fp16_to_double(wide[i]) == bf16_to_double(narrow[i]));

  DecodeInputs in = p.inputs();
  const DecodeOutput narrow_out = decode_reference(in);
  in.format = KvFormat::kFp16;
  in.k = wide.data() + p.k_offset;
  in.v = wide.data() + p.v_offset;
  const DecodeOutput wide_out = decode_reference(in);

  REQUIRE(narrow_out.out.size() == wide_out.out.size());
  for (size_t i = 0; i < narrow_out.out.size(); ++i) {
    REQUIRE(std::isfinite(narrow_out.out[i]));
    REQUIRE(double_bits(narrow_out.out[i]) == double_bits(wide_out.out[i]));
  }
  for (size_t i = 0; i < narrow_out.lse.size(); ++i)
    REQUIRE(double_bits(narrow_out.lse[i]) == double_bits(wide_out.lse[i]));
}
