// Tests of the float64 decode reference and of the random problems built to check kernels.
#include <catch2/catch.hpp>

#include <vxqa/testing/decode_reference.h>
#include <vxqa/testing/random_problem.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

using namespace vxqa::reference;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// |got - want| ≤ tol · (1 + |want|) everywhere; an infinite `want` must match exactly.
void require_close(const std::vector<double>& got, const std::vector<double>& want,
                   double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  size_t bad = got.size();
  for (size_t i = 0; i < got.size() && bad == got.size(); ++i) {
    const bool ok = std::isinf(want[i]) ? got[i] == want[i]
                                        : std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]));
    if (!ok) bad = i;
  }
  if (bad != got.size()) FAIL("index " << bad << ": got " << got[bad] << ", want " << want[bad]);
}

bool all_finite(const std::vector<double>& x) {
  for (double v : x)
    if (!std::isfinite(v)) return false;
  return true;
}

// A decode problem as dense values: K, V [B, T, Hkv, D] with T = the longest length.
struct Dense {
  int batch, kv_heads, group, head_dim, max_len;
  std::vector<int> lens;
  std::vector<double> q, k, v;  // q [B, Hq, D]
  double k_scale, v_scale, softmax_scale;

  size_t kv_index(int b, int t, int h, int d) const {
    return ((static_cast<size_t>(b) * max_len + t) * kv_heads + h) * head_dim + d;
  }
};

// The textbook formula, without the max shift (the scores here are small).
DecodeOutput brute_force(const Dense& p) {
  const int heads = p.kv_heads * p.group;
  DecodeOutput r;
  r.out.assign(static_cast<size_t>(p.batch) * heads * p.head_dim, 0.0);
  r.lse.assign(static_cast<size_t>(p.batch) * heads, -kInf);
  for (int b = 0; b < p.batch; ++b)
    for (int hq = 0; hq < heads; ++hq) {
      const int h = hq / p.group;
      const double* q = &p.q[(static_cast<size_t>(b) * heads + hq) * p.head_dim];
      std::vector<double> e(p.lens[b]);
      double total = 0;
      for (int t = 0; t < p.lens[b]; ++t) {
        double dot = 0;
        for (int d = 0; d < p.head_dim; ++d) dot += q[d] * (p.k[p.kv_index(b, t, h, d)] * p.k_scale);
        e[t] = std::exp(p.softmax_scale * dot);
        total += e[t];
      }
      if (p.lens[b] == 0) continue;
      r.lse[static_cast<size_t>(b) * heads + hq] = std::log(total);
      for (int d = 0; d < p.head_dim; ++d) {
        double acc = 0;
        for (int t = 0; t < p.lens[b]; ++t) acc += e[t] * p.v[p.kv_index(b, t, h, d)] * p.v_scale;
        r.out[(static_cast<size_t>(b) * heads + hq) * p.head_dim + d] = acc / total;
      }
    }
  return r;
}

// Out/lse index helpers for [B, Hq, D] and [B, Hq].
size_t out_index(const RandomProblem& p, int b, int hq, int d) {
  return (static_cast<size_t>(b) * p.query_heads() + hq) * p.head_dim + d;
}
size_t lse_index(const RandomProblem& p, int b, int hq) {
  return static_cast<size_t>(b) * p.query_heads() + hq;
}

double q_at(const RandomProblem& p, int b, int hq, int d) {
  return fp16_to_double(p.q[out_index(p, b, hq, d)]);
}

uint32_t nan_code(KvFormat f) { return f == KvFormat::kE5M2 ? 0xFFu : 0xFFFFu; }
uint32_t inf_code(KvFormat f) { return f == KvFormat::kE5M2 ? 0x7Cu : 0x7C00u; }

}  // namespace

