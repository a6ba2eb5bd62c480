// vxqa/testing/random_problem.h — random decode problems for tests and demos, built the way
// a serving engine leaves its cache: permuted pages, ragged lengths, any strides, and
// garbage (NaN/inf codes, huge values, out-of-range page ids) everywhere a correct kernel
// must not look. Host only; plain C++17.
#pragma once

#include <vxqa/testing/decode_reference.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

namespace vxqa::reference {

namespace detail {

// Rounds x to the format sign | 5 exponent bits (bias 15) | mant_bits, ties to even, and
// returns its bits. Overflow gives inf, or the largest finite value when `satfinite`; NaN
// gives a quiet NaN.
inline uint32_t encode_bias15(double x, int mant_bits, bool satfinite) {
  const uint32_t sign = std::signbit(x) ? 1u << (5 + mant_bits) : 0u;
  const uint32_t inf_code = 31u << mant_bits;
  const uint32_t max_code = inf_code - 1;
  if (std::isnan(x)) return inf_code | (1u << (mant_bits - 1));
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | (satfinite ? max_code : inf_code);
  if (a == 0.0) return sign;
  // Spacing of representable values around a: 2^(e - m) in binade e, and the subnormal
  // spacing 2^(-14 - m) below the smallest normal. a / spacing is exact (power of two).
  const int e = std::max(std::ilogb(a), -14);
  const double scaled = a / std::ldexp(1.0, e - mant_bits);
  double n = std::floor(scaled);
  const double rest = scaled - n;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(n, 2.0) == 1.0)) n += 1.0;
  // n counts spacings: 2^m + mantissa in a normal binade (mantissa alone when subnormal),
  // so the code is ((e + 14) << m) + n; n = 2^(m+1) carries into the next binade by itself.
  const uint64_t code = (static_cast<uint64_t>(e + 14) << mant_bits) + static_cast<uint64_t>(n);
  if (code >= inf_code) return sign | (satfinite ? max_code : inf_code);
  return sign | static_cast<uint32_t>(code);
}

}  // namespace detail

// Round to nearest even. E5M2 saturates to ±57344 by default (the cache writers' mode);
// fp16 overflows to inf like an ordinary cast.
inline uint8_t e5m2_from_double(double x, bool satfinite = true) {
  return static_cast<uint8_t>(detail::encode_bias15(x, 2, satfinite));
}
inline uint16_t fp16_from_double(double x) {
  return static_cast<uint16_t>(detail::encode_bias15(x, 10, false));
}

enum class CacheLayout {
  kPackedNhd,      // K, then V, each [num_pages, page_size, Hkv, D] packed
  kVllm,           // one [num_pages, 2, page_size, Hkv, D] tensor (vLLM): V = K + page_size·Hkv·D
  kRandomStrides,  // token-major or head-major drawn at random, random padding at every level
};

struct RandomProblemOptions {
  int batch = 2;
  int kv_heads = 1;
  int group = 1;
  int head_dim = 64;
  int page_size = 16;
  KvFormat format = KvFormat::kE5M2;
  int min_seq_len = 0;            // each length drawn uniformly from [min_seq_len, max_seq_len]
  int max_seq_len = 100;
  std::vector<int32_t> seq_lens;  // when not empty: exactly these lengths (size batch)
  CacheLayout layout = CacheLayout::kRandomStrides;
  int stride_align = 1;      // elements; every stride and the K and V offsets are multiples
  int spare_pages = 3;       // pages no sequence uses (all garbage)
  int spare_table_cols = 2;  // table columns past the longest sequence's pages (garbage)
  // Prefix cache: when > 0, each sequence after the first, with probability 1/2, starts with
  // the same physical pages as an earlier one (up to this many, full pages of both only), so
  // both read the same K/V there. 0 draws nothing: the problem is what it was without it.
  int shared_prefix_pages = 0;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  float softmax_scale = 0.0f;  // 0: 1 / sqrt(head_dim)
  uint64_t garbage_seed = 0;   // garbage has its own stream: changing this changes nothing else
};

// A whole problem on the host. `cache` holds K and V (raw element bytes) at element offsets
// k_offset and v_offset; a GPU test copies `cache` as is and offsets its device pointer.
struct RandomProblem {
  int batch = 0, kv_heads = 0, group = 0, head_dim = 0, page_size = 0;
  int num_pages = 0, max_pages = 0;
  KvFormat format = KvFormat::kE5M2;
  int64_t page_stride = 0, token_stride = 0, head_stride = 0;  // elements
  int64_t k_offset = 0, v_offset = 0;                          // elements into `cache`
  std::vector<unsigned char> cache;
  std::vector<uint16_t> q;             // fp16 bits [B, Hq, D]
  std::vector<int32_t> block_table;    // [B, table_stride], garbage past each sequence's pages
  int64_t table_stride = 0;
  std::vector<int32_t> seq_lens;       // [B]
  float k_scale = 1.0f, v_scale = 1.0f, softmax_scale = 1.0f;

  int query_heads() const { return kv_heads * group; }

