// vxqa/testing/compare.h — compares one decode's outputs with the float64 reference, by the
// rules the kernels promise. Host only; plain C++17.
//
// Rules, per sequence, for each of its query tokens' rows (one row per sequence, or with
// multi-token queries its q_indptr[b] .. q_indptr[b+1]-1: RowLayout):
//  - Expect::kReference, element by element: a NaN reference → ours NaN; a ±inf reference →
//    the same inf, or NaN (an fp16 weight that underflowed to 0 meeting an infinite V gives
//    0·inf); a finite reference → ours finite and within the bound below.
//  - Expect::kEmpty (length 0): out exactly 0, lse −inf; with sinks, lse = the head's sink
//    within 2^-20 (|sink| + 1). (With multi-token queries an empty sequence has no rows.)
//  - Expect::kNan (a bad length or page): every out and lse NaN.
// And the error word holds exactly the bits expected.
//
// Bounds: from the error model of the kernels' roundings (error_model.h), per element:
//   out: sigmas · σ + fixed + (half an ulp of the output type + 2^-22 of the fp32 steps
//        before it) at |ref| + sigmas · σ + fixed
//   lse: sigmas · σ + fixed
// (docs/design.md, "How the tests bound the error"; test/cpu/compare_power.cpp shows that a
// correct kernel's roundings pass it and that a dropped token or tile, swapped heads, the
// wrong KV head or page, or a missing scale fail it, at 1 to 128K tokens).
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

// A decode's outputs on the host: out fp16 bits [num_tokens, Hq, D] and lse [num_tokens, Hq],
// contiguous (num_tokens = B with one query token per sequence).
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

// How the rows map to sequences, and what an empty row's LSE is. The defaults (one query
// token per sequence, no sinks) are what a decode without those variants has.
struct RowLayout {
  const int32_t* q_indptr = nullptr;  // [B + 1], as DecodeInputs::q_indptr; null: row b is sequence b
  const float* sinks = nullptr;       // [Hq], as DecodeInputs::sinks; null: none
};

inline RowLayout row_layout(const DecodeInputs& in) { return {in.q_indptr, in.sinks}; }

// kEmpty for length 0, kReference otherwise (one entry per sequence, whatever its rows).
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

// Checks element (b, h, d) of out (or, with d < 0, of lse) of query token `token` of sequence b
// (−1: the sequence's one row) and records a mismatch, the first one in words. `want` is the
// reference's value, `empty` what a length-0 sequence gives, within `empty_bound`.
inline void check(Comparison* c, Expect expect, double got, double want, double empty,
                  double bound, size_t b, int h, int d, int token = -1, double empty_bound = 0) {
  double ratio = 0;
  bool ok = false;
  switch (expect) {
    case Expect::kEmpty:
      ok = empty_bound > 0 ? std::isfinite(got) && std::fabs(got - empty) <= empty_bound : got == empty;
      want = empty;
      bound = empty_bound;
      break;
    case Expect::kNan: ok = std::isnan(got); want = std::numeric_limits<double>::quiet_NaN(); break;
    case Expect::kReference: ok = matches(got, want, bound, &ratio); break;
  }
  c->worst = std::max(c->worst, ratio);
  if (ok || c->mismatches++ > 0) return;
  char where[64] = "";
  if (token >= 0) std::snprintf(where, sizeof where, " token %d", token);
  char text[240];
  if (d >= 0)
    std::snprintf(text, sizeof text, "out seq %zu%s head %d dim %d: got %.9g, want %.9g (bound %.3g)",
                  b, where, h, d, got, want, bound);
  else
    std::snprintf(text, sizeof text, "lse seq %zu%s head %d: got %.9g, want %.9g (bound %.3g)", b,
                  where, h, got, want, bound);
  c->first = text;
}

}  // namespace detail

