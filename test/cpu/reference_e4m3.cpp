// The float64 reference's E4M3 (OCP float8_e4m3fn): its decode of every code against the
// spec's formula written out here and against the library's own vxqa::e4m3_to_float (two
// independent routes must agree); its satfinite encoder on ties, subnormals, the saturation
// edge, zeros and NaN, and bit for bit against vxqa::float_to_e4m3; and the random problem,
// the reference's cache reads and problem_params with an E4M3 cache.
#include <catch2/catch.hpp>
#include "cpu/rounding_checks.h"

#include <vxqa/numeric/e4m3.cuh>
#include <vxqa/testing/decode_reference.h>
#include <vxqa/testing/problem_params.cuh>
#include <vxqa/testing/random_problem.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <vector>

using namespace vxqa::reference;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

uint64_t double_bits(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// The spec's value, spelled as it reads: (-1)^S · (1 + M/8) · 2^(E-7), or (-1)^S · (M/8) ·
// 2^-6 when E = 0; E = 15 with M = 7 is NaN.
double spec_value(int code) {
  const int s = code >> 7, e = (code >> 3) & 0xF, m = code & 7;
  if (e == 15 && m == 7) return std::nan("");
  const double magnitude = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -magnitude : magnitude;
}

bool is_nan_code(int code) { return (code & 0x7F) == 0x7F; }

}  // namespace

TEST_CASE("reference_e4m3: every code decodes to its OCP value, bit for bit", "[reference_e4m3]") {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const double got = e4m3_to_double(static_cast<uint8_t>(c));
    const double want = spec_value(c);
    INFO("code " << c);
    REQUIRE(std::isnan(got) == is_nan_code(c));
    if (std::isnan(want)) {
      ++nans;
      continue;
    }
    REQUIRE(double_bits(got) == double_bits(want));  // bitwise: -0 is not +0
  }
  REQUIRE(nans == 2);
  // Anchors that don't go through any formula.
  CHECK(e4m3_to_double(0x38) == 1.0);
  CHECK(e4m3_to_double(0xB8) == -1.0);
  CHECK(e4m3_to_double(0x7E) == 448.0);
  CHECK(e4m3_to_double(0xFE) == -448.0);
  CHECK(e4m3_to_double(0x78) == 256.0);  // exponent 15 is an ordinary binade
  CHECK(e4m3_to_double(0x08) == 0.015625);     // smallest normal, 2^-6
  CHECK(e4m3_to_double(0x07) == 0.013671875);  // largest subnormal, 7 · 2^-9
  CHECK(e4m3_to_double(0x01) == 0.001953125);  // smallest subnormal, 2^-9
  CHECK(e4m3_to_double(0x00) == 0.0);
  CHECK_FALSE(std::signbit(e4m3_to_double(0x00)));
  CHECK(std::signbit(e4m3_to_double(0x80)));
  // The finite codes 0x00..0x7E are the magnitudes in increasing order.
  for (int c = 0; c < 0x7E; ++c) REQUIRE(e4m3_to_double(static_cast<uint8_t>(c)) < e4m3_to_double(static_cast<uint8_t>(c + 1)));
}

TEST_CASE("reference_e4m3: the reference's decode agrees with vxqa::e4m3_to_float", "[reference_e4m3]") {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const double ours = e4m3_to_double(code);
    const float library = vxqa::e4m3_to_float(code);
    INFO("code " << c << " reference " << ours << " library " << library);
    if (std::isnan(ours)) {
      REQUIRE(std::isnan(library));
    } else {
      REQUIRE(static_cast<double>(library) == ours);
      REQUIRE(std::signbit(library) == std::signbit(ours));
    }
  }
}

