// The sweep's cases: one seed gives one decode step drawn over every axis the kernels have
// (head dim, group, KV heads, batch, page size, lengths, cache type and layout, scales, how
// peaked the scores are, shared prefix pages, plan; q and out strides, bf16 q/out, device
// scales, CUDA-graph replay; multi-token queries) and a class (finite, non-finite inputs, a
// bad page id, bad lengths). Non-finite cases either inject NaN/inf into q, K or V, or
// mask the tail of a sequence (MaskedTail: chunks whose live scores are all -inf, with NaN
// or inf V under them, beside a live chunk). A case is a small description;
// sweep_prepare.h builds it.
// Host only; plain C++17 (the CPU test includes it).
#pragma once

#include <vxqa/kernel/split_plan.cuh>
#include <vxqa/testing/random_problem.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace vxqa_sweep {

using vxqa::reference::CacheLayout;
using vxqa::reference::KvFormat;
using vxqa::reference::RandomProblemOptions;

enum class CaseClass { kFinite, kNonFinite, kBadPage, kBadLength };
inline constexpr int kCaseClasses = 4;
inline const char* class_name(CaseClass c) {
  switch (c) {
    case CaseClass::kFinite: return "finite";
    case CaseClass::kNonFinite: return "non-finite";
    case CaseClass::kBadPage: return "bad page";
    case CaseClass::kBadLength: return "bad length";
  }
  return "?";
}

// How much CPU a case may take to build and to reference (estimate_cpu_ns): most are small,
// some are long contexts with few sequences and heads.
enum class Tier { kSmall, kMedium, kLong };
inline constexpr int kTiers = 3;
inline constexpr double kTierBudgetNs[kTiers] = {4e7, 5e8, 4e9};
inline const char* tier_name(Tier t) {
  return t == Tier::kSmall ? "small" : t == Tier::kMedium ? "medium" : "long";
}

// 24 and 40: compile-time page sizes of sweep Configs that are not a multiple of 16.
inline constexpr int kListedPageSizes[] = {1, 16, 24, 40, 784, 800, 1056, 1568, 1616};
inline constexpr int kMaxRandomPageSize = 2048;
inline constexpr int kMaxLength = 65536;
inline constexpr int kMaxBatch = 32;
inline constexpr int kMaxKvHeads = 8;
// Groups drawn: the kernels take any group (ceil(G / 8) M tiles); 24 covers three.
inline constexpr int kMaxGroup = 24;
inline constexpr int kHeadDims[] = {64, 128, 256};
// Every Config's plan for a case fits in this much workspace.
inline constexpr size_t kMaxWorkspaceBytes = size_t(256) << 20;

// Multi-token queries (SweepCase::q_len): the most query tokens a sequence (opt::MaxQueryLen
// of sweep_configs.h's multi-token Configs), and the cache format of the one multi-token
// Config of each head dim (a multi-token case of that head dim takes it).
inline constexpr int kMaxQueryLen = 16;
inline KvFormat multi_token_format(int head_dim) { return head_dim == 128 ? KvFormat::kFp16 : KvFormat::kE5M2; }
// The float64 reference and its error model hold a (query row, key) cell of one KV head's
// scores in several doubles: a multi-token sequence's length is cut so that its rows
// (G · query tokens) times its keys stay at most this many (a single-token case reaches
// 24 · 65536).
inline constexpr int64_t kMaxScoreCells = int64_t(1) << 21;

// The plan each Config makes for the case (vxqa::make_decode_plan<Config>).
struct PlanSpec {
  int max_batch = 1;
  int max_context = 1;
  int sm_count = 1;
  int chunk_multiple = 0;  // 0: the plan picks the chunk; else chunk = this · Config::kChunkMultiple
  int max_window = 0;      // > 0: a plan for windows of at most this many keys (make_decode_plan's)
  int max_q_len = 1;       // make_decode_plan's max_q_len: >= the step's DecodeParams::max_q_len
};

enum class Target { kQ, kK, kV };
enum class Poison { kNan, kPlusInf, kMinusInf };

// A NaN or ±inf written into a live element (one that a sequence's length covers).
struct Injection {
  Target target = Target::kQ;
  Poison value = Poison::kNan;
  int seq = 0;
  int head = 0;   // a query head for q, a KV head for K and V
  int token = 0;  // K and V: the key; q: the sequence's query token (0 with one a sequence)
  int dim = 0;
  // >= 0: the factor it meets in q·k is set to 0 (inf · 0): for K, q's dim of query head
  // head·G + zero_partner; for q, K's dim at token zero_partner.
  int zero_partner = -1;
};

// One block-table entry that a valid length uses, set outside [0, num_pages).
struct BadPage {
  int seq = -1, column = -1;
  bool from_num_pages = false;  // the id is num_pages + id (num_pages is known once built)
  int32_t id = 0;
  int32_t resolve(int num_pages) const { return from_num_pages ? num_pages + id : id; }
};

// The tail of a sequence masked (CaseClass::kNonFinite): for KV head `kv_head` of sequence
// `seq`, q's dim `dim` is set > 0 for every head of the group and K's dim `dim` to -inf at
// tokens [from, len), so those scores are -inf and their probabilities 0, while tokens
// [0, from) keep finite scores. from <= kMaskedTailMaxFrom, which no chunk is shorter than
// (kChunkMultiple = 16 x warps), so the first chunk is live and every later chunk of the
// sequence has only -inf scores (l = 0). `v` puts NaN or ±inf into V under the masked tokens
// (the first at token len - 1, in the sequence's last chunk): the float64 reference gives
// 0 · NaN = 0 · inf = NaN at those dims for every head of the group, and so must every plan.
// Until fc1accf a chunk with l = 0 wrote O = 0 and several-chunk plans gave finite values.
inline constexpr int kMaskedTailMaxFrom = 16;
struct MaskedTail {
  struct VPoison {
    int token = 0, dim = 0;
    Poison value = Poison::kNan;
  };
  int seq = -1;  // -1: none
  int kv_head = 0, dim = 0, from = 0;
  std::vector<VPoison> v;
};

