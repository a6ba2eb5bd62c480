// vxqa/testing/decode_reference.h — float64 CPU reference of paged decode attention.
//
// It is the yardstick for the kernels, so it shares nothing with them: its own
// fp16/bf16/E5M2/E4M3 decode and its own address formula, written from the problem
// statement (design.md §1), and no other vxqa header. Host only; plain C++17.
//
// Sequence b has len_b cached tokens and n_b query tokens, the last n_b of them (n_b = 1
// without q_indptr); its query token i sits at position p = len_b − n_b + i. For that token,
// query head hq (KV head h = hq / G) and the keys it sees, j ∈ [lo, p] with
// lo = max(0, p − window + 1) (lo = 0 without a window):
//   k_j = decode(K[b, j, h]) · k_scale,   v_j = decode(V[b, j, h]) · v_scale
//   s_j = softmax_scale · (q · k_j)                 (then cap · tanh(s_j / cap) with a soft-cap)
//   lse = log(Σ_j exp(s_j) + exp(sink_hq))          (natural log; no sink term without sinks)
//   out = Σ_j exp(s_j − lse) · v_j
// A row that sees no key (len_b = 0, one query token): out = 0 and lse = −inf, or sink_hq
// with sinks. The exponentials are taken relative to the row's largest score (and sink).
// Only tokens [lo of the sequence's first query token, len_b) and the table entries of
// their pages are ever read.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace vxqa::reference {

enum class KvFormat {
  kE5M2,  // 1 byte per element
  kFp16,  // 2 bytes per element, IEEE binary16 bits
  kE4M3,  // 1 byte per element, OCP float8_e4m3fn
  kBf16,  // 2 bytes per element, bfloat16 bits (the top half of an IEEE binary32)
};

inline int element_bytes(KvFormat format) {
  return format == KvFormat::kFp16 || format == KvFormat::kBf16 ? 2 : 1;
}
inline const char* format_name(KvFormat format) {
  switch (format) {
    case KvFormat::kE5M2: return "e5m2";
    case KvFormat::kE4M3: return "e4m3";
    case KvFormat::kFp16: return "fp16";
    case KvFormat::kBf16: return "bf16";
  }
  return "unknown";
}

namespace detail {

// fp16 and E5M2 share the layout sign | 5 exponent bits (bias 15) | mantissa; only the
// mantissa width differs (10 and 2 bits), so one decoder serves both.
inline double decode_bias15(uint32_t bits, int mant_bits) {
  const bool negative = (bits >> (5 + mant_bits)) & 1u;
  const int exponent = static_cast<int>((bits >> mant_bits) & 31u);
  const uint32_t mantissa = bits & ((1u << mant_bits) - 1u);
  double magnitude;
  if (exponent == 31) {
    magnitude = mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                              : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {  // subnormal: no implicit 1, exponent of the smallest binade
    magnitude = std::ldexp(static_cast<double>(mantissa), -14 - mant_bits);
  } else {
    magnitude = std::ldexp(static_cast<double>(mantissa + (1u << mant_bits)),
                           exponent - 15 - mant_bits);
  }
  return negative ? -magnitude : magnitude;
}

}  // namespace detail

inline double fp16_to_double(uint16_t bits) { return detail::decode_bias15(bits, 10); }
inline double e5m2_to_double(uint8_t bits) { return detail::decode_bias15(bits, 2); }

// bf16 is the top half of an fp32 (sign | 8 exponent bits, bias 127 | 7 mantissa bits), so
// the fp32 with those bits and a zero low half is its value, exactly; a NaN stays a NaN.
inline double bf16_to_double(uint16_t bits) {
  static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559,
                "bf16_to_double: float must be IEEE binary32, whose top half bf16 is");
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &word, sizeof f);
  return static_cast<double>(f);
}

