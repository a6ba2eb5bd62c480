// Names the E5M2 tests print (shared by test/cpu/e5m2.cpp and test/gpu/e5m2.cu).
#pragma once
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

}  // namespace vxqa_test