// q and out as the device gets them; the reference's are contiguous [rows, Hq, D] (a row is
// one query token: one a sequence, or with q_indptr each sequence's q_counts[b]). Strides
// and offsets in elements (the batch strides are between rows). q rows start 16-byte
// aligned (strides and offset multiples of 8); out rows may start anywhere 2-byte aligned
// (out is written 2 bytes at a time where a row is not 4-byte aligned). Rows are ordered
// [rows, Hq] or, head-major, [Hq, rows], each level padded (head-major: for the
// batch · max_q_len rows that validate() reckons with); the stride of a dimension of one row
// is never used and may be anything (kJunkStrides, as framework views of size-1 dimensions
// carry). The buffers end with
// kIoTail elements past the last row, so a write past a row shows.
inline constexpr int64_t kIoTail = 8;
inline constexpr int64_t kJunkStrides[] = {0, 1, 3, -5, 1 << 20};
struct IoLayout {
  bool head_major = false;
  int64_t q_head_stride = 0, q_batch_stride = 0, q_offset = 0;
  int64_t out_head_stride = 0, out_batch_stride = 0, out_offset = 0;
  int64_t q_elements = 0, out_elements = 0;  // buffer sizes
  // Where (row, head) starts. The product with a one-row dimension's index (0) is 0.
  int64_t q_row(int row, int h) const { return q_offset + row * q_batch_stride + h * q_head_stride; }
  int64_t out_row(int row, int h) const { return out_offset + row * out_batch_stride + h * out_head_stride; }
};

struct SweepCase {
  uint64_t seed = 0;
  CaseClass cls = CaseClass::kFinite;
  Tier tier = Tier::kSmall;
  RandomProblemOptions problem;  // shape, lengths (seq_lens), layout, scales, shared prefix
  uint64_t problem_seed = 0;
  double score_spread = 1;  // drawn: ≈ the standard deviation of the scores
  double q_stddev = 1;      // q ~ N(0, q_stddev²), chosen to give that spread
  PlanSpec plan;
  std::vector<Injection> injections;              // kNonFinite (or masked)
  MaskedTail masked;                              // kNonFinite (or injections)
  BadPage bad_page;                               // kBadPage
  std::vector<std::pair<int, int32_t>> bad_lengths;  // kBadLength: (seq, length the device reads)
  IoLayout io;
  // q holds bf16 values (rounded; the reference takes them): Configs built for bf16 q/out
  // take this case with bf16 q and out, the others with the same values in fp16.
  bool bf16_q = false;
  // The K and V scales as device fp32 scalars (k_scale_ptr / v_scale_ptr), with NaN as the
  // host values the kernels must then ignore.
  bool k_scale_on_device = false, v_scale_on_device = false;
  // Each Config also runs the case from a captured CUDA graph, which must give the eager
  // run's bits; device scales hold other values while it is captured and the case's before
  // it is replayed.
  bool graph = false;
  // Multi-token queries. q_len 0: one query token a sequence, no q_indptr, run by the
  // single-token Configs. q_len 1..kMaxQueryLen: run by the multi-token Configs
  // (opt::MaxQueryLen), with q_indptr: up to q_len query tokens a sequence, all q_len or,
  // ragged, 1..q_len each and some 0 (RandomProblemOptions::q_len / ragged; q_len 1: one
  // each), cut to the sequence's length; q_counts says how many, as the problem has them.
  // q_indptr false (q_len 1 only): no q_indptr, one row a sequence, as a single-token caller
  // of a multi-token Config passes. max_q_len: DecodeParams::max_q_len, at least the most
  // query tokens of a sequence (sometimes more), at most plan.max_q_len (sometimes less).
  int q_len = 0;
  bool ragged = false;
  bool q_indptr = true;
  std::vector<int32_t> q_counts;  // [B] with q_indptr; empty: one query token (row) a sequence
  int max_q_len = 1;

  int query_heads() const { return problem.kv_heads * problem.group; }
  bool multi_token() const { return q_len > 0; }
  bool has_q_indptr() const { return !q_counts.empty(); }
  // Sequence b's query tokens: rows [first_row(b), first_row(b) + queries(b)).
  int queries(int b) const { return q_counts.empty() ? 1 : q_counts[b]; }
  int first_row(int b) const {
    if (q_counts.empty()) return b;
    int row = 0;
    for (int i = 0; i < b; ++i) row += q_counts[i];
    return row;
  }
  int rows() const { return first_row(problem.batch); }
  int most_queries() const {
    int most = 1;
    for (int b = 0; b < problem.batch; ++b) most = std::max(most, queries(b));
    return most;
  }
  // The rows validate() reckons q's and out's strides with: batch · max_q_len.
  int layout_rows() const { return problem.batch * max_q_len; }
  int longest() const {
    return problem.seq_lens.empty() ? 0 : *std::max_element(problem.seq_lens.begin(), problem.seq_lens.end());
  }
  // Table columns: the problem generator's max_pages.
  int max_pages() const {
    return (longest() + problem.page_size - 1) / problem.page_size + problem.spare_table_cols;
  }
  std::vector<int32_t> device_lens() const {
    std::vector<int32_t> lens = problem.seq_lens;
    for (const auto& [seq, len] : bad_lengths) lens[seq] = len;
    return lens;
  }
  // The attention variant's flags the case uses (vxqa::VariantFlag bits; 0: plain).
  unsigned variant_flags() const {
    return (problem.window > 0 ? 1u : 0u) | (problem.logit_softcap > 0.f ? 2u : 0u) | (problem.sinks ? 4u : 0u);
  }
  uint32_t expected_errors() const {  // vxqa::DecodeError bits
    return cls == CaseClass::kBadLength ? 1u : cls == CaseClass::kBadPage ? 2u : 0u;
  }
  // A bad length that is a length (in [0, plan.max_context]) but fewer keys than the
  // sequence's query tokens (multi-token, with q_indptr): validate() cannot tell it from
  // the host lengths; the kernels flag it.
  bool fewer_keys_than_queries(int seq, int32_t device_len) const {
    return has_q_indptr() && device_len >= 0 && device_len < queries(seq);
  }
};

// Which of the multi-token buckets the case is in: by the most query tokens of a sequence
// ("q_len 1", "q_len 2..4", "q_len 5..16"); nullptr for a single-token case.
inline const char* q_len_bucket(const SweepCase& c) {
  if (!c.multi_token()) return nullptr;
  const int most = c.most_queries();
  return most <= 1 ? "q_len 1" : most <= 4 ? "q_len 2..4" : "q_len 5..16";
}
// Whether the step's sequences have different numbers of query tokens (q_indptr ragged).
inline bool ragged_queries(const SweepCase& c) {
  if (!c.has_q_indptr()) return false;
  return std::adjacent_find(c.q_counts.begin(), c.q_counts.end(), std::not_equal_to<int32_t>()) != c.q_counts.end();
}