// OCP E4M3 (float8_e4m3fn): sign | 4 exponent bits (bias 7) | 3 mantissa bits. It trades the
// infinities for range: only S.1111.111 is NaN, so exponent 15 with any other mantissa is an
// ordinary binade (up to ±448).
inline double e4m3_to_double(uint8_t bits) {
  const bool negative = bits & 0x80u;
  const int exponent = (bits >> 3) & 15;
  const int mantissa = bits & 7;
  double magnitude;
  if (exponent == 15 && mantissa == 7) {
    magnitude = std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {  // subnormal: mantissa / 8 · 2^-6
    magnitude = std::ldexp(mantissa, -9);
  } else {
    magnitude = std::ldexp(8 + mantissa, exponent - 7 - 3);
  }
  return negative ? -magnitude : magnitude;
}

// Everything one decode step reads. Host pointers; the reference never writes through them.
struct DecodeInputs {
  int batch = 0;      // B
  int kv_heads = 0;   // Hkv
  int group = 1;      // G: query heads per KV head; Hq = Hkv · G, head hq reads KV head hq / G
  int head_dim = 0;   // D
  int page_size = 0;  // tokens per page, any value ≥ 1
  int num_pages = 0;  // pages in the cache: every page id a sequence uses is in [0, num_pages)
  int max_pages = 0;  // block-table columns: every length is ≤ max_pages · page_size

  const uint16_t* q = nullptr;  // fp16 bits [B, Hq, D], contiguous

  // K and V: logical [num_pages, page_size, Hkv, D], the same strides for both, in elements
  // (any sign or order); the D elements of one token row are contiguous.
  KvFormat format = KvFormat::kE5M2;
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t page_stride = 0;
  int64_t token_stride = 0;
  int64_t head_stride = 0;

  const int32_t* block_table = nullptr;  // [B, max_pages], row stride table_stride (elements)
  int64_t table_stride = 0;
  const int32_t* seq_lens = nullptr;  // [B]

  float k_scale = 1.0f;  // real K = decoded K · k_scale (per tensor)
  float v_scale = 1.0f;  // real V = decoded V · v_scale (per tensor)
  float softmax_scale = 1.0f;

  // Attention variants, all off by default.
  // Sliding window: > 0: a query at position p sees the keys max(0, p - window + 1) .. p
  // (vLLM's sliding_window; FlashInfer's window_left + 1). 0: the whole context.
  int window = 0;
  // Logit soft-cap: > 0: each score s = softmax_scale * q.k becomes cap * tanh(s / cap)
  // (Gemma 2, FlashInfer's logits_soft_cap). 0: off.
  double logit_softcap = 0.0;
  // Attention sinks: [Hq] fp32 natural-log logits, one per query head; each joins its head's
  // softmax denominator with no value row (gpt-oss): lse = log(sum_j exp(s_j) + exp(sink)),
  // out = sum_j exp(s_j - lse) v_j. Null: none.
  const float* sinks = nullptr;
  // Multi-token queries: null = one query token per sequence (q is [B, Hq, D]). Else [B + 1]
  // non-decreasing offsets, q_indptr[0] = 0: sequence b's n_b = q_indptr[b+1] - q_indptr[b]
  // query tokens are rows q_indptr[b] .. q_indptr[b+1]-1 of q [num_tokens, Hq, D], they are
  // the last n_b of its len_b cached tokens, and query token i (0-based) sits at position
  // p = len_b - n_b + i and sees keys 0 .. p (causal), intersected with the window.
  // n_b > len_b is refused; n_b = 0 is allowed (no rows).
  const int32_t* q_indptr = nullptr;
};

struct DecodeOutput {
  std::vector<double> out;  // [num_tokens, Hq, D] (num_tokens = B without q_indptr)
  std::vector<double> lse;  // [num_tokens, Hq], natural log
};

namespace detail {

[[noreturn]] inline void fail(const std::string& what) {
  throw std::invalid_argument("vxqa::reference::decode_reference: " + what);
}

// Reads element `index` (in elements from `base`) of a K or V cache. memcpy, because the
// caller's buffer may be bytes of any alignment.
inline double load_element(const void* base, int64_t index, KvFormat format) {
  const unsigned char* bytes = static_cast<const unsigned char*>(base);
  if (format == KvFormat::kE5M2) return e5m2_to_double(bytes[index]);
  if (format == KvFormat::kE4M3) return e4m3_to_double(bytes[index]);
  uint16_t bits;
  std::memcpy(&bits, bytes + index * 2, sizeof bits);
  return format == KvFormat::kBf16 ? bf16_to_double(bits) : fp16_to_double(bits);
}

}  // namespace detail


// The query tokens in all: q_indptr[B], or B without q_indptr (num_tokens of out and lse).
inline int64_t num_query_tokens(const DecodeInputs& in) {
  return in.q_indptr != nullptr ? in.q_indptr[in.batch] : in.batch;
}

// Sequence b's query tokens: rows [first, first + count) of q, out and lse.
struct QueryRows {
  int64_t first = 0;
  int count = 0;
};

inline QueryRows query_rows(const DecodeInputs& in, int b) {
  if (in.q_indptr == nullptr) return {b, 1};
  return {in.q_indptr[b], static_cast<int>(in.q_indptr[b + 1] - in.q_indptr[b])};
}

// The keys [begin, end) that query token i of the last n of a sequence's len tokens sees:
// causal to its position p = len − n + i, cut to the window's last `window` (0: no window).
// Empty for the one query of an empty sequence (p = −1).
struct KeyRange {
  int begin = 0, end = 0;
  int size() const { return end - begin; }
  bool contains(int j) const { return j >= begin && j < end; }
};

inline KeyRange visible_keys(int len, int n, int i, int window) {
  const int p = len - n + i;
  return {window > 0 ? std::max(0, p - window + 1) : 0, std::max(p + 1, 0)};
}

// The score after the logit soft-cap (cap 0: off).
inline double soft_capped(double s, double cap) { return cap > 0 ? cap * std::tanh(s / cap) : s; }

namespace detail {

// The checks every sequence shares; returns the number of query tokens.
inline int64_t check_inputs(const DecodeInputs& in) {
  if (in.batch < 0 || in.kv_heads < 1 || in.group < 1 || in.head_dim < 1 || in.page_size < 1)
    fail("batch must be >= 0 and kv_heads, group, head_dim, page_size >= 1");
  if (in.window < 0) fail("window must be >= 0");
  if (!(in.logit_softcap >= 0 && std::isfinite(in.logit_softcap)))
    fail("logit_softcap must be finite and >= 0");
  if (in.q_indptr != nullptr) {
    if (in.q_indptr[0] != 0) fail("q_indptr[0] must be 0");
    for (int b = 0; b < in.batch; ++b)
      if (in.q_indptr[b + 1] < in.q_indptr[b])
        fail("q_indptr must be non-decreasing (q_indptr[" + std::to_string(b + 1) + "] < q_indptr[" +
             std::to_string(b) + "])");
  }
  const int64_t tokens = num_query_tokens(in);
  if ((in.batch > 0 && in.seq_lens == nullptr) || (tokens > 0 && in.q == nullptr))
    fail("q and seq_lens must not be null");
  return tokens;
}

}  // namespace detail

// Computes out and lse in float64. Throws std::invalid_argument for a shape it cannot
// read safely (a length past the table, a used page id outside [0, num_pages), more query
// tokens than cached tokens, a bad q_indptr, window or soft-cap).
inline DecodeOutput decode_reference(const DecodeInputs& in) {
  const int64_t tokens = detail::check_inputs(in);
  const int heads = in.kv_heads * in.group;
  const int dim = in.head_dim;
  const int group = in.group;
  DecodeOutput result;
  result.out.assign(static_cast<size_t>(tokens) * heads * dim, 0.0);
  result.lse.assign(static_cast<size_t>(tokens) * heads, -std::numeric_limits<double>::infinity());

  std::vector<double> q;       // [n, G, D]: the sequence's queries of one KV head's group
  std::vector<double> row(dim);  // one decoded K or V row
  std::vector<double> scores;  // [n, G, span]: scores, then exp(score − max)
  std::vector<double> sum;     // [n, G]

  for (int b = 0; b < in.batch; ++b) {
    const int len = in.seq_lens[b];
    if (len < 0) detail::fail("seq_lens[" + std::to_string(b) + "] is negative");
    const QueryRows rows = query_rows(in, b);
    const int n = rows.count;
    if (in.q_indptr != nullptr && n > len)
      detail::fail("sequence " + std::to_string(b) + " has " + std::to_string(n) +
                   " query tokens but only " + std::to_string(len) + " cached tokens");
    if (n == 0) continue;
    if (len == 0) {  // the one query token sees no key: out 0, lse −inf or the sink
      if (in.sinks != nullptr)
        for (int hq = 0; hq < heads; ++hq) result.lse[rows.first * heads + hq] = in.sinks[hq];
      continue;
    }
    if (static_cast<int64_t>(len) > static_cast<int64_t>(in.max_pages) * in.page_size)
      detail::fail("seq_lens[" + std::to_string(b) + "] exceeds max_pages * page_size");
    if (in.k == nullptr || in.v == nullptr || in.block_table == nullptr)
      detail::fail("k, v and block_table must not be null");

    // The keys some query token sees: [first, len), from the first token's window start.
    std::vector<KeyRange> seen(n);
    for (int i = 0; i < n; ++i) seen[i] = visible_keys(len, n, i, in.window);
    const int first = seen[0].begin, span = len - first;

    // Token j of this sequence lives in row j % page_size of page table[b][j / page_size].
    const int32_t* table = in.block_table + static_cast<int64_t>(b) * in.table_stride;
    std::vector<int64_t> token_offset(span);
    for (int j = first; j < len; ++j) {
      const int32_t page = table[j / in.page_size];
      if (page < 0 || page >= in.num_pages)
        detail::fail("block_table[" + std::to_string(b) + "][" +
                     std::to_string(j / in.page_size) + "] = " + std::to_string(page) +
                     " is outside [0, num_pages)");
      token_offset[j - first] = page * in.page_stride + (j % in.page_size) * in.token_stride;
    }

    for (int h = 0; h < in.kv_heads; ++h) {
      const int first_head = h * group;  // query heads [h·G, h·G + G) share KV head h
      q.assign(static_cast<size_t>(n) * group * dim, 0.0);
      for (int i = 0; i < n; ++i)
        for (int g = 0; g < group; ++g)
          for (int d = 0; d < dim; ++d)
            q[(static_cast<size_t>(i) * group + g) * dim + d] =
                fp16_to_double(in.q[((rows.first + i) * heads + first_head + g) * dim + d]);
      // Row r = i·G + g: query token i, head first_head + g; its scores at [r · span, ...).
      auto score = [&](int i, int g, int j) -> double& {
        return scores[(static_cast<size_t>(i) * group + g) * span + (j - first)];
      };

      // Scores: decode each K row once and use it for every query that sees it.
      scores.assign(static_cast<size_t>(n) * group * span, 0.0);
      for (int j = first; j < len; ++j) {
        const int64_t start = token_offset[j - first] + h * in.head_stride;
        for (int d = 0; d < dim; ++d)
          row[d] = detail::load_element(in.k, start + d, in.format) * in.k_scale;
        for (int i = 0; i < n; ++i) {
          if (!seen[i].contains(j)) continue;
          for (int g = 0; g < group; ++g) {
            const double* qg = &q[(static_cast<size_t>(i) * group + g) * dim];
            double dot = 0.0;
            for (int d = 0; d < dim; ++d) dot += qg[d] * row[d];
            score(i, g, j) = soft_capped(in.softmax_scale * dot, in.logit_softcap);
          }
        }
      }

      // Softmax weights, relative to the row maximum (and the sink) so that exp never
      // overflows. Every row here sees at least its own position.
      sum.assign(static_cast<size_t>(n) * group, 0.0);
      for (int i = 0; i < n; ++i) {
        for (int g = 0; g < group; ++g) {
          double* s = &score(i, g, seen[i].begin);
          const int count = seen[i].size();
          double max = *std::max_element(s, s + count);
          const double sink = in.sinks != nullptr ? in.sinks[first_head + g] : 0.0;
          if (in.sinks != nullptr) max = std::max(max, sink);
          double& total = sum[static_cast<size_t>(i) * group + g];
          for (int j = 0; j < count; ++j) {
            s[j] = std::exp(s[j] - max);
            total += s[j];
          }
          if (in.sinks != nullptr) total += std::exp(sink - max);
          result.lse[(rows.first + i) * heads + first_head + g] = max + std::log(total);
        }
      }

      for (int j = first; j < len; ++j) {
        const int64_t start = token_offset[j - first] + h * in.head_stride;
        for (int d = 0; d < dim; ++d)
          row[d] = detail::load_element(in.v, start + d, in.format) * in.v_scale;
        for (int i = 0; i < n; ++i) {
          if (!seen[i].contains(j)) continue;
          for (int g = 0; g < group; ++g) {
            const double weight = score(i, g, j) / sum[static_cast<size_t>(i) * group + g];
            double* o = &result.out[((rows.first + i) * heads + first_head + g) * dim];
            for (int d = 0; d < dim; ++d) o[d] += weight * row[d];
          }
        }
      }
    }
  }
  return result;
}

}  // namespace vxqa::reference
