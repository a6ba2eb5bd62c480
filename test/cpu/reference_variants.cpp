// The float64 reference's attention variants (sliding window, logit soft-cap, sinks) and
// multi-token queries, their error model and comparator, and the random problems that
// draw them.
//
// The comparator's power over the variants follows test/cpu/compare_power.cpp: a CPU
// simulator of a kernel rounds as the kernels do (fp32 scores, the soft-cap's fp32 tanh,
// fp16 weights in each warp's running frame over 16-token tiles dealt to 4 warps, fp32
// sums, chunk partials merged by their LSE, the sink's fp32 weight added at the end, an fp16
// output). Unchanged it must pass; with a mutation (the window one token too wide or too
// narrow, the sink or the soft-cap left out, two query tokens' rows swapped) it must fail.
#include <catch2/catch.hpp>

#include <vxqa/testing/compare.h>
#include <vxqa/testing/decode_reference.h>
#include <vxqa/testing/error_model.h>
#include <vxqa/testing/random_problem.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using namespace vxqa::reference;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// |got - want| ≤ tol · (1 + |want|) everywhere; an infinite `want` must match exactly.
void require_close(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isinf(want[i]) ? got[i] == want[i] : std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]));
    if (!ok) FAIL("index " << i << ": got " << got[i] << ", want " << want[i]);
  }
}

size_t out_at(const RandomProblem& p, int64_t row, int hq, int d) {
  return (static_cast<size_t>(row) * p.query_heads() + hq) * p.head_dim + d;
}
size_t lse_at(const RandomProblem& p, int64_t row, int hq) { return static_cast<size_t>(row) * p.query_heads() + hq; }

// One query row's answer by the textbook formula, from the problem's accessors (not the
// reference's loops): keys [lo, hi) of sequence b, the q row `q_row`, head hq.
struct RowAnswer {
  std::vector<double> out;
  double lse = -kInf;
};

RowAnswer brute_row(const RandomProblem& p, int64_t q_row, int b, int hq, int lo, int hi) {
  const int h = hq / p.group, dim = p.head_dim;
  std::vector<double> s;
  for (int j = lo; j < hi; ++j) {
    double dot = 0;
    for (int d = 0; d < dim; ++d) dot += fp16_to_double(p.q[out_at(p, q_row, hq, d)]) * p.k_at(b, j, h, d) * p.k_scale;
    const double raw = p.softmax_scale * dot;
    s.push_back(p.logit_softcap > 0 ? p.logit_softcap * std::tanh(raw / p.logit_softcap) : raw);
  }
  double max = -kInf;
  for (double x : s) max = std::max(max, x);
  if (!p.sinks.empty()) max = std::max(max, static_cast<double>(p.sinks[hq]));
  RowAnswer r;
  r.out.assign(dim, 0.0);
  if (max == -kInf) return r;
  double sum = p.sinks.empty() ? 0.0 : std::exp(p.sinks[hq] - max);
  for (double x : s) sum += std::exp(x - max);
  for (int j = lo; j < hi; ++j)
    for (int d = 0; d < dim; ++d) r.out[d] += std::exp(s[j - lo] - max) / sum * p.v_at(b, j, h, d) * p.v_scale;
  r.lse = max + std::log(sum);
  return r;
}

// Every row of the problem against brute_row over the keys the row should see.
void require_brute_force(const RandomProblem& p, const DecodeOutput& r, double tol = 1e-12) {
  for (int b = 0; b < p.batch; ++b) {
    const int len = p.seq_lens[b], n = p.query_count(b);
    for (int i = 0; i < n; ++i) {
      const int pos = len - n + i;
      const int lo = p.window > 0 ? std::max(0, pos - p.window + 1) : 0;
      for (int hq = 0; hq < p.query_heads(); ++hq) {
        const int64_t row = p.first_row(b) + i;
        const RowAnswer want = brute_row(p, row, b, hq, lo, pos + 1);
        INFO("seq " << b << " token " << i << " head " << hq << " keys [" << lo << ", " << pos + 1 << ")");
        std::vector<double> got(r.out.begin() + out_at(p, row, hq, 0), r.out.begin() + out_at(p, row, hq, 0) + p.head_dim);
        require_close(got, want.out, tol);
        require_close({r.lse[lse_at(p, row, hq)]}, {want.lse}, tol);
      }
    }
  }
}

// Query token i of sequence b, decoded on its own: a one-token problem of the sequence cut
// to the token's position + 1 (the same cache, table row and window).
DecodeOutput single_token(const RandomProblem& p, int b, int i, std::vector<int32_t>* len_storage) {
  DecodeInputs in = p.inputs();
  in.batch = 1;
  in.q_indptr = nullptr;
  in.q = p.q.data() + out_at(p, p.first_row(b) + i, 0, 0);
  in.block_table = p.block_table.data() + b * p.table_stride;
  len_storage->assign(1, p.seq_lens[b] - p.query_count(b) + i + 1);
  in.seq_lens = len_storage->data();
  return decode_reference(in);
}

// Each multi-token row equals, bit for bit, the single-token reference of its truncation.
void require_rows_are_truncations(const RandomProblem& p, const DecodeOutput& r) {
  std::vector<int32_t> len;
  int rows = 0;
  for (int b = 0; b < p.batch; ++b)
    for (int i = 0; i < p.query_count(b); ++i, ++rows) {
      const DecodeOutput one = single_token(p, b, i, &len);
      const int64_t row = p.first_row(b) + i;
      INFO("seq " << b << " (len " << p.seq_lens[b] << ", " << p.query_count(b) << " query tokens) token " << i);
      REQUIRE(std::equal(one.out.begin(), one.out.end(), r.out.begin() + out_at(p, row, 0, 0)));
      REQUIRE(std::equal(one.lse.begin(), one.lse.end(), r.lse.begin() + lse_at(p, row, 0)));
    }
  REQUIRE(rows == p.num_tokens);
}

