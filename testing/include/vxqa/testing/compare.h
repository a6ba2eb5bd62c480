// vxqa/testing/compare.h — compares one decode's outputs with the float64 reference, by the
// rules the kernels promise. Host only; plain C++17.
//
// Rules, per sequence:
//  - Expect::kReference, element by element: a NaN reference → ours NaN; a ±inf reference →
//    the same inf, or NaN (an fp16 weight that underflowed to 0 meeting an infinite V gives
//    0·inf); a finite reference → ours finite and within the bound below.
//  - Expect::kEmpty (length 0): out exactly 0, lse −inf.
//  - Expect::kNan (a bad length or page): every out and lse NaN.
// And the error word holds exactly the bits expected.
//
// Bounds (|ours − ref| ≤ out_abs · max|V| · v_scale + out_rel · |ref|):
//  - K and V are decoded exactly to fp16 and Q is fp16, so Q·K is exact products summed in
//    fp32 (relative ~1e-7 of Σ|q||k|: negligible next to the rest);
//  - P is rounded to fp16 before P·V (relative 2^-11 per weight) and normalised by the sum of
//    the rounded weights, so O is off by at most ~2^-11 · max|V| from that;
//  - O is rounded to fp16 at the end (relative 2^-11);
//  - split chunks are merged in fp32 (relative ~1e-6).
// out_abs = 2e-3 (4x the P rounding) and out_rel = 2^-10 (2x the output rounding) leave room
// for sums of many roundings without hiding an indexing bug (which moves O by ~max|V|).
// LSE: fp32 sums of rounded P, relative error ~2^-11 in l, give 5e-4 in log: 2e-3 absolute.
// Plus 2^-20 · |lse|: the kernel's lse is an fp32 number close to the largest score, and with
// large scales (scores in the thousands) the fp32 roundings of the scale product, of the
// scores and of the base-2 → natural conversion each cost an ulp or so of |lse| (2^-24).
#pragma once

#include <vxqa/testing/decode_reference.h>
#include <vxqa/testing/error_model.h>
#include <vxqa/testing/random_problem.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace vxqa::reference {

// What one sequence's outputs must be.
enum class Expect : uint8_t {
  kReference,  // the reference's values, by the rules above
  kEmpty,      // length 0: out exactly 0, lse −inf
  kNan,        // bad length or bad page: NaN everywhere
};

struct CompareBounds {
  double out_abs = 2e-3;        // times max|V| · v_scale
  double out_rel = 1.0 / 1024;  // times |ref|
  double lse_abs = 2e-3;
  double lse_rel = 0x1p-20;  // times |ref|
};

// A decode's outputs on the host: out fp16 bits [B, Hq, D] and lse [B, Hq], contiguous.
struct KernelOutputs {
  const uint16_t* out = nullptr;
  const float* lse = nullptr;
  uint32_t errors = 0;
};

struct Comparison {
  size_t mismatches = 0;
  std::string first;  // the first mismatch in words; empty when there is none
  double worst = 0;   // largest |ours − ref| / bound over the finite elements compared
  bool ok() const { return mismatches == 0; }
};

// kEmpty for length 0, kReference otherwise.
inline std::vector<Expect> expect_from_lengths(const std::vector<int32_t>& seq_lens) {
  std::vector<Expect> expect;
  for (int32_t len : seq_lens) expect.push_back(len == 0 ? Expect::kEmpty : Expect::kReference);
  return expect;
}

// max |V| · v_scale over the finite V values the sequences use: the scale of the out bound
// (an infinite V makes its own outputs infinite or NaN, not every bound infinite).
inline double finite_v_abs_max(const RandomProblem& p) {
  const void* v = p.cache.data() + p.v_offset * element_bytes(p.format);
  double m = 0;
  for (int b = 0; b < p.batch; ++b)
    for (int t = 0; t < p.seq_lens[b]; ++t)
      for (int h = 0; h < p.kv_heads; ++h) {
        const int64_t row = p.element_index(b, t, h, 0);
        for (int d = 0; d < p.head_dim; ++d) {
          const double x = detail::load_element(v, row + d, p.format);
          if (std::isfinite(x)) m = std::max(m, std::fabs(x));
        }
      }
  return m * p.v_scale;
}

namespace detail {

// One element of a kReference sequence: true when `got` obeys the rules against `want`.
inline bool matches(double got, double want, double bound, double* ratio) {
  *ratio = 0;
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want || std::isnan(got);
  if (!std::isfinite(got)) return false;
  *ratio = std::fabs(got - want) / bound;
  return std::fabs(got - want) <= bound;
}

// Checks element (b, h, d) of out (or, with d < 0, of lse) and records a mismatch, the first
// one in words. `want` is the reference's value, `empty` what a length-0 sequence gives.
inline void check(Comparison* c, Expect expect, double got, double want, double empty,
                  double bound, size_t b, int h, int d) {
  double ratio = 0;
  bool ok = false;
  switch (expect) {
    case Expect::kEmpty: ok = got == empty; want = empty; break;
    case Expect::kNan: ok = std::isnan(got); want = std::numeric_limits<double>::quiet_NaN(); break;
    case Expect::kReference: ok = matches(got, want, bound, &ratio); break;
  }
  c->worst = std::max(c->worst, ratio);
  if (ok || c->mismatches++ > 0) return;
  char text[200];
  if (d >= 0)
    std::snprintf(text, sizeof text, "out seq %zu head %d dim %d: got %.9g, want %.9g (bound %.3g)",
                  b, h, d, got, want, bound);
  else
    std::snprintf(text, sizeof text, "lse seq %zu head %d: got %.9g, want %.9g (bound %.3g)", b, h,
                  got, want, bound);
  c->first = text;
}

}  // namespace detail

