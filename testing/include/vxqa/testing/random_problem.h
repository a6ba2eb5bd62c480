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

// Rounds a finite a >= 0, ties to even, to a binary format with mant_bits mantissa bits
// whose smallest normal is 2^min_exponent, and returns its magnitude bits (biased exponent,
// then mantissa). Unbounded above: what a code past the largest finite one means (inf,
// NaN, saturation) is the format's business.
inline uint64_t round_magnitude(double a, int mant_bits, int min_exponent) {
  if (a == 0.0) return 0;
  // Spacing of representable values around a: 2^(e - m) in binade e, and the subnormal
  // spacing 2^(min_exponent - m) below the smallest normal. a / spacing is exact (power of two).
  const int e = std::max(std::ilogb(a), min_exponent);
  const double scaled = a / std::ldexp(1.0, e - mant_bits);
  double n = std::floor(scaled);
  const double rest = scaled - n;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(n, 2.0) == 1.0)) n += 1.0;
  // n counts spacings: 2^m + mantissa in a normal binade (mantissa alone when subnormal),
  // so the code is ((e - min_exponent) << m) + n; n = 2^(m+1) carries into the next binade
  // by itself.
  return (static_cast<uint64_t>(e - min_exponent) << mant_bits) + static_cast<uint64_t>(n);
}

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
  const uint64_t code = round_magnitude(a, mant_bits, -14);
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

// Round to nearest even on bf16's 8 significant bits (its smallest normal is fp32's, 2^-126),
// straight from the double: no fp32 step, which would round twice. Overflow gives ±inf like
// an ordinary cast; zeros keep their sign; every NaN gives the quiet NaN 0x7FC0.
inline uint16_t bf16_from_double(double x) {
  constexpr uint32_t kInfCode = 0x7F80u;  // all 8 exponent bits, mantissa 0
  if (std::isnan(x)) return 0x7FC0u;
  const uint32_t sign = std::signbit(x) ? 0x8000u : 0u;
  const double a = std::fabs(x);
  const uint64_t code = std::isinf(a) ? kInfCode : std::min<uint64_t>(detail::round_magnitude(a, 7, -126), kInfCode);
  return static_cast<uint16_t>(sign | code);
}

// Round to nearest even, saturating as the cache writers' __NV_SATFINITE does: beyond ±448
// (±inf included) gives ±448, since E4M3 has no inf and the code past 448 is NaN. Every NaN
// gives 0x7F.
inline uint8_t e4m3_from_double(double x) {
  if (std::isnan(x)) return 0x7Fu;
  const uint64_t largest = 0x7Eu;  // 448
  const double a = std::fabs(x);
  const uint64_t code = std::isinf(a) ? largest : std::min(detail::round_magnitude(a, 3, -6), largest);
  return static_cast<uint8_t>((std::signbit(x) ? 0x80u : 0u) | code);
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

  // Attention variants and multi-token queries (decode_reference.h's DecodeInputs), all off
  // by default. With all of them off the problem is byte for byte what it was before they
  // existed: what they draw comes from a stream of its own.
  int window = 0;             // sliding window (keys), 0: off
  float logit_softcap = 0.f;  // 0: off
  // One fp32 sink logit per query head, uniform in [max̂ − 3, lsê + 3], where max̂ and lsê
  // are a typical row's largest score and log-sum-exp (from the score spread that q ~ N(0, 1)
  // and K ~ U[-2, 2] give, over the mean number of keys a row sees): from a sink that barely
  // counts to one that outweighs every key; in half the problems the last head's is -inf
  // (a head without a sink).
  bool sinks = false;
  // Query tokens per sequence: 0 or 1: one, q [B, Hq, D] and no q_indptr (as before).
  // > 1: q_len each (ragged: n_b uniform in 1..q_len, and with more than one sequence about
  // one in eight set to 0, at least one row left), q [num_tokens, Hq, D] with q_indptr. A
  // drawn length shorter than n_b is raised to n_b; an explicit one (seq_lens) cuts n_b.
  // Each sequence's last query token has the q row the single-token problem would have.
  int q_len = 0;
  bool ragged = false;
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
  std::vector<uint16_t> q;             // fp16 bits [num_tokens, Hq, D]
  std::vector<int32_t> block_table;    // [B, table_stride], garbage past each sequence's pages
  int64_t table_stride = 0;
  std::vector<int32_t> seq_lens;       // [B]
  float k_scale = 1.0f, v_scale = 1.0f, softmax_scale = 1.0f;
  // Attention variants and multi-token queries, as RandomProblemOptions drew them.
  int window = 0;                  // 0: off
  float logit_softcap = 0.f;       // 0: off
  std::vector<float> sinks;        // [Hq], or empty: none
  std::vector<int32_t> q_indptr;   // [B + 1], or empty: one query token per sequence
  int num_tokens = 0;              // rows of q, out and lse: q_indptr[B], or B

  int query_heads() const { return kv_heads * group; }
  // Sequence b's query tokens: rows [first_row(b), first_row(b) + query_count(b)).
  int first_row(int b) const { return q_indptr.empty() ? b : q_indptr[b]; }
  int query_count(int b) const { return q_indptr.empty() ? 1 : q_indptr[b + 1] - q_indptr[b]; }

  // Element index, relative to K's (or V's) start, of dim d of token t of sequence b, KV head h.
  int64_t element_index(int b, int t, int h, int d) const {
    const int32_t page = block_table[b * table_stride + t / page_size];
    return page * page_stride + (t % page_size) * token_stride + h * head_stride + d;
  }
  // Decoded (unscaled) cache values; set_* rounds to the format (E5M2, E4M3: satfinite;
  // fp16, bf16: overflow to inf).
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
    if (element_bytes(format) == 1) {
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
    in.window = window;
    in.logit_softcap = logit_softcap;
    in.sinks = sinks.empty() ? nullptr : sinks.data();
    in.q_indptr = q_indptr.empty() ? nullptr : q_indptr.data();
    return in;
  }

 private:
  uint32_t encode(double x) const {
    if (format == KvFormat::kE5M2) return e5m2_from_double(x);
    if (format == KvFormat::kE4M3) return e4m3_from_double(x);
    if (format == KvFormat::kBf16) return bf16_from_double(x);
    return fp16_from_double(x);
  }
  double load(int64_t i) const { return detail::load_element(cache.data(), i, format); }
};

