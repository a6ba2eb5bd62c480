// Non-finite inputs and corrupt block tables through the public API.
//
// NaN follows the float64 reference's IEEE arithmetic, and the answer must not depend on
// the plan: every test runs one problem under several chunkings (one chunk, many, the
// automatic plan) and requires, element by element, NaN exactly where the reference is
// NaN and the harness's bound elsewhere; among them a chunk whose live scores are all -inf
// beside a live chunk, with NaN and inf V under it (NaN there, as the reference, since
// fc1accf). A block-table id outside [0, num_pages) inside a valid length gives NaN for its
// sequence and kDecodeErrorBadPage, reads nothing outside the pool (compute-sanitizer
// memcheck runs this file's "[sanitize_pages]" case), and leaves the other sequences right.
#include "gpu/decode_harness.cuh"

#include <climits>
#include <string>

using namespace vxqa_test;

namespace {

using E5m2D128 = vxqa::DecodeConfig<128, vxqa::KvType::kE5M2>;
using Fp16D256 = vxqa::DecodeConfig<256, vxqa::KvType::kFp16, vxqa::opt::Warps<2>>;
using E4m3D128 = vxqa::DecodeConfig<128, vxqa::KvType::kE4M3>;
using E4m3SoftwareD128 = vxqa::DecodeConfig<128, vxqa::KvType::kE4M3, vxqa::opt::E4m3Path<vxqa::E4m3Decode::kSoftware>>;

constexpr uint16_t kHalfNan = 0x7E00, kHalfInf = 0x7C00, kHalfOne = 0x3C00;

// Finite poison (fp16 61280, fp32 ~1.3e36): a NaN read back was written by the kernels.
constexpr unsigned char kFinitePoison = 0x7B;

uint32_t code_nan(const RandomProblem& p) {
  switch (p.format) {
    case vxqa::reference::KvFormat::kE5M2: return 0xFFu;
    case vxqa::reference::KvFormat::kE4M3: return 0x7Fu;  // the bit-move alone would make it 480
    default: return 0x7E00u;
  }
}
uint32_t code_minus_inf(const RandomProblem& p) {
  return p.format == vxqa::reference::KvFormat::kE5M2 ? 0xFCu : 0xFC00u;
}

int round_up(int x, int m) { return (x + m - 1) / m * m; }

int longest(const RandomProblem& p) {
  int m = 1;
  for (int len : p.seq_lens) m = std::max(m, len);
  return m;
}

// Chunkings of one problem: a single chunk, the smallest chunk, three of the smallest (not
// whole rounds of the SM70 body's CTA), automatic.
template <class Config>
std::vector<int> chunkings(const RandomProblem& p) {
  return {round_up(longest(p), Config::kCtaTokens), Config::kChunkMultiple, 3 * Config::kChunkMultiple, 0};
}

// Element by element against the reference: NaN where it is NaN, within the harness's bound
// where it is finite. `nan_sequences`: sequences that must be NaN whatever the reference says.
// Returns how many output elements were NaN (so a test can also say how many it expected).
size_t check_ieee(const RandomProblem& p, const vxqa::reference::DecodeOutput& ref, const DecodeResult& r,
                  const std::vector<bool>& nan_sequences) {
  double vmax = 0;
  for (int b = 0; b < p.batch; ++b)
    for (int t = 0; t < p.seq_lens[b]; ++t)
      for (int h = 0; h < p.kv_heads; ++h)
        for (int dd = 0; dd < p.head_dim; ++dd) {
          const double v = std::fabs(p.v_at(b, t, h, dd));
          if (std::isfinite(v)) vmax = std::max(vmax, v);
        }
  vmax = std::max(vmax * p.v_scale, 1e-30);
  const int hq = p.query_heads();
  size_t nans = 0;
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < hq; ++h) {
      const bool forced = nan_sequences[b];
      for (int dd = 0; dd < p.head_dim; ++dd) {
        const size_t i = (size_t(b) * hq + h) * p.head_dim + dd;
        const double got = half_bits_to_double(r.out[i]), want = ref.out[i];
        INFO("seq " << b << " (len " << p.seq_lens[b] << ") head " << h << " dim " << dd << ": got " << got
                    << " want " << (forced ? "NaN (bad page)" : std::to_string(want)));
        if (forced || std::isnan(want)) {
          REQUIRE(std::isnan(got));
        } else {
          REQUIRE(std::isfinite(got));
          REQUIRE(std::fabs(got - want) <= 2e-3 * vmax + std::fabs(want) / 1024);
        }
        nans += std::isnan(got);
      }
      const size_t i = size_t(b) * hq + h;
      INFO("lse of seq " << b << " head " << h << ": got " << r.lse[i] << " want " << ref.lse[i]);
      if (forced || std::isnan(ref.lse[i])) {
        REQUIRE(std::isnan(r.lse[i]));
      } else if (std::isinf(ref.lse[i])) {
        REQUIRE(r.lse[i] == float(ref.lse[i]));
      } else {
        REQUIRE(std::fabs(r.lse[i] - ref.lse[i]) <= 2e-3);
      }
    }
  }
  return nans;
}