TEST_CASE("fp16 and E5M2 decode known codes", "[reference]") {
  CHECK(e5m2_to_double(0x00) == 0.0);
  CHECK(std::signbit(e5m2_to_double(0x80)));
  CHECK(e5m2_to_double(0x3C) == 1.0);
  CHECK(e5m2_to_double(0xBC) == -1.0);
  CHECK(e5m2_to_double(0x42) == 3.0);
  CHECK(e5m2_to_double(0x39) == 0.625);
  CHECK(e5m2_to_double(0x04) == std::ldexp(1.0, -14));     // smallest normal
  CHECK(e5m2_to_double(0x01) == std::ldexp(1.0, -16));     // smallest subnormal
  CHECK(e5m2_to_double(0x83) == -std::ldexp(3.0, -16));
  CHECK(e5m2_to_double(0x7B) == 57344.0);                   // largest finite
  CHECK(e5m2_to_double(0x7C) == kInf);
  CHECK(e5m2_to_double(0xFC) == -kInf);
  for (uint8_t b : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) CHECK(std::isnan(e5m2_to_double(b)));

  CHECK(fp16_to_double(0x3C00) == 1.0);
  CHECK(fp16_to_double(0xC000) == -2.0);
  CHECK(fp16_to_double(0x3555) == 0.333251953125);
  CHECK(fp16_to_double(0x7BFF) == 65504.0);
  CHECK(fp16_to_double(0x0400) == std::ldexp(1.0, -14));
  CHECK(fp16_to_double(0x0001) == std::ldexp(1.0, -24));
  CHECK(fp16_to_double(0x03FF) == std::ldexp(1023.0, -24));
  CHECK(std::signbit(fp16_to_double(0x8000)));
  CHECK(fp16_to_double(0x7C00) == kInf);
  CHECK(fp16_to_double(0xFC00) == -kInf);
  CHECK(std::isnan(fp16_to_double(0x7E00)));
  CHECK(std::isnan(fp16_to_double(0x7C01)));

  // E5M2 is the top byte of an fp16.
  for (int b = 0; b < 256; ++b) {
    const double e = e5m2_to_double(static_cast<uint8_t>(b));
    const double h = fp16_to_double(static_cast<uint16_t>(b << 8));
    INFO("code " << b);
    CHECK(((std::isnan(e) && std::isnan(h)) || e == h));
  }
}

TEST_CASE("encoders round to nearest even and round-trip every code", "[reference]") {
  // Round trip, and at each midpoint between neighbours: ties to the even code, and one ulp
  // of double either side of the midpoint goes to the nearer neighbour.
  for (int c = 0; c < 0x7C; ++c) {
    INFO("E5M2 code " << c);
    const double lo = e5m2_to_double(static_cast<uint8_t>(c));
    REQUIRE(e5m2_from_double(lo) == c);
    REQUIRE(e5m2_from_double(-lo) == (c | 0x80));
    if (c == 0x7B) break;
    const double mid = (lo + e5m2_to_double(static_cast<uint8_t>(c + 1))) / 2;
    REQUIRE(e5m2_from_double(mid) == (c % 2 == 0 ? c : c + 1));
    REQUIRE(e5m2_from_double(std::nextafter(mid, kInf)) == c + 1);
    REQUIRE(e5m2_from_double(std::nextafter(mid, 0.0)) == c);
  }
  for (int c = 0; c < 0x7C00; ++c) {
    const double lo = fp16_to_double(static_cast<uint16_t>(c));
    const double mid = (lo + fp16_to_double(static_cast<uint16_t>(c + 1))) / 2;
    const bool ok = fp16_from_double(lo) == c && fp16_from_double(-lo) == (c | 0x8000) &&
                    (c == 0x7BFF || (fp16_from_double(mid) == (c % 2 == 0 ? c : c + 1) &&
                                     fp16_from_double(std::nextafter(mid, kInf)) == c + 1 &&
                                     fp16_from_double(std::nextafter(mid, 0.0)) == c));
    if (!ok) FAIL("fp16 code " << c);
  }
  CHECK(e5m2_from_double(1.125) == 0x3C);  // tie between 0x3C and 0x3D: even
  CHECK(e5m2_from_double(1.375) == 0x3E);  // tie between 0x3D and 0x3E: even
  CHECK(e5m2_from_double(std::ldexp(1.0, -17)) == 0x00);  // half the smallest subnormal
  CHECK(e5m2_from_double(std::ldexp(3.0, -17)) == 0x02);
  CHECK(e5m2_from_double(-std::ldexp(1.0, -30)) == 0x80);

  // Overflow: E5M2 satfinite clamps (inf too), nosat and fp16 go to inf at the halfway point.
  CHECK(e5m2_from_double(1e6) == 0x7B);
  CHECK(e5m2_from_double(-kInf) == 0xFB);
  CHECK(e5m2_from_double(61440.0) == 0x7B);
  CHECK(e5m2_from_double(61440.0, false) == 0x7C);
  CHECK(e5m2_from_double(61439.0, false) == 0x7B);
  CHECK(e5m2_from_double(-kInf, false) == 0xFC);
  CHECK(fp16_from_double(65520.0) == 0x7C00);
  CHECK(fp16_from_double(65519.0) == 0x7BFF);
  CHECK(fp16_from_double(-1e300) == 0xFC00);
  CHECK(std::isnan(e5m2_to_double(e5m2_from_double(std::nan("")))));
  CHECK(std::isnan(fp16_to_double(fp16_from_double(std::nan("")))));
}