// `expect` has one entry per sequence (its size is the batch); `ref` is the reference of
// the problem with every kReference sequence as the kernel saw it.
inline Comparison compare_with_reference(const DecodeOutput& ref, const std::vector<Expect>& expect,
                                         int q_heads, int head_dim, double v_abs_max,
                                         const KernelOutputs& ours, uint32_t expected_errors,
                                         const CompareBounds& bounds = {}) {
  Comparison c;
  const size_t batch = expect.size();
  if (ref.out.size() != batch * q_heads * head_dim || ref.lse.size() != batch * q_heads) {
    c.mismatches = 1;
    c.first = "the reference's shape is not [" + std::to_string(batch) + ", " +
              std::to_string(q_heads) + ", " + std::to_string(head_dim) + "]";
    return c;
  }
  if (ours.errors != expected_errors) {
    c.mismatches = 1;
    c.first = "error word " + std::to_string(ours.errors) + ", want " + std::to_string(expected_errors);
  }
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t b = 0; b < batch; ++b) {
    for (int h = 0; h < q_heads; ++h) {
      const size_t row = b * q_heads + h;
      for (int d = 0; d < head_dim; ++d) {
        const size_t i = row * head_dim + d;
        const double want = ref.out[i];
        detail::check(&c, expect[b], fp16_to_double(ours.out[i]), want, 0.0,
                      bounds.out_abs * v_abs_max + bounds.out_rel * std::fabs(want), b, h, d);
      }
      const double want = ref.lse[row];
      detail::check(&c, expect[b], ours.lse[row], want, -inf,
                    bounds.lse_abs + bounds.lse_rel * std::fabs(want), b, h, -1);
    }
  }
  return c;
}

// The bound of a correct kernel, from the error model (error_model.h): for out,
//   sigmas · σ + fixed + half an ulp of the output type at |ref| + sigmas · σ + fixed
// (with bf16 outputs compared as the fp16 values they equal, plus half an fp16 subnormal
// step for that conversion); for LSE, sigmas · σ + fixed. Eight standard deviations: a
// kernel whose weights round in a frame twice as coarse as the model's (the running
// frame) still stays within, and a dropped token, a dropped tile or a swapped head moves an
// output by many of them (test/cpu/compare_power.cpp).
struct ModelBounds {
  double sigmas = 8;
  int out_mantissa_bits = 10;  // 10: fp16 outputs; 7: bf16
};

namespace detail {

// Half an ulp of |x| in a float format with `mantissa_bits` and fp16's or bf16's range.
inline double half_ulp(double x, int mantissa_bits) {
  const double a = std::fabs(x);
  const int min_exponent = mantissa_bits == 10 ? -14 : -126;
  const int e = a > 0 ? std::max(std::ilogb(a), min_exponent) : min_exponent;
  return std::ldexp(0.5, e - mantissa_bits);
}

}  // namespace detail

inline Comparison compare_with_reference(const DecodeOutput& ref, const ErrorModel& model,
                                         const std::vector<Expect>& expect, int q_heads, int head_dim,
                                         const KernelOutputs& ours, uint32_t expected_errors,
                                         const ModelBounds& bounds = {}) {
  Comparison c;
  const size_t batch = expect.size();
  if (ref.out.size() != batch * q_heads * head_dim || ref.lse.size() != batch * q_heads ||
      model.out_sigma.size() != ref.out.size() || model.lse_sigma.size() != ref.lse.size()) {
    c.mismatches = 1;
    c.first = "the reference's or the model's shape is not [" + std::to_string(batch) + ", " +
              std::to_string(q_heads) + ", " + std::to_string(head_dim) + "]";
    return c;
  }
  if (ours.errors != expected_errors) {
    c.mismatches = 1;
    c.first = "error word " + std::to_string(ours.errors) + ", want " + std::to_string(expected_errors);
  }
  const double inf = std::numeric_limits<double>::infinity();
  const double conversion = bounds.out_mantissa_bits == 10 ? 0.0 : 0x1p-25;
  for (size_t b = 0; b < batch; ++b) {
    for (int h = 0; h < q_heads; ++h) {
      const size_t row = b * q_heads + h;
      for (int d = 0; d < head_dim; ++d) {
        const size_t i = row * head_dim + d;
        const double want = ref.out[i];
        const double error = bounds.sigmas * model.out_sigma[i] + model.out_fixed[i];
        const double bound = error + detail::half_ulp(std::fabs(want) + error, bounds.out_mantissa_bits) + conversion;
        detail::check(&c, expect[b], fp16_to_double(ours.out[i]), want, 0.0, bound, b, h, d);
      }
      detail::check(&c, expect[b], ours.lse[row], ref.lse[row], -inf,
                    bounds.sigmas * model.lse_sigma[row] + model.lse_fixed[row], b, h, -1);
    }
  }
  return c;
}

}  // namespace vxqa::reference
