// bf16 q and out: the problem's q is rounded to bf16 values (which fp16 holds exactly), the
// kernel gets their bf16 bits and writes bf16, and the result must match the float64
// reference over those q values within the fp16 bounds plus bf16's output rounding. A
// Config refuses the other q/out type, naming qo_type. bf16 caches (the SM80 body's bf16
// MMA: q, K, V and P in bf16) likewise, within the bounds of P rounded to bf16.
#include "gpu/decode_harness.cuh"

#include <algorithm>
#include <vector>

namespace {

using vxqa::ActType;

template <int D, vxqa::KvType Kv, class... Options>
using Bf16Config = vxqa::DecodeConfig<D, Kv, Options..., vxqa::opt::QoType<ActType::kBf16>>;

int longest(const vxqa::reference::RandomProblem& p) {
  return std::max(1, *std::max_element(p.seq_lens.begin(), p.seq_lens.end()));
}

template <class Config>
void bf16_matches_reference(vxqa::reference::RandomProblemOptions o, uint64_t seed) {
  auto p = vxqa::reference::make_random_problem(o, seed);
  const std::vector<uint16_t> q_bf16 = vxqa_test::round_q_to_bf16(p);
  vxqa_test::DeviceProblem d(p);
  d.q.upload(q_bf16);
  vxqa::DecodeParams params = vxqa_test::make_params(p, d, nullptr, nullptr);
  params.qo_type = ActType::kBf16;
  const int max_len = longest(p), whole = (max_len + 127) / 128 * 128;
  for (int chunk : {whole, 128}) {  // one chunk (the decode kernel writes out) and several (the combine)
    const vxqa::DecodePlan plan = vxqa_test::plan_for<Config>(p, max_len, chunk);
    INFO("seed " << seed << ", chunks " << plan.num_chunks);
    vxqa_test::check_against_reference(p, vxqa_test::run_params<Config>(params, plan, p.batch), ActType::kBf16);
  }
}

// Groups 1, 6 and 11 over pages of 7 tokens, ragged lengths and non-unit scales; returns the
// next seed.
template <class Config>
uint64_t groups_over_short_pages(uint64_t seed) {
  for (int group : {1, 6, 11}) {
    auto o = vxqa_test::aligned_options<Config>();
    o.group = group;
    o.kv_heads = 2;
    o.batch = 4;
    o.page_size = 7;
    o.min_seq_len = 1;
    o.max_seq_len = 900;
    o.k_scale = 0.6f;
    o.v_scale = 1.7f;
    bf16_matches_reference<Config>(o, seed++);
  }
  return seed;
}

// Whether the GPU runs the SM80 body, where bf16 caches are read (decode refuses them
// elsewhere); says it skips where not.
bool has_bf16_mma() {
  cudaDeviceProp prop{};
  int device = 0;
  VXQA_CUDA_CHECK(cudaGetDevice(&device));
  VXQA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  if (prop.major >= 8) return true;
  WARN("SKIPPED: bf16 caches need sm_80 or newer, this GPU is sm_" << prop.major << prop.minor);
  return false;
}

}  // namespace

TEST_CASE("bf16 q and out decode like the reference, every head dim and cache type", "[decode_bf16]") {
  uint64_t seed = 7100;
  seed = groups_over_short_pages<Bf16Config<64, vxqa::KvType::kE5M2>>(seed);
  {
    auto o = vxqa_test::aligned_options<Bf16Config<128, vxqa::KvType::kE5M2, vxqa::opt::PageSize<16>>>();
    o.group = 8;
    o.kv_heads = 2;
    o.batch = 3;
    o.max_seq_len = 1500;
    bf16_matches_reference<Bf16Config<128, vxqa::KvType::kE5M2, vxqa::opt::PageSize<16>>>(o, seed++);
  }
  {
    auto o = vxqa_test::aligned_options<Bf16Config<256, vxqa::KvType::kE5M2>>();
    o.group = 6;
    o.batch = 3;
    o.page_size = 800;
    o.max_seq_len = 2500;
    bf16_matches_reference<Bf16Config<256, vxqa::KvType::kE5M2>>(o, seed++);
  }
  {
    auto o = vxqa_test::aligned_options<Bf16Config<128, vxqa::KvType::kFp16>>();
    o.group = 4;
    o.kv_heads = 2;
    o.batch = 3;
    o.page_size = 32;
    o.max_seq_len = 700;
    bf16_matches_reference<Bf16Config<128, vxqa::KvType::kFp16>>(o, seed++);
  }
}