TEST_CASE("hand-built cache: literal addresses, garbage everywhere else", "[reference]") {
  // Hkv = 2, D = 2, page_size = 2, 3 pages; strides page 20, token 8, head 3 (in elements).
  // Every element not written below is an E5M2 NaN.
  std::vector<uint8_t> k(60, 0xFF), v(60, 0xFF);
  // Sequence 0: 3 tokens in pages {2, 0}: token 0 at 40, token 1 at 48, token 2 at 0 (+3 for
  // head 1). Sequence 1 is empty. Table entries past the pages are out of range.
  const int32_t table[] = {2, 0, 99, -7, /* sequence 1 */ -1, 1 << 30, 3, -7};
  const int32_t lens[] = {3, 0};
  const uint16_t q[] = {0x3C00, 0x0000, 0x3C00, 0x3C00};  // head 0 [1, 0], head 1 [1, 1]
  for (int base : {40, 48, 0})
    for (int i : {0, 1, 3, 4}) k[base + i] = 0x00;
  k[48] = 0x3C;  // head 0 token 1: [1, 0] so its score is softmax_scale
  // V head 0: [1, 2], [3, 4], [0.5, -1]; head 1: [4, 4], [-1, -1], [0.5, 2].
  v[40] = 0x3C, v[41] = 0x40, v[48] = 0x42, v[49] = 0x44, v[0] = 0x38, v[1] = 0xBC;
  v[43] = 0x44, v[44] = 0x44, v[51] = 0xBC, v[52] = 0xBC, v[3] = 0x38, v[4] = 0x40;

  DecodeInputs in;
  in.batch = 2, in.kv_heads = 2, in.group = 1, in.head_dim = 2, in.page_size = 2;
  in.num_pages = 3, in.max_pages = 4;
  in.q = q, in.k = k.data(), in.v = v.data(), in.format = KvFormat::kE5M2;
  in.page_stride = 20, in.token_stride = 8, in.head_stride = 3;
  in.block_table = table, in.table_stride = 4, in.seq_lens = lens;
  in.softmax_scale = static_cast<float>(std::log(2.0));
  const DecodeOutput r = decode_reference(in);

  const double w = std::exp(static_cast<double>(in.softmax_scale));  // ≈ 2: token 1's weight
  require_close(r.out, {(1 + 3 * w + 0.5) / (2 + w), (2 + 4 * w - 1) / (2 + w),  // head 0
                        (4 - 1 + 0.5) / 3, (4 - 1 + 2) / 3.0,                  // head 1: mean
                        0, 0, 0, 0});
  require_close(r.lse, {std::log(2 + w), std::log(3.0), -kInf, -kInf});
}

