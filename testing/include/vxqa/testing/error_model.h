// vxqa/testing/error_model.h — how far a correct kernel's outputs may lie from the float64
// reference, element by element, worked out from the roundings the kernels make. Host
// only; plain C++17. compare.h turns it into the bound every test uses.
//
// What a kernel rounds (docs/design.md, "How the tests bound the error"):
//  - Each softmax weight p_j = exp(s_j − max) is rounded to fp16 (bf16 with a bf16 cache,
//    whose MMA takes bf16: an ulp 2^(e − 7) instead of 2^(e − 10)) before P·V, and the sum l
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
//  - Weights that repeat (equal within 2^-20) round alike: a run of them has one rounding
//    error, not independent ones. A saturated soft-cap makes that common (scores of ±cap:
//    two weights for every key). A run counts as one token whose error is its weight's
//    rounding times its size (lse) or its Σ (v_j − out) (out): independent of the other
//    runs and tokens, so it adds (size · e)² to Σ e_j² and (e Σ (v_j − out))² to
//    Σ e_j² (v_j − out)².
//  - The output is rounded to fp16 or bf16 at the end (compare.h adds half an ulp).
//
// Attention variants (decode_reference.h) and multi-token rows:
//  - Window, multi-token queries: a row's weights are those of the keys it sees, nothing
//    else changes. Its chunks are counted from its first visible key (the plan cuts them over
//    the window; their part barely depends on where they start).
//  - Soft-cap: the kernel takes x = s_raw · (softmax_scale · k_scale / cap) in fp32, then
//    cap · tanh(x) with a tanh good to about 2^-21 absolute (1 − 2 / (exp2(2x·log2 e) + 1)),
//    then times log2(e) (with cap: one fp32 constant). So
//      · the shared relative error ε of that fp32 scale moves x by ε·x, so s_j by
//        c_j ε with c_j = cap · sech²(x_j) · x_j (every score together): a second fixed
//        part, Σ_j p_j c_j (v_j − out) / l for out and Σ_j p_j c_j / l for lse, times ε
//        (the first one, ε · s_j from the constant cap · log2(e), is the plain kernel's);
//      · the dot product's error reaches s_j through tanh's slope: the Σ|q k| term is
//        multiplied by sech²(x_j);
//      · tanh's own error, cap · 2^-20 absolute per score, independent: added to e_j.
//  - Sinks: the kernel adds w = exp2f(sink · log2 e − max) in fp32 to the fp32 sum l at the
//    end, not rounded to fp16; L = l + w replaces l in every division. The sink is a token
//    of value 0 in the (v_j − out) terms: its relative error of 2^-21, independent, adds
//    e_w² out² to σ_out² and e_w² to σ_lse² (e_w = 2^-21 w / √3), and w |out| to
//    Σ p_j |v_j − out|. The scores' shared ε does not move the sink, so the frame no longer
//    cancels: the shift is ε Σ_j p_j s_j (v_j − out) / L, with Σ_j p_j (v_j − out) = w · out,
//    i.e. ε (Σ_j p_j (s_j − max) (v_j − out) + max · w · out) / L, and the lse's is
//    ε (|Σ_j p_j (s_j − max)| + |max| · l) / L. A chunk's LSE is as large as the sink's:
//    the combine's ε takes the larger of |max| and |sink|. (The sums are scaled to the frame
//    max(max, sink), so that a sink far above every score overflows nothing.)
//  - An empty row with a sink: out exactly 0 (compare.h), lse = the sink within
//    2^-20 (|sink| + 1) (its fp32 log2(e) and ln 2 products).
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
  std::vector<double> out_sigma;  // [num_tokens, Hq, D] standard deviation of the random part
  std::vector<double> out_fixed;  // [num_tokens, Hq, D] bound on the correlated part
  std::vector<double> lse_sigma;  // [num_tokens, Hq]
  std::vector<double> lse_fixed;  // [num_tokens, Hq]
};

