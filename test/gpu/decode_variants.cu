// Attention variants through the public API, against the float64 reference: the sliding
// window, the logit soft-cap and attention sinks, each alone and together, under one chunk
// and many, on both atoms (this file is in both GPU binaries). Windows shorter than a page,
// longer than the context and cutting mid-page; garbage block-table ids and NaN rows before
// the window, which must never be read; a plan cut over the window; sinks of a sequence
// without tokens; NaN and inf inputs under each variant.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>
#include "gpu/decode_harness.cuh"

namespace {

namespace opt = vxqa::opt;
using vxqa::KvType;
using vxqa_test::DeviceBuffer;
using vxqa_test::DeviceProblem;
using vxqa_test::RandomProblem;
using vxqa_test::RandomProblemOptions;

// Every flag compiled in, each on or off at run time: the Config a Decoder picks for a model
// with any variant. Page 16 at compile time takes the SM80 body's one-page path (16-aligned
// tiles whose rows below the window are masked and zeroed); the run-time page size of the
// others takes it or the per-lane path by the page.
using AllD128 = vxqa::DecodeConfig<128, KvType::kE5M2, opt::Variant<vxqa::kAllVariantFlags>>;
using AllD64Fp16Page16 =
    vxqa::DecodeConfig<64, KvType::kFp16, opt::PageSize<16>, opt::Variant<vxqa::kAllVariantFlags>>;
// The window alone, on the seed shape's Config.
using WindowD256 = vxqa::DecodeConfig<256, KvType::kE5M2, opt::Variant<vxqa::kSlidingWindow>>;

struct VariantRun {
  int window = 0;
  float softcap = 0.f;
  bool sinks = false;
};

int longest(const RandomProblem& p) { return std::max(1, *std::max_element(p.seq_lens.begin(), p.seq_lens.end())); }

// Runs `p` (its variant values as the problem drew them) under a plan of `chunk_tokens`
// (0: the device's choice) and `max_window`, and checks it against the reference.
template <class Config>
double variant_matches_reference(const RandomProblem& p, int chunk_tokens, int max_window = 0) {
  const DeviceProblem d(p);
  vxqa::DecodePlan plan;
  const vxqa::Status made = vxqa::make_decode_plan<Config>(p.batch, longest(p), p.kv_heads, p.group,
                                                          vxqa_test::sm_count(), &plan, chunk_tokens, 4, 1, max_window);
  INFO(made.message());
  REQUIRE(made.ok());
  const vxqa::DecodeParams params = vxqa_test::make_params(p, d, nullptr, nullptr);  // with the variant
  INFO("D " << p.head_dim << " G " << p.group << " page " << p.page_size << " window " << p.window << " cap "
            << p.logit_softcap << " sinks " << !p.sinks.empty() << " chunk " << plan.chunk_tokens << " chunks "
            << plan.num_chunks);
  return vxqa_test::check_against_reference(p, vxqa_test::run_params<Config>(params, plan, p.batch));
}

template <class Config>
RandomProblemOptions variant_options(const VariantRun& v, int page, std::vector<int32_t> lens) {
  RandomProblemOptions o = vxqa_test::aligned_options<Config>();
  o.kv_heads = 2;
  o.group = 5;
  o.page_size = page;
  o.seq_lens = std::move(lens);
  o.batch = int(o.seq_lens.size());
  o.window = v.window;
  o.logit_softcap = v.softcap;
  o.sinks = v.sinks;
  o.k_scale = 0.75f;
  o.v_scale = 1.25f;
  return o;
}

// Each variant alone and together, under one chunk and under chunks of one SM80 round.
template <class Config>
void every_combination(uint64_t seed) {
  const std::vector<VariantRun> runs = {{0, 0.f, false}, {37, 0.f, false},  {0, 20.f, false}, {0, 0.f, true},
                                        {37, 20.f, true}, {100, 0.f, true}, {5, 30.f, false}};
  for (const VariantRun& v : runs) {
    for (int chunk : {0, Config::kChunkMultiple}) {
      const RandomProblemOptions o = variant_options<Config>(v, 16, {1, 5, 36, 37, 38, 100, 333, 1025});
      variant_matches_reference<Config>(vxqa::reference::make_random_problem(o, seed++), chunk);
    }
  }
}

// Windows shorter than a page, of one key, cutting mid-page, and longer than the context,
// on page sizes that take either SM80 path.
template <class Config>
void window_edges(uint64_t seed) {
  for (int page : {16, 7, 32}) {
    for (int window : {1, 5, 16, 17, 37, 64, 1000, 1 << 20}) {
      for (int chunk : {0, Config::kChunkMultiple}) {
        const RandomProblemOptions o =
            variant_options<Config>({window, 0.f, false}, page, {1, 2, 15, 16, 17, 63, 64, 65, 300, 777});
        variant_matches_reference<Config>(vxqa::reference::make_random_problem(o, seed++), chunk);
      }
    }
  }
}

}  // namespace