TEST_CASE("reference matches a dense brute force on random pages, tables and strides",
          "[reference]") {
  const KvFormat format = GENERATE(KvFormat::kE5M2, KvFormat::kFp16);
  const CacheLayout layout =
      GENERATE(CacheLayout::kPackedNhd, CacheLayout::kVllm, CacheLayout::kRandomStrides);
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    std::mt19937_64 rng(seed);
    auto pick = [&rng](std::vector<int> xs) { return xs[rng() % xs.size()]; };
    RandomProblemOptions o;
    o.format = format;
    o.layout = layout;
    o.batch = pick({1, 2, 3});
    o.kv_heads = pick({1, 2, 3});
    o.group = pick({1, 2, 5});
    o.head_dim = pick({1, 3, 8, 16});
    o.page_size = pick({1, 2, 3, 7});
    o.max_seq_len = pick({1, 5, 30});
    o.stride_align = pick({1, 4});
    o.k_scale = pick({1, 3}) * 0.25f;
    o.v_scale = pick({1, 5}) * 0.5f;
    o.softmax_scale = pick({1, 3}) * 0.3f;
    RandomProblem p = make_random_problem(o, seed);

    Dense dense{p.batch, p.kv_heads, p.group, p.head_dim, o.max_seq_len,
                std::vector<int>(p.seq_lens.begin(), p.seq_lens.end()),
                {}, {}, {}, p.k_scale, p.v_scale, p.softmax_scale};
    for (uint16_t x : p.q) dense.q.push_back(fp16_to_double(x));
    // Fresh values, rounded to the format, written into the pages through set_k / set_v.
    dense.k.assign(static_cast<size_t>(p.batch) * dense.max_len * p.kv_heads * p.head_dim, 0.0);
    dense.v = dense.k;
    std::uniform_real_distribution<double> value(-2.0, 2.0);
    for (int b = 0; b < p.batch; ++b)
      for (int t = 0; t < p.seq_lens[b]; ++t)
        for (int h = 0; h < p.kv_heads; ++h)
          for (int d = 0; d < p.head_dim; ++d) {
            p.set_k(b, t, h, d, value(rng));
            p.set_v(b, t, h, d, value(rng));
            dense.k[dense.kv_index(b, t, h, d)] = p.k_at(b, t, h, d);
            dense.v[dense.kv_index(b, t, h, d)] = p.v_at(b, t, h, d);
          }

    INFO("seed " << seed << ", B " << p.batch << ", Hkv " << p.kv_heads << ", G " << p.group
                 << ", D " << p.head_dim << ", page " << p.page_size);
    const DecodeOutput want = brute_force(dense);
    const DecodeOutput got = decode_reference(p.inputs());
    require_close(got.out, want.out);
    require_close(got.lse, want.lse);
  }
}

TEST_CASE("equal keys: out is the mean of the V rows, lse = s + log(len)", "[reference]") {
  const KvFormat format = GENERATE(KvFormat::kE5M2, KvFormat::kFp16);
  RandomProblemOptions o;
  o.format = format;
  o.batch = 3, o.kv_heads = 2, o.group = 3, o.head_dim = 16, o.page_size = 5;
  o.seq_lens = {1, 7, 40};
  o.k_scale = 0.75f, o.v_scale = 1.5f;
  RandomProblem p = make_random_problem(o, 7);
  for (int b = 0; b < p.batch; ++b)
    for (int t = 1; t < p.seq_lens[b]; ++t)
      for (int h = 0; h < p.kv_heads; ++h)
        for (int d = 0; d < p.head_dim; ++d) p.set_k(b, t, h, d, p.k_at(b, 0, h, d));

  const DecodeOutput r = decode_reference(p.inputs());
  std::vector<double> out(r.out.size()), lse(r.lse.size());
  for (int b = 0; b < p.batch; ++b)
    for (int hq = 0; hq < p.query_heads(); ++hq) {
      const int h = hq / p.group, len = p.seq_lens[b];
      double dot = 0;
      for (int d = 0; d < p.head_dim; ++d) {
        dot += q_at(p, b, hq, d) * p.k_at(b, 0, h, d) * p.k_scale;
        double sum = 0;
        for (int t = 0; t < len; ++t) sum += p.v_at(b, t, h, d);
        out[out_index(p, b, hq, d)] = sum / len * p.v_scale;
      }
      lse[lse_index(p, b, hq)] = p.softmax_scale * dot + std::log(len);
    }
  require_close(r.out, out);
  require_close(r.lse, lse);
}