// The query tokens make_random_problem (random_problem.h) gives each sequence of a problem
// with options `o` and seed `seed` before it cuts them to the lengths: the first draws of
// its own stream, which depend on the batch, q_len and ragged only. The sweep draws the
// lengths knowing them (a sequence's rows multiply its reference's cost); sweep_prepare.h
// checks that the built problem has exactly these, cut. q_len 0 or 1: one each.
inline std::vector<int32_t> generator_query_counts(const RandomProblemOptions& o, uint64_t seed) {
  std::vector<int32_t> n(size_t(std::max(o.batch, 0)), 1);
  if (o.q_len <= 1) return n;
  std::seed_seq extra_seed{uint32_t(seed), uint32_t(seed >> 32), 0x76617269u};
  std::mt19937_64 extra(extra_seed);
  auto extra_draw = [&extra](int64_t lo, int64_t hi) { return lo + int64_t(extra() % uint64_t(hi - lo + 1)); };
  for (int b = 0; b < o.batch; ++b) {
    n[b] = o.ragged ? int32_t(extra_draw(1, o.q_len)) : o.q_len;
    if (o.ragged && o.batch > 1 && extra() % 8 == 0) n[b] = 0;
  }
  if (o.batch > 0 && std::all_of(n.begin(), n.end(), [](int32_t x) { return x == 0; })) {
    // The generator's `queries[extra_draw(0, B - 1)] = extra_draw(1, q_len)`: C++17
    // evaluates an assignment's right operand first.
    const int32_t count = int32_t(extra_draw(1, o.q_len));
    n[size_t(extra_draw(0, o.batch - 1))] = count;
  }
  return n;
}
// Counts cut to the lengths, as make_random_problem cuts them to explicit seq_lens.
inline std::vector<int32_t> cut_query_counts(std::vector<int32_t> n, const std::vector<int32_t>& lens) {
  for (size_t b = 0; b < n.size(); ++b) n[b] = std::min(n[b], std::max(lens[b], 0));
  return n;
}

// Whether a plan whose chunks are `chunk_tokens` long puts a V poison of the case's masked
// tail in a chunk whose live scores are all -inf, while the sequence's first chunk is live:
// the case fc1accf fixed. Such a chunk is any chunk but the first (from <= chunk_tokens).
inline bool masked_chunk_exercised(const SweepCase& c, int chunk_tokens) {
  if (c.masked.seq < 0 || chunk_tokens < c.masked.from || c.queries(c.masked.seq) == 0) return false;
  for (const MaskedTail::VPoison& v : c.masked.v)
    if (v.token >= chunk_tokens) return true;
  return false;
}

// --- the cost model ----------------------------------------------------------------------
// Nanoseconds on one core (measured on a 2-core CI machine, g++ -O2) of make_random_problem, the
// q rescale, the reference and finite_v_abs_max: garbage for every cache element, and per
// live element (token · KV head · dim) two encodes, two decodes and 2·G multiply-adds (2·G·n
// with n query tokens: each query row reads the keys again).
inline constexpr double kFillNs = 17.5;
inline constexpr double kLiveNs = 70;
inline constexpr double kLivePerHeadNs = 0.8;
inline constexpr double kQNs = 60;  // per q element: drawn, rescaled, read
// Multi-token cases: per live element and query row (G · n of them), instead of
// kLivePerHeadNs. The error model decodes each V row again for each query row that weighs
// it: about 10 ns a (row, key, dim), fitted over the multi-token cases of seeds [0, 10000)
// that take under 0.1 s (measured/estimated 0.99 over them, median 1.04, on a 2-core
// machine, g++ -O2).
inline constexpr double kLivePerRowNs = 10;

// At most the elements of one page of K or V as make_random_problem lays them out (random
// strides pad each level by up to 5 elements, then align).
inline int64_t page_elements_bound(const RandomProblemOptions& o) {
  const int64_t a = o.stride_align;
  auto up = [a](int64_t x) { return (x + a - 1) / a * a; };
  if (o.layout != CacheLayout::kRandomStrides) return int64_t(o.page_size) * o.kv_heads * up(o.head_dim);
  const int64_t inner = up(o.head_dim + 5);
  const int64_t token_major = up(int64_t(o.page_size) * up(o.kv_heads * inner + 5) + 5);
  const int64_t head_major = up(int64_t(o.kv_heads) * up(o.page_size * inner + 5) + 5);
  return std::max(token_major, head_major);
}

// At most the elements of the whole cache (K and V, every page, with offsets), ignoring
// shared prefix pages (which only save).
inline int64_t cache_elements_bound(const RandomProblemOptions& o) {
  int64_t pages = o.spare_pages;
  for (int32_t len : o.seq_lens) pages += (len + o.page_size - 1) / o.page_size;
  return (2 * pages + 1) * page_elements_bound(o) + 32 * o.stride_align;
}

inline double estimate_cpu_ns(const SweepCase& c) {
  const RandomProblemOptions& o = c.problem;
  if (!c.has_q_indptr()) {
    int64_t tokens = 0;
    for (int32_t len : o.seq_lens) tokens += len;
    const double live = double(tokens) * o.kv_heads * o.head_dim;
    return kFillNs * double(cache_elements_bound(o)) + live * (kLiveNs + kLivePerHeadNs * o.group) +
           kQNs * double(o.batch) * c.query_heads() * o.head_dim;
  }
  // Multi-token: each sequence's keys are read by its rows (G · its query tokens).
  double live = 0;
  for (int b = 0; b < o.batch; ++b)
    live += double(o.seq_lens[b]) * o.kv_heads * o.head_dim * (kLiveNs + kLivePerRowNs * o.group * c.queries(b));
  return kFillNs * double(cache_elements_bound(o)) + live + kQNs * double(c.rows()) * c.query_heads() * o.head_dim;
}

// The most workspace any Config's plan takes: explicit chunks of multiples of each
// kChunkMultiple a Config can have (16 · Warps, Warps 1..8); an automatic chunk for each
// kCtaTokens (32 · Warps). Multi-token plans as make_decode_plan makes them: max_batch ·
// max_q_len rows, a KV head's G · max_q_len rows in CTAs of 8 (the SM70 body's tiling),
// chunks over plan_span.
inline size_t worst_workspace_bytes(const SweepCase& c) {
  const PlanSpec& s = c.plan;
  const int hq = c.query_heads();
  const int tiles = c.problem.kv_heads * ((c.problem.group * s.max_q_len + 7) / 8);
  const int span = c.multi_token() ? vxqa::plan_span(s.max_context, s.max_window, s.max_q_len) : s.max_context;
  size_t worst = 0;
  for (int warps = 1; warps <= 8; ++warps) {
    const int chunk = s.chunk_multiple ? s.chunk_multiple * 16 * warps
                                       : vxqa::choose_chunk_tokens(s.max_batch, span, tiles, 32 * warps,
                                                                   4 * s.sm_count);
    const int chunks = int((int64_t(span) + chunk - 1) / chunk);
    worst = std::max(worst, vxqa::plan_workspace_bytes(s.max_batch * s.max_q_len, hq, chunks, c.problem.head_dim));
  }
  return worst;
}