TEST_CASE("bf16 caches decode like the reference on the SM80 body, every head dim, one chunk and several",
          "[decode_bf16]") {
  if (!has_bf16_mma()) return;
  // The SM80 body even in the suite built with the SM70 atom as the default.
  using vxqa::opt::Atom;
  constexpr vxqa::MmaAtom kAuto = vxqa::MmaAtom::kAuto;
  uint64_t seed = 7400;
  seed = groups_over_short_pages<Bf16Config<64, vxqa::KvType::kBf16, Atom<kAuto>>>(seed);
  {
    using Config = Bf16Config<128, vxqa::KvType::kBf16, Atom<kAuto>, vxqa::opt::PageSize<16>>;
    auto o = vxqa_test::aligned_options<Config>();
    o.group = 8;
    o.kv_heads = 2;
    o.batch = 3;
    o.max_seq_len = 1500;
    bf16_matches_reference<Config>(o, seed++);
  }
  for (int group : {4, 16}) {
    using Config = Bf16Config<256, vxqa::KvType::kBf16, Atom<kAuto>, vxqa::opt::Warps<2>>;
    auto o = vxqa_test::aligned_options<Config>();
    o.group = group;
    o.batch = 3;
    o.page_size = 800;
    o.max_seq_len = 2500;
    o.layout = vxqa::reference::CacheLayout::kVllm;
    bf16_matches_reference<Config>(o, seed++);
  }
}

TEST_CASE("a bf16 cache is read as bf16: the same bytes as fp16 codes fail the bound", "[decode_bf16]") {
  if (!has_bf16_mma()) return;
  using Config = Bf16Config<128, vxqa::KvType::kBf16, vxqa::opt::Atom<vxqa::MmaAtom::kAuto>>;
  auto o = vxqa_test::aligned_options<Config>();
  o.group = 4;
  o.batch = 2;
  o.max_seq_len = 600;
  auto p = vxqa::reference::make_random_problem(o, 7500);
  const std::vector<uint16_t> q_bf16 = vxqa_test::round_q_to_bf16(p);
  vxqa_test::DeviceProblem d(p);
  d.q.upload(q_bf16);
  vxqa::DecodeParams params = vxqa_test::make_params(p, d, nullptr, nullptr);
  params.qo_type = ActType::kBf16;
  const vxqa::DecodePlan plan = vxqa_test::plan_for<Config>(p, longest(p), 0);
  const vxqa_test::DecodeResult r = vxqa_test::run_params<Config>(params, plan, p.batch);
  vxqa_test::check_against_reference(p, r, ActType::kBf16);
  // The reference of the same bytes read as fp16 codes is far off: the kernel's answer fails it.
  auto as_fp16 = p;
  as_fp16.format = vxqa::reference::KvFormat::kFp16;
  REQUIRE_FALSE(vxqa_test::compare_against_reference(as_fp16, r, ActType::kBf16).ok());
}

TEST_CASE("a Config refuses the other q/out type, naming qo_type", "[decode_bf16]") {
  using Fp16 = vxqa::DecodeConfig<64, vxqa::KvType::kE5M2>;
  using Bf16 = Bf16Config<64, vxqa::KvType::kE5M2>;
  auto o = vxqa_test::aligned_options<Fp16>();
  o.batch = 2;
  o.min_seq_len = 1;
  const auto p = vxqa::reference::make_random_problem(o, 7200);
  vxqa_test::DeviceProblem d(p);
  vxqa_test::DeviceBuffer<uint16_t> out(p.q.size());
  const vxqa::DecodePlan plan = vxqa_test::plan_for<Fp16>(p, longest(p));
  vxqa_test::DeviceBuffer<unsigned char> ws(plan.workspace_bytes);
  vxqa::DecodeParams params = vxqa_test::make_params(p, d, out.get(), nullptr);
  REQUIRE(vxqa::validate<Fp16>(params, plan, ws.get(), plan.workspace_bytes).ok());
  REQUIRE(vxqa::validate<Bf16>(params, plan, ws.get(), plan.workspace_bytes).field() == "qo_type");
  params.qo_type = ActType::kBf16;
  const vxqa::Status s = vxqa::decode<Fp16>(params, plan, ws.get(), plan.workspace_bytes, 0);
  INFO(s.message());
  REQUIRE(s.field() == "qo_type");
  REQUIRE(vxqa::validate<Bf16>(params, plan, ws.get(), plan.workspace_bytes).ok());
}
