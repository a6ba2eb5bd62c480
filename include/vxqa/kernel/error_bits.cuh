// vxqa/kernel/error_bits.cuh — the bits decode and append_kv set in an error word. One set
// for both, without collisions, so a layer's one word can collect them all.
#pragma once
#include <vxqa/common.cuh>

namespace vxqa {

enum ErrorBit : uint32_t {
  kDecodeErrorBadLength = 1u << 0,  // a length < 0, above max_context or past the block table
  kDecodeErrorBadPage = 1u << 1,    // a block-table id that a valid length uses is outside [0, num_pages)
  kAppendErrorBadSlot = 1u << 2,    // a slot at/after num_pages * page_size: not written
  // A device scale (k_scale_ptr / v_scale_ptr) holding a value that is not finite or not
  // > 0. Decode: every output it touches is NaN (K: O and LSE; V: O). append_kv: the rows it
  // scales are written as NaN codes.
  kErrorBadKScale = 1u << 3,
  kErrorBadVScale = 1u << 4,
};

// A scale the kernels may use: finite and > 0 (false for NaN and +inf).
VXQA_HD bool scale_is_valid(float s) { return s > 0.f && s <= 3.402823466e38f; }

// The scale a kernel uses: `s` itself, or NaN where it is not valid, so that every output
// it touches is NaN, never a silent finite number.
VXQA_HD float valid_scale_or_nan(float s) { return scale_is_valid(s) ? s : quiet_nan(); }

// The scale bits of a (k_scale, v_scale) pair.
VXQA_HD uint32_t scale_error_bits(float k_scale, float v_scale) {
  return (scale_is_valid(k_scale) ? 0u : uint32_t(kErrorBadKScale)) |
         (scale_is_valid(v_scale) ? 0u : uint32_t(kErrorBadVScale));
}

}  // namespace vxqa