TEST_CASE("every combination of window, soft-cap and sinks matches the reference", "[decode_variants]") {
  every_combination<AllD128>(12000);
  every_combination<AllD64Fp16Page16>(12100);
}


TEST_CASE("sliding windows at every edge match the reference", "[decode_variants]") {
  window_edges<AllD128>(12200);
  window_edges<WindowD256>(12400);
}

namespace {

// Pages wholly before the window get block-table ids outside the pool, and the window's
// first page NaN in its rows before the window, in K and V: nothing of them may be read
// (no error bit) or reach the output.
template <class Config>
void nothing_before_the_window_is_read(int page, uint64_t seed) {
  for (int chunk : {0, Config::kChunkMultiple}) {
    const int window = 3 * page + 5;
    RandomProblemOptions o = variant_options<Config>({window, 0.f, false}, page, {1000, 10 * page + 3, 777});
    RandomProblem p = vxqa::reference::make_random_problem(o, seed++);
    const uint32_t nan_code = p.format == vxqa::reference::KvFormat::kE5M2 ? 0x7Fu : 0x7E00u;
    for (int b = 0; b < p.batch; ++b) {
      const int first = std::max(0, p.seq_lens[b] - window);
      for (int t = first / page * page; t < first; ++t)  // the window's first page, before it
        for (int h = 0; h < p.kv_heads; ++h)
          for (int dim = 0; dim < p.head_dim; ++dim) {
            p.store(p.k_offset + p.element_index(b, t, h, dim), nan_code);
            p.store(p.v_offset + p.element_index(b, t, h, dim), nan_code);
          }
      for (int page_index = 0; page_index < first / page; ++page_index)
        p.block_table[b * p.table_stride + page_index] = page_index % 2 ? -7 : p.num_pages + page_index;
    }
    variant_matches_reference<Config>(p, chunk);
  }
}

}  // namespace

TEST_CASE("nothing before the window is read: bad page ids and NaN rows there change nothing",
          "[decode_variants]") {
  nothing_before_the_window_is_read<AllD128>(16, 12600);
  nothing_before_the_window_is_read<AllD128>(12, 12610);
  nothing_before_the_window_is_read<AllD64Fp16Page16>(16, 12620);
  nothing_before_the_window_is_read<WindowD256>(32, 12630);
}

// A plan for windows of at most max_window keys cuts its chunks over the window: fewer
// chunks than the context needs, and the same answers.
TEST_CASE("a plan cut over the window gives the window's answers", "[decode_variants]") {
  uint64_t seed = 12700;
  for (int window : {1, 100, 512, 4096}) {
    const RandomProblemOptions o =
        variant_options<AllD128>({window, 0.f, true}, 16, {window, window + 1, 3 * window + 17, 5000, 20});
    const RandomProblem p = vxqa::reference::make_random_problem(o, seed++);
    vxqa::DecodePlan whole, windowed;
    REQUIRE(vxqa::make_decode_plan<AllD128>(p.batch, 5000, 2, 5, vxqa_test::sm_count(), &whole, 64).ok());
    REQUIRE(vxqa::make_decode_plan<AllD128>(p.batch, 5000, 2, 5, vxqa_test::sm_count(), &windowed, 64, 4, 1, window)
                .ok());
    INFO("window " << window << ": " << windowed.num_chunks << " chunks against " << whole.num_chunks);
    CHECK(windowed.num_chunks == (std::min(5000, window + 15) + 63) / 64);
    CHECK(windowed.num_chunks <= whole.num_chunks);
    variant_matches_reference<AllD128>(p, 64, window);
  }
}

namespace {

// A sequence without tokens gives O = 0 and LSE = its sink (the sink alone is the
// denominator), to fp32 rounding; under one chunk and many.
template <class Config>
void sinks_without_tokens(uint64_t seed) {
  for (int chunk : {0, Config::kChunkMultiple}) {
    RandomProblemOptions o = variant_options<Config>({0, 0.f, true}, 16, {0, 50, 0, 300});
    RandomProblem p = vxqa::reference::make_random_problem(o, seed++);
    p.sinks.back() = -std::numeric_limits<float>::infinity();  // a head without a sink: LSE -inf
    const DeviceProblem d(p);
    vxqa::DecodePlan plan;
    REQUIRE(vxqa::make_decode_plan<Config>(p.batch, 300, p.kv_heads, p.group, vxqa_test::sm_count(), &plan, chunk)
                .ok());
    const vxqa::DecodeParams params = vxqa_test::make_params(p, d, nullptr, nullptr);
    const vxqa_test::DecodeResult r = vxqa_test::run_params<Config>(params, plan, p.batch);
    CHECK(r.errors == 0u);
    const int hq = p.query_heads();
    for (int b : {0, 2})
      for (int h = 0; h < hq; ++h) {
        INFO("seq " << b << " head " << h << " chunks " << plan.num_chunks);
        // The kernels take the sink to base 2 and back: a few fp32 roundings.
        if (std::isinf(p.sinks[h]))
          CHECK(r.lse[b * hq + h] == p.sinks[h]);
        else
          CHECK(std::fabs(r.lse[b * hq + h] - p.sinks[h]) <= 0x1p-20 * std::max(1.f, std::fabs(p.sinks[h])));
        for (int dim = 0; dim < p.head_dim; ++dim) CHECK(r.out[(size_t(b) * hq + h) * p.head_dim + dim] == 0);
      }
  }
}

}  // namespace