// --- drawing -----------------------------------------------------------------------------
namespace detail {

// The case's own draws (not std:: distributions, which differ between standard libraries).
class CaseRng {
 public:
  // `salt`: another stream of the same seed.
  explicit CaseRng(uint64_t seed, uint32_t salt = 0x5EEDu) {
    std::seed_seq s{uint32_t(seed), uint32_t(seed >> 32), salt};
    rng_.seed(s);
  }
  uint64_t bits() { return rng_(); }
  int below(int n) { return int(rng_() % uint64_t(n)); }  // [0, n)
  int in(int lo, int hi) { return lo + below(hi - lo + 1); }  // [lo, hi]
  bool chance(int percent) { return below(100) < percent; }
  double unit() { return double(rng_() >> 11) * 0x1.0p-53; }  // [0, 1)
  double log_uniform(double lo, double hi) { return lo * std::pow(hi / lo, unit()); }
  int log_uniform_int(int lo, int hi) {  // [lo, hi], denser at lo
    return std::min(hi, int(std::floor(log_uniform(lo, hi + 1.0))));
  }
  template <class T, size_t N>
  T pick(const T (&xs)[N]) { return xs[below(int(N))]; }

 private:
  std::mt19937_64 rng_;
};

// A length at an edge of the kernels' tiling: tiny, a page, a CTA round or a chunk, ±1.
inline int edge_length(CaseRng& r, int page, int chunk_multiple) {
  static constexpr int kSmall[] = {0, 1, 2, 3, 31, 32, 33, 63, 64, 65};
  int base;
  switch (r.below(4)) {
    case 0: return r.pick(kSmall);
    case 1: base = page * r.in(1, 3); break;
    case 2: base = 32 * (1 << r.below(12)) * r.in(1, 3); break;  // CTA rounds of 1..8 warps
    default:  // the explicit chunk of a 2- or 4-warp Config, or the top
      base = chunk_multiple ? chunk_multiple * (r.below(2) ? 32 : 64) * r.in(1, 3) : kMaxLength;
  }
  return std::clamp(base + r.in(-1, 1), 0, kMaxLength);
}

// Lengths under the budget: each an edge length or uniform in [0, scale], then shuffled
// (the last drawn are the ones the budget squeezes). Multi-token (c.q_counts holds the
// counts before the cut): a token costs what it costs with the most query tokens, some
// lengths are the sequence's query tokens or 1 or 2 more (its first token sees 1..3 keys),
// and a length is at most what kMaxScoreCells allows the most rows a sequence has.
inline std::vector<int32_t> draw_lengths(CaseRng& r, const SweepCase& c, double budget_ns) {
  const RandomProblemOptions& o = c.problem;
  // Cost of a token, and of what does not depend on the lengths (partial and spare pages,
  // q): estimate_cpu_ns <= fixed + per_token * Σ len.
  const double page_ns = kFillNs * 2 * double(page_elements_bound(o));
  const double per_row = c.has_q_indptr() ? kLivePerRowNs : kLivePerHeadNs;
  const double per_token = page_ns / o.page_size +
                           double(o.kv_heads) * o.head_dim * (kLiveNs + per_row * (o.group * c.most_queries()));
  const double fixed = page_ns * (o.batch + o.spare_pages + 1) + kFillNs * 32 * o.stride_align +
                       kQNs * double(c.rows()) * c.query_heads() * o.head_dim;
  // 2 tokens a sequence kept in reserve: the classes below may lengthen one.
  int64_t left = std::max<int64_t>(0, int64_t((budget_ns - fixed) / per_token) - 2);
  const int scale = c.tier == Tier::kSmall    ? r.log_uniform_int(1, 4096)
                    : c.tier == Tier::kMedium ? r.log_uniform_int(256, 16384)
                                              : r.log_uniform_int(16384, kMaxLength);
  std::vector<int32_t> lens(o.batch);
  for (int b = 0; b < o.batch; ++b) {
    int32_t& len = lens[b];
    len = r.chance(35) ? edge_length(r, o.page_size, c.plan.chunk_multiple) : r.in(0, scale);
    if (c.has_q_indptr()) {
      if (r.chance(15)) len = c.queries(b) + r.in(0, 2);
      // (the lengths are shuffled below: the cap is the most query tokens')
      len = int32_t(std::min<int64_t>(len, kMaxScoreCells / (int64_t(o.group) * c.most_queries())));
    }
    if (len > left) len = int32_t(r.in(0, int(std::min<int64_t>(left, kMaxLength))));
    left -= len;
  }
  for (int i = o.batch - 1; i > 0; --i) std::swap(lens[i], lens[r.in(0, i)]);
  return lens;
}

// Scales log-uniform in [1e-3, 1e3] and a score spread τ (≈ std of the scores) log-uniform
// in [1e-3, 1e3]: flat to one-hot. q's deviation gives τ = softmax_scale · k_scale · σ ·
// √D · std(K) (K is uniform in [-2, 2]); where σ would leave the range that keeps q normal
// in fp16 and its products finite, it is clamped and softmax_scale takes the rest.
inline void draw_scales(CaseRng& r, SweepCase* c) {
  RandomProblemOptions& o = c->problem;
  constexpr double kKStd = 1.1547005383792515;  // 2 / √3
  const double k_scale = r.log_uniform(1e-3, 1e3);
  double softmax_scale = r.log_uniform(1e-3, 1e3);
  c->score_spread = r.log_uniform(1e-3, 1e3);
  const double unit_spread = k_scale * std::sqrt(double(o.head_dim)) * kKStd;
  c->q_stddev = std::clamp(c->score_spread / (softmax_scale * unit_spread), 0x1p-6, 0x1p11);
  softmax_scale = c->score_spread / (c->q_stddev * unit_spread);
  o.k_scale = float(k_scale);
  o.softmax_scale = float(softmax_scale);
  o.v_scale = float(r.log_uniform(1e-3, 1e3));  // |out| <= 2 · 1e3, far under fp16's 65504
}

// A sliding window at an edge (one key, a page, a chunk ±1) or anywhere up to past the
// longest sequence, a soft-cap from a tenth of the score spread to far above it, sinks; at
// least one of them. Half the windowed cases plan for the window (max_window).
inline void draw_variant(CaseRng& r, SweepCase* c) {
  RandomProblemOptions& o = c->problem;
  do {
    if (r.chance(60)) {
      const int page = o.page_size, chunk = c->plan.chunk_multiple ? 16 * c->plan.chunk_multiple : 64;
      const int edges[] = {1, 2, page, page + 1, std::max(1, page - 1), 15, 16, 17, chunk, chunk + 1, std::max(1, chunk - 1)};
      o.window = r.chance(50) ? r.pick(edges) : r.in(1, std::max(c->longest(), 1) + 64);
      if (r.chance(50)) c->plan.max_window = o.window + r.in(0, 2) * r.in(0, 40);
    }
    if (r.chance(40)) o.logit_softcap = float(r.log_uniform(0.1, 100.0) * std::max(c->score_spread, 1e-2));
    if (r.chance(40)) o.sinks = true;
  } while (c->variant_flags() == 0u);
}

// A sequence with length >= 1, or -1.
inline int live_sequence(CaseRng& r, const std::vector<int32_t>& lens) {
  std::vector<int> live;
  for (int b = 0; b < int(lens.size()); ++b)
    if (lens[b] > 0) live.push_back(b);
  return live.empty() ? -1 : live[r.below(int(live.size()))];
}

// A sequence with query rows (length >= 1 and, multi-token, query tokens >= 1), other than
// `besides`, or -1. For a single-token case live_sequence's draw.
inline int row_sequence(CaseRng& r, const SweepCase& c, int besides = -1) {
  std::vector<int> with_rows;
  for (int b = 0; b < c.problem.batch; ++b)
    if (b != besides && c.problem.seq_lens[b] > 0 && c.queries(b) > 0) with_rows.push_back(b);
  return with_rows.empty() ? -1 : with_rows[r.below(int(with_rows.size()))];
}

// NaN/inf in q (multi-token: in one query token's row), K or V. A multi-token q poison goes
// to a sequence with rows, and a K poison's zero partner is q's dim in each of its rows.
inline Injection draw_injection(CaseRng& r, const SweepCase& c) {
  const RandomProblemOptions& o = c.problem;
  Injection in;
  in.target = Target(r.below(3));
  in.value = Poison(r.below(3));
  in.seq = c.has_q_indptr() && in.target == Target::kQ ? row_sequence(r, c) : live_sequence(r, o.seq_lens);
  in.dim = r.below(o.head_dim);
  const bool inf = in.value != Poison::kNan;
  if (in.target == Target::kQ) {
    in.head = r.below(c.query_heads());
    if (c.has_q_indptr()) in.token = r.below(c.queries(in.seq));
    if (inf && r.chance(50)) in.zero_partner = r.below(o.seq_lens[in.seq]);
  } else {
    in.head = r.below(o.kv_heads);
    in.token = r.below(o.seq_lens[in.seq]);
    if (in.target == Target::kK && inf && r.chance(50)) in.zero_partner = r.below(o.group);
  }
  return in;
}

// The masked tail of the longest sequence (which the caller has made at least 2 tokens).
inline MaskedTail draw_masked_tail(CaseRng& r, const SweepCase& c) {
  const RandomProblemOptions& o = c.problem;
  MaskedTail m;
  m.seq = int(std::max_element(o.seq_lens.begin(), o.seq_lens.end()) - o.seq_lens.begin());
  const int len = o.seq_lens[m.seq];
  m.kv_head = r.below(o.kv_heads);
  m.dim = r.below(o.head_dim);
  m.from = r.in(1, std::min(kMaskedTailMaxFrom, len - 1));
  const int poisons = r.chance(50) ? 1 : 2;
  for (int i = 0; i < poisons; ++i) {
    MaskedTail::VPoison v;
    v.token = i == 0 ? len - 1 : r.in(m.from, len - 1);
    v.dim = r.below(o.head_dim);
    v.value = Poison(r.below(3));
    m.v.push_back(v);
  }
  return m;
}

// A bad id in a column a valid length uses. Multi-token: in a sequence with query rows, and
// in a column of the keys every query token sees (0 .. len - n), so that no row of the
// sequence could be computed without it (the kernels may skip keys no row of a CTA sees).
inline BadPage draw_bad_page(CaseRng& r, const SweepCase& c) {
  BadPage bad;
  bad.seq = c.has_q_indptr() ? row_sequence(r, c) : live_sequence(r, c.problem.seq_lens);
  const int shared_keys = c.problem.seq_lens[bad.seq] - c.queries(bad.seq) + 1;  // single-token: len
  bad.column = r.below((shared_keys + c.problem.page_size - 1) / c.problem.page_size);
  switch (r.below(7)) {
    case 0: bad.id = -1; break;
    case 1: bad.from_num_pages = true, bad.id = 0; break;
    case 2: bad.from_num_pages = true, bad.id = r.in(1, 1000); break;
    case 3: bad.id = INT_MAX; break;
    case 4: bad.id = INT_MIN; break;
    case 5: bad.id = 50000000; break;
    default: bad.id = -r.in(2, 1000000);
  }
  return bad;
}

inline int32_t draw_bad_length(CaseRng& r, int max_context) {
  switch (r.below(7)) {
    case 0: return -1;
    case 1: return -r.in(2, 1000000);
    case 2: return INT_MIN;
    case 3: return max_context + 1;
    case 4: return max_context + r.in(2, 1000000);
    case 5: return INT_MAX;
    default: return -7;
  }
}

// Multi-token (with q_indptr): 40 % a length short of the sequence's query tokens (0 .. n - 1),
// which only the kernels can tell from a good one, else one draw_bad_length draws.
inline int32_t draw_multi_token_bad_length(CaseRng& r, const SweepCase& c, int seq) {
  return r.chance(40) ? r.in(0, c.queries(seq) - 1) : draw_bad_length(r, c.plan.max_context);
}

// Multi-token (with q_indptr), before the counts are cut: makes sure some sequence will have
// query rows (length >= 1 and a query token drawn), lengthening one to 1 or 2 tokens if
// none does (as single-token cases make sure of a live sequence).
inline void ensure_rows(CaseRng& r, SweepCase* c) {
  std::vector<int32_t>& lens = c->problem.seq_lens;
  std::vector<int> drawn;
  for (int b = 0; b < c->problem.batch; ++b) {
    if (lens[b] > 0 && c->q_counts[b] > 0) return;
    if (c->q_counts[b] > 0) drawn.push_back(b);
  }
  if (!drawn.empty()) lens[drawn[r.below(int(drawn.size()))]] = r.in(1, 2);
}

inline int64_t junk_stride(CaseRng& r) { return r.pick(kJunkStrides); }

// One past the last element of rows of `d` elements at offset + r·batch_stride + h·head_stride
// (with no rows, of one: the buffer is then what one row would take).
inline int64_t rows_end(int64_t offset, int64_t batch_stride, int rows, int64_t head_stride, int heads, int d) {
  return offset + (std::max(rows, 1) - 1) * batch_stride + (heads - 1) * head_stride + d;
}

// q and out: contiguous a third of the time, else padded rows in either order, q's padding
// in 16-byte steps, out's in elements (odd strides and offsets included). Head-major rows
// are padded for the batch · max_q_len rows validate() checks the strides with (more than a
// multi-token step's rows where sequences have fewer query tokens), and a junk row stride
// needs that to be 1; the buffers hold the step's rows (c.rows()).
inline IoLayout draw_io(CaseRng& r, const SweepCase& c) {
  const int batch = c.layout_rows(), rows = c.rows(), heads = c.query_heads(), dim = c.problem.head_dim;
  IoLayout io;
  io.q_head_stride = io.out_head_stride = dim;
  io.q_batch_stride = io.out_batch_stride = int64_t(heads) * dim;
  if (!r.chance(33)) {
    io.head_major = r.chance(40);
    const int inner_rows = io.head_major ? batch : heads;
    const int64_t q_inner = dim + 8 * r.in(0, 2), out_inner = dim + (r.chance(60) ? r.in(1, 9) : 0);
    const int64_t q_outer = q_inner * inner_rows + 8 * r.in(0, 2), out_outer = out_inner * inner_rows + r.in(0, 9);
    io.q_head_stride = io.head_major ? q_outer : q_inner;
    io.q_batch_stride = io.head_major ? q_inner : q_outer;
    io.out_head_stride = io.head_major ? out_outer : out_inner;
    io.out_batch_stride = io.head_major ? out_inner : out_outer;
    io.q_offset = 8 * r.in(0, 3);
    io.out_offset = r.in(0, 7);
  }
  if (batch == 1 && r.chance(50)) io.q_batch_stride = junk_stride(r), io.out_batch_stride = junk_stride(r);
  if (heads == 1 && r.chance(50)) io.q_head_stride = junk_stride(r), io.out_head_stride = junk_stride(r);
  auto used = [](int n, int64_t stride) { return n > 1 ? stride : 0; };
  io.q_elements = rows_end(io.q_offset, used(rows, io.q_batch_stride), rows, used(heads, io.q_head_stride), heads,
                           dim) + kIoTail;
  io.out_elements = rows_end(io.out_offset, used(rows, io.out_batch_stride), rows,
                             used(heads, io.out_head_stride), heads, dim) + kIoTail;
  return io;
}

}  // namespace detail