TEST_CASE("one dominant key selects its V row", "[reference]") {
  const KvFormat format = GENERATE(KvFormat::kE5M2, KvFormat::kFp16);
  RandomProblemOptions o;
  o.format = format;
  o.batch = 1, o.kv_heads = 1, o.group = 1, o.head_dim = 8, o.page_size = 3;
  o.seq_lens = {20};
  o.softmax_scale = 4.0f;
  const RandomProblem base = make_random_problem(o, 11);
  // Every position in turn: key j = 2·sign(q) scores 4 · 2·Σ|q| ≈ 50; the others score 0
  // and weigh e^-50 together.
  for (int j = 0; j < base.seq_lens[0]; ++j) {
    RandomProblem p = base;
    double abs_sum = 0;
    for (int t = 0; t < p.seq_lens[0]; ++t)
      for (int d = 0; d < p.head_dim; ++d) {
        const double qd = q_at(p, 0, 0, d);
        if (t == j) abs_sum += std::abs(qd);
        p.set_k(0, t, 0, d, t == j ? (qd < 0 ? -2.0 : 2.0) : 0.0);
      }
    INFO("dominant token " << j << ", score " << p.softmax_scale * 2 * abs_sum);
    REQUIRE(p.softmax_scale * 2 * abs_sum > 40);
    const DecodeOutput r = decode_reference(p.inputs());
    std::vector<double> row(p.head_dim);
    for (int d = 0; d < p.head_dim; ++d) row[d] = p.v_at(0, j, 0, d);
    require_close(r.out, row);
    require_close(r.lse, {p.softmax_scale * 2 * abs_sum});
  }
}

TEST_CASE("length 0 gives zeros and lse -inf", "[reference]") {
  RandomProblemOptions o;
  o.batch = 3, o.kv_heads = 2, o.group = 2, o.head_dim = 8;
  o.seq_lens = {5, 0, 9};
  const RandomProblem p = make_random_problem(o, 3);
  const DecodeOutput r = decode_reference(p.inputs());
  for (int hq = 0; hq < p.query_heads(); ++hq) {
    CHECK(r.lse[lse_index(p, 1, hq)] == -kInf);
    CHECK(std::isfinite(r.lse[lse_index(p, 0, hq)]));
    for (int d = 0; d < p.head_dim; ++d) CHECK(r.out[out_index(p, 1, hq, d)] == 0.0);
  }

  // All empty: nothing of the cache or the table is read, so null pointers are fine.
  DecodeInputs in = p.inputs();
  const int32_t empty[] = {0, 0, 0};
  in.seq_lens = empty, in.k = nullptr, in.v = nullptr, in.block_table = nullptr;
  const DecodeOutput e = decode_reference(in);
  require_close(e.out, std::vector<double>(e.out.size(), 0.0), 0.0);
  require_close(e.lse, std::vector<double>(e.lse.size(), -kInf));

  in.batch = 0;
  const DecodeOutput none = decode_reference(in);
  CHECK(none.out.empty());
  CHECK(none.lse.empty());
}

TEST_CASE("garbage past the end of each sequence never changes the output", "[reference]") {
  const KvFormat format = GENERATE(KvFormat::kE5M2, KvFormat::kFp16);
  RandomProblemOptions o;
  o.format = format;
  o.batch = 4, o.kv_heads = 2, o.group = 3, o.head_dim = 8, o.page_size = 5;
  o.min_seq_len = 1, o.max_seq_len = 23;
  o.garbage_seed = 1;
  const RandomProblem p = make_random_problem(o, 5);
  o.garbage_seed = 2;
  const RandomProblem other = make_random_problem(o, 5);

  // The garbage is real: NaN codes in the cache, page ids out of range in the table, and the
  // two garbage seeds differ only there.
  int nans = 0, wild_pages = 0;
  for (size_t i = 0; i < p.cache.size(); i += element_bytes(format)) {
    uint16_t bits = p.cache[i];
    if (format == KvFormat::kFp16) std::memcpy(&bits, &p.cache[i], 2);
    nans += std::isnan(format == KvFormat::kE5M2 ? e5m2_to_double(static_cast<uint8_t>(bits))
                                                 : fp16_to_double(bits));
  }
  for (int32_t page : p.block_table) wild_pages += page < 0 || page >= p.num_pages;
  CHECK(nans > 10);
  CHECK(wild_pages > 0);
  CHECK(p.cache != other.cache);
  CHECK(p.block_table != other.block_table);
  CHECK(p.q == other.q);

  const DecodeOutput r = decode_reference(p.inputs());
  REQUIRE(all_finite(r.out));
  REQUIRE(all_finite(r.lse));
  const DecodeOutput r_other = decode_reference(other.inputs());
  CHECK(r_other.out == r.out);
  CHECK(r_other.lse == r.lse);

  // Every element outside the sequences' tokens set to NaN, then to +inf: same bits out.
  for (uint32_t fill : {nan_code(format), inf_code(format)}) {
    RandomProblem f = p;
    const int64_t elements = static_cast<int64_t>(f.cache.size()) / element_bytes(format);
    for (int64_t i = 0; i < elements; ++i) f.store(i, fill);
    for (int b = 0; b < p.batch; ++b)
      for (int t = 0; t < p.seq_lens[b]; ++t)
        for (int h = 0; h < p.kv_heads; ++h)
          for (int d = 0; d < p.head_dim; ++d) {
            f.set_k(b, t, h, d, p.k_at(b, t, h, d));
            f.set_v(b, t, h, d, p.v_at(b, t, h, d));
          }
    const DecodeOutput rf = decode_reference(f.inputs());
    CHECK(rf.out == r.out);
    CHECK(rf.lse == r.lse);
  }
}