RandomProblemOptions small_options(int batch, int page_size, int min_len, int max_len) {
  RandomProblemOptions o;
  o.batch = batch, o.kv_heads = 2, o.group = 3, o.head_dim = 16, o.page_size = page_size;
  o.min_seq_len = min_len, o.max_seq_len = max_len;
  o.k_scale = 0.75f, o.v_scale = 1.25f;
  return o;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Sliding window

TEST_CASE("window 1: out is exactly the last visible token's V row, lse its score", "[reference_variants]") {
  for (int q_len : {0, 4}) {
    RandomProblemOptions o = small_options(3, 5, 1, 40);
    o.window = 1, o.q_len = q_len;
    const RandomProblem p = make_random_problem(o, 21);
    const DecodeOutput r = decode_reference(p.inputs());
    for (int b = 0; b < p.batch; ++b)
      for (int i = 0; i < p.query_count(b); ++i) {
        const int pos = p.seq_lens[b] - p.query_count(b) + i;
        for (int hq = 0; hq < p.query_heads(); ++hq) {
          const int64_t row = p.first_row(b) + i;
          INFO("q_len " << q_len << " seq " << b << " token " << i << " head " << hq);
          for (int d = 0; d < p.head_dim; ++d)
            REQUIRE(r.out[out_at(p, row, hq, d)] == p.v_at(b, pos, hq / p.group, d) * p.v_scale);
          double dot = 0;
          for (int d = 0; d < p.head_dim; ++d)
            dot += fp16_to_double(p.q[out_at(p, row, hq, d)]) * (p.k_at(b, pos, hq / p.group, d) * p.k_scale);
          REQUIRE(r.lse[lse_at(p, row, hq)] == p.softmax_scale * dot);
        }
      }
  }
}

TEST_CASE("a window at least the length changes nothing, bit for bit", "[reference_variants]") {
  RandomProblemOptions o = small_options(4, 7, 0, 50);
  const RandomProblem p = make_random_problem(o, 23);
  const DecodeOutput plain = decode_reference(p.inputs());
  int longest = 0;
  for (int len : p.seq_lens) longest = std::max(longest, len);
  for (int window : {longest, longest + 1, 1 << 30}) {
    DecodeInputs in = p.inputs();
    in.window = window;
    const DecodeOutput r = decode_reference(in);
    CHECK(r.out == plain.out);
    CHECK(r.lse == plain.lse);
  }
  // ... and one shorter than the longest sequence does change it.
  DecodeInputs in = p.inputs();
  in.window = longest - 1;
  CHECK(decode_reference(in).lse != plain.lse);
}

TEST_CASE("windows that cut mid-page match the textbook formula over the window's keys", "[reference_variants]") {
  const KvFormat format = GENERATE(KvFormat::kE5M2, KvFormat::kFp16);
  for (int window : {2, 13, 37, 64}) {
    RandomProblemOptions o = small_options(3, 16, 0, 0);
    o.format = format;
    o.seq_lens = {100, 37, 5};  // 100 - 37 = 63: the window starts inside page 3
    o.window = window;
    const RandomProblem p = make_random_problem(o, 29 + window);
    INFO("window " << window);
    require_brute_force(p, decode_reference(p.inputs()));
  }
}

TEST_CASE("block-table entries of pages wholly before the window are never read", "[reference_variants]") {
  for (int q_len : {0, 3}) {
    RandomProblemOptions o = small_options(2, 16, 0, 0);
    o.seq_lens = {200, 90};
    o.window = 50, o.q_len = q_len;
    const RandomProblem p = make_random_problem(o, 31);
    const DecodeOutput r = decode_reference(p.inputs());
    // The first key any row sees is len − n − window + 1: pages before its page are dead.
    RandomProblem garbage = p;
    int dead = 0;
    for (int b = 0; b < p.batch; ++b) {
      const int first_key = std::max(0, p.seq_lens[b] - p.query_count(b) - p.window + 1);
      for (int col = 0; col < first_key / p.page_size; ++col, ++dead)
        garbage.block_table[b * p.table_stride + col] =
            col % 3 == 0 ? -1 : col % 3 == 1 ? p.num_pages : std::numeric_limits<int32_t>::min();
    }
    INFO("q_len " << q_len);
    REQUIRE(dead >= 6);
    DecodeOutput g;
    REQUIRE_NOTHROW(g = decode_reference(garbage.inputs()));
    CHECK(g.out == r.out);
    CHECK(g.lse == r.lse);
    REQUIRE_NOTHROW(decode_error_model(garbage.inputs(), g));
    // Without the window those entries are read, and refused.
    DecodeInputs in = garbage.inputs();
    in.window = 0;
    CHECK_THROWS_AS(decode_reference(in), std::invalid_argument);
    // The page that holds the first visible key is read.
    garbage.block_table[(p.seq_lens[0] - p.query_count(0) - p.window + 1) / p.page_size] = -1;
    CHECK_THROWS_AS(decode_reference(garbage.inputs()), std::invalid_argument);
  }
}

// ---------------------------------------------------------------------------------------
// Logit soft-cap

TEST_CASE("soft-cap: a huge cap gives the plain answer", "[reference_variants]") {
  RandomProblemOptions o = small_options(3, 5, 1, 60);
  const RandomProblem p = make_random_problem(o, 37);
  const DecodeOutput plain = decode_reference(p.inputs());
  DecodeInputs in = p.inputs();
  in.logit_softcap = 1e6;
  const DecodeOutput capped = decode_reference(in);
  require_close(capped.out, plain.out, 1e-9);
  require_close(capped.lse, plain.lse, 1e-9);
  in.logit_softcap = 2;  // ... and a small one does not
  CHECK(std::abs(decode_reference(in).lse[0] - plain.lse[0]) > 1e-3);
}

TEST_CASE("soft-cap: two tokens by hand", "[reference_variants]") {
  // D 2, one page of 2 tokens, fp16: k0 = [1, 0], k1 = [0, 1], q = [2, -1], softmax_scale 1.5:
  // raw scores 3 and -1.5; cap 2: 2 tanh(1.5) = 1.8102965..., 2 tanh(-0.75) = -1.2702979...
  const uint16_t k[] = {0x3C00, 0x0000, 0x0000, 0x3C00};
  const uint16_t v[] = {0x3C00, 0x4000, 0xC200, 0x3800};  // v0 = [1, 2], v1 = [-3, 0.5]
  const uint16_t q[] = {0x4000, 0xBC00};
  const int32_t table[] = {0}, lens[] = {2};
  DecodeInputs in;
  in.batch = 1, in.kv_heads = 1, in.group = 1, in.head_dim = 2, in.page_size = 2;
  in.num_pages = 1, in.max_pages = 1;
  in.q = q, in.k = k, in.v = v, in.format = KvFormat::kFp16;
  in.page_stride = 4, in.token_stride = 2, in.head_stride = 2;
  in.block_table = table, in.table_stride = 1, in.seq_lens = lens;
  in.softmax_scale = 1.5f;
  in.logit_softcap = 2.0;
  const DecodeOutput r = decode_reference(in);
  const double c0 = 1.8102965072897328, c1 = -1.2702979047745746;  // 2 tanh(1.5), 2 tanh(-0.75)
  const double w0 = std::exp(c0), w1 = std::exp(c1);
  require_close(r.out, {(w0 * 1 + w1 * -3) / (w0 + w1), (w0 * 2 + w1 * 0.5) / (w0 + w1)}, 1e-12);
  require_close(r.lse, {std::log(w0 + w1)}, 1e-12);
  // Without the cap: scores 3 and -1.5.
  in.logit_softcap = 0;
  const DecodeOutput plain = decode_reference(in);
  require_close(plain.lse, {std::log(std::exp(3.0) + std::exp(-1.5))}, 1e-12);
  CHECK(std::abs(plain.lse[0] - r.lse[0]) > 1);
}

// ---------------------------------------------------------------------------------------
// Sinks

TEST_CASE("sinks: out scaled by l / (l + e^sink), lse = log(e^lse + e^sink)", "[reference_variants]") {
  for (int window : {0, 9}) {
    RandomProblemOptions o = small_options(4, 5, 0, 60);
    o.sinks = true, o.window = window;
    const RandomProblem p = make_random_problem(o, 41);
    REQUIRE(p.sinks.size() == static_cast<size_t>(p.query_heads()));
    const DecodeOutput with = decode_reference(p.inputs());
    DecodeInputs in = p.inputs();
    in.sinks = nullptr;
    const DecodeOutput plain = decode_reference(in);
    std::vector<double> out(plain.out.size()), lse(plain.lse.size());
    for (int b = 0; b < p.batch; ++b)
      for (int hq = 0; hq < p.query_heads(); ++hq) {
        const double l = plain.lse[lse_at(p, b, hq)], sink = p.sinks[hq];
        // l / (l + e^sink) with l = e^lse, and log(e^lse + e^sink), without overflow.
        const double keep = p.seq_lens[b] == 0 ? 0.0 : 1 / (1 + std::exp(sink - l));
        lse[lse_at(p, b, hq)] = std::max(l, sink) + std::log1p(std::exp(-std::abs(l - sink)));
        for (int d = 0; d < p.head_dim; ++d) out[out_at(p, b, hq, d)] = plain.out[out_at(p, b, hq, d)] * keep;
      }
    INFO("window " << window);
    require_close(with.out, out, 1e-12);
    require_close(with.lse, lse, 1e-12);
    require_brute_force(p, with);
  }
}

TEST_CASE("sinks: an empty sequence gives out 0 and lse = its sink; huge sinks do not overflow",
          "[reference_variants]") {
  RandomProblemOptions o = small_options(3, 4, 0, 0);
  o.seq_lens = {6, 0, 3};
  o.sinks = true;
  RandomProblem p = make_random_problem(o, 43);
  const DecodeOutput r = decode_reference(p.inputs());
  for (int hq = 0; hq < p.query_heads(); ++hq) {
    CHECK(r.lse[lse_at(p, 1, hq)] == static_cast<double>(p.sinks[hq]));
    for (int d = 0; d < p.head_dim; ++d) CHECK(r.out[out_at(p, 1, hq, d)] == 0.0);
  }
  // All sequences empty: nothing but the sinks is read.
  DecodeInputs in = p.inputs();
  const int32_t empty[] = {0, 0, 0};
  in.seq_lens = empty, in.k = nullptr, in.v = nullptr, in.block_table = nullptr;
  const DecodeOutput e = decode_reference(in);
  for (int b = 0; b < 3; ++b)
    for (int hq = 0; hq < p.query_heads(); ++hq) CHECK(e.lse[lse_at(p, b, hq)] == static_cast<double>(p.sinks[hq]));
  // A sink of 1000 (e^1000 overflows a double): the keys weigh nothing, lse = 1000.
  for (float& s : p.sinks) s = 1000.f;
  const DecodeOutput big = decode_reference(p.inputs());
  for (double x : big.out) CHECK(std::abs(x) < 1e-300);
  for (double x : big.lse) CHECK(x == 1000.0);
  // A sink of -1000: as if there were none.
  for (float& s : p.sinks) s = -1000.f;
  DecodeInputs none = p.inputs();
  none.sinks = nullptr;
  const DecodeOutput small = decode_reference(p.inputs()), plain = decode_reference(none);
  CHECK(small.out == plain.out);
  for (int b : {0, 2})
    for (int hq = 0; hq < p.query_heads(); ++hq) CHECK(small.lse[lse_at(p, b, hq)] == plain.lse[lse_at(p, b, hq)]);
}

// Every score -inf (K = -inf where q > 0): 0 / 0 without a sink, NaN; beside a finite sink the
// sink is the one weight, as in an empty sequence: out exactly 0 (bound 0), lse the sink
// within 2^-20 (|sink| + 1), the kernels' base-2 round trip; a -inf sink is none (NaN).
TEST_CASE("sinks: a row whose every score is -inf is the sink alone, or NaN without one", "[reference_variants]") {
  RandomProblemOptions o = small_options(2, 4, 0, 0);
  o.seq_lens = {7, 5};
  o.sinks = true;
  RandomProblem p = make_random_problem(o, 47);
  const int kv = 1, first = kv * p.group;  // sequence 1, KV head 1's heads
  for (int g = 0; g < p.group; ++g) p.q[(size_t(p.query_heads()) + first + g) * p.head_dim + 2] = 0x3C00;  // q = 1
  REQUIRE(p.format == KvFormat::kE5M2);  // (its encoder saturates: the code of -inf by hand)
  for (int t = 0; t < p.seq_lens[1]; ++t) p.store(p.k_offset + p.element_index(1, t, kv, 2), 0xFCu);
  for (int g = 0; g < p.group; ++g) p.sinks[first + g] = 0.5f + g;
  p.sinks[first] = -std::numeric_limits<float>::infinity();
  const DecodeOutput r = decode_reference(p.inputs());
  const ErrorModel m = decode_error_model(p.inputs(), r, 64);
  for (int g = 0; g < p.group; ++g) {
    const size_t i = lse_at(p, 1, first + g);
    INFO("head " << first + g << ", sink " << p.sinks[first + g]);
    if (g == 0) {
      CHECK(std::isnan(r.lse[i]));
      CHECK(m.lse_fixed[i] == 0.0);
    } else {
      CHECK(r.lse[i] == double(p.sinks[first + g]));
      CHECK(m.lse_fixed[i] == 0x1p-20 * (std::fabs(double(p.sinks[first + g])) + 1));
    }
    CHECK(m.lse_sigma[i] == 0.0);
    for (int d = 0; d < p.head_dim; ++d) {
      const size_t e = out_at(p, 1, first + g, d);
      CHECK((g == 0 ? std::isnan(r.out[e]) : r.out[e] == 0.0));
      CHECK(m.out_sigma[e] == 0.0);
      CHECK(m.out_fixed[e] == 0.0);
    }
  }
  // The other heads keep their scores: finite, with bounds of their own.
  CHECK(std::isfinite(r.lse[lse_at(p, 1, 0)]));
  CHECK(m.lse_sigma[lse_at(p, 1, 0)] > 0.0);
}

// ---------------------------------------------------------------------------------------
// Multi-token queries

TEST_CASE("multi-token: row i is the single-token answer of the sequence cut to len - n + i + 1",
          "[reference_variants]") {
  for (int window : {0, 1, 6, 23}) {
    for (bool ragged : {false, true}) {
      RandomProblemOptions o = small_options(5, 7, 0, 45);
      o.window = window, o.q_len = 5, o.ragged = ragged;
      o.sinks = window == 6;
      o.logit_softcap = window == 23 ? 3.f : 0.f;
      const RandomProblem p = make_random_problem(o, 47 + window);
      INFO("window " << window << (ragged ? ", ragged" : ""));
      const DecodeOutput r = decode_reference(p.inputs());
      REQUIRE(r.out.size() == static_cast<size_t>(p.num_tokens) * p.query_heads() * p.head_dim);
      REQUIRE(r.lse.size() == static_cast<size_t>(p.num_tokens) * p.query_heads());
      require_rows_are_truncations(p, r);
      require_brute_force(p, r);
    }
  }
}

TEST_CASE("multi-token: a hand-made ragged q_indptr, with empty and full sequences", "[reference_variants]") {
  RandomProblemOptions o = small_options(4, 3, 0, 0);
  o.seq_lens = {5, 0, 8, 2};
  const RandomProblem single = make_random_problem(o, 53);
  // Queries 3, 0, 1, 2 (the last sequence is all query tokens); q rows drawn afresh.
  RandomProblem p = single;
  p.q_indptr = {0, 3, 3, 4, 6};
  p.num_tokens = 6;
  p.q.resize(static_cast<size_t>(p.num_tokens) * p.query_heads() * p.head_dim);
  for (size_t i = 0; i < p.q.size(); ++i) p.q[i] = fp16_from_double(std::sin(0.37 * i) * 1.5);
  const DecodeOutput r = decode_reference(p.inputs());
  REQUIRE(r.lse.size() == 6u * p.query_heads());
  require_rows_are_truncations(p, r);
  require_brute_force(p, r);

  // Refused: more query tokens than cached ones, a decreasing q_indptr, q_indptr[0] != 0.
  RandomProblem bad = p;
  bad.q_indptr = {0, 3, 4, 5, 8};  // sequence 1 (length 0) with one query token
  CHECK_THROWS_AS(decode_reference(bad.inputs()), std::invalid_argument);
  bad.q_indptr = {0, 6, 6, 7, 8};  // sequence 0: 6 > 5
  CHECK_THROWS_AS(decode_reference(bad.inputs()), std::invalid_argument);
  bad.q_indptr = {0, 3, 2, 4, 6};
  CHECK_THROWS_AS(decode_reference(bad.inputs()), std::invalid_argument);
  bad.q_indptr = {1, 3, 3, 4, 6};
  CHECK_THROWS_AS(decode_reference(bad.inputs()), std::invalid_argument);
  DecodeInputs in = p.inputs();
  in.window = -1;
  CHECK_THROWS_AS(decode_reference(in), std::invalid_argument);
  in = p.inputs();
  in.logit_softcap = -1;
  CHECK_THROWS_AS(decode_reference(in), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------
// Random problems

namespace {

// FNV-1a over every field and byte a problem held before the variants existed.
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  }
  template <class T> void value(const T& x) { bytes(&x, sizeof x); }
  template <class T> void vec(const std::vector<T>& v) {
    value(v.size());
    if (!v.empty()) bytes(v.data(), v.size() * sizeof(T));
  }
};

uint64_t problem_checksum(const RandomProblem& p) {
  Fnv f;
  for (int x : {p.batch, p.kv_heads, p.group, p.head_dim, p.page_size, p.num_pages, p.max_pages, int(p.format)}) f.value(x);
  for (int64_t x : {p.page_stride, p.token_stride, p.head_stride, p.k_offset, p.v_offset, p.table_stride}) f.value(x);
  for (float x : {p.k_scale, p.v_scale, p.softmax_scale}) f.value(x);
  f.vec(p.cache);
  f.vec(p.q);
  f.vec(p.block_table);
  f.vec(p.seq_lens);
  return f.h;
}

std::vector<std::pair<RandomProblemOptions, uint64_t>> checksum_cases() {
  std::vector<std::pair<RandomProblemOptions, uint64_t>> cases;
  RandomProblemOptions o;
  cases.push_back({o, 1});
  o.batch = 5, o.kv_heads = 2, o.group = 4, o.head_dim = 128, o.format = KvFormat::kFp16;
  o.min_seq_len = 1, o.max_seq_len = 300, o.stride_align = 8;
  cases.push_back({o, 42});
  o = RandomProblemOptions{};
  o.layout = CacheLayout::kVllm, o.shared_prefix_pages = 2, o.batch = 6, o.page_size = 8;
  o.min_seq_len = 20, o.max_seq_len = 100, o.group = 2;
  cases.push_back({o, 7});
  o = RandomProblemOptions{};
  o.layout = CacheLayout::kPackedNhd, o.seq_lens = {0, 33, 17}, o.batch = 3, o.garbage_seed = 5;
  o.k_scale = 0.5f, o.v_scale = 2.0f, o.softmax_scale = 0.3f, o.head_dim = 32, o.spare_pages = 0;
  cases.push_back({o, 9});
  return cases;
}

}  // namespace

TEST_CASE("random problems without the new options are byte for byte what they were", "[reference_variants]") {
  // Computed with make_random_problem as it was before the variants (commit c028bf2).
  const uint64_t before[] = {0xb4f4139e81ca3381ull, 0xb9e6995fdf4ee6c8ull, 0xa13ff8810718a26aull,
                             0x06d80bc10331a6d3ull};
  const auto cases = checksum_cases();
  for (size_t c = 0; c < cases.size(); ++c) {
    INFO("case " << c);
    const RandomProblem p = make_random_problem(cases[c].first, cases[c].second);
    CHECK(problem_checksum(p) == before[c]);
    CHECK(p.num_tokens == p.batch);
    CHECK(p.q_indptr.empty());
    CHECK(p.sinks.empty());
    const DecodeInputs in = p.inputs();
    CHECK((in.window == 0 && in.logit_softcap == 0 && in.sinks == nullptr && in.q_indptr == nullptr));
    // The window and the soft-cap draw nothing, and the sinks draw from their own stream:
    // the same bytes with them on.
    RandomProblemOptions o = cases[c].first;
    o.window = 5, o.logit_softcap = 7.5f, o.sinks = true;
    const RandomProblem v = make_random_problem(o, cases[c].second);
    CHECK(problem_checksum(v) == before[c]);
    CHECK(v.window == 5);
    CHECK(v.logit_softcap == 7.5f);
    CHECK(v.sinks.size() == static_cast<size_t>(v.query_heads()));
  }
  // The checksum sees a one-bit change anywhere.
  RandomProblem p = make_random_problem(cases[0].first, cases[0].second);
  p.cache[p.cache.size() / 2] ^= 1;
  CHECK(problem_checksum(p) != before[0]);
}

TEST_CASE("random problems: multi-token rows, lengths and sinks", "[reference_variants]") {
  int ragged_seen = 0, zero_rows = 0, raised = 0, sinks_above = 0, sinks_below = 0, no_sink = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    RandomProblemOptions o = small_options(6, 4, 0, 12);
    o.q_len = 6, o.ragged = seed % 2 == 0, o.sinks = true;
    const RandomProblem p = make_random_problem(o, seed);
    REQUIRE(p.q_indptr.size() == 7u);
    REQUIRE(p.q_indptr[0] == 0);
    REQUIRE(p.num_tokens == p.q_indptr.back());
    REQUIRE(p.num_tokens >= 1);
    REQUIRE(p.q.size() == static_cast<size_t>(p.num_tokens) * p.query_heads() * p.head_dim);
    int distinct = 0;
    for (int b = 0; b < p.batch; ++b) {
      const int n = p.query_count(b);
      REQUIRE(n >= 0);
      REQUIRE(n <= o.q_len);
      REQUIRE(p.seq_lens[b] >= n);
      if (!o.ragged) REQUIRE(n == o.q_len);
      distinct += n != p.query_count(0);
      zero_rows += n == 0;
      raised += p.seq_lens[b] == n;
    }
    ragged_seen += distinct > 0;
    // Sinks around the rows' scale: compare with each row's log-sum-exp without them.
    DecodeInputs in = p.inputs();
    in.sinks = nullptr;
    const DecodeOutput r = decode_reference(in);
    for (int hq = 0; hq < p.query_heads(); ++hq) {
      if (hq + 1 == p.query_heads() && p.sinks[hq] == -std::numeric_limits<float>::infinity()) {
        ++no_sink;  // the last head without a sink, in about half the problems
        continue;
      }
      REQUIRE(std::isfinite(p.sinks[hq]));
      for (int64_t row = 0; row < p.num_tokens; ++row) {
        const double lse = r.lse[lse_at(p, row, hq)];
        sinks_above += p.sinks[hq] > lse;
        sinks_below += p.sinks[hq] < lse - 2;
      }
    }
  }
  CHECK(ragged_seen >= 10);
  CHECK(zero_rows > 0);
  CHECK(raised > 0);
  CHECK(sinks_above > 100);
  CHECK(sinks_below > 100);
  CHECK(no_sink >= 10);
  CHECK(no_sink <= 30);
}