RandomProblem problem(RandomProblemOptions o, std::vector<int32_t> lens, uint64_t seed) {
  o.group = 6;
  o.kv_heads = 2;
  o.page_size = 64;
  o.seq_lens = std::move(lens);
  o.batch = int(o.seq_lens.size());
  return vxqa::reference::make_random_problem(o, seed);
}

// Runs `p` under every chunking and checks it against its own float64 reference.
template <class Config>
void same_answer_under_every_plan(const RandomProblem& p, size_t expected_nans) {
  const vxqa::reference::DecodeOutput ref = vxqa::reference::decode_reference(p.inputs());
  const DeviceProblem d(p);
  for (const int chunk : chunkings<Config>(p)) {
    const vxqa::DecodePlan plan = plan_for<Config>(p, longest(p), chunk);
    INFO("chunk " << plan.chunk_tokens << ", " << plan.num_chunks << " chunks");
    const DecodeResult r = run_params<Config>(make_params(p, d, nullptr, nullptr), plan, p.batch, kFinitePoison);
    REQUIRE(r.errors == 0u);
    CHECK(check_ieee(p, ref, r, std::vector<bool>(p.batch, false)) == expected_nans);
  }
}

template <class Config>
void nan_in_q_k_v(uint64_t seed) {
  const RandomProblemOptions o = aligned_options<Config>();
  const std::vector<int32_t> lens = {700, 1500, 33};
  const int D = Config::kHeadDim;
  {  // one q element of sequence 1, head 4: that head alone is NaN (out and LSE)
    RandomProblem p = problem(o, lens, seed);
    p.q[(size_t(1) * p.query_heads() + 4) * D + 5] = kHalfNan;
    INFO("NaN in q");
    same_answer_under_every_plan<Config>(p, size_t(D));
  }
  {  // one live K element of sequence 0, KV head 1, token 650: the 6 heads of KV head 1
    RandomProblem p = problem(o, lens, seed + 1);
    p.store(p.k_offset + p.element_index(0, 650, 1, 17), code_nan(p));
    INFO("NaN in K");
    same_answer_under_every_plan<Config>(p, size_t(6) * D);
  }
  {  // one live V element of sequence 2, KV head 0, token 32, dim 9: that dim of 6 heads
    RandomProblem p = problem(o, lens, seed + 2);
    p.store(p.v_offset + p.element_index(2, 32, 0, 9), code_nan(p));
    INFO("NaN in V");
    same_answer_under_every_plan<Config>(p, 6);
  }
  {  // +inf in q: scores of ±inf, so the max is +inf and exp(inf - inf) is NaN
    RandomProblem p = problem(o, lens, seed + 3);
    p.q[(size_t(0) * p.query_heads() + 7) * D + 0] = kHalfInf;
    INFO("+inf in q");
    same_answer_under_every_plan<Config>(p, size_t(D));
  }
  {  // +inf in q meets K = 0 at that dim in one token: inf * 0 = NaN
    RandomProblem p = problem(o, lens, seed + 4);
    p.q[(size_t(1) * p.query_heads() + 0) * D + 3] = kHalfInf;
    for (int t = 0; t < lens[1]; ++t) p.set_k(1, t, 0, 3, -1.0);  // every other score is -inf
    p.set_k(1, 1234, 0, 3, 0.0);
    INFO("+inf in q times K = 0");
    same_answer_under_every_plan<Config>(p, size_t(D));
  }
}