TEST_CASE("scales: k_scale folds into the softmax scale, v_scale scales out", "[reference]") {
  const KvFormat format = GENERATE(KvFormat::kE5M2, KvFormat::kFp16);
  RandomProblemOptions o;
  o.format = format;
  o.batch = 2, o.kv_heads = 2, o.group = 2, o.head_dim = 16, o.min_seq_len = 1;
  o.softmax_scale = 0.3f;
  const RandomProblem p = make_random_problem(o, 9);
  const DecodeOutput r = decode_reference(p.inputs());

  DecodeInputs in = p.inputs();
  in.k_scale = 2.0f;
  const DecodeOutput k2 = decode_reference(in);
  in.k_scale = 1.0f;
  in.softmax_scale = 0.6f;
  const DecodeOutput s2 = decode_reference(in);
  require_close(k2.out, s2.out);
  require_close(k2.lse, s2.lse);
  // ... and doubling either one really changes the answer.
  CHECK(std::abs(k2.lse[0] - r.lse[0]) > 1e-3);

  in = p.inputs();
  in.v_scale = 3.0f;
  const DecodeOutput v3 = decode_reference(in);
  std::vector<double> tripled = r.out;
  for (double& x : tripled) x *= 3;
  require_close(v3.out, tripled);
  require_close(v3.lse, r.lse, 0.0);
}

TEST_CASE("GQA: query head hq reads KV head hq / G", "[reference]") {
  RandomProblemOptions o;
  o.batch = 2, o.kv_heads = 3, o.group = 4, o.head_dim = 8, o.min_seq_len = 1;
  const RandomProblem p = make_random_problem(o, 13);
  const DecodeOutput r = decode_reference(p.inputs());

  // Member g of every group on its own, as plain multi-head attention (G = 1): the same cache,
  // query heads {h·G + g}.
  for (int g = 0; g < p.group; ++g) {
    std::vector<uint16_t> q;
    std::vector<double> out, lse;
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.kv_heads; ++h) {
        const int hq = h * p.group + g;
        lse.push_back(r.lse[lse_index(p, b, hq)]);
        for (int d = 0; d < p.head_dim; ++d) {
          q.push_back(p.q[out_index(p, b, hq, d)]);
          out.push_back(r.out[out_index(p, b, hq, d)]);
        }
      }
    DecodeInputs in = p.inputs();
    in.group = 1;
    in.q = q.data();
    const DecodeOutput single = decode_reference(in);
    INFO("group member " << g);
    require_close(single.out, out, 0.0);
    require_close(single.lse, lse, 0.0);
  }
}