// A sink of -inf is a head without one: the reference, the bound and the empty rows' LSE
// are those of no sink (a -inf |sink| once made the combine's term, and the LSE bound, inf).
TEST_CASE("a head whose sink is -inf is a head without a sink", "[reference_variants]") {
  RandomProblemOptions o = small_options(4, 5, 0, 0);
  o.seq_lens = {9, 0, 4, 300};
  o.q_len = 3, o.ragged = true, o.sinks = true;
  RandomProblem p = make_random_problem(o, 61);
  p.sinks.back() = -std::numeric_limits<float>::infinity();
  const int last = p.query_heads() - 1;
  DecodeInputs plain = p.inputs();
  plain.sinks = nullptr;
  const DecodeOutput with = decode_reference(p.inputs()), without = decode_reference(plain);
  const ErrorModel m_with = decode_error_model(p.inputs(), with, 64), m_without = decode_error_model(plain, without, 64);
  for (int64_t row = 0; row < p.num_tokens; ++row) {
    const size_t i = lse_at(p, row, last);
    INFO("row " << row);
    CHECK(with.lse[i] == without.lse[i]);
    CHECK(std::isfinite(m_with.lse_fixed[i]));
    CHECK(m_with.lse_fixed[i] == m_without.lse_fixed[i]);
    CHECK(m_with.lse_sigma[i] == m_without.lse_sigma[i]);
    for (int d = 0; d < p.head_dim; ++d) {
      const size_t e = i * p.head_dim + d;
      CHECK(with.out[e] == without.out[e]);
      CHECK(m_with.out_fixed[e] == m_without.out_fixed[e]);
    }
  }
}

