// vxqa/testing/error_model.h — how far a correct kernel's outputs may lie from the float64
// reference, element by element, worked out from the roundings the kernels make. Host
// only; plain C++17. compare.h turns it into the bound every test uses.
//
// What a kernel rounds (docs/design.md, "How the tests bound the error"):
//  - Each softmax weight p_j = exp(s_j − max) is rounded to fp16 before P·V, and the sum l
//    is taken over the rounded weights. Relative to the reference's weights that rounding is
//    a random error of at most half an fp16 ulp, independent from token to token: with e_j
//    its standard deviation, out = Σ p̃_j v_j / Σ p̃_j is off by Σ δ_j (v_j − out) / l to first
//    order, whose standard deviation is
//        σ_out = sqrt(Σ e_j² (v_j − out)²) / l,          σ_lse = sqrt(Σ e_j²) / l.
//    A kernel works in a running frame (the tile's max, not the row's), so its ulp can be up
//    to twice the final frame's; on average over tokens it is the same, and the bound takes
//    a multiple of σ. A weight below 2^-25 rounds to 0: its error is the weight itself.
//  - The scores are fp32: the dot products of exact fp16 products (about 2^-23 of Σ|q||k|
//    each) and exp2f (2^-22): independent per token, added to e_j.
//  - softmax_scale · k_scale · log2(e) is one fp32 number: a relative error ε shared by every
//    score, which moves the weights by ε (s_j − max), all together. Its effect is computed
//    exactly (times the largest ε) and added as a fixed part.
//  - With several chunks, each chunk's weight in the combine carries fp32 errors of its LSE
//    (log2f, exp2f, the additions): a random relative error per chunk, of the chunk's sum
//    Σ_{j∈c} p_j (v_j − out).
//  - fp32 accumulation of P·V and of l: errors proportional to the partial sums, which are
//    small next to those above; a fixed 2^-22 of Σ p_j |v_j − out| / l covers them.
//  - The output is rounded to fp16 or bf16 at the end (compare.h adds half an ulp).
// Inputs whose reference is not finite (NaN, inf) are left to compare.h's rules.
#pragma once

#include <vxqa/testing/decode_reference.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace vxqa::reference {

struct ErrorModel {
  std::vector<double> out_sigma;  // [B, Hq, D] standard deviation of the random part
  std::vector<double> out_fixed;  // [B, Hq, D] bound on the correlated part
  std::vector<double> lse_sigma;  // [B, Hq]
  std::vector<double> lse_fixed;  // [B, Hq]
};

namespace detail {

// One unit in the last place of the fp16 number nearest to |x| (subnormals: 2^-24).
inline double fp16_ulp(double x) {
  const double a = std::fabs(x);
  if (!(a >= 0x1p-14)) return 0x1p-24;
  return std::ldexp(1.0, std::ilogb(a) - 10);
}

// The standard deviation of the fp16 rounding error of weight p (≤ 1).
inline double weight_rounding_sigma(double p) {
  if (p < 0x1p-25) return p;  // rounds to 0
  return fp16_ulp(p) / std::sqrt(12.0);
}

}  // namespace detail