TEST_CASE("reference_e4m3: e4m3_from_double rounds to nearest even and saturates", "[reference_e4m3]") {
  // Every finite code round-trips with either sign (0x80: -0); midpoints go to the even
  // code, just off them to the nearer (the subnormal/normal step is 0x07 | 0x08).
  vxqa_test::check_nearest_even_encoder(
      0x7E, 0x80, [](int c) { return e4m3_to_double(static_cast<uint8_t>(c)); },
      [](double x) { return e4m3_from_double(x); });
  CHECK(e4m3_from_double(1.0625) == 0x38);  // 1 | 1.125: to 1.0 (mantissa 000)
  CHECK(e4m3_from_double(1.1875) == 0x3A);  // 1.125 | 1.25: to 1.25 (mantissa 010)
  // Subnormals and below: 2^-10, half the smallest subnormal, is a tie with 0.
  CHECK(e4m3_from_double(std::ldexp(1.0, -10)) == 0x00);
  CHECK(e4m3_from_double(std::ldexp(3.0, -11)) == 0x01);
  CHECK(e4m3_from_double(std::ldexp(3.0, -10)) == 0x02);  // 1.5 · 2^-9: tie, to 2 · 2^-9
  CHECK(e4m3_from_double(std::ldexp(5.0, -10)) == 0x02);  // 2.5 · 2^-9: tie, to 2 · 2^-9
  CHECK(e4m3_from_double(-std::ldexp(1.0, -30)) == 0x80);
  CHECK(e4m3_from_double(std::numeric_limits<double>::denorm_min()) == 0x00);
  CHECK(e4m3_from_double(-std::numeric_limits<double>::denorm_min()) == 0x80);
  // Saturation: 464, the midpoint between 448 and the NaN code's place (480), and all above.
  for (double big : {448.0, 449.0, 463.9, 464.0, std::nextafter(464.0, kInf), 480.0, 1e9, 1e300,
                     std::numeric_limits<double>::max(), kInf}) {
    INFO(big);
    REQUIRE(e4m3_from_double(big) == 0x7E);
    REQUIRE(e4m3_from_double(-big) == 0xFE);
  }
  CHECK(e4m3_from_double(432.0) == 0x7E);  // 416 | 448: to 448 (mantissa 110)
  CHECK(e4m3_from_double(431.0) == 0x7D);
  // Zeros keep their sign; every NaN is 0x7F.
  CHECK(e4m3_from_double(0.0) == 0x00);
  CHECK(e4m3_from_double(-0.0) == 0x80);
  CHECK(e4m3_from_double(std::nan("")) == 0x7F);
  CHECK(e4m3_from_double(-std::nan("")) == 0x7F);
  CHECK(e4m3_from_double(std::numeric_limits<double>::signaling_NaN()) == 0x7F);
}

TEST_CASE("reference_e4m3: e4m3_from_double matches vxqa::float_to_e4m3 on fp32 inputs", "[reference_e4m3]") {
  std::mt19937_64 rng(0xE4E3);
  auto check = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    const uint8_t ours = e4m3_from_double(static_cast<double>(f));
    const uint8_t library = vxqa::float_to_e4m3(f);
    if (ours != library) {
      INFO("fp32 bits " << bits << " reference " << int(ours) << " library " << int(library));
      REQUIRE(ours == library);
    }
  };
  for (int i = 0; i < 150000; ++i) {
    const uint64_t r = rng();
    check(static_cast<uint32_t>(r));  // any pattern: NaNs, infs, fp32 subnormals, huge
    // Magnitudes 2^-12 .. 2^10, where E4M3 rounds, with a random sign.
    const uint32_t exponent = 127 - 12 + static_cast<uint32_t>((r >> 32) % 22);
    check((static_cast<uint32_t>(r >> 32) & 0x80000000u) | (exponent << 23) | (static_cast<uint32_t>(r >> 8) & 0x7FFFFFu));
  }
  // Every code's value and midpoint as fp32, and one fp32 ulp either side.
  for (int c = 0; c < 0x7E; ++c) {
    const double lo = e4m3_to_double(static_cast<uint8_t>(c));
    for (double x : {lo, (lo + e4m3_to_double(static_cast<uint8_t>(c + 1))) / 2}) {
      uint32_t bits;
      const float f = static_cast<float>(x);
      std::memcpy(&bits, &f, sizeof bits);
      for (uint32_t b : {bits - 1, bits, bits + 1, (bits - 1) | 0x80000000u, bits | 0x80000000u, (bits + 1) | 0x80000000u})
        check(b);
    }
  }
}