namespace detail {

// Bits a stale or uninitialised cache element might hold; most would poison any sum.
inline uint32_t garbage_element(KvFormat format, std::mt19937_64& rng) {
  // E4M3 has no inf: NaN and ±448 in its place, from the same draws, so that the other
  // formats' garbage (and every problem built before E4M3 or bf16) stays as it was. bf16
  // takes fp16's draws too: a bf16 problem's garbage sits where its fp16 twin's does.
  const uint64_t pick = rng() % 5;
  if (format == KvFormat::kE4M3) {
    switch (pick) {
      case 0: return 0xFFu;  // NaN
      case 1: return 0x7Fu;  // NaN
      case 2: return 0xFEu;  // -448
      case 3: return 0x7Eu;  // largest finite
      default: return static_cast<uint32_t>(rng() & 0xFFu);
    }
  }
  if (format == KvFormat::kBf16) {
    switch (pick) {
      case 0: return 0x7FC0u;  // NaN
      case 1: return 0x7F80u;  // +inf
      case 2: return 0xFF80u;  // -inf
      case 3: return 0x7F7Fu;  // largest finite
      default: return static_cast<uint32_t>(rng() & 0xFFFFu);
    }
  }
  const bool e5m2 = format == KvFormat::kE5M2;
  switch (pick) {
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
      o.window < 0 || !(o.logit_softcap >= 0 && std::isfinite(o.logit_softcap)) || o.q_len < 0 ||
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
  // The variants' own stream: drawn from only when they are asked for.
  std::seed_seq extra_seed{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), 0x76617269u};
  std::mt19937_64 extra(extra_seed);
  auto extra_draw = [&extra](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(extra() % static_cast<uint64_t>(hi - lo + 1));
  };
  auto extra_unit = [&extra] { return static_cast<double>(extra() >> 11) * 0x1.0p-53; };

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
  p.window = o.window;
  p.logit_softcap = o.logit_softcap;

  // Query tokens per sequence (multi-token only), before the lengths that must hold them.
  const bool multi = o.q_len > 1;
  std::vector<int> queries(o.batch, 1);
  if (multi) {
    for (int b = 0; b < o.batch; ++b) {
      queries[b] = o.ragged ? static_cast<int>(extra_draw(1, o.q_len)) : o.q_len;
      if (o.ragged && o.batch > 1 && extra() % 8 == 0) queries[b] = 0;
    }
    if (o.batch > 0 && std::all_of(queries.begin(), queries.end(), [](int n) { return n == 0; }))
      queries[extra_draw(0, o.batch - 1)] = static_cast<int>(extra_draw(1, o.q_len));
  }

  p.seq_lens = o.seq_lens;
  if (p.seq_lens.empty())
    for (int b = 0; b < o.batch; ++b) {
      p.seq_lens.push_back(static_cast<int32_t>(draw(o.min_seq_len, o.max_seq_len)));
      if (multi) p.seq_lens[b] = std::max(p.seq_lens[b], queries[b]);
    }
  if (multi) {
    p.q_indptr.assign(1, 0);
    for (int b = 0; b < o.batch; ++b) {
      queries[b] = std::min(queries[b], std::max(p.seq_lens[b], 0));
      p.q_indptr.push_back(p.q_indptr.back() + queries[b]);
    }
  }
  p.num_tokens = multi ? p.q_indptr.back() : o.batch;
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

  // q ~ N(0, 1) (Box–Muller), K and V ~ uniform [-2, 2], each rounded to its format. With
  // several query tokens, these q rows are each sequence's last token's (dropped where it
  // has none); the others come from the variants' stream below.
  const size_t q_row = static_cast<size_t>(p.query_heads()) * o.head_dim;
  p.q.resize(static_cast<size_t>(p.num_tokens) * q_row);
  const double two_pi = 6.283185307179586;
  for (int b = 0; b < o.batch; ++b)
    for (size_t e = 0; e < q_row; ++e) {
      const uint16_t x = fp16_from_double(std::sqrt(-2.0 * std::log1p(-unit())) * std::cos(two_pi * unit()));
      if (p.query_count(b) > 0) p.q[static_cast<size_t>(p.first_row(b) + p.query_count(b) - 1) * q_row + e] = x;
    }
  for (int b = 0; b < o.batch; ++b)
    for (int t = shared_of[b] * o.page_size; t < p.seq_lens[b]; ++t)  // shared: written once
      for (int h = 0; h < o.kv_heads; ++h)
        for (int d = 0; d < o.head_dim; ++d) {
          p.set_k(b, t, h, d, 4.0 * unit() - 2.0);
          p.set_v(b, t, h, d, 4.0 * unit() - 2.0);
        }

  // The variants' draws, after everything else: the other query rows, then the sinks.
  auto normal = [&] { return std::sqrt(-2.0 * std::log1p(-extra_unit())) * std::cos(two_pi * extra_unit()); };
  if (multi)
    for (int b = 0; b < o.batch; ++b)
      for (int i = 0; i + 1 < p.query_count(b); ++i)
        for (size_t e = 0; e < q_row; ++e)
          p.q[static_cast<size_t>(p.first_row(b) + i) * q_row + e] = fp16_from_double(normal());
  if (o.sinks) {
    // A row's scores: s = softmax_scale · k_scale · q·K, about N(0, σ²) with σ² = (softmax_scale
    // · k_scale)² · D · 4/3; over n keys the largest is about σ √(2 ln n) and the log-sum-exp
    // about ln n + σ²/2 (at most the largest + ln n).
    double keys = 0;
    for (int b = 0; b < o.batch; ++b)
      keys += o.window > 0 ? std::min(p.seq_lens[b], o.window) : p.seq_lens[b];
    keys = std::max(2.0, o.batch > 0 ? keys / o.batch : 0.0);
    const double sigma = std::fabs(static_cast<double>(p.softmax_scale) * p.k_scale) * std::sqrt(o.head_dim * 4.0 / 3);
    double max_hat = sigma * std::sqrt(2 * std::log(keys));
    double lse_hat = std::min(std::log(keys) + sigma * sigma / 2, max_hat + std::log(keys));
    if (o.logit_softcap > 0) {  // the cap squeezes both
      max_hat = soft_capped(max_hat, o.logit_softcap);
      lse_hat = std::min(lse_hat, max_hat + std::log(keys));
    }
    for (int hq = 0; hq < p.query_heads(); ++hq)
      p.sinks.push_back(static_cast<float>(max_hat - 3 + extra_unit() * (lse_hat - max_hat + 6)));
    // Half the problems give their last head a sink of -inf: a head without one (vLLM's
    // gpt-oss layers pass one tensor for every head).
    if (p.query_heads() > 1 && extra_unit() < 0.5) p.sinks.back() = -std::numeric_limits<float>::infinity();
  }
  return p;
}

}  // namespace vxqa::reference