TEST_CASE("sinks of a sequence without tokens: O = 0, LSE = the sink (-inf for a head without one)", "[decode_variants]") {
  sinks_without_tokens<AllD128>(12800);
  sinks_without_tokens<AllD64Fp16Page16>(12810);
}

namespace {

// Non-finite inputs under each variant: what the variant changes about them, from the float64
// reference (whose pattern each case first checks, so that the test checks what it says).
//  - sinks: a head whose every score is -inf has the sink as its only weight (O = 0, LSE = the
//    sink), where without one it is NaN (0 / 0); a head whose sink is -inf keeps the NaN;
//  - soft-cap: cap · tanh(±inf / cap) = ±cap, so an infinite score is a finite logit and its
//    head stays finite, where without a cap +inf makes it NaN; a NaN score stays NaN;
//  - window: an infinite K inside the window makes its group NaN, one before it nothing;
//  - all three: a NaN V inside the window is NaN at its dim, one before it nothing.
// Under one chunk and chunks of one SM80 round (the masked chunks then are whole chunks).
template <class Config>
void non_finite_under_the_variants(uint64_t seed) {
  const int D = Config::kHeadDim;
  const float inf = std::numeric_limits<float>::infinity();
  auto code = [](const RandomProblem& p, double x) -> uint32_t {
    const bool e5m2 = p.format == vxqa::reference::KvFormat::kE5M2;
    if (std::isnan(x)) return e5m2 ? 0x7Fu : 0x7E00u;
    return x > 0 ? (e5m2 ? 0x7Cu : 0x7C00u) : (e5m2 ? 0xFCu : 0xFC00u);
  };
  // q = +1 at dim `dim` for the group of KV head `kv` in sequence `b`, so K = ±inf there makes
  // that token's scores ±inf.
  auto aim = [&](RandomProblem& p, int b, int kv, int dim) {
    for (int g = 0; g < p.group; ++g) p.q[(size_t(b) * p.query_heads() + kv * p.group + g) * D + dim] = 0x3C00;
  };
  struct Expected {
    int b, first_head, heads, nan_dims;  // nan_dims: D (whole heads), or dims a head
  };
  // The reference's NaN outputs are exactly those of `nan`; returns the reference.
  auto reference_has = [&](const RandomProblem& p, const std::vector<Expected>& nan) {
    const vxqa::reference::DecodeOutput ref = vxqa::reference::decode_reference(p.inputs());
    size_t want = 0, got = 0;
    for (const Expected& e : nan) want += size_t(e.heads) * e.nan_dims;
    for (double x : ref.out) got += std::isnan(x);
    INFO("the reference's NaN outputs");
    REQUIRE(got == want);
    for (const Expected& e : nan)
      for (int h = e.first_head; h < e.first_head + e.heads; ++h) {
        INFO("reference, seq " << e.b << " head " << h);
        REQUIRE(std::isnan(ref.out[(size_t(e.b) * p.query_heads() + h) * D + (e.nan_dims == D ? 0 : 5)]));
        REQUIRE(std::isnan(ref.lse[size_t(e.b) * p.query_heads() + h]) == (e.nan_dims == D));
      }
    return ref;
  };
  const std::vector<int32_t> lens = {600, 900, 333};
  for (int chunk : {0, Config::kChunkMultiple}) {
    {  // sinks: sequence 1, KV head 1, every score -inf; its last head's sink -inf
      RandomProblem p = vxqa::reference::make_random_problem(variant_options<Config>({0, 0.f, true}, 16, lens), seed++);
      aim(p, 1, 1, 2);
      for (int t = 0; t < lens[1]; ++t) p.store(p.k_offset + p.element_index(1, t, 1, 2), code(p, -inf));
      for (int h = 0; h < p.query_heads() - 1; ++h)
        if (!std::isfinite(p.sinks[h])) p.sinks[h] = 1.5f;
      p.sinks.back() = -inf;
      const vxqa::reference::DecodeOutput ref = reference_has(p, {{1, p.query_heads() - 1, 1, D}});
      for (int h = p.group; h < p.query_heads() - 1; ++h) {
        INFO("reference, seq 1 head " << h << ": the sink alone");
        REQUIRE(ref.lse[size_t(1) * p.query_heads() + h] == double(p.sinks[h]));
        REQUIRE(ref.out[(size_t(1) * p.query_heads() + h) * D] == 0.0);
      }
      INFO("sinks beside -inf scores, chunk " << chunk);
      variant_matches_reference<Config>(p, chunk);
    }
    {  // soft-cap 20: sequence 0, KV head 0, +inf at token 100 and -inf at [200, 300): finite;
       // sequence 2, KV head 1, NaN K at token 50: NaN
      RandomProblem p = vxqa::reference::make_random_problem(variant_options<Config>({0, 20.f, false}, 16, lens), seed++);
      aim(p, 0, 0, 2);
      p.store(p.k_offset + p.element_index(0, 100, 0, 2), code(p, inf));
      for (int t = 200; t < 300; ++t) p.store(p.k_offset + p.element_index(0, t, 0, 2), code(p, -inf));
      p.store(p.k_offset + p.element_index(2, 50, 1, 7), code(p, std::nan("")));
      reference_has(p, {{2, p.group, p.group, D}});
      INFO("soft-cap of infinite scores, chunk " << chunk);
      variant_matches_reference<Config>(p, chunk);
    }
    {  // window 37: +inf K in the window (sequence 1, KV head 0) and before it (KV head 1)
      RandomProblem p = vxqa::reference::make_random_problem(variant_options<Config>({37, 0.f, false}, 16, lens), seed++);
      aim(p, 1, 0, 2);
      aim(p, 1, 1, 2);
      p.store(p.k_offset + p.element_index(1, lens[1] - 5, 0, 2), code(p, inf));
      p.store(p.k_offset + p.element_index(1, lens[1] - 100, 1, 2), code(p, inf));
      reference_has(p, {{1, 0, p.group, D}});
      INFO("infinite K in and before the window, chunk " << chunk);
      variant_matches_reference<Config>(p, chunk);
    }
    {  // all three: NaN V at dim 5 inside the window (sequence 0, KV head 1) and before it
      RandomProblem p =
          vxqa::reference::make_random_problem(variant_options<Config>({37, 20.f, true}, 16, lens), seed++);
      p.store(p.v_offset + p.element_index(0, lens[0] - 1, 1, 5), code(p, std::nan("")));
      p.store(p.v_offset + p.element_index(0, lens[0] - 40, 0, 5), code(p, std::nan("")));
      reference_has(p, {{0, p.group, p.group, 1}});
      INFO("NaN V in and before the window, chunk " << chunk);
      variant_matches_reference<Config>(p, chunk);
    }
  }
}

}  // namespace