namespace detail {

// One unit in the last place of the fp16 number nearest to |x| (subnormals: 2^-24).
inline double fp16_ulp(double x) {
  const double a = std::fabs(x);
  if (!(a >= 0x1p-14)) return 0x1p-24;
  return std::ldexp(1.0, std::ilogb(a) - 10);
}

// The standard deviation of the rounding error of weight p (≤ 1): to fp16, or with `bf16` to
// bf16 (fp32's range, but the kernels' exp2 flushes weights below 2^-126 to 0).
inline double weight_rounding_sigma(double p, bool bf16 = false) {
  if (bf16) return p < 0x1p-126 ? p : std::ldexp(1.0, std::ilogb(p) - 7) / std::sqrt(12.0);
  if (p < 0x1p-25) return p;  // rounds to 0
  return fp16_ulp(p) / std::sqrt(12.0);
}

// Weights that repeat round alike, so their rounding errors are one error, not independent
// ones: a saturated soft-cap gives every score ±cap, two weights for thousands of keys.
// Runs: the weights (> 0) equal to another within 2^-20 (the kernel's fp32 scores cannot
// tell them apart). of[j]: token j's run, or -1 (its error independent); sigma[r]: the
// standard deviation of run r's one rounding error (weight_rounding_sigma).
struct WeightRuns {
  std::vector<int> of;
  std::vector<double> sigma;
  std::vector<int> size;
  double lse_variance() const {  // Σ_r (size_r · sigma_r)²
    double sum = 0;
    for (size_t r = 0; r < sigma.size(); ++r) sum += (size[r] * sigma[r]) * (size[r] * sigma[r]);
    return sum;
  }
};
inline WeightRuns weight_runs(const std::vector<double>& p, bool bf16) {
  const int count = static_cast<int>(p.size());
  WeightRuns runs;
  runs.of.assign(count, -1);
  std::vector<int> order;
  for (int j = 0; j < count; ++j)
    if (p[j] > 0 && std::isfinite(p[j])) order.push_back(j);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] < p[b]; });
  const int n = static_cast<int>(order.size());
  for (int i = 0, k = 0; i < n; i = k + 1) {
    k = i;
    while (k + 1 < n && p[order[k + 1]] - p[order[i]] <= 0x1p-20 * p[order[k + 1]]) ++k;
    if (k == i) continue;
    for (int t = i; t <= k; ++t) runs.of[order[t]] = static_cast<int>(runs.sigma.size());
    runs.sigma.push_back(weight_rounding_sigma(p[order[k]], bf16));
    runs.size.push_back(k - i + 1);
  }
  return runs;
}

// The LSE bound of a head whose only weight is its sink (a sequence without tokens, or every
// score -inf): the sink through the kernels' base-2 round trip, a few fp32 roundings; 0 where
// the LSE is not finite (compare.h's rules).
inline double sink_alone_lse_fixed(double lse) { return std::isfinite(lse) ? 0x1p-20 * (std::fabs(lse) + 1) : 0.0; }

}  // namespace detail