TEST_CASE("random problems: multi-token keeps the cache and each sequence's last query row", "[reference_variants]") {
  RandomProblemOptions o = small_options(4, 5, 0, 0);
  o.seq_lens = {9, 0, 4, 30};
  const RandomProblem single = make_random_problem(o, 59);
  o.q_len = 4, o.ragged = true, o.sinks = true;
  const RandomProblem multi = make_random_problem(o, 59);
  CHECK(multi.cache == single.cache);
  CHECK(multi.block_table == single.block_table);
  CHECK(multi.seq_lens == single.seq_lens);
  CHECK(multi.query_count(1) == 0);  // an explicit length 0 cuts its query tokens to 0
  const size_t row = static_cast<size_t>(single.query_heads()) * single.head_dim;
  const DecodeOutput rs = decode_reference(single.inputs());
  DecodeInputs in = multi.inputs();
  in.sinks = nullptr;
  const DecodeOutput rm = decode_reference(in);
  for (int b = 0; b < single.batch; ++b) {
    const int n = multi.query_count(b);
    if (n == 0) continue;
    const size_t last = multi.first_row(b) + n - 1;
    INFO("seq " << b);
    CHECK(std::equal(single.q.begin() + b * row, single.q.begin() + (b + 1) * row, multi.q.begin() + last * row));
    CHECK(std::equal(rs.out.begin() + b * row, rs.out.begin() + (b + 1) * row, rm.out.begin() + last * row));
  }
}

