// Multi-token queries (opt::MaxQueryLen) through the public API, against the float64
// reference: q_len 1..16, uniform and ragged (sequences without a query token among them),
// groups whose rows fill part of a CTA, one CTA and several, under one chunk and many, with
// the variants, on both atoms (this file is in both GPU binaries). Then the bad query
// counts: a length shorter than its tokens, and a count above max_q_len. And a NaN or
// infinite V at keys only some of a sequence's query tokens see.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <vector>
#include "gpu/decode_harness.cuh"

namespace {

namespace opt = vxqa::opt;
using vxqa::KvType;
using vxqa_test::DeviceBuffer;
using vxqa_test::DeviceProblem;
using vxqa_test::RandomProblem;
using vxqa_test::RandomProblemOptions;

// 8 warps: up to 64 rows a CTA on the SM80 body (row_tiling), the seed shape's head dim.
using MultiD256 = vxqa::DecodeConfig<256, KvType::kE5M2, opt::MaxQueryLen<16>, opt::Warps<8>>;
// The Decoder's other D 256 E5M2 one: 6 warps (48 rows a CTA), so row tiles of 1, 2, 3 and 6
// warps (streams of 6, 3, 2 and 1), every variant flag compiled in and off.
using MultiD256W6 = vxqa::DecodeConfig<256, KvType::kE5M2, opt::Warps<6>, opt::Variant<vxqa::kAllVariantFlags>,
                                       opt::MaxQueryLen<16>>;
// Every variant flag, 4 warps (32 rows a CTA), a run-time page size: either SM80 path.
using MultiAllD128 =
    vxqa::DecodeConfig<128, KvType::kE5M2, opt::MaxQueryLen<16>, opt::Variant<vxqa::kAllVariantFlags>>;
// fp16 cache, compile-time page 16 (the one-page path with the window's zero-fill), q_len <= 4.
using MultiD64Fp16Page16 = vxqa::DecodeConfig<64, KvType::kFp16, opt::PageSize<16>, opt::MaxQueryLen<4>,
                                              opt::Variant<vxqa::kSlidingWindow>>;

int longest(const RandomProblem& p) { return std::max(1, *std::max_element(p.seq_lens.begin(), p.seq_lens.end())); }

template <class Config>
vxqa::DecodePlan multi_plan(const RandomProblem& p, int chunk_tokens, int max_q_len) {
  vxqa::DecodePlan plan;
  const vxqa::Status made = vxqa::make_decode_plan<Config>(p.batch, longest(p), p.kv_heads, p.group,
                                                          vxqa_test::sm_count(), &plan, chunk_tokens, 4, 1, 0,
                                                          max_q_len);
  INFO(made.message());
  REQUIRE(made.ok());
  return plan;
}

// Runs `p` under a plan of `chunk_tokens` (0: the rule's choice) for up to `plan_q_len` query
// tokens (at least the problem's), and checks it against the reference.
template <class Config>
double multi_matches_reference(const RandomProblem& p, int chunk_tokens, int plan_q_len = 0) {
  const DeviceProblem d(p);
  const int q_len = std::max(plan_q_len, vxqa::problem_max_q_len(p));
  const vxqa::DecodePlan plan = multi_plan<Config>(p, chunk_tokens, q_len);
  vxqa::DecodeParams params = vxqa_test::make_params(p, d, nullptr, nullptr);
  if (params.q_indptr) params.max_q_len = q_len;  // without q_indptr a step has one token a sequence
  INFO("D " << p.head_dim << " G " << p.group << " Hkv " << p.kv_heads << " page " << p.page_size << " tokens "
            << p.num_tokens << " max_q_len " << q_len << " window " << p.window << " cap " << p.logit_softcap
            << " sinks " << !p.sinks.empty() << " chunk " << plan.chunk_tokens << " chunks " << plan.num_chunks);
  return vxqa_test::check_against_reference(p, vxqa_test::run_params<Config>(params, plan, p.num_tokens));
}

template <class Config>
RandomProblemOptions multi_options(int group, int q_len, bool ragged, int page, std::vector<int32_t> lens) {
  RandomProblemOptions o = vxqa_test::aligned_options<Config>();
  o.kv_heads = 2;
  o.group = group;
  o.q_len = q_len;
  o.ragged = ragged;
  o.page_size = page;
  o.seq_lens = std::move(lens);
  o.batch = int(o.seq_lens.size());
  o.k_scale = 0.75f;
  o.v_scale = 1.25f;
  return o;
}

// Groups x query lengths: rows from 2 to 16 · 12 = 192 (several CTAs of 64, 48 or 32 rows, and on
// the SM70 body of 8), lengths at the edges a token's causal limit meets (a tile, a page, a
// chunk), under one chunk and one SM80 round a chunk.
template <class Config>
void groups_and_query_lengths(int page, uint64_t seed) {
  for (int group : {1, 5, 8, 12}) {
    for (int q_len : {2, 3, 4, 7, 16}) {
      if (q_len > Config::kMaxQueryLen) continue;
      for (bool ragged : {false, true}) {
        for (int chunk : {0, Config::kChunkMultiple}) {
          const RandomProblemOptions o =
              multi_options<Config>(group, q_len, ragged, page, {16, 17, 31, 64, 65, 130, 1000});
          multi_matches_reference<Config>(vxqa::reference::make_random_problem(o, seed++), chunk);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("query lengths 2..16, uniform and ragged, over groups and chunks match the reference",
          "[decode_multi_token]") {
  groups_and_query_lengths<MultiD256>(16, 13000);
  groups_and_query_lengths<MultiD256W6>(48, 13100);
  groups_and_query_lengths<MultiAllD128>(7, 13200);
  groups_and_query_lengths<MultiD64Fp16Page16>(16, 13400);
}

// One query token a sequence through a multi-token Config: with q_indptr (every count 1) and
// without, under a plan for 1 and for 16; and a plan for 16 serving a step of 3.
TEST_CASE("a multi-token Config serves one query token a sequence, and steps below its plan",
          "[decode_multi_token]") {
  uint64_t seed = 13600;
  for (int chunk : {0, MultiD256::kChunkMultiple}) {
    RandomProblemOptions o = multi_options<MultiD256>(6, 0, false, 16, {1, 40, 300, 0, 2000});
    multi_matches_reference<MultiD256>(vxqa::reference::make_random_problem(o, seed++), chunk);
    multi_matches_reference<MultiD256>(vxqa::reference::make_random_problem(o, seed++), chunk, 16);
    o.q_len = 3;
    o.seq_lens = {3, 40, 300, 5, 2000};
    multi_matches_reference<MultiD256>(vxqa::reference::make_random_problem(o, seed++), chunk, 16);
  }
}

// Every variant with several query tokens: each token's window ends at its own position,
// the soft-cap and the sinks apply to every row.
TEST_CASE("windows, soft-cap and sinks with several query tokens match the reference", "[decode_multi_token]") {
  uint64_t seed = 13700;
  for (int window : {1, 5, 16, 37, 1 << 20}) {
    for (int chunk : {0, MultiAllD128::kChunkMultiple}) {
      RandomProblemOptions o = multi_options<MultiAllD128>(5, 6, true, 16, {6, 17, 64, 65, 300, 777});
      o.window = window;
      o.logit_softcap = window % 2 ? 20.f : 0.f;
      o.sinks = window > 5;
      multi_matches_reference<MultiAllD128>(vxqa::reference::make_random_problem(o, seed++), chunk);
      RandomProblemOptions w = multi_options<MultiD64Fp16Page16>(3, 4, true, 16, {4, 17, 64, 65, 300, 777});
      w.window = window;
      multi_matches_reference<MultiD64Fp16Page16>(vxqa::reference::make_random_problem(w, seed++), chunk);
    }
  }
}

namespace {

// A tile's P·V takes each key for all its rows at once; a row that does not see the key
// gives it p = 0, and 0 · NaN = NaN. So: a NaN or infinite V at keys only some query tokens
// see (past the earlier tokens' causal limits; before the later tokens' windows), and the
// rows that do not see them must stay finite, the others NaN or inf as the reference.
template <class Config>
void non_finite_v_some_rows_do_not_see(int window, uint64_t seed) {
  const bool fp8 = Config::kElemBytes == 1;
  const uint32_t nan = fp8 ? 0xFFu : 0x7E00u, inf = fp8 ? 0x7Cu : 0x7C00u, minus_inf = fp8 ? 0xFCu : 0xFC00u;
  for (int group : {1, 3, 8, 12}) {
    for (int q_len : {2, 4, 16}) {
      if (q_len > Config::kMaxQueryLen) continue;
      for (int chunk : {0, Config::kChunkMultiple}) {
        RandomProblemOptions o = multi_options<Config>(group, q_len, q_len == 4, 16, {16, 19, 47, 300, 1000});
        o.window = window;
        RandomProblem p = vxqa::reference::make_random_problem(o, seed++);
        for (int b = 0; b < p.batch; ++b) {
          const int len = p.seq_lens[b], n = p.query_count(b), h = b % p.kv_heads;
          if (n < 2) continue;
          p.store(p.v_offset + p.element_index(b, len - 1, h, 5), nan);  // the last token's own key
          p.store(p.v_offset + p.element_index(b, len - 1, h, 6), minus_inf);
          p.store(p.v_offset + p.element_index(b, len - 2, h, 7), inf);  // the last two tokens'
          const int first = len - n + 1 - window;                       // the first token's first key
          if (window > 0 && first >= 0) p.store(p.v_offset + p.element_index(b, first, h, 9), nan);
        }
        multi_matches_reference<Config>(p, chunk);
      }
    }
  }
}

// Sequence 1 has fewer keys than query tokens (bad length), the others are fine: the error
// bit, NaN in sequence 1's rows, the reference's answer elsewhere; under one chunk and many.
template <class Config>
void length_below_query_tokens(uint64_t seed) {
  for (int chunk : {0, Config::kChunkMultiple}) {
    RandomProblemOptions o = multi_options<Config>(4, 4, false, 16, {100, 4, 300});
    RandomProblem p = vxqa::reference::make_random_problem(o, seed++);
    const DeviceProblem d(p);
    std::vector<int32_t> lens = p.seq_lens;
    lens[1] = 3;  // 4 query tokens, 3 keys
    DeviceBuffer<int32_t> device_lens(lens.size());
    device_lens.upload(lens);
    const vxqa::DecodePlan plan = multi_plan<Config>(p, chunk, 4);
    vxqa::DecodeParams params = vxqa_test::make_params(p, d, nullptr, nullptr);
    params.seq_lens = device_lens.get();
    const vxqa_test::DecodeResult r = vxqa_test::run_params<Config>(params, plan, p.num_tokens, 0x7B);
    INFO("chunks " << plan.num_chunks);
    CHECK(r.errors == uint32_t(vxqa::kDecodeErrorBadLength));
    const int hq = p.query_heads();
    for (int row = p.first_row(1); row < p.first_row(1) + p.query_count(1); ++row)
      for (int h = 0; h < hq; ++h) {
        CHECK(std::isnan(r.lse[size_t(row) * hq + h]));
        CHECK(std::isnan(vxqa_test::half_bits_to_double(r.out[(size_t(row) * hq + h) * p.head_dim])));
      }
    // The other sequences: compared as usual (sequence 1 expected NaN).
    namespace ref = vxqa::reference;
    const ref::DecodeOutput reference = ref::decode_reference(p.inputs());
    std::vector<ref::Expect> expect = ref::expect_from_lengths(p.seq_lens);
    expect[1] = ref::Expect::kNan;
    const ref::Comparison c = ref::compare_with_reference(
        reference, ref::decode_error_model(p.inputs(), reference), expect, hq, p.head_dim,
        {r.out.data(), r.lse.data(), r.errors}, uint32_t(vxqa::kDecodeErrorBadLength), {}, ref::row_layout(p.inputs()));
    INFO(c.mismatches << " mismatches; first: " << c.first);
    CHECK(c.ok());
  }
}

// q_indptr gives sequence 0 more tokens than max_q_len: the error bit, and nothing written
// for it (its rows are not trusted); sequence 1 is answered.
template <class Config>
void count_above_max_q_len(uint64_t seed) {
  for (int chunk : {0, Config::kChunkMultiple}) {
    RandomProblemOptions o = multi_options<Config>(4, 2, false, 16, {100, 300});
    RandomProblem p = vxqa::reference::make_random_problem(o, seed++);
    const DeviceProblem d(p);
    const vxqa::DecodePlan plan = multi_plan<Config>(p, chunk, 2);
    const std::vector<int32_t> bad_indptr = {0, 3, 4};  // 3 tokens > max_q_len 2, then 1
    DeviceBuffer<int32_t> indptr(bad_indptr.size());
    indptr.upload(bad_indptr);
    vxqa::DecodeParams params = vxqa_test::make_params(p, d, nullptr, nullptr);
    params.q_indptr = indptr.get();
    const vxqa_test::DecodeResult r = vxqa_test::run_params<Config>(params, plan, p.num_tokens, 0x7B);
    INFO("chunks " << plan.num_chunks);
    CHECK(r.errors == uint32_t(vxqa::kDecodeErrorBadLength));
    const int hq = p.query_heads();
    for (int row = 0; row < 3; ++row)  // sequence 0's rows keep the poison
      for (int h = 0; h < hq; ++h) CHECK(r.out[(size_t(row) * hq + h) * p.head_dim] == 0x7B7B);
    // Row 3 is sequence 1's one token now, the last of its 300 keys: q row 3 is what the
    // problem gave sequence 1's second token, which sees every key.
    const vxqa::reference::DecodeOutput reference = vxqa::reference::decode_reference(p.inputs());
    for (int h = 0; h < hq; ++h) {
      const double want = reference.out[(size_t(3) * hq + h) * p.head_dim];
      const double got = vxqa_test::half_bits_to_double(r.out[(size_t(3) * hq + h) * p.head_dim]);
      CHECK(std::fabs(got - want) <= 1e-2 * std::max(1.0, std::fabs(want)));
    }
  }
}

}  // namespace

TEST_CASE("a NaN or inf V that some query tokens do not see leaves their rows finite", "[decode_multi_token]") {
  non_finite_v_some_rows_do_not_see<MultiD256>(0, 13750);
  non_finite_v_some_rows_do_not_see<MultiD256W6>(0, 13760);
  non_finite_v_some_rows_do_not_see<MultiAllD128>(0, 13770);
  non_finite_v_some_rows_do_not_see<MultiAllD128>(37, 13780);
  non_finite_v_some_rows_do_not_see<MultiD64Fp16Page16>(5, 13790);
}

TEST_CASE("bad query counts: a length below its tokens is NaN, a count above max_q_len is not written",
          "[decode_multi_token]") {
  length_below_query_tokens<MultiD256>(13800);
  length_below_query_tokens<MultiAllD128>(13810);
  count_above_max_q_len<MultiD256>(13820);
  count_above_max_q_len<MultiAllD128>(13830);
}

// What a Config or a plan cannot take is a named error, before any launch.
TEST_CASE("query-token values a Config or a plan does not take are refused", "[decode_multi_token]") {
  using Plain = vxqa::DecodeConfig<128, KvType::kE5M2>;
  RandomProblemOptions o = multi_options<MultiAllD128>(4, 3, false, 16, {10, 20});
  const RandomProblem p = vxqa::reference::make_random_problem(o, 13900);
  const DeviceProblem d(p);
  vxqa::DecodePlan plan2, plain_plan;
  REQUIRE(vxqa::make_decode_plan<MultiAllD128>(p.batch, 20, p.kv_heads, p.group, 80, &plan2, 0, 4, 1, 0, 2).ok());
  REQUIRE(vxqa::make_decode_plan<Plain>(p.batch, 20, p.kv_heads, p.group, 80, &plain_plan).ok());
  CHECK(vxqa::make_decode_plan<Plain>(p.batch, 20, p.kv_heads, p.group, 80, &plain_plan, 0, 4, 1, 0, 2).field() ==
        "max_q_len");
  CHECK(vxqa::make_decode_plan<MultiAllD128>(p.batch, 20, p.kv_heads, p.group, 80, &plan2, 0, 4, 1, 0, 17).field() ==
        "max_q_len");
  DeviceBuffer<unsigned char> ws(std::max(plan2.workspace_bytes, plain_plan.workspace_bytes));
  DeviceBuffer<uint16_t> out(size_t(p.num_tokens) * p.query_heads() * p.head_dim);
  vxqa::DecodeParams params = vxqa_test::make_params(p, d, nullptr, nullptr);
  params.out = out.get();
  CHECK(params.max_q_len == 3);
  CHECK(vxqa::decode<MultiAllD128>(params, plan2, ws.get(), plan2.workspace_bytes, 0).field() == "max_q_len");
  CHECK(vxqa::decode<Plain>(params, plain_plan, ws.get(), plain_plan.workspace_bytes, 0).field() == "max_q_len");
  params.max_q_len = 1;
  CHECK(vxqa::decode<Plain>(params, plain_plan, ws.get(), plain_plan.workspace_bytes, 0).field() == "q_indptr");
  params.max_q_len = 2;
  params.q_indptr = nullptr;
  CHECK(vxqa::decode<MultiAllD128>(params, plan2, ws.get(), plan2.workspace_bytes, 0).field() == "q_indptr");
}