// The model of `in`'s decode whose reference is `ref`; `chunk_tokens` is the plan's chunk
// (0 or ≥ the longest sequence: one chunk, no combine). The default, 64 tokens, is the
// finest chunk a plan takes; the combine's part it adds is about 1 % of the variance, and
// it barely depends on the chunk (a sum of independent terms), so one model serves every
// plan of a problem.
inline ErrorModel decode_error_model(const DecodeInputs& in, const DecodeOutput& ref, int chunk_tokens = 64) {
  constexpr double kLog2e = 1.4426950408889634, kLn2 = 0.6931471805599453;
  constexpr double kScaleEps = 0x1p-22;  // softmax_scale · k_scale · log2(e) rounded to fp32, twice
  constexpr double kTanhError = 0x1p-20;  // the soft-cap's tanh, absolute, times cap
  constexpr double kSinkEps = 0x1p-21;    // the sink's weight, relative
  const int heads = in.kv_heads * in.group, dim = in.head_dim, group = in.group;
  const double cap = in.logit_softcap;
  const int64_t tokens = num_query_tokens(in);
  ErrorModel m;
  m.out_sigma.assign(static_cast<size_t>(tokens) * heads * dim, 0.0);
  m.out_fixed.assign(m.out_sigma.size(), 0.0);
  m.lse_sigma.assign(static_cast<size_t>(tokens) * heads, 0.0);
  m.lse_fixed.assign(m.lse_sigma.size(), 0.0);

  std::vector<double> q, k(dim), v(dim);
  for (int b = 0; b < in.batch; ++b) {
    const int len = in.seq_lens[b];
    const QueryRows rows = query_rows(in, b);
    const int n = rows.count;
    if (n <= 0) continue;
    if (len <= 0) {  // the one query sees no key: out exactly 0, lse −inf or the sink
      if (in.sinks != nullptr)
        for (int hq = 0; hq < heads; ++hq) {
          const size_t row = static_cast<size_t>(rows.first) * heads + hq;
          m.lse_fixed[row] = detail::sink_alone_lse_fixed(ref.lse[row]);
        }
      continue;
    }
    std::vector<KeyRange> seen(n);
    for (int i = 0; i < n; ++i) seen[i] = visible_keys(len, n, i, in.window);
    const int first = seen[0].begin, span = len - first;
    const int32_t* table = in.block_table + static_cast<int64_t>(b) * in.table_stride;
    auto row_start = [&](int j, int h) {
      return table[j / in.page_size] * in.page_stride + (j % in.page_size) * in.token_stride + h * in.head_stride;
    };
    for (int h = 0; h < in.kv_heads; ++h) {
      const int first_head = h * group;
      q.assign(static_cast<size_t>(n) * group * dim, 0.0);
      for (int i = 0; i < n; ++i)
        for (int g = 0; g < group; ++g)
          for (int d = 0; d < dim; ++d)
            q[(static_cast<size_t>(i) * group + g) * dim + d] =
                fp16_to_double(in.q[((rows.first + i) * heads + first_head + g) * dim + d]);
      // Scores (natural units, as the reference), the Σ|q_i k_i| term of their error (times
      // tanh's slope with a soft-cap) and the soft-cap's c_j, for each query row and key.
      const size_t cells = static_cast<size_t>(n) * group * span;
      std::vector<double> s(cells), s_abs(cells), c(cap > 0 ? cells : 0);
      for (int j = first; j < len; ++j) {
        for (int d = 0; d < dim; ++d) k[d] = detail::load_element(in.k, row_start(j, h) + d, in.format) * in.k_scale;
        for (int i = 0; i < n; ++i) {
          if (!seen[i].contains(j)) continue;
          for (int g = 0; g < group; ++g) {
            const double* qg = &q[(static_cast<size_t>(i) * group + g) * dim];
            double dot = 0, dot_abs = 0;
            for (int d = 0; d < dim; ++d) {
              dot += qg[d] * k[d];
              dot_abs += std::fabs(qg[d] * k[d]);
            }
            const size_t cell = (static_cast<size_t>(i) * group + g) * span + (j - first);
            s[cell] = in.softmax_scale * dot;
            s_abs[cell] = std::fabs(in.softmax_scale) * dot_abs;
            if (cap > 0) {
              // sech²(x); 0 where the raw score is infinite (and so is Σ|q k|): tanh is flat there.
              const double x = s[cell] / cap, cosh = std::cosh(x), sech2 = std::isfinite(x) ? 1 / (cosh * cosh) : 0.0;
              s[cell] = soft_capped(s[cell], cap);
              s_abs[cell] = sech2 > 0 ? s_abs[cell] * sech2 : 0.0;
              c[cell] = sech2 > 0 ? cap * sech2 * x : 0.0;
            }
          }
        }
      }
      for (int i = 0; i < n; ++i) {
        for (int g = 0; g < group; ++g) {
          const size_t row = static_cast<size_t>(rows.first + i) * heads + first_head + g;
          const size_t base = (static_cast<size_t>(i) * group + g) * span + (seen[i].begin - first);
          const int count = seen[i].size();
          const double* sg = &s[base];
          const double* ag = &s_abs[base];
          const double* cg = cap > 0 ? &c[base] : nullptr;
          const double* out = &ref.out[row * dim];
          const double max = *std::max_element(sg, sg + count);
          if (!std::isfinite(max) || !std::isfinite(ref.lse[row])) {  // compare.h's rules, but:
            // every score -inf beside a finite sink is the sink alone (out exactly 0)
            m.lse_fixed[row] = detail::sink_alone_lse_fixed(ref.lse[row]);
            continue;
          }
          const int chunk = chunk_tokens > 0 && chunk_tokens < count ? chunk_tokens : count;
          // Per-token weights and their error's standard deviation; the runs of repeated weights.
          const bool bf16 = in.format == KvFormat::kBf16;
          double l = 0, e2_sum = 0, shift_sum = 0, cap_sum = 0;
          std::vector<double> p(count), e2(count);
          for (int j = 0; j < count; ++j) p[j] = std::exp(sg[j] - max);
          const detail::WeightRuns runs = detail::weight_runs(p, bf16);
          for (int j = 0; j < count; ++j) {
            if (p[j] == 0) continue;  // a masked (-inf) score: no weight, no error (and no 0 · inf)
            const double score_error = 0x1p-22 * (ag[j] + std::fabs(sg[j])) * kLog2e;  // base-2 units
            const double rounding = runs.of[j] < 0 ? detail::weight_rounding_sigma(p[j], bf16) : 0.0;
            double rel2 = kLn2 * kLn2 * score_error * score_error / 3 + 0x1p-44;
            if (cap > 0) rel2 += (kTanhError * cap) * (kTanhError * cap) / 3;
            e2[j] = rounding * rounding + p[j] * p[j] * rel2;
            l += p[j];
            e2_sum += e2[j];
            shift_sum += p[j] * (sg[j] - max) * kLog2e;
            if (cap > 0) cap_sum += p[j] * cg[j];
          }
          // The sink: its weight w and error e_w in the frame max(max, sink), where the keys'
          // sums (taken in the scores' frame, where the kernel rounds) weigh ks = exp(max −
          // frame): nothing overflows whatever the sink. L = l · ks + w. Without a sink ks = 1.
          double ks = 1, w = 0, e2_w = 0;
          double max2 = std::fabs(max) * kLog2e;
          // No sinks, or a sink of -inf (a head without one): no weight, and no frame moved.
          const double sink = in.sinks != nullptr ? in.sinks[first_head + g] : -std::numeric_limits<double>::infinity();
          if (sink != -std::numeric_limits<double>::infinity()) {
            const double frame = std::max(max, sink);
            ks = std::exp(max - frame);
            w = std::exp(sink - frame);
            e2_w = (kSinkEps * w) * (kSinkEps * w) / 3;
            max2 = std::max(std::fabs(max), std::fabs(sink)) * kLog2e;
          }
          const double total = l * ks + w;
          const double chunk_eps = 0x1p-21 * (max2 + 24);  // a chunk weight's relative fp32 error
          m.lse_sigma[row] = std::sqrt((e2_sum + runs.lse_variance()) * (ks * ks) + e2_w) / total;
          m.lse_fixed[row] =
              kLn2 * kScaleEps * (std::fabs(shift_sum) * ks / total + std::fabs(max) * kLog2e * (l * ks / total)) +
              kScaleEps * std::fabs(cap_sum) * ks / total + 0x1p-20 * (std::fabs(ref.lse[row]) + 1) +
              (chunk < count ? chunk_eps : 0.0);
          // Per dim: Σ e_j² (v_j − out)², the scale's shared shift, Σ p_j |v_j − out|, and the
          // chunks' sums Σ_{j∈c} p_j (v_j − out); with a soft-cap Σ p_j c_j (v_j − out).
          std::vector<double> var(dim, 0), shift(dim, 0), spread(dim, 0), chunk_sum(dim, 0), chunk_var(dim, 0),
              cap_shift(dim, 0), run_sums(runs.sigma.size() * dim, 0);
          for (int j = 0; j < count; ++j) {
            if (p[j] != 0)
              for (int d = 0; d < dim; ++d)
                v[d] = detail::load_element(in.v, row_start(seen[i].begin + j, h) + d, in.format) * in.v_scale;
            for (int d = 0; d < dim && p[j] != 0; ++d) {
              const double dv = v[d] - out[d];
              var[d] += e2[j] * dv * dv;
              shift[d] += p[j] * (sg[j] - max) * kLog2e * dv;
              spread[d] += p[j] * std::fabs(dv);
              chunk_sum[d] += p[j] * dv;
              if (cap > 0) cap_shift[d] += p[j] * cg[j] * dv;
              if (runs.of[j] >= 0) run_sums[runs.of[j] * dim + d] += dv;
            }
            if ((j + 1) % chunk == 0 || j + 1 == count) {
              for (int d = 0; d < dim; ++d) {
                chunk_var[d] += chunk_sum[d] * chunk_sum[d];
                chunk_sum[d] = 0;
              }
            }
          }
          for (size_t r = 0; r < runs.sigma.size(); ++r)  // a run's one rounding error times Σ (v_j − out)
            for (int d = 0; d < dim; ++d) {
              const double e = runs.sigma[r] * run_sums[r * dim + d];
              var[d] += e * e;
            }
          if (ks != 1)  // the keys' sums into the sink's frame
            for (int d = 0; d < dim; ++d) {
              var[d] *= ks * ks, chunk_var[d] *= ks * ks;
              shift[d] *= ks, spread[d] *= ks, cap_shift[d] *= ks;
            }
          if (w != 0)  // the sink: a token of value 0
            for (int d = 0; d < dim; ++d) {
              var[d] += e2_w * out[d] * out[d];
              shift[d] += max * kLog2e * w * out[d];
              spread[d] += w * std::fabs(out[d]);
            }
          for (int d = 0; d < dim; ++d) {
            const double combine_var = chunk < count ? chunk_eps * chunk_eps / 3 * chunk_var[d] : 0.0;
            m.out_sigma[row * dim + d] = std::sqrt(var[d] + combine_var) / total;
            m.out_fixed[row * dim + d] =
                (kLn2 * kScaleEps * std::fabs(shift[d]) + kScaleEps * std::fabs(cap_shift[d]) + 0x1p-22 * spread[d]) /
                total;
          }
        }
      }
    }
  }
  return m;
}

}  // namespace vxqa::reference
