// test/cpu/rounding_checks.h — what an encoder to a small float format (E4M3, bf16, ...)
// owes, checked code by code: every finite code comes back from its own value, with either
// sign, and a value between two neighbouring codes goes to the nearer one, ties to the even
// code (subnormals, the subnormal/normal step and every binade).
#pragma once
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

namespace vxqa_test {

// Codes 0..max_finite are the non-negative finite values in increasing order; OR-ing
// sign_bit in gives their negatives. to_double(code) decodes, from_double(x) encodes.
template <class Decode, class Encode>
void check_nearest_even_encoder(int max_finite, int sign_bit, Decode to_double, Encode from_double) {
  for (int c = 0; c <= max_finite; ++c) {
    const double v = to_double(c);
    REQUIRE(from_double(v) == c);
    REQUIRE(from_double(-v) == (c | sign_bit));
  }
  for (int c = 0; c < max_finite; ++c) {
    const double mid = (to_double(c) + to_double(c + 1)) / 2;
    INFO("between codes " << c << " and " << c + 1);
    const int even = c % 2 == 0 ? c : c + 1;
    REQUIRE(from_double(mid) == even);
    REQUIRE(from_double(-mid) == (even | sign_bit));
    REQUIRE(from_double(std::nextafter(mid, std::numeric_limits<double>::infinity())) == c + 1);
    REQUIRE(from_double(std::nextafter(mid, 0.0)) == c);
  }
}

}  // namespace vxqa_test