  // Element index, relative to K's (or V's) start, of dim d of token t of sequence b, KV head h.
  int64_t element_index(int b, int t, int h, int d) const {
    const int32_t page = block_table[b * table_stride + t / page_size];
    return page * page_stride + (t % page_size) * token_stride + h * head_stride + d;
  }
  // Decoded (unscaled) cache values; set_* rounds to the format (E5M2: satfinite).
  double k_at(int b, int t, int h, int d) const {
    return load(k_offset + element_index(b, t, h, d));
  }
  double v_at(int b, int t, int h, int d) const {
    return load(v_offset + element_index(b, t, h, d));
  }
  void set_k(int b, int t, int h, int d, double x) {
    store(k_offset + element_index(b, t, h, d), encode(x));
  }
  void set_v(int b, int t, int h, int d, double x) {
    store(v_offset + element_index(b, t, h, d), encode(x));
  }

  // Raw element bits at index `i` of `cache` (for garbage and hand-made codes).
  void store(int64_t i, uint32_t bits) {
    if (format == KvFormat::kE5M2) {
      cache[i] = static_cast<unsigned char>(bits);
    } else {
      const uint16_t half = static_cast<uint16_t>(bits);
      std::memcpy(&cache[i * 2], &half, sizeof half);
    }
  }

  DecodeInputs inputs() const {
    DecodeInputs in;
    in.batch = batch;
    in.kv_heads = kv_heads;
    in.group = group;
    in.head_dim = head_dim;
    in.page_size = page_size;
    in.num_pages = num_pages;
    in.max_pages = max_pages;
    in.q = q.data();
    in.format = format;
    in.k = cache.data() + k_offset * element_bytes(format);
    in.v = cache.data() + v_offset * element_bytes(format);
    in.page_stride = page_stride;
    in.token_stride = token_stride;
    in.head_stride = head_stride;
    in.block_table = block_table.data();
    in.table_stride = table_stride;
    in.seq_lens = seq_lens.data();
    in.k_scale = k_scale;
    in.v_scale = v_scale;
    in.softmax_scale = softmax_scale;
    return in;
  }

 private:
  uint32_t encode(double x) const {
    return format == KvFormat::kE5M2 ? e5m2_from_double(x) : fp16_from_double(x);
  }
  double load(int64_t i) const {
    if (format == KvFormat::kE5M2) return e5m2_to_double(cache[i]);
    uint16_t half;
    std::memcpy(&half, &cache[i * 2], sizeof half);
    return fp16_to_double(half);
  }
};

namespace detail {

// Bits a stale or uninitialised cache element might hold; most would poison any sum.
inline uint32_t garbage_element(KvFormat format, std::mt19937_64& rng) {
  const bool e5m2 = format == KvFormat::kE5M2;
  switch (rng() % 5) {
    case 0: return e5m2 ? 0xFFu : 0xFFFFu;  // NaN
    case 1: return e5m2 ? 0x7Cu : 0x7C00u;  // +inf
    case 2: return e5m2 ? 0xFCu : 0xFC00u;  // -inf
    case 3: return e5m2 ? 0x7Bu : 0x7BFFu;  // largest finite
    default: return static_cast<uint32_t>(rng() & (e5m2 ? 0xFFu : 0xFFFFu));
  }
}

// A block-table entry past a sequence's pages: out of range, or another sequence's page.
inline int32_t garbage_page(int num_pages, std::mt19937_64& rng) {
  switch (rng() % 5) {
    case 0: return -1;
    case 1: return num_pages;
    case 2: return std::numeric_limits<int32_t>::min();
    case 3: return std::numeric_limits<int32_t>::max();
    default: return num_pages > 0 ? static_cast<int32_t>(rng() % num_pages) : -1;
  }
}

}  // namespace detail