// The model of `in`'s decode whose reference is `ref`; `chunk_tokens` is the plan's chunk
// (0 or ≥ the longest sequence: one chunk, no combine). The default, 64 tokens, is the
// finest chunk a plan takes; the combine's part it adds is about 1 % of the variance, and
// it barely depends on the chunk (a sum of independent terms), so one model serves every
// plan of a problem.
inline ErrorModel decode_error_model(const DecodeInputs& in, const DecodeOutput& ref, int chunk_tokens = 64) {
  constexpr double kLog2e = 1.4426950408889634, kLn2 = 0.6931471805599453;
  constexpr double kScaleEps = 0x1p-22;  // softmax_scale · k_scale · log2(e) rounded to fp32, twice
  const int heads = in.kv_heads * in.group, dim = in.head_dim;
  ErrorModel m;
  m.out_sigma.assign(static_cast<size_t>(in.batch) * heads * dim, 0.0);
  m.out_fixed.assign(m.out_sigma.size(), 0.0);
  m.lse_sigma.assign(static_cast<size_t>(in.batch) * heads, 0.0);
  m.lse_fixed.assign(m.lse_sigma.size(), 0.0);

  std::vector<double> q(static_cast<size_t>(in.group) * dim), k(dim), v(dim);
  for (int b = 0; b < in.batch; ++b) {
    const int len = in.seq_lens[b];
    if (len <= 0) continue;
    const int chunk = chunk_tokens > 0 && chunk_tokens < len ? chunk_tokens : len;
    const int32_t* table = in.block_table + static_cast<int64_t>(b) * in.table_stride;
    auto row_start = [&](int j, int h) {
      return table[j / in.page_size] * in.page_stride + (j % in.page_size) * in.token_stride + h * in.head_stride;
    };
    for (int h = 0; h < in.kv_heads; ++h) {
      const int first = h * in.group;
      for (int g = 0; g < in.group; ++g)
        for (int d = 0; d < dim; ++d)
          q[g * dim + d] = fp16_to_double(in.q[(static_cast<int64_t>(b) * heads + first + g) * dim + d]);
      // Scores (natural units, as the reference) and Σ|q_i k_i| for each token and head.
      std::vector<double> s(static_cast<size_t>(in.group) * len), s_abs(s.size());
      for (int j = 0; j < len; ++j) {
        for (int d = 0; d < dim; ++d) k[d] = detail::load_element(in.k, row_start(j, h) + d, in.format) * in.k_scale;
        for (int g = 0; g < in.group; ++g) {
          double dot = 0, dot_abs = 0;
          for (int d = 0; d < dim; ++d) {
            dot += q[g * dim + d] * k[d];
            dot_abs += std::fabs(q[g * dim + d] * k[d]);
          }
          s[static_cast<size_t>(g) * len + j] = in.softmax_scale * dot;
          s_abs[static_cast<size_t>(g) * len + j] = std::fabs(in.softmax_scale) * dot_abs;
        }
      }
      for (int g = 0; g < in.group; ++g) {
        const size_t row = static_cast<size_t>(b) * heads + first + g;
        const double* sg = &s[static_cast<size_t>(g) * len];
        const double* ag = &s_abs[static_cast<size_t>(g) * len];
        const double* out = &ref.out[row * dim];
        const double max = *std::max_element(sg, sg + len);
        if (!std::isfinite(max) || !std::isfinite(ref.lse[row])) continue;  // compare.h's rules
        // Per-token weights and their error's standard deviation.
        double l = 0, e2_sum = 0, shift_sum = 0;
        std::vector<double> p(len), e2(len);
        for (int j = 0; j < len; ++j) {
          p[j] = std::exp(sg[j] - max);
          if (p[j] == 0) continue;  // a masked (-inf) score: no weight, no error (and no 0 · inf)
          const double score_error = 0x1p-22 * (ag[j] + std::fabs(sg[j])) * kLog2e;  // base-2 units
          const double rounding = detail::weight_rounding_sigma(p[j]);
          e2[j] = rounding * rounding + p[j] * p[j] * (kLn2 * kLn2 * score_error * score_error / 3 + 0x1p-44);
          l += p[j];
          e2_sum += e2[j];
          shift_sum += p[j] * (sg[j] - max) * kLog2e;
        }
        const double max2 = std::fabs(max) * kLog2e;
        const double chunk_eps = 0x1p-21 * (max2 + 24);  // a chunk weight's relative fp32 error
        m.lse_sigma[row] = std::sqrt(e2_sum) / l;
        m.lse_fixed[row] = kLn2 * kScaleEps * (std::fabs(shift_sum) / l + max2) + 0x1p-20 * (std::fabs(ref.lse[row]) + 1) +
                           (chunk < len ? chunk_eps : 0.0);
        // Per dim: Σ e_j² (v_j − out)², the scale's shared shift, Σ p_j |v_j − out|, and the
        // chunks' sums Σ_{j∈c} p_j (v_j − out).
        std::vector<double> var(dim, 0), shift(dim, 0), spread(dim, 0), chunk_sum(dim, 0), chunk_var(dim, 0);
        for (int j = 0; j < len; ++j) {
          if (p[j] != 0)
            for (int d = 0; d < dim; ++d) v[d] = detail::load_element(in.v, row_start(j, h) + d, in.format) * in.v_scale;
          for (int d = 0; d < dim && p[j] != 0; ++d) {
            const double dv = v[d] - out[d];
            var[d] += e2[j] * dv * dv;
            shift[d] += p[j] * (sg[j] - max) * kLog2e * dv;
            spread[d] += p[j] * std::fabs(dv);
            chunk_sum[d] += p[j] * dv;
          }
          if ((j + 1) % chunk == 0 || j + 1 == len) {
            for (int d = 0; d < dim; ++d) {
              chunk_var[d] += chunk_sum[d] * chunk_sum[d];
              chunk_sum[d] = 0;
            }
          }
        }
        for (int d = 0; d < dim; ++d) {
          const double combine_var = chunk < len ? chunk_eps * chunk_eps / 3 * chunk_var[d] : 0.0;
          m.out_sigma[row * dim + d] = std::sqrt(var[d] + combine_var) / l;
          m.out_fixed[row * dim + d] = (kLn2 * kScaleEps * std::fabs(shift[d]) + 0x1p-22 * spread[d]) / l;
        }
      }
    }
  }
  return m;
}

}  // namespace vxqa::reference