// ---------------------------------------------------------------------------------------
// The comparator with the variants' error model

namespace {

enum class Mutation {
  kNone,
  kWindowWider,    // the window one key too wide
  kWindowNarrower,  // the window one key too narrow
  kNoSink,         // the sink left out of the denominator
  kNoSoftcap,      // the soft-cap left out
  kSwapRows,       // query tokens 0 and 1 of each sequence trade outputs
};

const char* name(Mutation m) {
  switch (m) {
    case Mutation::kNone: return "none";
    case Mutation::kWindowWider: return "window one key too wide";
    case Mutation::kWindowNarrower: return "window one key too narrow";
    case Mutation::kNoSink: return "sink ignored";
    case Mutation::kNoSoftcap: return "soft-cap ignored";
    case Mutation::kSwapRows: return "two query tokens' rows swapped";
  }
  return "?";
}

double round_fp16(double x) { return fp16_to_double(fp16_from_double(x)); }

struct SimulatedOutputs {
  std::vector<uint16_t> out;  // fp16 bits [num_tokens, Hq, D]
  std::vector<float> lse;     // [num_tokens, Hq]
};

// The kernel of compare_power.cpp, per query row over the keys it sees, with the variants:
// the soft-cap as x = raw · fp32(softmax_scale · k_scale / cap), cap · tanh(x) by
// 1 − 2 / (exp2f(2x · log2 e) + 1), times fp32(cap · log2 e); the sink's exp2f weight added
// to the combine's fp32 sum. `chunk` 0: one chunk; chunks start at the row's first key.
SimulatedOutputs simulate_kernel(const RandomProblem& p, int chunk, Mutation mutation) {
  constexpr int kWarps = 4, kTile = 16;
  constexpr float kLog2e = 1.4426950408889634f;
  const int heads = p.query_heads(), dim = p.head_dim;
  const bool softcap = p.logit_softcap > 0 && mutation != Mutation::kNoSoftcap;
  const bool sinks = !p.sinks.empty() && mutation != Mutation::kNoSink;
  const float qk_scale = p.softmax_scale * p.k_scale * kLog2e;
  const float x_scale = softcap ? p.softmax_scale * p.k_scale / p.logit_softcap : 0.f;
  const float cap_log2 = softcap ? p.logit_softcap * kLog2e : 0.f;
  const int window = mutation == Mutation::kWindowWider ? p.window + 1
                     : mutation == Mutation::kWindowNarrower ? p.window - 1
                                                             : p.window;
  SimulatedOutputs r;
  r.out.assign(static_cast<size_t>(p.num_tokens) * heads * dim, 0);
  r.lse.assign(static_cast<size_t>(p.num_tokens) * heads, -INFINITY);
  for (int b = 0; b < p.batch; ++b) {
    const int len = p.seq_lens[b], n = p.query_count(b);
    for (int h_kv = 0; h_kv < p.kv_heads; ++h_kv) {
      std::vector<float> k(static_cast<size_t>(len) * dim), v(k.size());  // decoded, unscaled
      for (int j = 0; j < len; ++j)
        for (int d = 0; d < dim; ++d) {
          k[static_cast<size_t>(j) * dim + d] = static_cast<float>(p.k_at(b, j, h_kv, d));
          v[static_cast<size_t>(j) * dim + d] = static_cast<float>(p.v_at(b, j, h_kv, d));
        }
      for (int i = 0; i < n; ++i) {
        const KeyRange keys = visible_keys(len, n, i, window);
        const int64_t row = p.first_row(b) + i;
        for (int hq = h_kv * p.group; hq < (h_kv + 1) * p.group; ++hq) {
          std::vector<double> q(dim);
          for (int d = 0; d < dim; ++d) q[d] = fp16_to_double(p.q[out_at(p, row, hq, d)]);
          std::vector<float> s(keys.size());
          for (int j = keys.begin; j < keys.end; ++j) {
            double dot = 0;
            for (int d = 0; d < dim; ++d) dot += q[d] * k[static_cast<size_t>(j) * dim + d];
            const float raw = static_cast<float>(dot);
            if (softcap) {
              const float x = raw * x_scale;
              const float t = 1.f - 2.f / (std::exp2(2.f * x * kLog2e) + 1.f);
              s[j - keys.begin] = t * cap_log2;
            } else {
              s[j - keys.begin] = raw * qk_scale;
            }
          }
          const int c_tokens = chunk > 0 ? chunk : std::max(1, keys.size());
          std::vector<float> part_o, part_lse;
          for (int begin = 0; begin < keys.size(); begin += c_tokens) {
            const int end = std::min(keys.size(), begin + c_tokens);
            float wm[kWarps], wl[kWarps];
            std::vector<float> wo(static_cast<size_t>(kWarps) * dim, 0.f);
            for (int w = 0; w < kWarps; ++w) {
              float m = -INFINITY, l = 0.f;
              float* o = &wo[static_cast<size_t>(w) * dim];
              for (int t0 = begin + w * kTile; t0 < end; t0 += kWarps * kTile) {
                const int t1 = std::min(end, t0 + kTile);
                float tile_max = -INFINITY;
                for (int j = t0; j < t1; ++j) tile_max = std::max(tile_max, s[j]);
                const float m_new = std::max(m, tile_max);
                const float alpha = m_new == -INFINITY ? 1.f : std::exp2(m - m_new);
                l *= alpha;
                for (int d = 0; d < dim; ++d) o[d] *= alpha;
                for (int j = t0; j < t1; ++j) {
                  const float pj = static_cast<float>(round_fp16(std::exp2(s[j] - m_new)));
                  l += pj;
                  const float* vj = &v[static_cast<size_t>(keys.begin + j) * dim];
                  for (int d = 0; d < dim; ++d) o[d] += pj * vj[d];
                }
                m = m_new;
              }
              wm[w] = m;
              wl[w] = l;
            }
            float m = -INFINITY, l = 0.f;
            for (int w = 0; w < kWarps; ++w) m = std::max(m, wm[w]);
            std::vector<float> o(dim, 0.f);
            for (int w = 0; w < kWarps; ++w) {
              const float weight = m == -INFINITY ? 1.f : std::exp2(wm[w] - m);
              l += wl[w] * weight;
              for (int d = 0; d < dim; ++d) o[d] += wo[static_cast<size_t>(w) * dim + d] * weight;
            }
            for (int d = 0; d < dim; ++d) part_o.push_back(o[d] / l);
            part_lse.push_back(m + std::log2(l));
          }
          float mx = -INFINITY, sum = 0.f;
          for (float x : part_lse) mx = std::max(mx, x);
          const float sink2 = sinks ? p.sinks[hq] * kLog2e : -INFINITY;
          mx = std::max(mx, sink2);
          std::vector<float> acc(dim, 0.f);
          for (size_t c = 0; c < part_lse.size(); ++c) {
            const float w = std::exp2(part_lse[c] - mx);
            sum += w;
            for (int d = 0; d < dim; ++d) acc[d] += w * part_o[c * dim + d];
          }
          if (sinks) sum += std::exp2(sink2 - mx);
          if (mx == -INFINITY) continue;  // no key, no sink: out 0, lse −inf
          for (int d = 0; d < dim; ++d)
            r.out[out_at(p, row, hq, d)] = fp16_from_double(static_cast<double>(acc[d] / sum * p.v_scale));
          r.lse[lse_at(p, row, hq)] = (mx + std::log2(sum)) * 0.6931471805599453f;
        }
      }
    }
    if (mutation == Mutation::kSwapRows && n >= 2) {
      const size_t a = p.first_row(b), row = static_cast<size_t>(heads) * dim;
      std::swap_ranges(r.out.begin() + a * row, r.out.begin() + (a + 1) * row, r.out.begin() + (a + 1) * row);
      std::swap_ranges(r.lse.begin() + a * heads, r.lse.begin() + (a + 1) * heads, r.lse.begin() + (a + 1) * heads);
    }
  }
  return r;
}

Comparison compare(const RandomProblem& p, const DecodeOutput& ref, const ErrorModel& model,
                   const SimulatedOutputs& ours) {
  return compare_problem(p, ref, model, {ours.out.data(), ours.lse.data(), 0u});
}

// Realistic: D 128, Hkv 2, G 4, lengths to 4K, every variant of `variants` on.
struct Variants {
  int window = 0;
  float softcap = 0;
  bool sinks = false;
  int q_len = 0;
  bool ragged = false;
};

RandomProblem realistic_problem(const Variants& v, std::vector<int32_t> lens, bool peaked, KvFormat format,
                                uint64_t seed) {
  RandomProblemOptions o;
  o.batch = static_cast<int>(lens.size());
  o.kv_heads = 2, o.group = 4, o.head_dim = 128, o.page_size = 16;
  o.format = format;
  o.seq_lens = std::move(lens);
  o.k_scale = 0.75f, o.v_scale = 1.25f;
  o.softmax_scale = peaked ? 0.25f : 0.0f;  // 0: 1/sqrt(128) ≈ 0.088
  o.window = v.window, o.logit_softcap = v.softcap, o.sinks = v.sinks, o.q_len = v.q_len, o.ragged = v.ragged;
  return make_random_problem(o, seed);
}

// Whether a mutation can change the problem's answer at all.
bool applies(Mutation m, const RandomProblem& p) {
  bool cut = false, two_rows = false;  // some row's window starts after key 0; a sequence with 2 rows
  for (int b = 0; b < p.batch; ++b) {
    cut = cut || (p.window > 0 && p.query_count(b) > 0 && p.seq_lens[b] > p.window);
    two_rows = two_rows || p.query_count(b) >= 2;
  }
  switch (m) {
    case Mutation::kWindowWider: return cut;
    case Mutation::kWindowNarrower: return p.window > 1;
    case Mutation::kNoSink: return !p.sinks.empty();
    case Mutation::kNoSoftcap: return p.logit_softcap > 0;
    case Mutation::kSwapRows: return two_rows;
    default: return true;
  }
}

}  // namespace