// Live scores of -inf: some tokens' (the reference weighs them 0), a whole chunk's (it must
// not poison the combine with 0 * NaN), and every token's (0 / 0: NaN, as the reference).
template <class Config>
void minus_inf_scores(uint64_t seed) {
  const RandomProblemOptions o = aligned_options<Config>();
  const int D = Config::kHeadDim;
  const std::vector<int32_t> lens = {1000, 900};
  RandomProblem p = problem(o, lens, seed);
  // q = +1 at dim 2 for every head of sequence 0 and KV head 0; K = -inf there for tokens
  // [0, 400) of sequence 0: those scores are -inf, which covers whole chunks.
  for (int h = 0; h < 6; ++h) p.q[(size_t(0) * p.query_heads() + h) * D + 2] = kHalfOne;
  for (int t = 0; t < 400; ++t) p.store(p.k_offset + p.element_index(0, t, 0, 2), code_minus_inf(p));
  // Sequence 1, KV head 1: every live score -inf.
  for (int h = 6; h < 12; ++h) p.q[(size_t(1) * p.query_heads() + h) * D + 2] = kHalfOne;
  for (int t = 0; t < lens[1]; ++t) p.store(p.k_offset + p.element_index(1, t, 1, 2), code_minus_inf(p));
  INFO("-inf scores");
  same_answer_under_every_plan<Config>(p, size_t(6) * D);
}

// A chunk whose live scores are all -inf (l = 0) beside a chunk whose scores are finite,
// with NaN and inf V under the masked tokens (commit fc1accf). Sequence 0 (length 256): q
// dim 0 > 0 for every head and K dim 0 = -inf at tokens [128, 256) of both KV heads, so
// those scores are -inf and their probabilities 0; V is NaN at token 130 dim 5 (KV head 0),
// +inf at token 200 dim 9 and -inf at token 255 dim 63 (KV head 1). The float64 reference
// gives 0 · NaN = 0 · inf = NaN at those dims for every head of the group (6 x 1 + 6 x 2 =
// 18 outputs), a finite LSE and finite values everywhere else; so must every plan. The
// plans: one chunk; chunks of 64 and 128 (tokens [128, 256) are whole chunks of their own:
// the case fc1accf fixed); 192 (token 130 in a mixed chunk, tokens 200 and 255 in a masked
// one); automatic. Sequences 1 and 2 are plain ragged neighbours.
// How the old behaviour fails: a masked chunk wrote O = 0, so with chunks of 64 or 128 the
// combine returned a finite value at those 18 outputs, where check_ieee requires NaN. Out
// and lse are poisoned with finite bytes, so an output the kernels never wrote cannot pass
// for a NaN; the workspace is poisoned both ways (NaN, and finite garbage), so a masked
// chunk's partial that were never written could not pass for a NaN either.
template <class Config>
void masked_chunk_keeps_nan_v(uint64_t seed) {
  static_assert(Config::kHeadDim == 64, "the trigger is written for D = 64");
  const int D = Config::kHeadDim;
  RandomProblem p = problem(aligned_options<Config>(), {256, 97, 300}, seed);
  REQUIRE(p.group == 6);
  REQUIRE(p.kv_heads == 2);
  const bool e5m2 = p.format == vxqa::reference::KvFormat::kE5M2;
  for (int h = 0; h < p.query_heads(); ++h) {  // q dim 0 of every head of sequence 0: > 0
    uint16_t& q0 = p.q[(size_t(0) * p.query_heads() + h) * D + 0];
    q0 = vxqa::reference::fp16_from_double(std::max(0.25, std::fabs(half_bits_to_double(q0))));
  }
  for (int kv = 0; kv < p.kv_heads; ++kv)
    for (int t = 128; t < 256; ++t) p.store(p.k_offset + p.element_index(0, t, kv, 0), code_minus_inf(p));
  p.store(p.v_offset + p.element_index(0, 130, 0, 5), e5m2 ? 0x7Fu : 0x7E00u);   // NaN
  p.store(p.v_offset + p.element_index(0, 200, 1, 9), e5m2 ? 0x7Cu : 0x7C00u);   // +inf
  p.store(p.v_offset + p.element_index(0, 255, 1, 63), e5m2 ? 0xFCu : 0xFC00u);  // -inf

  // The reference is what the comment says (so the test checks what it claims to).
  const vxqa::reference::DecodeOutput ref = vxqa::reference::decode_reference(p.inputs());
  const int hq = p.query_heads();
  size_t ref_nans = 0;
  for (int h = 0; h < hq; ++h) {
    REQUIRE(std::isfinite(ref.lse[h]));
    for (int dd = 0; dd < D; ++dd) {
      const bool nan_dim = h < 6 ? dd == 5 : (dd == 9 || dd == 63);
      INFO("reference, seq 0 head " << h << " dim " << dd);
      REQUIRE(std::isnan(ref.out[size_t(h) * D + dd]) == nan_dim);
      ref_nans += nan_dim;
    }
  }
  REQUIRE(ref_nans == 18);

  const DeviceProblem d(p);
  const int whole = round_up(longest(p), Config::kCtaTokens);
  int masked_chunk_plans = 0;
  for (const int chunk : {whole, 64, 128, 192, 0}) {
    if (chunk % Config::kChunkMultiple) continue;
    const vxqa::DecodePlan plan = plan_for<Config>(p, longest(p), chunk);
    if (chunk) REQUIRE(plan.chunk_tokens == chunk);
    if (chunk == whole) REQUIRE(plan.num_chunks == 1);
    // Token 200 lies in a chunk of its own whose scores are all -inf.
    masked_chunk_plans += plan.num_chunks > 1 && plan.chunk_tokens <= 128;
    DeviceBuffer<unsigned char> workspace(plan.workspace_bytes);
    for (const unsigned char garbage : {(unsigned char)0xFF, kFinitePoison}) {
      INFO("chunk " << plan.chunk_tokens << ", " << plan.num_chunks << " chunks, workspace bytes 0x" << std::hex
                    << int(garbage) << std::dec);
      workspace.poison(garbage);
      const DecodeResult r = run_params<Config>(make_params(p, d, nullptr, nullptr), plan, p.batch, kFinitePoison,
                                                workspace.get());
      REQUIRE(r.errors == 0u);
      CHECK(check_ieee(p, ref, r, std::vector<bool>(p.batch, false)) == 18);
    }
  }
  REQUIRE(masked_chunk_plans >= 2);  // 64 and 128 at least
}