// The multi-token stream's salt, and the head-dim-512 stream's (draw_case).
inline constexpr uint32_t kMultiTokenSalt = 0x51E7u;
inline constexpr uint32_t kHeadDim512Salt = 0xD512u;

// Same seed, same case.
inline SweepCase draw_case(uint64_t seed) {
  detail::CaseRng r(seed);
  // Whether the step has multi-token queries, and their shape, come from a stream of their
  // own: a single-token case is the case it was before the sweep drew them.
  detail::CaseRng m(seed, kMultiTokenSalt);
  detail::CaseRng wide(seed, kHeadDim512Salt);
  SweepCase c;
  c.seed = seed;
  const int cls = r.below(100);
  c.cls = cls < 70 ? CaseClass::kFinite
          : cls < 82 ? CaseClass::kNonFinite
          : cls < 92 ? CaseClass::kBadPage
                     : CaseClass::kBadLength;
  const int tier = r.below(100);
  c.tier = tier < 80 ? Tier::kSmall : tier < 96 ? Tier::kMedium : Tier::kLong;
  c.problem_seed = r.bits();
  // Multi-token queries: 22 % of the finite cases, 15 % of the others (NaN/inf injections
  // and masked tails into a query token's rows, bad pages every query token reads, bad
  // lengths and too few keys for the query tokens). The head dim and format are the
  // multi-token Configs' (sweep_configs.h): D128 fp16 (SM70 atom) for half of them, D64 and
  // D256 E5M2 (default atom) for the others. q_len: 1 (a tenth; with no q_indptr 40 % of
  // those), 2..4 or 5..16 (16 a fifth of those); ragged 40 % of q_len > 1.
  const bool multi = m.chance(c.cls == CaseClass::kFinite ? 22 : 15);

  RandomProblemOptions& o = c.problem;
  o.head_dim = r.pick(kHeadDims);
  // E5M2 7/12 (its Configs are the most), E4M3 2/12, fp16 3/12.
  const int format_draw = r.below(12);
  o.format = format_draw < 7 ? KvFormat::kE5M2 : format_draw < 9 ? KvFormat::kE4M3 : KvFormat::kFp16;
  // Head dim 512 (two warps a K/V tile): 35 % of the single-token D 256 cases, from a stream
  // of its own (the other cases are what they were).
  if (!multi && o.head_dim == 256 && wide.chance(35)) o.head_dim = 512;
  if (multi) {
    o.head_dim = m.chance(50) ? 128 : m.chance(50) ? 64 : 256;
    o.format = multi_token_format(o.head_dim);
    const int q_bucket = m.below(100);
    c.q_len = q_bucket < 10 ? 1 : q_bucket < 50 ? m.in(2, 4) : m.chance(20) ? kMaxQueryLen : m.in(5, kMaxQueryLen);
    c.ragged = c.q_len > 1 && m.chance(40);
    c.q_indptr = c.q_len > 1 || m.chance(60);
    o.q_len = c.q_len > 1 ? c.q_len : 0;  // q_len 1: sweep_prepare.h makes the one-token q_indptr
    o.ragged = c.ragged;
  }
  o.stride_align = 16 / vxqa::reference::element_bytes(o.format);  // the kernel's 16-byte loads
  static constexpr int kCommonGroups[] = {1, 6, 8, 9, 16};
  o.group = r.chance(25) ? r.pick(kCommonGroups) : r.in(1, kMaxGroup);
  const bool long_tier = c.tier == Tier::kLong;
  o.kv_heads = r.in(1, long_tier ? 2 : kMaxKvHeads);
  o.batch = long_tier ? r.in(1, 3) : r.chance(30) ? r.in(1, kMaxBatch) : r.log_uniform_int(1, kMaxBatch);
  o.page_size = r.chance(50) ? r.pick(kListedPageSizes) : r.log_uniform_int(1, kMaxRandomPageSize);
  o.layout = CacheLayout(r.below(3));
  o.spare_pages = r.in(0, 3);
  o.spare_table_cols = r.in(0, 3);
  if (o.batch >= 2 && r.chance(25)) o.shared_prefix_pages = r.chance(50) ? r.in(1, 4) : 1 << 20;
  o.garbage_seed = r.bits();
  detail::draw_scales(r, &c);
  c.plan.chunk_multiple = r.chance(40) ? 0 : r.chance(85) ? r.log_uniform_int(1, 64) : 1 << 12;

  // Heavy shapes first give up sequences, then heads, then spare pages, until what does
  // not depend on the lengths takes at most half the budget.
  const double budget = kTierBudgetNs[int(c.tier)];
  for (;;) {
    o.seq_lens.assign(o.batch, 0);
    if (multi && c.q_indptr) c.q_counts = generator_query_counts(o, c.problem_seed);  // not yet cut
    if (estimate_cpu_ns(c) + kFillNs * 2 * double(page_elements_bound(o)) * o.batch <= budget / 2) break;
    if (o.batch > 1) o.batch = (o.batch + 1) / 2;
    else if (o.kv_heads > 1) o.kv_heads /= 2;
    else if (o.spare_pages > 0) o.spare_pages = 0;
    else if (o.head_dim == 512) o.head_dim = 256;  // too big a shape at 512 stays at 256
    else break;
  }
  o.seq_lens = detail::draw_lengths(r, c, budget);
  if (c.has_q_indptr()) {
    if (c.cls != CaseClass::kFinite) detail::ensure_rows(r, &c);
  } else if (c.cls == CaseClass::kNonFinite || c.cls == CaseClass::kBadPage) {
    if (detail::live_sequence(r, o.seq_lens) < 0) o.seq_lens[r.below(o.batch)] = r.in(1, 2);
  }
  // A third of the non-finite cases mask the tail of their longest sequence instead of
  // injecting: it needs 2 tokens (within the 2 a sequence keeps in reserve), and K = -inf,
  // which E4M3 cannot hold (its cases inject).
  const bool masked_tail = c.cls == CaseClass::kNonFinite && r.chance(35) && o.format != KvFormat::kE4M3;
  if (masked_tail) {
    int32_t& len = *std::max_element(o.seq_lens.begin(), o.seq_lens.end());
    len = std::max(len, 2);
  }
  if (c.longest() == 0) {  // the API needs a page and a table column even when none is read
    o.spare_pages = std::max(o.spare_pages, 1);
    o.spare_table_cols = std::max(o.spare_table_cols, 1);
  }
  if (c.has_q_indptr()) c.q_counts = cut_query_counts(c.q_counts, o.seq_lens);  // the lengths are final

  // The plan: capacity at or above this step's, within what the block table holds.
  PlanSpec& plan = c.plan;
  const int room = c.max_pages() * o.page_size;
  plan.max_context = c.longest() > 0 && r.chance(50) ? c.longest() : r.in(std::max(c.longest(), 1), room);
  plan.max_batch = r.chance(30) ? o.batch + r.in(1, o.batch + 8) : o.batch;
  plan.sm_count = r.in(1, 200);
  if (multi) {  // DecodeParams::max_q_len and the plan's: at or above the step's, sometimes above
    c.max_q_len = c.has_q_indptr() && r.chance(30) ? r.in(c.most_queries(), kMaxQueryLen) : c.most_queries();
    plan.max_q_len = r.chance(40) ? r.in(c.max_q_len, kMaxQueryLen) : c.max_q_len;
  }
  while (worst_workspace_bytes(c) > kMaxWorkspaceBytes) {
    if (plan.max_batch > o.batch) plan.max_batch = o.batch;
    else if (plan.max_q_len > c.max_q_len) plan.max_q_len = c.max_q_len;
    else plan.chunk_multiple = plan.chunk_multiple ? 2 * plan.chunk_multiple : 64;
  }

  switch (c.cls) {
    case CaseClass::kFinite: break;
    case CaseClass::kNonFinite:
      if (masked_tail) {
        c.masked = detail::draw_masked_tail(r, c);
      } else {
        for (int n = r.in(1, 3); n > 0; --n) c.injections.push_back(detail::draw_injection(r, c));
      }
      break;
    case CaseClass::kBadPage: c.bad_page = detail::draw_bad_page(r, c); break;
    case CaseClass::kBadLength: {
      if (c.has_q_indptr()) {
        // On sequences with query rows (ensure_rows): a sequence without rows has none to
        // make NaN (and where the plan has several chunks no kernel reads its length).
        const int first = detail::row_sequence(r, c);
        c.bad_lengths.push_back({first, detail::draw_multi_token_bad_length(r, c, first)});
        const int second = r.chance(40) ? detail::row_sequence(r, c, first) : -1;
        if (second >= 0) c.bad_lengths.push_back({second, detail::draw_multi_token_bad_length(r, c, second)});
        break;
      }
      const int first = r.below(o.batch);
      c.bad_lengths.push_back({first, detail::draw_bad_length(r, plan.max_context)});
      if (o.batch > 1 && r.chance(40)) {
        const int second = (first + r.in(1, o.batch - 1)) % o.batch;
        c.bad_lengths.push_back({second, detail::draw_bad_length(r, plan.max_context)});
      }
      break;
    }
  }

  // How the step reaches the kernels (drawn last: the draws above are what they were).
  c.io = detail::draw_io(r, c);
  c.bf16_q = r.chance(35);
  c.k_scale_on_device = r.chance(35);
  c.v_scale_on_device = r.chance(35);
  c.graph = r.chance(20);
  // The attention variant (drawn after everything else: the draws above are what they
  // were): a third of the finite cases and 30 % of the injected non-finite ones (NaN/inf
  // under a window, a soft-cap's tanh of ±inf, a sink beside -inf scores; not a masked tail,
  // whose -inf scores a soft-cap would make finite), run by the Configs with every flag (at
  // D 512 E5M2's only).
  const int variant_chance = c.cls == CaseClass::kFinite                           ? 33
                             : c.cls == CaseClass::kNonFinite && c.masked.seq < 0 ? 30
                                                                                  : 0;
  if (variant_chance > 0 && r.chance(variant_chance) && (o.head_dim != 512 || o.format == KvFormat::kE5M2))
    detail::draw_variant(r, &c);
  // A bf16 cache (the SM80 body's bf16 MMA, bf16 q): drawn last, from a third of the plain
  // single-token E5M2 cases with bf16 q (its Configs take no variant or multi-token case;
  // at D 512, where those are fewer, from 75 %).
  if (o.format == KvFormat::kE5M2 && c.bf16_q && !c.multi_token() && c.variant_flags() == 0u &&
      r.chance(o.head_dim == 512 ? 75 : 30)) {
    o.format = KvFormat::kBf16;
    o.stride_align = 16 / vxqa::reference::element_bytes(o.format);
  }
  return c;
}