TEST_CASE("variants: a correct kernel's roundings pass the bound", "[reference_variants]") {
  double worst = 0;
  int problems = 0;
  for (uint64_t seed = 0; seed < 36; ++seed) {
    Variants v;
    v.window = seed % 3 == 0 ? 0 : static_cast<int>(1 + (seed * 7919) % 1500);
    v.softcap = seed % 4 == 1 ? 0.f : static_cast<float>(3 + seed % 5 * 6);
    v.sinks = seed % 5 != 2;
    v.q_len = seed % 3 == 1 ? 1 : static_cast<int>(2 + seed % 6);
    v.ragged = seed % 2 == 1;
    const int len = static_cast<int>(1 + (seed * 2654435761u) % 4096);
    const std::vector<int32_t> lens = {len, static_cast<int32_t>(1 + (len * 7) % 1300)};
    const bool peaked = seed % 2 == 0;
    const KvFormat format = seed % 3 ? KvFormat::kE5M2 : KvFormat::kFp16;
    const RandomProblem p = realistic_problem(v, lens, peaked, format, 100 + seed);
    const int chunk = seed % 4 == 0 ? 0 : 64 * static_cast<int>(1 + seed % 7);
    const DecodeOutput ref = decode_reference(p.inputs());
    const ErrorModel model = decode_error_model(p.inputs(), ref, chunk);
    const Comparison c = compare(p, ref, model, simulate_kernel(p, chunk, Mutation::kNone));
    INFO("seed " << seed << ", lens " << lens[0] << " " << lens[1] << ", window " << v.window << ", cap "
                 << v.softcap << ", sinks " << v.sinks << ", q_len " << v.q_len << ", chunk " << chunk << ": "
                 << c.first);
    REQUIRE(c.ok());
    worst = std::max(worst, c.worst);
    ++problems;
  }
  WARN(problems << " problems with variants, worst error " << worst << " of the bound");
}

