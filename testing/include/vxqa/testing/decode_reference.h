// vxqa/testing/decode_reference.h — float64 CPU reference of paged decode attention.
//
// It is the yardstick for the kernels, so it shares nothing with them: its own fp16/E5M2
// decode and its own address formula, written from the problem statement (design.md §1),
// and no other vxqa header. Host only; plain C++17.
//
// For sequence b, query head hq (KV head h = hq / G) and its tokens j in [0, len_b):
//   k_j = decode(K[b, j, h]) · k_scale,   v_j = decode(V[b, j, h]) · v_scale
//   s_j = softmax_scale · (q · k_j)
//   lse = log Σ_j exp(s_j)                 (natural log; −inf when len_b = 0)
//   out = Σ_j exp(s_j − lse) · v_j          (zeros when len_b = 0)
// Only tokens [0, len_b) and table entries [0, ceil(len_b / page_size)) are ever read.
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
};

inline int element_bytes(KvFormat format) { return format == KvFormat::kE5M2 ? 1 : 2; }

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
};

struct DecodeOutput {
  std::vector<double> out;  // [B, Hq, D]
  std::vector<double> lse;  // [B, Hq], natural log
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
  uint16_t bits;
  std::memcpy(&bits, bytes + index * 2, sizeof bits);
  return fp16_to_double(bits);
}

}  // namespace detail

// Computes out and lse in float64. Throws std::invalid_argument for a shape it cannot
// read safely (a length past the table, a used page id outside [0, num_pages)).
inline DecodeOutput decode_reference(const DecodeInputs& in) {
  if (in.batch < 0 || in.kv_heads < 1 || in.group < 1 || in.head_dim < 1 || in.page_size < 1)
    detail::fail("batch must be >= 0 and kv_heads, group, head_dim, page_size >= 1");
  if (in.batch > 0 && (in.q == nullptr || in.seq_lens == nullptr))
    detail::fail("q and seq_lens must not be null");

  const int heads = in.kv_heads * in.group;
  const int dim = in.head_dim;
  DecodeOutput result;
  result.out.assign(static_cast<size_t>(in.batch) * heads * dim, 0.0);
  result.lse.assign(static_cast<size_t>(in.batch) * heads,
                    -std::numeric_limits<double>::infinity());

  std::vector<double> q(static_cast<size_t>(in.group) * dim);  // the group's queries
  std::vector<double> row(dim);                                // one decoded K or V row
  std::vector<double> scores;                                  // [G, len]

  for (int b = 0; b < in.batch; ++b) {
    const int len = in.seq_lens[b];
    if (len < 0) detail::fail("seq_lens[" + std::to_string(b) + "] is negative");
    if (len == 0) continue;
    if (static_cast<int64_t>(len) > static_cast<int64_t>(in.max_pages) * in.page_size)
      detail::fail("seq_lens[" + std::to_string(b) + "] exceeds max_pages * page_size");
    if (in.k == nullptr || in.v == nullptr || in.block_table == nullptr)
      detail::fail("k, v and block_table must not be null");

    // Token j of this sequence lives in row j % page_size of page table[b][j / page_size].
    const int32_t* table = in.block_table + static_cast<int64_t>(b) * in.table_stride;
    std::vector<int64_t> token_offset(len);
    for (int j = 0; j < len; ++j) {
      const int32_t page = table[j / in.page_size];
      if (page < 0 || page >= in.num_pages)
        detail::fail("block_table[" + std::to_string(b) + "][" +
                     std::to_string(j / in.page_size) + "] = " + std::to_string(page) +
                     " is outside [0, num_pages)");
      token_offset[j] = page * in.page_stride + (j % in.page_size) * in.token_stride;
    }

    for (int h = 0; h < in.kv_heads; ++h) {
      const int first_head = h * in.group;  // query heads [h·G, h·G + G) share KV head h
      for (int g = 0; g < in.group; ++g)
        for (int d = 0; d < dim; ++d)
          q[g * dim + d] =
              fp16_to_double(in.q[(static_cast<int64_t>(b) * heads + first_head + g) * dim + d]);

      // Scores: decode each K row once and use it for the whole group.
      scores.assign(static_cast<size_t>(in.group) * len, 0.0);
      for (int j = 0; j < len; ++j) {
        const int64_t start = token_offset[j] + h * in.head_stride;
        for (int d = 0; d < dim; ++d)
          row[d] = detail::load_element(in.k, start + d, in.format) * in.k_scale;
        for (int g = 0; g < in.group; ++g) {
          double dot = 0.0;
          for (int d = 0; d < dim; ++d) dot += q[g * dim + d] * row[d];
          scores[static_cast<size_t>(g) * len + j] = in.softmax_scale * dot;
        }
      }

      // Softmax weights, relative to the row maximum so that exp never overflows.
      std::vector<double> sum(in.group, 0.0);
      for (int g = 0; g < in.group; ++g) {
        double* s = &scores[static_cast<size_t>(g) * len];
        const double max = *std::max_element(s, s + len);
        for (int j = 0; j < len; ++j) {
          s[j] = std::exp(s[j] - max);
          sum[g] += s[j];
        }
        result.lse[static_cast<size_t>(b) * heads + first_head + g] = max + std::log(sum[g]);
      }

      for (int j = 0; j < len; ++j) {
        const int64_t start = token_offset[j] + h * in.head_stride;
        for (int d = 0; d < dim; ++d)
          row[d] = detail::load_element(in.v, start + d, in.format) * in.v_scale;
        for (int g = 0; g < in.group; ++g) {
          const double weight = scores[static_cast<size_t>(g) * len + j] / sum[g];
          double* o = &result.out[(static_cast<size_t>(b) * heads + first_head + g) * dim];
          for (int d = 0; d < dim; ++d) o[d] += weight * row[d];
        }
      }
    }
  }
  return result;
}

}  // namespace vxqa::reference
