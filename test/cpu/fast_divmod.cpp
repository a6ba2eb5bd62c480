// FastDivmod and PageSize against the hardware divide.
#include <catch2/catch.hpp>

#include <vxqa/numeric/fast_divmod.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

using vxqa::FastDivmod;
using vxqa::PageSize;

namespace {

constexpr uint32_t kTwo31 = uint32_t(1) << 31;
constexpr uint32_t kMaxClaimed = kTwo31 - 1;  // exact range is [0, 2^31)

// Numerators worth trying for divisor d: edges, the neighbours of multiples of d (small ones
// and those near the top of the range, where the rounding error of the multiplier is largest),
// and random values.
std::vector<uint32_t> numerators(uint32_t d, std::mt19937& rng, int random_count) {
  std::vector<uint32_t> ns = {0, 1, 2, d - 1, d, kMaxClaimed, kMaxClaimed - 1, kMaxClaimed - d / 2};
  auto near = [&](uint64_t multiple) {
    for (int64_t delta = -2; delta <= 2; ++delta) {
      const int64_t n = int64_t(multiple) + delta;
      if (n >= 0 && n <= int64_t(kMaxClaimed)) ns.push_back(uint32_t(n));
    }
  };
  for (uint64_t k = 1; k <= 8; ++k) near(k * d);
  const uint64_t top_k = kMaxClaimed / d;
  for (uint64_t k = top_k > 8 ? top_k - 8 : 1; k <= top_k + 1; ++k) near(k * d);
  std::uniform_int_distribution<uint32_t> any(0, kMaxClaimed);
  for (int i = 0; i < random_count; ++i) ns.push_back(any(rng));
  return ns;
}

// Counts mismatches instead of a REQUIRE per numerator: millions of checks stay fast, and the
// first failure is still reported with its operands.
void check_divisor(uint32_t d, std::mt19937& rng, int random_count) {
  const FastDivmod fd(d);
  REQUIRE(fd.divisor == d);
  for (uint32_t n : numerators(d, rng, random_count)) {
    uint32_t q = 0, r = 0;
    fd.divmod(n, q, r);
    if (q != n / d || r != n % d || fd.div(n) != n / d) {
      INFO("d = " << d << ", n = " << n << ", got q = " << q << " r = " << r);
      CHECK(q == n / d);
      CHECK(r == n % d);
      return;
    }
  }
}

std::vector<uint32_t> special_divisors() {
  std::vector<uint32_t> ds = {784,        800,        1568,       4096,       3,
                              7,          65521,      65537,      1000003,    16777213,
                              1000000007, 2147483629, 2147483647, kTwo31 - 2, kTwo31};
  for (int k = 0; k <= 31; ++k) {
    const uint32_t p = uint32_t(1) << k;
    ds.push_back(p);
    if (p > 1) ds.push_back(p - 1);
    if (k < 31) ds.push_back(p + 1);
  }
  return ds;
}

template <int kPage>
void check_page_size_forms(std::mt19937& rng) {
  const PageSize<kPage> fixed(kPage);
  const PageSize<0> runtime(kPage);
  STATIC_REQUIRE(PageSize<kPage>::kIsStatic);
  STATIC_REQUIRE(!PageSize<0>::kIsStatic);
  REQUIRE(fixed.size() == kPage);
  REQUIRE(runtime.size() == kPage);
  REQUIRE(PageSize<kPage>::matches(kPage));
  REQUIRE_FALSE(PageSize<kPage>::matches(kPage + 1));
  REQUIRE_FALSE(PageSize<kPage>::matches(0));
  for (uint32_t n : numerators(kPage, rng, 20000)) {
    uint32_t fp = 0, fs = 0, rp = 0, rs = 0;
    fixed.divmod(n, fp, fs);
    runtime.divmod(n, rp, rs);
    if (fp != rp || fs != rs || fp != n / kPage || fs != n % kPage) {
      INFO("page " << kPage << ", token " << n);
      CHECK(fp == rp);
      CHECK(fs == rs);
      CHECK(fp == n / kPage);
      CHECK(fs == n % kPage);
      return;
    }
  }
}

}  // namespace

TEST_CASE("FastDivmod is exact for every divisor 1..5000", "[fast_divmod]") {
  std::mt19937 rng(12345);
  for (uint32_t d = 1; d <= 5000; ++d) check_divisor(d, rng, 400);
}

TEST_CASE("FastDivmod is exact for page sizes, powers of two and their neighbours, large primes",
          "[fast_divmod]") {
  std::mt19937 rng(777);
  for (uint32_t d : special_divisors()) check_divisor(d, rng, 100000);
}

TEST_CASE("FastDivmod is exact for random divisors across the whole range", "[fast_divmod]") {
  std::mt19937 rng(4242);
  std::uniform_int_distribution<uint32_t> any(1, kTwo31);
  for (int i = 0; i < 20000; ++i) check_divisor(any(rng), rng, 200);
}