// A cap far below the scores saturates tanh: every score is ±cap, two weights for all the
// keys, so their fp16 roundings are two errors, not thousands of independent ones (the sweep
// found seeds with caps below 0.1 whose LSE passed the independent model's bound by 10 %).
TEST_CASE("variants: a saturated soft-cap's repeated weights pass the bound, wrong answers still fail",
          "[reference_variants]") {
  for (const float cap : {0.0817f, 0.0186f, 0.3f}) {
    for (const int len : {3000, 20000}) {
      Variants v;
      v.softcap = cap;
      v.q_len = len == 3000 ? 3 : 1;
      const RandomProblem p = realistic_problem(v, {len, len / 3}, true, KvFormat::kE5M2, 900 + len);
      const int chunk = len > 4096 ? 1024 : 0;
      const DecodeOutput ref = decode_reference(p.inputs());
      const ErrorModel model = decode_error_model(p.inputs(), ref, chunk);
      const Comparison right = compare(p, ref, model, simulate_kernel(p, chunk, Mutation::kNone));
      INFO("cap " << cap << ", len " << len << ": correct kernel " << right.first << " (worst " << right.worst
                  << " of the bound)");
      CHECK(right.ok());
      CHECK_FALSE(compare(p, ref, model, simulate_kernel(p, chunk, Mutation::kNoSoftcap)).ok());
      if (v.q_len > 1) CHECK_FALSE(compare(p, ref, model, simulate_kernel(p, chunk, Mutation::kSwapRows)).ok());
    }
  }
}

TEST_CASE("variants: every mutation fails the bound, 1 to 4K tokens, flat and peaked", "[reference_variants]") {
  const Mutation mutations[] = {Mutation::kWindowWider, Mutation::kWindowNarrower, Mutation::kNoSink,
                                Mutation::kNoSoftcap, Mutation::kSwapRows};
  int failed = 0;
  for (const int len : {1, 17, 300, 1600, 4096}) {
    for (const bool peaked : {false, true}) {
      for (int set = 0; set < 3; ++set) {
        Variants v;
        v.window = set == 0 ? 0 : std::max(2, len / (set == 1 ? 3 : 40));
        v.softcap = set == 2 ? 0.f : (peaked ? 8.f : 4.f);
        v.sinks = set != 1;
        v.q_len = set == 0 ? 1 : 4;
        v.ragged = set == 2;
        const std::vector<int32_t> lens = {len, std::max(4, len / 2 + 3)};
        const RandomProblem p = realistic_problem(v, lens, peaked, KvFormat::kE5M2, 7 + len + set);
        const int chunk = len > 1000 ? 512 : 0;
        const DecodeOutput ref = decode_reference(p.inputs());
        const ErrorModel model = decode_error_model(p.inputs(), ref, chunk);
        const Comparison right = compare(p, ref, model, simulate_kernel(p, chunk, Mutation::kNone));
        INFO("len " << len << (peaked ? ", peaked" : ", flat") << ", window " << v.window << ", cap " << v.softcap
                    << ", sinks " << v.sinks << ", q_len " << v.q_len << ": correct kernel " << right.first);
        REQUIRE(right.ok());
        for (const Mutation m : mutations) {
          if (!applies(m, p)) continue;
          const Comparison wrong = compare(p, ref, model, simulate_kernel(p, chunk, m));
          INFO(name(m) << ": worst error " << wrong.worst << " of the bound");
          CHECK_FALSE(wrong.ok());
          ++failed;
        }
      }
    }
  }
  CHECK(failed >= 60);
}