// The bound's knobs. bf16 outputs are compared as the fp16 values they equal, plus half an
// fp16 subnormal step for that conversion. Eight standard deviations: a kernel whose
// weights round in a frame twice as coarse as the model's (its running frame) stays within.
struct CompareBounds {
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

// The bound on row `row`'s LSE error: sigmas · σ + fixed.
inline double lse_bound(const ErrorModel& model, size_t row, const CompareBounds& bounds = {}) {
  return bounds.sigmas * model.lse_sigma[row] + model.lse_fixed[row];
}

// `expect` has one entry per sequence (its size is the batch); `ref` is the reference of
// the problem with every kReference sequence as the kernel saw it, `model` its error model;
// `layout` says which rows each sequence has (multi-token queries) and the sinks an empty
// row's LSE equals.
inline Comparison compare_with_reference(const DecodeOutput& ref, const ErrorModel& model,
                                         const std::vector<Expect>& expect, int q_heads, int head_dim,
                                         const KernelOutputs& ours, uint32_t expected_errors,
                                         const CompareBounds& bounds = {}, const RowLayout& layout = {}) {
  Comparison c;
  const size_t batch = expect.size();
  const size_t rows = layout.q_indptr != nullptr ? static_cast<size_t>(layout.q_indptr[batch]) : batch;
  if (ref.out.size() != rows * q_heads * head_dim || ref.lse.size() != rows * q_heads ||
      model.out_sigma.size() != ref.out.size() || model.lse_sigma.size() != ref.lse.size()) {
    c.mismatches = 1;
    c.first = "the reference's or the model's shape is not [" + std::to_string(rows) + ", " +
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
    const size_t first = layout.q_indptr != nullptr ? static_cast<size_t>(layout.q_indptr[b]) : b;
    const size_t end = layout.q_indptr != nullptr ? static_cast<size_t>(layout.q_indptr[b + 1]) : b + 1;
    for (size_t t = first; t < end; ++t) {
      const int token = layout.q_indptr != nullptr ? static_cast<int>(t - first) : -1;
      for (int h = 0; h < q_heads; ++h) {
        const size_t row = t * q_heads + h;
        for (int d = 0; d < head_dim; ++d) {
          const size_t i = row * head_dim + d;
          const double want = ref.out[i];
          const double error = bounds.sigmas * model.out_sigma[i] + model.out_fixed[i];
          // The fp32 steps before the output's rounding (o · (1 / l), × v_scale, the combine's
          // division): a few 2^-24 of |out|, which half an ulp does not cover when it rounds twice.
          const double bound = error + detail::half_ulp(std::fabs(want) + error, bounds.out_mantissa_bits) +
                               0x1p-22 * (std::fabs(want) + error) + conversion;
          detail::check(&c, expect[b], fp16_to_double(ours.out[i]), want, 0.0, bound, b, h, d, token);
        }
        // An empty row's LSE: −inf exactly (no sink, or a sink of −inf), or the sink (fp32
        // log2(e) and ln 2 on the way).
        const double empty = layout.sinks != nullptr ? static_cast<double>(layout.sinks[h]) : -inf;
        const double empty_bound = std::isfinite(empty) ? 0x1p-20 * (std::fabs(empty) + 1) : 0.0;
        detail::check(&c, expect[b], ours.lse[row], ref.lse[row], empty, lse_bound(model, row, bounds), b, h, -1,
                      token, empty_bound);
      }
    }
  }
  return c;
}

// A RandomProblem's decode against its reference and model, every sequence by its length
// (kEmpty for length 0), its rows and sinks from the problem.
inline Comparison compare_problem(const RandomProblem& p, const DecodeOutput& ref, const ErrorModel& model,
                                  const KernelOutputs& ours, uint32_t expected_errors = 0,
                                  const CompareBounds& bounds = {}) {
  return compare_with_reference(ref, model, expect_from_lengths(p.seq_lens), p.query_heads(), p.head_dim, ours,
                                expected_errors, bounds, row_layout(p.inputs()));
}

}  // namespace vxqa::reference