TEST_CASE("reference_e4m3: a random E4M3 problem", "[reference_e4m3]") {
  RandomProblemOptions o;
  o.batch = 3, o.kv_heads = 2, o.group = 2, o.head_dim = 16, o.page_size = 5, o.max_seq_len = 40;
  o.format = KvFormat::kE4M3;
  const RandomProblem e4m3 = make_random_problem(o, 11);
  o.format = KvFormat::kE5M2;
  const RandomProblem e5m2 = make_random_problem(o, 11);
  REQUIRE(element_bytes(KvFormat::kE4M3) == 1);

  // The same draws as E5M2: the same shape and table, and the garbage byte for byte, but
  // where E5M2 drew +inf, -inf or its largest finite, E4M3 has NaN, -448 and 448.
  REQUIRE(e4m3.cache.size() == e5m2.cache.size());
  REQUIRE(e4m3.block_table == e5m2.block_table);
  REQUIRE(e4m3.seq_lens == e5m2.seq_lens);
  REQUIRE(e4m3.q == e5m2.q);
  REQUIRE((e4m3.page_stride == e5m2.page_stride && e4m3.token_stride == e5m2.token_stride &&
           e4m3.head_stride == e5m2.head_stride && e4m3.k_offset == e5m2.k_offset &&
           e4m3.v_offset == e5m2.v_offset));
  std::vector<bool> written(e4m3.cache.size(), false);
  for (int b = 0; b < e4m3.batch; ++b)
    for (int t = 0; t < e4m3.seq_lens[b]; ++t)
      for (int h = 0; h < e4m3.kv_heads; ++h)
        for (int d = 0; d < e4m3.head_dim; ++d) {
          const int64_t i = e4m3.element_index(b, t, h, d);
          written[e4m3.k_offset + i] = written[e4m3.v_offset + i] = true;
          // K and V are U[-2, 2] rounded to E4M3, read back through the cache bytes.
          for (const double x : {e4m3.k_at(b, t, h, d), e4m3.v_at(b, t, h, d)}) {
            REQUIRE(std::isfinite(x));
            REQUIRE(std::fabs(x) <= 2.0);
          }
          REQUIRE(e4m3.k_at(b, t, h, d) == e4m3_to_double(e4m3.cache[e4m3.k_offset + i]));
          REQUIRE(e4m3.v_at(b, t, h, d) == e4m3_to_double(e4m3.cache[e4m3.v_offset + i]));
          // Both formats rounded the same draw: at most half a step of each apart (1/16 and
          // 1/8 below 2).
          REQUIRE(std::fabs(e4m3.k_at(b, t, h, d) - e5m2.k_at(b, t, h, d)) <= 0.0625 + 0.125);
          REQUIRE(std::fabs(e4m3.v_at(b, t, h, d) - e5m2.v_at(b, t, h, d)) <= 0.0625 + 0.125);
        }
  std::set<int> seen;
  for (size_t i = 0; i < written.size(); ++i) {
    if (written[i]) continue;
    const int a = e4m3.cache[i], b = e5m2.cache[i];
    INFO("garbage byte " << i << ": e4m3 " << a << " e5m2 " << b);
    REQUIRE((a == b || (b == 0x7C && a == 0x7F) || (b == 0xFC && a == 0xFE) || (b == 0x7B && a == 0x7E)));
    seen.insert(a);
  }
  for (int code : {0x7F, 0xFF, 0x7E, 0xFE}) CHECK(seen.count(code) == 1);

  // set_k rounds with satfinite.
  RandomProblem p = e4m3;
  p.set_k(0, 0, 0, 0, 1000.0);
  CHECK(p.k_at(0, 0, 0, 0) == 448.0);
  p.set_k(0, 0, 0, 0, -kInf);
  CHECK(p.k_at(0, 0, 0, 0) == -448.0);

  // The library's name for it, and byte offsets of one byte per element.
  vxqa::DeviceProblemBuffers d;
  const unsigned char* base = reinterpret_cast<const unsigned char*>(0x10000);
  d.cache = base;
  const vxqa::DecodeParams params = vxqa::problem_params(e4m3, d);
  CHECK(params.cache_type == vxqa::KvType::kE4M3);
  CHECK(static_cast<const unsigned char*>(params.k_cache) == base + e4m3.k_offset);
  CHECK(static_cast<const unsigned char*>(params.v_cache) == base + e4m3.v_offset);
  CHECK(vxqa::problem_kv_type(KvFormat::kE5M2) == vxqa::KvType::kE5M2);
  CHECK(vxqa::problem_kv_type(KvFormat::kFp16) == vxqa::KvType::kFp16);
}

TEST_CASE("reference_e4m3: the reference reads an E4M3 cache as the same values in fp16", "[reference_e4m3]") {
  // fp16 holds every E4M3 value exactly (4 significant bits, 2^-9 .. 448), so the same cache
  // recoded to fp16, with the same element strides, must give bit-identical results; the
  // garbage (NaN included) is recoded too, and stays unread.
  RandomProblemOptions o;
  o.batch = 4, o.kv_heads = 2, o.group = 3, o.head_dim = 32, o.page_size = 7, o.max_seq_len = 60;
  o.format = KvFormat::kE4M3;
  o.k_scale = 1.5f, o.v_scale = 0.75f;
  const RandomProblem p = make_random_problem(o, 5);
  std::vector<uint16_t> wide(p.cache.size());
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = fp16_from_double(e4m3_to_double(p.cache[i]));

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