// --- words -------------------------------------------------------------------------------
inline const char* layout_name(CacheLayout l) {
  return l == CacheLayout::kPackedNhd ? "packed" : l == CacheLayout::kVllm ? "vllm" : "strided";
}

inline std::string plan_words(const PlanSpec& p) {
  char text[140];
  char q[24] = "";
  if (p.max_q_len > 1) std::snprintf(q, sizeof q, ", max_q_len %d", p.max_q_len);
  if (p.chunk_multiple)
    std::snprintf(text, sizeof text, "chunk %d x kChunkMultiple (max_batch %d, max_context %d%s)", p.chunk_multiple,
                  p.max_batch, p.max_context, q);
  else
    std::snprintf(text, sizeof text, "auto (max_batch %d, max_context %d, sm %d%s)", p.max_batch,
                  p.max_context, p.sm_count, q);
  return text;
}

// The multi-token queries in words ("" for a single-token case).
inline std::string queries_words(const SweepCase& c) {
  if (!c.multi_token()) return "";
  char text[120];
  if (!c.has_q_indptr())
    std::snprintf(text, sizeof text, ", multi-token Config: one query token a sequence, no q_indptr");
  else
    std::snprintf(text, sizeof text, ", %s%d query tokens (most %d, %d rows, max_q_len %d)",
                  c.ragged ? "ragged 1.." : "", c.q_len, c.most_queries(), c.rows(), c.max_q_len);
  return text;
}