TEST_CASE("FastDivmod: every numerator below 2^31, proven block by block", "[fast_divmod]") {
  // div(n) = (n + umulhi(n, m)) >> l is non-decreasing in n below 2^31 (nothing wraps), so
  // matching n / d at both ends of every block [k*d, (k+1)*d - 1] proves it for every n in
  // the block: this covers all of [0, 2^31) with 2 * 2^31 / d checks per divisor.
  std::vector<uint32_t> ds = {16, 784, 800, 1568, 4096};
  for (uint32_t d : special_divisors())
    if (d >= 1000) ds.push_back(d);
  std::mt19937 rng(2024);
  std::uniform_real_distribution<double> log2_d(10.0, 31.0);  // log-uniform in [2^10, 2^31]
  for (int i = 0; i < 500; ++i) ds.push_back(uint32_t(std::exp2(log2_d(rng))));
  for (uint32_t d : ds) {
    const FastDivmod fd(d);
    bool ok = true;
    uint32_t q = 0;
    for (uint64_t lo = 0; lo < kTwo31 && ok; lo += d, ++q) {
      const uint32_t hi = uint32_t(std::min<uint64_t>(lo + d - 1, kMaxClaimed));
      ok = fd.div(uint32_t(lo)) == q && fd.div(hi) == q;
    }
    INFO("d = " << d << ", first failing block quotient " << q - 1);
    CHECK(ok);
  }
}

TEST_CASE("FastDivmod: d == 1, powers of two and the default are identity / shifts",
          "[fast_divmod]") {
  // m == 0 for powers of two, so the whole 32-bit range is exact there.
  const FastDivmod one(1);
  CHECK(one.multiplier == 0);
  CHECK(one.shift == 0);
  for (uint32_t n : {0u, 1u, 12345u, kMaxClaimed, kTwo31, 0xffffffffu}) {
    uint32_t q, r;
    one.divmod(n, q, r);
    CHECK(q == n);
    CHECK(r == 0);
    CHECK(FastDivmod().div(n) == n);
  }
  for (int k = 0; k <= 31; ++k) {
    const FastDivmod p(uint32_t(1) << k);
    CHECK(p.multiplier == 0);
    CHECK(p.shift == uint32_t(k));
    CHECK(p.div(0xffffffffu) == (0xffffffffu >> k));
  }
}

TEST_CASE("FastDivmod: multiplier and shift of the round-up method", "[fast_divmod]") {
  // d = 800: l = 10, M = ceil(2^42 / 800) = 5497558139 (2^42 / 800 = 5497558138.88),
  // stored as M - 2^32.
  const FastDivmod fd(800);
  CHECK(fd.shift == 10);
  CHECK(fd.multiplier == uint32_t(5497558139ull - (1ull << 32)));
  // d = 3: l = 2, M = ceil(2^34 / 3) = 5726623062 (2^34 / 3 = 5726623061.33).
  const FastDivmod three(3);
  CHECK(three.shift == 2);
  CHECK(three.multiplier == uint32_t(5726623062ull - (1ull << 32)));
  STATIC_REQUIRE(FastDivmod(800).shift == 10);  // usable in constant expressions
}

TEST_CASE("FastDivmod: above 2^31 the host wraps in 32 bits like the device", "[fast_divmod]") {
  // d = 3: m = 1431655766, l = 2; for n = 2^32 - 1, n + umulhi(n, m) = n + 1431655765 wraps to
  // 1431655764, so div returns 357913941, not 1431655765. The host must show the same value
  // the GPU computes, or host tests would vouch for numerators the device gets wrong.
  const FastDivmod three(3);
  CHECK(three.div(0xffffffffu) == 357913941u);
  CHECK(three.div(0xffffffffu) != 0xffffffffu / 3);
}

TEST_CASE("FastDivmod: is_valid_divisor", "[fast_divmod]") {
  CHECK_FALSE(FastDivmod::is_valid_divisor(0));
  CHECK(FastDivmod::is_valid_divisor(1));
  CHECK(FastDivmod::is_valid_divisor(kTwo31));
  CHECK_FALSE(FastDivmod::is_valid_divisor(uint64_t(kTwo31) + 1));
}

TEST_CASE("PageSize: compile-time and runtime forms agree", "[fast_divmod]") {
  std::mt19937 rng(99);
  check_page_size_forms<1>(rng);
  check_page_size_forms<2>(rng);
  check_page_size_forms<16>(rng);
  check_page_size_forms<17>(rng);
  check_page_size_forms<784>(rng);
  check_page_size_forms<800>(rng);
  check_page_size_forms<1568>(rng);
  check_page_size_forms<4096>(rng);
  check_page_size_forms<100003>(rng);
  CHECK(PageSize<0>::matches(1));
  CHECK(PageSize<0>::matches(800));
  CHECK_FALSE(PageSize<0>::matches(0));
  CHECK_FALSE(PageSize<0>::matches(-16));
  CHECK(PageSize<0>().size() == 1);
}