TEST_CASE("random problems: pages permuted, token rows disjoint and inside the buffer",
          "[reference]") {
  const CacheLayout layout =
      GENERATE(CacheLayout::kPackedNhd, CacheLayout::kVllm, CacheLayout::kRandomStrides);
  RandomProblemOptions o;
  o.layout = layout;
  o.format = KvFormat::kFp16;
  o.batch = 3, o.kv_heads = 2, o.head_dim = 6, o.page_size = 3, o.max_seq_len = 20;
  o.stride_align = 4;
  const RandomProblem p = make_random_problem(o, 17);
  CHECK(p.page_stride % 4 == 0);
  CHECK(p.token_stride % 4 == 0);
  CHECK(p.head_stride % 4 == 0);
  CHECK(p.k_offset % 4 == 0);
  CHECK(p.v_offset % 4 == 0);
  CHECK(make_random_problem(o, 17).cache == p.cache);  // deterministic

  std::set<int32_t> pages;
  std::set<int64_t> elements;
  size_t used_pages = 0, used_elements = 0;
  for (int b = 0; b < p.batch; ++b) {
    const int used = (p.seq_lens[b] + p.page_size - 1) / p.page_size;
    for (int i = 0; i < used; ++i, ++used_pages) {
      const int32_t page = p.block_table[b * p.table_stride + i];
      REQUIRE(page >= 0);
      REQUIRE(page < p.num_pages);
      pages.insert(page);
    }
    for (int t = 0; t < p.seq_lens[b]; ++t)
      for (int h = 0; h < p.kv_heads; ++h)
        for (int d = 0; d < p.head_dim; ++d, used_elements += 2) {
          elements.insert(p.k_offset + p.element_index(b, t, h, d));
          elements.insert(p.v_offset + p.element_index(b, t, h, d));
        }
  }
  CHECK(pages.size() == used_pages);        // no page given twice
  CHECK(elements.size() == used_elements);  // no element shared between tokens, heads, K, V
  REQUIRE(!elements.empty());
  CHECK(*elements.begin() >= 0);
  CHECK(*elements.rbegin() < static_cast<int64_t>(p.cache.size()) / 2);  // fp16: 2 bytes each
}

TEST_CASE("shared prefix pages: full pages of an earlier sequence, the rest distinct",
          "[reference]") {
  RandomProblemOptions o;
  o.batch = 8, o.head_dim = 4, o.page_size = 4, o.min_seq_len = 8, o.max_seq_len = 30;
  o.shared_prefix_pages = 3;
  size_t shared = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const RandomProblem p = make_random_problem(o, seed);
    std::set<int32_t> owned;  // pages that appear first in some sequence
    size_t owned_count = 0;
    for (int b = 0; b < p.batch; ++b) {
      const int used = (p.seq_lens[b] + p.page_size - 1) / p.page_size;
      for (int i = 0; i < used; ++i) {
        const int32_t page = p.block_table[b * p.table_stride + i];
        REQUIRE(page >= 0);
        REQUIRE(page < p.num_pages);
        // A page seen before is a prefix page: a full page at the same column, for both.
        bool seen_before = false;
        for (int a = 0; a < b; ++a) {
          if (i < (p.seq_lens[a] + p.page_size - 1) / p.page_size &&
              p.block_table[a * p.table_stride + i] == page) {
            seen_before = true;
            CHECK((i + 1) * p.page_size <= p.seq_lens[a]);
          }
        }
        if (seen_before) {
          ++shared;
          CHECK(i < o.shared_prefix_pages);
          CHECK((i + 1) * p.page_size <= p.seq_lens[b]);
        } else {
          owned.insert(page);
          ++owned_count;
        }
      }
    }
    CHECK(owned.size() == owned_count);  // no page given twice except as a prefix
    REQUIRE_NOTHROW(decode_reference(p.inputs()));
  }
  CHECK(shared > 0);
}

TEST_CASE("inputs the reference cannot read safely throw", "[reference]") {
  RandomProblemOptions o;
  o.batch = 2, o.head_dim = 4, o.page_size = 4, o.seq_lens = {6, 3};
  const RandomProblem p = make_random_problem(o, 19);
  REQUIRE_NOTHROW(decode_reference(p.inputs()));

  RandomProblem bad = p;
  bad.block_table[1] = p.num_pages;  // sequence 0's second page
  CHECK_THROWS_AS(decode_reference(bad.inputs()), std::invalid_argument);
  bad = p;
  bad.seq_lens[1] = p.max_pages * p.page_size + 1;
  CHECK_THROWS_AS(decode_reference(bad.inputs()), std::invalid_argument);
  bad = p;
  bad.seq_lens[0] = -1;
  CHECK_THROWS_AS(decode_reference(bad.inputs()), std::invalid_argument);
  DecodeInputs in = p.inputs();
  in.page_size = 0;
  CHECK_THROWS_AS(decode_reference(in), std::invalid_argument);
}