// Whether q and out are contiguous [rows, Hq, D] rows at offset 0.
inline bool io_contiguous(const SweepCase& c) {
  const IoLayout& io = c.io;
  const int64_t d = c.problem.head_dim, row = int64_t(c.query_heads()) * d;
  return io.q_offset == 0 && io.out_offset == 0 && io.q_head_stride == d && io.out_head_stride == d &&
         io.q_batch_stride == row && io.out_batch_stride == row;
}

inline std::string io_words(const SweepCase& c) {
  if (io_contiguous(c)) return "q/out contiguous";
  const IoLayout& io = c.io;
  char text[160];
  std::snprintf(text, sizeof text, "q/out %s, q strides %lld/%lld +%lld, out strides %lld/%lld +%lld",
                io.head_major ? "head-major" : "batch-major", static_cast<long long>(io.q_batch_stride),
                static_cast<long long>(io.q_head_stride), static_cast<long long>(io.q_offset),
                static_cast<long long>(io.out_batch_stride), static_cast<long long>(io.out_head_stride),
                static_cast<long long>(io.out_offset));
  return text;
}

// One line.
inline std::string summary(const SweepCase& c) {
  const RandomProblemOptions& o = c.problem;
  int empty = 0;
  for (int32_t len : o.seq_lens) empty += len == 0;
  char variant[96] = "";
  if (c.variant_flags())
    std::snprintf(variant, sizeof variant, ", variant: window %d (plan max %d), soft-cap %.3g%s", o.window,
                  c.plan.max_window, double(o.logit_softcap), o.sinks ? ", sinks" : "");
  char text[880];
  std::snprintf(text, sizeof text,
                "[%s, %s] D%d %s G%d Hkv%d B%d page %d %s, longest %d (%d empty)%s%s, scales k %.3g v %.3g "
                "softmax %.3g, spread %.3g, plan %s%s; %s%s%s%s%s%s",
                class_name(c.cls), tier_name(c.tier), o.head_dim,
                vxqa::reference::format_name(o.format), o.group, o.kv_heads, o.batch, o.page_size,
                layout_name(o.layout), c.longest(), empty, o.shared_prefix_pages ? ", shared prefix" : "",
                queries_words(c).c_str(),
                double(o.k_scale), double(o.v_scale), double(o.softmax_scale), c.score_spread,
                plan_words(c.plan).c_str(), c.masked.seq >= 0 ? ", masked tail" : "", io_words(c).c_str(),
                c.bf16_q ? ", bf16 q" : "", c.k_scale_on_device ? ", k scale on device" : "",
                c.v_scale_on_device ? ", v scale on device" : "", c.graph ? ", graph replay" : "", variant);
  return text;
}