// A block-table id outside the pool inside a valid length, for each kind of bad id.
template <class Config>
void bad_page_ids(uint64_t seed, const std::vector<int32_t>& ids, const std::vector<int>& pages) {
  const RandomProblemOptions o = aligned_options<Config>();
  const std::vector<int32_t> lens = {700, 1500, 33, 0, 129};
  const RandomProblem good = problem(o, lens, seed);
  const vxqa::reference::DecodeOutput ref = vxqa::reference::decode_reference(good.inputs());
  for (const int32_t id : ids) {
    const int32_t bad_id = id == 0 ? good.num_pages : id;  // 0 stands for num_pages
    for (const int page : pages) {
      RandomProblem p = good;
      p.block_table[size_t(1) * p.table_stride + page] = bad_id;
      const DeviceProblem d(p);
      std::vector<bool> nan_sequences(p.batch, false);
      nan_sequences[1] = true;
      for (const int chunk : chunkings<Config>(p)) {
        const vxqa::DecodePlan plan = plan_for<Config>(p, longest(p), chunk);
        INFO("bad id " << bad_id << " at logical page " << page << "; chunk " << plan.chunk_tokens << ", "
                       << plan.num_chunks << " chunks");
        const DecodeResult r =
            run_params<Config>(make_params(p, d, nullptr, nullptr), plan, p.batch, kFinitePoison);
        REQUIRE(r.errors == uint32_t(vxqa::kDecodeErrorBadPage));
        check_ieee(good, ref, r, nan_sequences);  // `good`: its table reads V in bounds on the host
      }
    }
  }
}

