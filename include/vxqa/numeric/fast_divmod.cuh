// vxqa/numeric/fast_divmod.cuh — division of 32-bit token indices by a page size.
//
// FastDivmod: a runtime divisor d turned, once, into a multiplier and a shift, so that every
// later n / d is one high multiply, one add and one shift (no hardware divide on the GPU).
// PageSize<k>: the same interface for a compile-time page size (k > 0, plain `/` by the
// constant) or a runtime one (k == 0, holds a FastDivmod), so code is generic over both.
#pragma once

#include "../common.cuh"

namespace vxqa {

// Round-up reciprocal. For 1 <= d <= 2^31 let l = ceil(log2 d) and M = ceil(2^(32+l) / d).
// Since 2^(l-1) < d <= 2^l, 2^32 <= M < 2^33, so only m = M - 2^32 is stored (32 bits) and
//   n / d == floor(n * M / 2^(32+l)) == (n + umulhi(n, m)) >> l.
// Proof of the first equality: with e = M*d - 2^(32+l) (0 <= e <= d-1 < 2^l) and
// n = q*d + r, n*M / 2^(32+l) = q + r/d + n*e / (d * 2^(32+l)); the last term is below 1/d
// for every n < 2^32, and r/d <= 1 - 1/d, so the floor is q.
// The second equality holds as long as n + umulhi(n, m) does not wrap 32 bits; umulhi(n, m)
// <= n, so that is guaranteed for n < 2^31. Proven exact range: every n in [0, 2^31) for every
// d in [1, 2^31]. (For d a power of two m == 0 and all 2^32 numerators are exact; for other d,
// numerators >= 2^31 may wrap — token indices never get there.) d == 1 gives m == 0, l == 0.
struct FastDivmod {
  uint32_t divisor;
  uint32_t multiplier;  // M - 2^32
  uint32_t shift;       // ceil(log2 divisor)

  // Divisor 1, so a default-constructed value is still a valid (identity) divisor.
  VXQA_HD constexpr FastDivmod() : divisor(1), multiplier(0), shift(0) {}

  // Precondition: is_valid_divisor(d). Meant for the host (a 64-bit divide), once per launch.
  VXQA_HD constexpr explicit FastDivmod(uint32_t d) : divisor(d), multiplier(0), shift(0) {
    while ((uint64_t(1) << shift) < d) ++shift;
    const uint64_t two_pow = uint64_t(1) << (32 + shift);
    multiplier = static_cast<uint32_t>((two_pow + d - 1) / d - (uint64_t(1) << 32));
  }

  VXQA_HD static constexpr bool is_valid_divisor(uint64_t d) {
    return d >= 1 && d <= (uint64_t(1) << 31);
  }

  // n / divisor, exact for n < 2^31 (see above).
  VXQA_HD uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, multiplier);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t(n) * multiplier) >> 32);
#endif
    // 32-bit add on both paths, so the host computes exactly what the device does.
    return static_cast<uint32_t>(n + hi) >> shift;
  }

  VXQA_HD void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * divisor;
  }
};

// Compile-time page size: `/` and `%` by a constant, which the compiler turns into its own
// multiply-shift (exact for every 32-bit numerator).
template <int kPageSize>
struct PageSize {
  static_assert(kPageSize > 0, "PageSize: the page size must be positive (0 selects the runtime form)");
  static constexpr bool kIsStatic = true;

  VXQA_HD constexpr PageSize() {}
  // The int is accepted so both forms construct alike; a host API checks matches() first.
  VXQA_HD constexpr explicit PageSize(int) {}

  VXQA_HD static constexpr bool matches(int page_size) { return page_size == kPageSize; }
  VXQA_HD constexpr int size() const { return kPageSize; }

  VXQA_HD void divmod(uint32_t token, uint32_t& page, uint32_t& slot) const {
    page = token / static_cast<uint32_t>(kPageSize);
    slot = token - page * static_cast<uint32_t>(kPageSize);
  }
};

// Runtime page size: any value >= 1, divided through a precomputed FastDivmod.
template <>
struct PageSize<0> {
  static constexpr bool kIsStatic = false;

  VXQA_HD constexpr PageSize() : div_() {}
  // Precondition: matches(page_size).
  VXQA_HD constexpr explicit PageSize(int page_size) : div_(static_cast<uint32_t>(page_size)) {}

  VXQA_HD static constexpr bool matches(int page_size) { return page_size >= 1; }
  VXQA_HD constexpr int size() const { return static_cast<int>(div_.divisor); }

  // Exact for token < 2^31 (FastDivmod's range), i.e. for every int32 token index.
  VXQA_HD void divmod(uint32_t token, uint32_t& page, uint32_t& slot) const {
    div_.divmod(token, page, slot);
  }

 private:
  FastDivmod div_;
};

}  // namespace vxqa