TEST_CASE("non-finite inputs under each variant: a sink, a cap and a window change what they reach",
          "[decode_variants]") {
  non_finite_under_the_variants<AllD128>(12850);
  non_finite_under_the_variants<AllD64Fp16Page16>(12870);
}

// Values a Config cannot take are named errors, before any launch.
TEST_CASE("variant values a Config does not have are refused", "[decode_variants]") {
  using Plain = vxqa::DecodeConfig<128, KvType::kE5M2>;
  const RandomProblem p = vxqa::reference::make_random_problem(vxqa_test::aligned_options<Plain>(), 12900);
  const DeviceProblem d(p);
  DeviceBuffer<float> sinks(p.query_heads());
  vxqa::DecodePlan plan;
  REQUIRE(vxqa::make_decode_plan<Plain>(p.batch, longest(p), p.kv_heads, p.group, 80, &plan).ok());
  DeviceBuffer<unsigned char> ws(plan.workspace_bytes);
  DeviceBuffer<uint16_t> out(size_t(p.batch) * p.query_heads() * p.head_dim);
  auto refused = [&](vxqa::DecodeParams params) {
    params.out = out.get();
    return vxqa::decode<Plain>(params, plan, ws.get(), plan.workspace_bytes, 0).field();
  };
  vxqa::DecodeParams params = vxqa_test::make_params(p, d, nullptr, nullptr);
  params.sliding_window = 8;
  CHECK(refused(params) == "sliding_window");
  params = vxqa_test::make_params(p, d, nullptr, nullptr);
  params.logit_softcap = 30.f;
  CHECK(refused(params) == "logit_softcap");
  params = vxqa_test::make_params(p, d, nullptr, nullptr);
  params.sinks = sinks.get();
  CHECK(refused(params) == "sinks");
  vxqa::DecodePlan windowed;
  CHECK(vxqa::make_decode_plan<Plain>(p.batch, 100, p.kv_heads, p.group, 80, &windowed, 0, 4, 1, 64).field() ==
        "max_window");
}