// The combine alone gathers the chunks' error words into the step's (the decode CTAs'
// own atomicOr, which usually lands after the kernel zeroes the word, would hide a broken
// gather from bad_page_ids): after a good decode, the word zeroed and one chunk's word of
// one head set to the bad-page bit, the combine must report it; with every chunk word 0, not.
template <class Config>
void combine_gathers_chunk_errors(uint64_t seed, bool narrow) {
  RandomProblemOptions o = aligned_options<Config>();
  const RandomProblem p = problem(o, {700, narrow ? 4500 : 1500, 33}, seed);
  const DeviceProblem d(p);
  const vxqa::DecodePlan plan = plan_for<Config>(p, longest(p), Config::kCtaTokens);
  INFO("chunks " << plan.num_chunks << ", combine slices of " << vxqa::combine_slice_dims(plan.num_chunks));
  REQUIRE((vxqa::combine_slice_dims(plan.num_chunks) == 16) == narrow);
  DeviceBuffer<unsigned char> workspace(plan.workspace_bytes);
  const DecodeResult good = run_params<Config>(make_params(p, d, nullptr, nullptr), plan, p.batch, kNanPoison,
                                               workspace.get());
  REQUIRE(good.errors == 0u);

  DeviceBuffer<uint16_t> out(p.q.size());
  vxqa::DecodeParams params = make_params(p, d, out.get(), nullptr);
  vxqa::DecodeKernelArgs args = vxqa::make_decode_args<Config>(params, plan, workspace.get());
  REQUIRE(args.chunk_errors != nullptr);
  dim3 grid;
  const void* combine = vxqa::combine_kernel_for<Config>(plan, p.query_heads(), &grid);
  void* kernel_args[] = {&args};
  const uint32_t zero = 0u, bad = vxqa::kDecodeErrorBadPage;
  // Sequence 1, its last query head, its last chunk (one the combine reads).
  const int64_t slot = (int64_t(1) * p.query_heads() + p.query_heads() - 1) * plan.num_chunks +
                       (p.seq_lens[1] - 1) / plan.chunk_tokens;
  for (const uint32_t word : {zero, bad}) {
    INFO("chunk word " << word);
    VXQA_CUDA_CHECK(cudaMemcpy(args.errors, &zero, 4, cudaMemcpyHostToDevice));
    VXQA_CUDA_CHECK(cudaMemcpy(args.chunk_errors + slot, &word, 4, cudaMemcpyHostToDevice));
    VXQA_CUDA_CHECK(cudaLaunchKernel(combine, grid, dim3(vxqa::kCombineThreads), kernel_args, 0, 0));
    VXQA_CUDA_CHECK_LAUNCH();
    uint32_t errors = ~0u;
    VXQA_CUDA_CHECK(cudaMemcpy(&errors, args.errors, 4, cudaMemcpyDeviceToHost));
    REQUIRE(errors == word);
  }
}

}  // namespace

TEST_CASE("the combine ORs the chunks' error words into the step's, both slice widths", "[decode_nonfinite]") {
  combine_gathers_chunk_errors<E5m2D128>(7700, false);
  combine_gathers_chunk_errors<E5m2D128>(7701, true);
}

TEST_CASE("NaN and inf in q, K and V: NaN where the reference is NaN, under every plan", "[decode_nonfinite]") {
  nan_in_q_k_v<E5m2D128>(7000);
  nan_in_q_k_v<Fp16D256>(7100);
  nan_in_q_k_v<E4m3D128>(7150);
  nan_in_q_k_v<E4m3SoftwareD128>(7160);
}

TEST_CASE("-inf scores: a masked chunk weighs nothing, an all -inf row is NaN", "[decode_nonfinite]") {
  minus_inf_scores<E5m2D128>(7200);
  minus_inf_scores<Fp16D256>(7300);
}

TEST_CASE("a chunk whose live scores are all -inf keeps a NaN or inf V under them: NaN, under every plan",
          "[decode_nonfinite]") {
  masked_chunk_keeps_nan_v<vxqa::DecodeConfig<64, vxqa::KvType::kE5M2>>(7800);
  masked_chunk_keeps_nan_v<vxqa::DecodeConfig<64, vxqa::KvType::kFp16>>(7900);
}

// Logical pages of sequence 1 (1500 tokens of 64): the first, a middle one, the last.
TEST_CASE("block-table ids outside the pool: NaN for that sequence and the error bit", "[decode_nonfinite]") {
  bad_page_ids<E5m2D128>(7400, {-1, 0, INT_MAX, INT_MIN, 50000000}, {0, 11, 23});
  bad_page_ids<Fp16D256>(7500, {-1, 0, INT_MAX, INT_MIN, 50000000}, {0, 11, 23});
}

// The same, small enough for compute-sanitizer memcheck: no read outside the pool.
TEST_CASE("block-table ids outside the pool, for memcheck", "[sanitize_pages]") {
  bad_page_ids<E5m2D128>(7600, {-1, 0, 50000000}, {0, 23});
}