// Everything the case draws, one item a line.
inline std::string describe(const SweepCase& c) {
  static const char* kTargets[] = {"q", "K", "V"};
  static const char* kPoisons[] = {"NaN", "+inf", "-inf"};
  const RandomProblemOptions& o = c.problem;
  std::string s = "seed " + std::to_string(c.seed) + ": " + summary(c) + "\n";
  char line[320];
  std::snprintf(line, sizeof line,
                "  problem seed %llu, garbage seed %llu, q stddev %.6g, spare pages %d, spare table "
                "columns %d, shared prefix pages %d, stride align %d\n",
                static_cast<unsigned long long>(c.problem_seed),
                static_cast<unsigned long long>(o.garbage_seed), c.q_stddev, o.spare_pages,
                o.spare_table_cols, o.shared_prefix_pages, o.stride_align);
  s += line;
  std::snprintf(line, sizeof line, "  q buffer %lld elements, out buffer %lld elements\n",
                static_cast<long long>(c.io.q_elements), static_cast<long long>(c.io.out_elements));
  s += line;
  s += "  lengths:";
  for (int32_t len : o.seq_lens) s += " " + std::to_string(len);
  s += "\n";
  if (c.has_q_indptr()) {
    s += "  query tokens:";
    for (int32_t n : c.q_counts) s += " " + std::to_string(n);
    s += "\n";
  }
  for (const auto& [seq, len] : c.bad_lengths)
    s += "  bad length: seq " + std::to_string(seq) + " reads " + std::to_string(len) + "\n";
  if (c.bad_page.seq >= 0)
    s += "  bad page: seq " + std::to_string(c.bad_page.seq) + " column " +
         std::to_string(c.bad_page.column) + " = " + (c.bad_page.from_num_pages ? "num_pages + " : "") +
         std::to_string(c.bad_page.id) + "\n";
  for (const Injection& in : c.injections) {
    if (in.target == Target::kQ && c.has_q_indptr())
      std::snprintf(line, sizeof line, "  %s at q seq %d query token %d head %d dim %d", kPoisons[int(in.value)],
                    in.seq, in.token, in.head, in.dim);
    else
      std::snprintf(line, sizeof line, "  %s at %s seq %d head %d token %d dim %d", kPoisons[int(in.value)],
                    kTargets[int(in.target)], in.seq, in.head, in.target == Target::kQ ? -1 : in.token, in.dim);
    s += line;
    if (in.zero_partner >= 0)
      s += (in.target == Target::kQ ? ", K = 0 at token " : ", q = 0 for group head ") +
           std::to_string(in.zero_partner);
    s += "\n";
  }
  if (c.masked.seq >= 0) {
    std::snprintf(line, sizeof line,
                  "  masked tail: seq %d KV head %d: q dim %d > 0 for its group, K dim %d = -inf at tokens "
                  "[%d, %d)",
                  c.masked.seq, c.masked.kv_head, c.masked.dim, c.masked.dim, c.masked.from,
                  o.seq_lens[c.masked.seq]);
    s += line;
    for (const MaskedTail::VPoison& v : c.masked.v) {
      std::snprintf(line, sizeof line, "; V %s at token %d dim %d", kPoisons[int(v.value)], v.token, v.dim);
      s += line;
    }
    s += "\n";
  }
  std::snprintf(line, sizeof line, "  estimated CPU %.1f ms (budget %.0f ms), worst workspace %.1f MB\n",
                estimate_cpu_ns(c) * 1e-6, kTierBudgetNs[int(c.tier)] * 1e-6,
                double(worst_workspace_bytes(c)) / (1 << 20));
  s += line;
  return s;
}

}  // namespace vxqa_sweep
