// What the E5M2 tests share (test/cpu/e5m2.cpp and test/gpu/e5m2.cu): names and the
// all-inputs comparison.
#pragma once
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vxqa/numeric/e5m2.cuh>

namespace vxqa_test {

constexpr vxqa::Saturation kSaturationModes[] = {vxqa::Saturation::kFinite, vxqa::Saturation::kNone};

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