// Same options and seed → the same problem.
inline RandomProblem make_random_problem(const RandomProblemOptions& o, uint64_t seed) {
  if (o.batch < 0 || o.kv_heads < 1 || o.group < 1 || o.head_dim < 1 || o.page_size < 1 ||
      o.stride_align < 1 || o.spare_pages < 0 || o.spare_table_cols < 0 ||
      o.shared_prefix_pages < 0 || o.min_seq_len < 0 || o.min_seq_len > o.max_seq_len ||
      (!o.seq_lens.empty() && o.seq_lens.size() != static_cast<size_t>(o.batch)))
    throw std::invalid_argument("vxqa::reference::make_random_problem: bad options");

  std::mt19937_64 rng(seed);
  std::seed_seq junk_seed{seed, o.garbage_seed};
  std::mt19937_64 junk(junk_seed);
  // Own draws, not std:: distributions: those differ between standard libraries.
  auto draw = [&rng](int64_t lo, int64_t hi) {  // uniform in [lo, hi]
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  auto unit = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };  // [0, 1)

  RandomProblem p;
  p.batch = o.batch;
  p.kv_heads = o.kv_heads;
  p.group = o.group;
  p.head_dim = o.head_dim;
  p.page_size = o.page_size;
  p.format = o.format;
  p.k_scale = o.k_scale;
  p.v_scale = o.v_scale;
  p.softmax_scale = o.softmax_scale != 0.0f
                        ? o.softmax_scale
                        : static_cast<float>(1.0 / std::sqrt(static_cast<double>(o.head_dim)));

  p.seq_lens = o.seq_lens;
  if (p.seq_lens.empty())
    for (int b = 0; b < o.batch; ++b)
      p.seq_lens.push_back(static_cast<int32_t>(draw(o.min_seq_len, o.max_seq_len)));
  std::vector<int> pages_of(o.batch);
  int longest = 0;
  for (int b = 0; b < o.batch; ++b) {
    pages_of[b] = (p.seq_lens[b] + o.page_size - 1) / o.page_size;
    longest = std::max(longest, pages_of[b]);
  }
  // Sequence b's first shared_of[b] pages are those of sequence prefix_of[b] < b.
  std::vector<int> prefix_of(o.batch, -1), shared_of(o.batch, 0);
  if (o.shared_prefix_pages > 0) {
    for (int b = 1; b < o.batch; ++b) {
      const int a = static_cast<int>(draw(0, b - 1));
      const int full = std::min({o.shared_prefix_pages, p.seq_lens[a] / o.page_size,
                                 p.seq_lens[b] / o.page_size});
      if ((rng() & 1) && full >= 1) {
        prefix_of[b] = a;
        shared_of[b] = static_cast<int>(draw(1, full));
      }
    }
  }
  int used_pages = 0;
  for (int b = 0; b < o.batch; ++b) used_pages += pages_of[b] - shared_of[b];
  p.num_pages = used_pages + o.spare_pages;
  p.max_pages = longest + o.spare_table_cols;

  // Strides. Padding and offsets are garbage too: the whole buffer starts as garbage.
  const bool random = o.layout == CacheLayout::kRandomStrides;
  auto up = [&o](int64_t x) { return (x + o.stride_align - 1) / o.stride_align * o.stride_align; };
  auto pad = [&] { return random ? draw(0, 5) : 0; };
  p.head_stride = up(o.head_dim);
  p.token_stride = o.kv_heads * p.head_stride;
  p.page_stride = o.page_size * p.token_stride;
  if (o.layout == CacheLayout::kPackedNhd) {
    p.v_offset = p.num_pages * p.page_stride;
  } else if (o.layout == CacheLayout::kVllm) {
    p.v_offset = p.page_stride;
    p.page_stride *= 2;
  } else {
    const bool token_major = rng() & 1;  // NHD; else HND
    const int inner_count = token_major ? o.kv_heads : o.page_size;
    const int outer_count = token_major ? o.page_size : o.kv_heads;
    const int64_t inner = up(o.head_dim + pad());
    const int64_t outer = up(inner_count * inner + pad());
    p.page_stride = up(outer_count * outer + pad());
    p.head_stride = token_major ? inner : outer;
    p.token_stride = token_major ? outer : inner;
    p.k_offset = up(pad());
    p.v_offset = up(p.k_offset + p.num_pages * p.page_stride + pad());
  }
  const int64_t elements = std::max(p.k_offset, p.v_offset) + p.num_pages * p.page_stride;
  p.cache.resize(static_cast<size_t>(elements * element_bytes(o.format)));
  for (int64_t i = 0; i < elements; ++i) p.store(i, detail::garbage_element(o.format, junk));

  // Page table: the pages in a random order, then garbage to the end of every row.
  p.table_stride = p.max_pages + pad();
  p.block_table.resize(static_cast<size_t>(o.batch * p.table_stride));
  for (int32_t& entry : p.block_table) entry = detail::garbage_page(p.num_pages, junk);
  std::vector<int32_t> order(p.num_pages);
  std::iota(order.begin(), order.end(), 0);
  for (int i = p.num_pages - 1; i > 0; --i) std::swap(order[i], order[draw(0, i)]);
  int next = 0;
  for (int b = 0; b < o.batch; ++b)
    for (int i = 0; i < pages_of[b]; ++i)
      p.block_table[b * p.table_stride + i] =
          i < shared_of[b] ? p.block_table[prefix_of[b] * p.table_stride + i] : order[next++];

  // q ~ N(0, 1) (Box–Muller), K and V ~ uniform [-2, 2], each rounded to its format.
  p.q.resize(static_cast<size_t>(o.batch) * p.query_heads() * o.head_dim);
  const double two_pi = 6.283185307179586;
  for (uint16_t& x : p.q)
    x = fp16_from_double(std::sqrt(-2.0 * std::log1p(-unit())) * std::cos(two_pi * unit()));
  for (int b = 0; b < o.batch; ++b)
    for (int t = shared_of[b] * o.page_size; t < p.seq_lens[b]; ++t)  // shared: written once
      for (int h = 0; h < o.kv_heads; ++h)
        for (int d = 0; d < o.head_dim; ++d) {
          p.set_k(b, t, h, d, 4.0 * unit() - 2.0);
          p.set_v(b, t, h, d, 4.0 * unit() - 2.0);
        }
  return p;
}

}  // namespace vxqa::reference