TEST_CASE("variants: the reference plus a perturbation of the modelled size passes, three times it fails",
          "[reference_variants]") {
  Variants v;
  v.window = 700, v.softcap = 6.f, v.sinks = true, v.q_len = 3, v.ragged = true;
  const RandomProblem p = realistic_problem(v, {2500, 900, 1}, false, KvFormat::kE5M2, 71);
  const DecodeOutput ref = decode_reference(p.inputs());
  const ErrorModel model = decode_error_model(p.inputs(), ref);
  const CompareBounds bounds;
  // Each element moved by `scale` of its bound without the output rounding (sigmas · σ +
  // fixed), the sign alternating; out then rounded to fp16.
  auto perturbed = [&](double scale) {
    SimulatedOutputs s;
    for (size_t i = 0; i < ref.out.size(); ++i) {
      const double e = scale * (bounds.sigmas * model.out_sigma[i] + model.out_fixed[i]);
      s.out.push_back(fp16_from_double(ref.out[i] + (i % 2 ? e : -e)));
    }
    for (size_t i = 0; i < ref.lse.size(); ++i)
      s.lse.push_back(static_cast<float>(ref.lse[i] + (i % 2 ? -1 : 1) * scale * lse_bound(model, i, bounds)));
    return s;
  };
  const Comparison at_model = compare(p, ref, model, perturbed(0.9));
  INFO(at_model.first);
  CHECK(at_model.ok());
  const Comparison beyond = compare(p, ref, model, perturbed(3));
  CHECK_FALSE(beyond.ok());
  CHECK(beyond.first.find(" token ") != std::string::npos);  // multi-token rows are named by token
}

TEST_CASE("error model: sinks far above or below every score give finite bounds", "[reference_variants]") {
  // As when q is rescaled after the sinks were drawn: e^(sink - max) overflows a double.
  for (float sink : {1e4f, 800.f, -800.f}) {
    RandomProblemOptions o = small_options(3, 4, 0, 0);
    o.seq_lens = {6, 0, 40};
    o.sinks = true, o.q_len = sink == 800.f ? 3 : 0;
    o.seq_lens[1] = o.q_len > 0 ? 2 : 0;
    RandomProblem p = make_random_problem(o, 73);
    for (float& s : p.sinks) s = sink;
    const DecodeOutput ref = decode_reference(p.inputs());
    const ErrorModel model = decode_error_model(p.inputs(), ref, 16);
    INFO("sink " << sink);
    for (const auto* v : {&model.out_sigma, &model.out_fixed, &model.lse_sigma, &model.lse_fixed})
      for (double x : *v) REQUIRE(std::isfinite(x));
    const Comparison c = compare(p, ref, model, simulate_kernel(p, 16, Mutation::kNone));
    INFO(c.first);
    CHECK(c.ok());
  }
}

TEST_CASE("comparator: empty rows with and without sinks, multi-token row layout", "[reference_variants]") {
  RandomProblemOptions o = small_options(3, 4, 0, 0);
  o.seq_lens = {6, 0, 3};
  for (bool sinks : {false, true}) {
    o.sinks = sinks;
    const RandomProblem p = make_random_problem(o, 61);
    const DecodeOutput ref = decode_reference(p.inputs());
    const ErrorModel model = decode_error_model(p.inputs(), ref);
    SimulatedOutputs ours = simulate_kernel(p, 0, Mutation::kNone);
    INFO((sinks ? "sinks" : "no sinks"));
    {
      const Comparison c = compare(p, ref, model, ours);
      INFO(c.first);
      CHECK(c.ok());
    }
    const size_t empty_lse = lse_at(p, 1, 2), empty_out = out_at(p, 1, 2, 3);
    if (sinks) {
      CHECK(ours.lse[empty_lse] != -INFINITY);
      SimulatedOutputs bad = ours;
      bad.lse[empty_lse] = -INFINITY;  // the sink forgotten on an empty row
      CHECK_FALSE(compare(p, ref, model, bad).ok());
      bad = ours;
      bad.lse[empty_lse] = p.sinks[2] + 1e-3f;
      CHECK_FALSE(compare(p, ref, model, bad).ok());
      // Without the layout's sinks the comparator wants −inf there.
      CHECK_FALSE(compare_with_reference(ref, model, expect_from_lengths(p.seq_lens), p.query_heads(), p.head_dim,
                                         {ours.out.data(), ours.lse.data(), 0u}, 0u)
                      .ok());
    } else {
      CHECK(ours.lse[empty_lse] == -INFINITY);
    }
    SimulatedOutputs bad = ours;
    bad.out[empty_out] = fp16_from_double(1e-7);  // not exactly 0
    CHECK_FALSE(compare(p, ref, model, bad).ok());
  }

  // Multi-token: the shapes follow q_indptr, and a mismatch names its token.
  o.seq_lens = {6, 0, 3};
  o.sinks = false, o.q_len = 2;
  const RandomProblem p = make_random_problem(o, 67);
  REQUIRE(p.q_indptr == std::vector<int32_t>({0, 2, 2, 4}));
  const DecodeOutput ref = decode_reference(p.inputs());
  const ErrorModel model = decode_error_model(p.inputs(), ref);
  REQUIRE(model.out_sigma.size() == ref.out.size());
  REQUIRE(model.lse_sigma.size() == 4u * p.query_heads());
  SimulatedOutputs ours = simulate_kernel(p, 0, Mutation::kNone);
  CHECK(compare(p, ref, model, ours).ok());
  ours.lse[lse_at(p, 3, 1)] += 0.5f;
  const Comparison c = compare(p, ref, model, ours);
  CHECK(c.mismatches == 1);
  CHECK(c.first.find("lse seq 2 token 1 head 1") == 0);
  // The single-token layout on multi-token outputs is a shape mismatch, not a pass.
  CHECK_FALSE(compare_with_reference(ref, model, expect_from_lengths(p.seq_lens), p.query_heads(), p.head_dim,
                                     {ours.out.data(), ours.lse.data(), 0u}, 0u)
                  .ok());
}
