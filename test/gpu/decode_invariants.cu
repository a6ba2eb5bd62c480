// Decode invariants through the public API: determinism, batch invariance, CUDA-graph
// capture and replay with growing lengths, empty sequences, bad lengths, garbage tolerance.
//
// Most checks here are bitwise (out's fp16 bits and lse's fp32 bits compared with memcmp
// semantics): the kernels promise a fixed reduction order (combine_kernel.cuh), chunks cut at
// absolute token positions and a grid planned from capacity only (split_plan.cuh), so the
// same sequence with the same plan must give the same bits whatever else is in the batch,
// however it is launched, and whatever garbage lies where the kernel must not look. Where a
// result is compared with the float64 reference instead, the bounds are the harness's
// (vxqa/testing/compare.h explains them).
#include "gpu/decode_harness.cuh"

#include <climits>
#include <cstdio>
#include <string>

using namespace vxqa_test;

namespace {

// The Qwen shape's Config (runtime page size) and a D = 128 one on an fp16 cache, so both
// element types go through every invariant.
using E5m2D256 = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2>;
using Fp16D128 = vxqa::DecodeConfig<128, vxqa::KvType::kFp16>;

// Besides the harness's NaN poison: 0x7B makes finite values far from any output (fp16
// 0x7B7B = 61280, fp32 0x7B7B7B7B ~ 1.3e36), so that a NaN read back proves the kernel wrote it.
constexpr unsigned char kFinitePoison = 0x7B;

bool is_nan_half(uint16_t bits) { return (bits & 0x7C00u) == 0x7C00u && (bits & 0x03FFu) != 0; }

int round_up(int x, int m) { return (x + m - 1) / m * m; }

int longest(const std::vector<int32_t>& lens) {
  int m = 1;
  for (int len : lens) m = std::max(m, len);
  return m;
}


uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Bitwise equality of sequence a_seq of `a` and sequence b_seq of `b` (q_heads x head_dim
// outputs and q_heads LSEs each). NaN payloads count too: bits, not values.
void require_same_bits(const DecodeResult& a, int a_seq, const DecodeResult& b, int b_seq,
                       int q_heads, int head_dim, const std::string& what) {
  const size_t n = size_t(q_heads) * head_dim;
  size_t mismatches = 0;
  std::string first;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t x = a.out[a_seq * n + i], y = b.out[b_seq * n + i];
    if (x != y && mismatches++ == 0) {
      char text[160];
      std::snprintf(text, sizeof text, "out head %d dim %d: 0x%04X vs 0x%04X", int(i / head_dim),
                    int(i % head_dim), unsigned(x), unsigned(y));
      first = text;
    }
  }
  for (int h = 0; h < q_heads; ++h) {
    const uint32_t x = float_bits(a.lse[size_t(a_seq) * q_heads + h]);
    const uint32_t y = float_bits(b.lse[size_t(b_seq) * q_heads + h]);
    if (x != y && mismatches++ == 0) {
      char text[160];
      std::snprintf(text, sizeof text, "lse head %d: 0x%08X vs 0x%08X", h, unsigned(x), unsigned(y));
      first = text;
    }
  }
  INFO(what << ": " << mismatches << " differing values; first: " << first);
  REQUIRE(mismatches == 0);
}

void require_same_bits(const DecodeResult& a, const DecodeResult& b, int batch, int q_heads,
                       int head_dim, const std::string& what) {
  for (int s = 0; s < batch; ++s) require_same_bits(a, s, b, s, q_heads, head_dim, what + ", seq " + std::to_string(s));
  REQUIRE(a.errors == b.errors);
}

// Compares only the sequences with keep[b] with the float64 reference of `p` (whose other
// lengths the caller has set to something the reference accepts), bounds as in the harness.
void check_sequences_against_reference(const RandomProblem& p, const DecodeResult& r,
                                       const std::vector<bool>& keep) {
  const vxqa::reference::DecodeOutput ref = vxqa::reference::decode_reference(p.inputs());
  const double vmax = std::max(vxqa::reference::finite_v_abs_max(p), 1e-30);
  const double kAbs = 2e-3, kRel = 1.0 / 1024, kLse = 2e-3;  // vxqa/testing/compare.h's bounds
  const int hq = p.query_heads();
  for (int b = 0; b < p.batch; ++b) {
    if (!keep[b]) continue;
    for (int h = 0; h < hq; ++h) {
      for (int dd = 0; dd < p.head_dim; ++dd) {
        const size_t i = (size_t(b) * hq + h) * p.head_dim + dd;
        const double got = half_bits_to_double(r.out[i]), want = ref.out[i];
        INFO("seq " << b << " (len " << p.seq_lens[b] << ") head " << h << " dim " << dd << ": got "
                    << got << " want " << want);
        REQUIRE(std::isfinite(got));
        REQUIRE(std::fabs(got - want) <= kAbs * vmax + kRel * std::fabs(want));
      }
      const size_t i = size_t(b) * hq + h;
      INFO("lse of seq " << b << " head " << h << ": got " << r.lse[i] << " want " << ref.lse[i]);
      if (std::isinf(ref.lse[i])) {
        REQUIRE((std::isinf(r.lse[i]) && r.lse[i] < 0));
      } else {
        REQUIRE(std::fabs(r.lse[i] - ref.lse[i]) <= kLse);
      }
    }
  }
}

// RAII for the graph test's stream, graph and executable graph.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { VXQA_CUDA_CHECK(cudaStreamCreate(&s)); }  // blocking: ordered after legacy-stream copies
  ~Stream() { cudaStreamDestroy(s); }
};
struct Graph {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (g) cudaGraphDestroy(g);
  }
};

// ---------------------------------------------------------------------------------------
template <class Config>
void two_runs_identical(RandomProblemOptions o, uint64_t seed, int min_chunks = 4) {
  const RandomProblem p = vxqa::reference::make_random_problem(o, seed);
  DeviceProblem d(p);
  const int chunk = Config::kChunkMultiple;  // the smallest chunk: many chunks
  const vxqa::DecodePlan plan = plan_for<Config>(p, longest(p.seq_lens), chunk);
  INFO("D " << p.head_dim << " G " << p.group << " Hkv " << p.kv_heads << " page " << p.page_size
            << " chunks " << plan.num_chunks << " seed " << seed);
  REQUIRE(plan.num_chunks >= min_chunks);
  const DecodeResult a = run_decode<Config>(p, d, plan);
  const DecodeResult b = run_decode<Config>(p, d, plan);
  require_same_bits(a, b, p.batch, p.query_heads(), p.head_dim, "run 1 vs run 2");
  check_against_reference(p, a);  // and the bits are the right ones
}

// Sequence k alone (batch 1) and inside a batch of 16, same plan capacity (max_batch 16).
template <class Config>
void batch_invariance(RandomProblemOptions o, uint64_t seed) {
  o.batch = 16;
  // The table must cover the plan's max_context whatever lengths are drawn.
  o.spare_table_cols = (o.max_seq_len + o.page_size - 1) / o.page_size;
  const RandomProblem p = vxqa::reference::make_random_problem(o, seed);
  DeviceProblem d(p);
  const int max_context = o.max_seq_len;
  const int hq = p.query_heads();
  // An explicit chunk (several chunks per long sequence; not whole rounds of the SM70
  // body's CTA) and the automatic one.
  for (int chunk : {3 * Config::kChunkMultiple, 0}) {
    const vxqa::DecodePlan plan = plan_for<Config>(p, max_context, chunk, /*max_batch=*/16);
    INFO("D " << p.head_dim << " G " << p.group << " page " << p.page_size << " chunk "
              << plan.chunk_tokens << " chunks " << plan.num_chunks << " seed " << seed);
    const vxqa::DecodeParams all = make_params(p, d, nullptr, nullptr);
    const DecodeResult batched = run_params<Config>(all, plan, 16);
    if (chunk != 0) check_against_reference(p, batched);
    for (int k : {0, 5, 15}) {
      INFO("position " << k << " (len " << p.seq_lens[k] << ")");
      vxqa::DecodeParams one = all;  // a view of sequence k on the same device buffers
      one.q = d.q.get() + int64_t(k) * all.q_batch_stride;
      one.block_table = d.table.get() + int64_t(k) * p.table_stride;
      one.seq_lens = d.lens.get() + k;
      one.batch = 1;
      const DecodeResult alone = run_params<Config>(one, plan, 1);
      REQUIRE(alone.errors == 0u);
      require_same_bits(alone, 0, batched, k, hq, p.head_dim, "alone vs in the batch");
    }
  }
}

// Capture one decode in a graph, replay at the initial lengths, grow the lengths in the
// device seq_lens buffer, replay again (and shrink back): each replay is bitwise the eager
// decode at the same lengths.
template <class Config>
void graph_replay_with_growing_lengths(RandomProblemOptions o, const std::vector<int32_t>& initial,
                                       uint64_t seed, bool single_chunk) {
  REQUIRE(initial.size() == o.seq_lens.size());
  const RandomProblem p = vxqa::reference::make_random_problem(o, seed);  // at the final lengths
  RandomProblem p_initial = p;  // same data, the shorter lengths (for the reference)
  p_initial.seq_lens = initial;
  DeviceProblem d(p);
  const int max_context = longest(p.seq_lens);  // capacity fixed at setup: the final lengths
  const int chunk = single_chunk ? round_up(max_context, Config::kCtaTokens) : Config::kCtaTokens;
  const vxqa::DecodePlan plan = plan_for<Config>(p, max_context, chunk);
  INFO("D " << p.head_dim << " chunks " << plan.num_chunks << " seed " << seed);
  REQUIRE((plan.num_chunks == 1) == single_chunk);
  const int hq = p.query_heads();

  d.lens.upload(initial);
  VXQA_CUDA_CHECK(cudaDeviceSynchronize());
  // Eager first: loads the kernels outside the capture (lazy module loading).
  const DecodeResult eager_initial = run_decode<Config>(p, d, plan);
  check_against_reference(p_initial, eager_initial);

  DeviceBuffer<uint16_t> out(size_t(p.batch) * hq * p.head_dim);
  DeviceBuffer<float> lse(size_t(p.batch) * hq);
  DeviceBuffer<unsigned char> workspace(plan.workspace_bytes);
  const vxqa::DecodeParams params = make_params(p, d, out.get(), lse.get());
  Stream stream;
  Graph graph;
  VXQA_CUDA_CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
  const vxqa::Status s = vxqa::decode<Config>(params, plan, workspace.get(), plan.workspace_bytes, stream.s);
  const cudaError_t ended = cudaStreamEndCapture(stream.s, &graph.g);  // always end the capture
  INFO(s.message());
  REQUIRE(s.ok());
  VXQA_CUDA_CHECK(ended);
  VXQA_CUDA_CHECK(cudaGraphInstantiateWithFlags(&graph.exec, graph.g, 0));

  auto replay = [&]() {
    out.poison(kNanPoison);
    lse.poison(kNanPoison);
    VXQA_CUDA_CHECK(cudaDeviceSynchronize());
    VXQA_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream.s));
    VXQA_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    DecodeResult r;
    r.out = out.download();
    r.lse = lse.download();
    const vxqa::Status e = vxqa::read_decode_errors(workspace.get(), stream.s, &r.errors);
    INFO(e.message());
    REQUIRE(e.ok());
    REQUIRE(r.errors == 0u);
    return r;
  };

  const DecodeResult replay_initial = replay();
  require_same_bits(replay_initial, eager_initial, p.batch, hq, p.head_dim, "replay 1 vs eager, initial lengths");

  d.lens.upload(p.seq_lens);  // the sequences grow; the graph is not touched
  VXQA_CUDA_CHECK(cudaDeviceSynchronize());
  const DecodeResult eager_final = run_decode<Config>(p, d, plan);
  check_against_reference(p, eager_final);
  const DecodeResult replay_final = replay();
  require_same_bits(replay_final, eager_final, p.batch, hq, p.head_dim, "replay 2 vs eager, grown lengths");

  d.lens.upload(initial);  // and back: nothing of the previous replay lingers
  VXQA_CUDA_CHECK(cudaDeviceSynchronize());
  const DecodeResult replay_again = replay();
  require_same_bits(replay_again, eager_initial, p.batch, hq, p.head_dim, "replay 3 vs eager, initial lengths");
}

// Sequences of length 0 inside a batch: out exactly zero, lse = -inf, the others right.
template <class Config>
void empty_sequences(RandomProblemOptions o, uint64_t seed) {
  const RandomProblem p = vxqa::reference::make_random_problem(o, seed);
  DeviceProblem d(p);
  const int max_context = longest(p.seq_lens);
  const int hq = p.query_heads();
  for (int chunk : {round_up(max_context, Config::kCtaTokens), int(Config::kCtaTokens)}) {
    const vxqa::DecodePlan plan = plan_for<Config>(p, max_context, chunk);
    INFO("D " << p.head_dim << " chunks " << plan.num_chunks << " seed " << seed);
    const DecodeResult r = run_decode<Config>(p, d, plan);
    check_against_reference(p, r);
    for (int b = 0; b < p.batch; ++b) {
      if (p.seq_lens[b] != 0) continue;
      for (int h = 0; h < hq; ++h) {
        INFO("empty seq " << b << " head " << h);
        for (int dd = 0; dd < p.head_dim; ++dd)
          REQUIRE(half_bits_to_double(r.out[(size_t(b) * hq + h) * p.head_dim + dd]) == 0.0);
        const float lse = r.lse[size_t(b) * hq + h];
        REQUIRE((std::isinf(lse) && lse < 0));
      }
    }
  }
}

// Bad lengths in the device seq_lens: NaN for those sequences, the error bit, the others
// still right; then a good step on the same workspace clears the bit.
template <class Config>
void bad_lengths(RandomProblemOptions o, uint64_t seed) {
  // Generated at valid lengths (so every sequence has real pages), with sequence 3 longer
  // than the plan's capacity below: its block table covers it, only max_context forbids it.
  o.seq_lens = {300, 1200, 50, 2100, 700, 33};
  o.batch = int(o.seq_lens.size());
  const RandomProblem p = vxqa::reference::make_random_problem(o, seed);
  const int max_context = 2048;
  REQUIRE(int64_t(p.max_pages) * p.page_size >= 2100);
  std::vector<int32_t> device_lens = p.seq_lens;
  device_lens[1] = -7;
  device_lens[3] = 2100;  // > max_context
  device_lens[4] = INT_MIN;
  const std::vector<bool> good = {true, false, true, false, false, true};
  RandomProblem p_ref = p;  // the reference of the good sequences (bad ones emptied)
  for (int b = 0; b < p.batch; ++b)
    if (!good[b]) p_ref.seq_lens[b] = 0;

  DeviceProblem d(p);
  d.lens.upload(device_lens);
  const int hq = p.query_heads();
  for (int chunk : {max_context, int(Config::kCtaTokens)}) {
    const vxqa::DecodePlan plan = plan_for<Config>(p, max_context, chunk);
    INFO("D " << p.head_dim << " chunks " << plan.num_chunks << " seed " << seed);
    DeviceBuffer<unsigned char> workspace(plan.workspace_bytes);
    workspace.poison(0xFF);  // garbage before the first decode: its error words too
    DeviceBuffer<uint16_t> dummy_out(size_t(p.batch) * hq * p.head_dim);
    const vxqa::DecodeParams params = make_params(p, d, dummy_out.get(), nullptr);

    // The host check, given the lengths, names the field.
    const vxqa::Status host = vxqa::validate<Config>(params, plan, workspace.get(),
                                                    plan.workspace_bytes, device_lens.data());
    REQUIRE_FALSE(host.ok());
    REQUIRE(host.field() == "seq_lens");

    // Finite poison: a NaN read back was written by the kernels.
    const DecodeResult r = run_params<Config>(params, plan, p.batch, kFinitePoison, workspace.get());
    REQUIRE(r.errors == uint32_t(vxqa::kDecodeErrorBadLength));
    for (int b = 0; b < p.batch; ++b) {
      if (good[b]) continue;
      for (int h = 0; h < hq; ++h) {
        INFO("bad seq " << b << " (len " << device_lens[b] << ") head " << h);
        for (int dd = 0; dd < p.head_dim; ++dd)
          REQUIRE(is_nan_half(r.out[(size_t(b) * hq + h) * p.head_dim + dd]));
        REQUIRE(std::isnan(r.lse[size_t(b) * hq + h]));
      }
    }
    check_sequences_against_reference(p_ref, r, good);

    // Fixed lengths, same workspace: the error word is reset by every decode.
    d.lens.upload(p_ref.seq_lens);
    const DecodeResult fixed = run_params<Config>(params, plan, p.batch, kNanPoison, workspace.get());
    REQUIRE(fixed.errors == 0u);
    check_against_reference(p_ref, fixed);
    d.lens.upload(device_lens);
  }
}

// The same problem with different garbage (NaN/inf codes in unused rows, pages and padding;
// garbage page ids past each sequence's pages): bitwise the same outputs.
template <class Config>
void garbage_does_not_matter(RandomProblemOptions o, uint64_t seed) {
  const int hq = o.kv_heads * o.group;
  o.garbage_seed = 0;
  const RandomProblem p0 = vxqa::reference::make_random_problem(o, seed);
  const int max_context = longest(p0.seq_lens);
  DecodeResult r0;
  {
    const DeviceProblem d(p0);
    r0 = run_decode<Config>(p0, d, plan_for<Config>(p0, max_context, Config::kCtaTokens));
    check_against_reference(p0, r0);
  }
  for (uint64_t garbage : {1ull, 2ull, 0x9E3779B97F4A7C15ull}) {
    o.garbage_seed = garbage;
    const RandomProblem p = vxqa::reference::make_random_problem(o, seed);
    INFO("garbage seed " << garbage);
    // Same problem, different garbage (else this test proves nothing).
    REQUIRE(p.q == p0.q);
    REQUIRE(p.seq_lens == p0.seq_lens);
    REQUIRE(p.cache.size() == p0.cache.size());
    REQUIRE(p.cache != p0.cache);
    REQUIRE(p.block_table != p0.block_table);
    const DeviceProblem d(p);
    const DecodeResult r = run_decode<Config>(p, d, plan_for<Config>(p, max_context, Config::kCtaTokens));
    require_same_bits(r, r0, p.batch, hq, p.head_dim, "garbage seed changed");
  }
}

RandomProblemOptions qwen_like() {  // G 6, Hkv 1, D 256, page 800 (not a power of two)
  RandomProblemOptions o = aligned_options<E5m2D256>();
  o.group = 6;
  o.kv_heads = 1;
  o.page_size = 800;
  o.k_scale = 0.75f;
  o.v_scale = 1.25f;
  return o;
}

RandomProblemOptions d128_fp16() {  // two M tiles (G 12), two KV heads, page 16
  RandomProblemOptions o = aligned_options<Fp16D128>();
  o.group = 12;
  o.kv_heads = 2;
  o.page_size = 16;
  o.k_scale = 1.5f;
  o.v_scale = 0.5f;
  return o;
}

}  // namespace

TEST_CASE("two runs of a split-KV decode give identical bits", "[decode_invariants]") {
  {
    RandomProblemOptions o = qwen_like();
    o.seq_lens = {3001, 1, 800, 1599};
    o.batch = 4;
    two_runs_identical<E5m2D256>(o, 11000);
  }
  {
    RandomProblemOptions o = d128_fp16();
    o.seq_lens = {1000, 513, 17};
    o.batch = 3;
    two_runs_identical<Fp16D128>(o, 11001);
  }
  {  // more than 32 chunks: the combine's 16-dim slices
    RandomProblemOptions o = qwen_like();
    o.seq_lens = {5000, 4300, 70};
    o.batch = 3;
    two_runs_identical<E5m2D256>(o, 11002, vxqa::kCombineNarrowAbove + 1);
  }
}

TEST_CASE("a sequence alone and inside a batch of 16 give identical bits", "[decode_invariants]") {
  {
    RandomProblemOptions o = qwen_like();
    o.min_seq_len = 1;
    o.max_seq_len = 3000;
    batch_invariance<E5m2D256>(o, 12000);
  }
  {
    RandomProblemOptions o = d128_fp16();
    o.min_seq_len = 0;
    o.max_seq_len = 1100;
    batch_invariance<Fp16D128>(o, 12001);
  }
  {  // the explicit chunk gives more than 32 chunks: the combine's 16-dim slices
    RandomProblemOptions o = d128_fp16();
    o.min_seq_len = 1;
    o.max_seq_len = 9000;
    batch_invariance<Fp16D128>(o, 12002);
  }
}

TEST_CASE("a captured decode replays bitwise like eager decodes while the lengths grow",
          "[decode_invariants]") {
  for (bool single_chunk : {false, true}) {
    INFO("single chunk: " << single_chunk);
    {
      RandomProblemOptions o = qwen_like();
      o.seq_lens = {1500, 2900, 800, 17, 1601};
      o.batch = 5;
      graph_replay_with_growing_lengths<E5m2D256>(o, {1000, 100, 0, 1, 1600}, 13000, single_chunk);
    }
    {
      RandomProblemOptions o = d128_fp16();
      o.seq_lens = {700, 33, 1024};
      o.batch = 3;
      graph_replay_with_growing_lengths<Fp16D128>(o, {129, 0, 1023}, 13001, single_chunk);
    }
  }
}

TEST_CASE("length-0 sequences give zeros and lse = -inf, single- and multi-chunk",
          "[decode_invariants]") {
  {
    RandomProblemOptions o = qwen_like();
    o.seq_lens = {0, 37, 0, 1000, 0, 1, 0};
    o.batch = 7;
    empty_sequences<E5m2D256>(o, 14000);
  }
  {
    RandomProblemOptions o = d128_fp16();
    o.seq_lens = {513, 0, 0, 2};
    o.batch = 4;
    empty_sequences<Fp16D128>(o, 14001);
  }
  {  // a whole batch of empty sequences (the table still covers max_context)
    RandomProblemOptions o = qwen_like();
    o.page_size = 16;
    o.seq_lens = {0, 0, 0};
    o.batch = 3;
    o.spare_table_cols = 16;
    empty_sequences<E5m2D256>(o, 14002);
  }
}

TEST_CASE("a bad device length: NaN outputs, the error bit, the other sequences right",
          "[decode_invariants]") {
  bad_lengths<E5m2D256>(qwen_like(), 15000);
  bad_lengths<Fp16D128>(d128_fp16(), 15001);
}

TEST_CASE("garbage in the cache and the block table does not change a bit",
          "[decode_invariants]") {
  {
    RandomProblemOptions o = qwen_like();
    o.page_size = 16;  // many partial pages: garbage rows right after every sequence's end
    o.seq_lens = {1, 15, 16, 17, 799, 1200};
    o.batch = 6;
    garbage_does_not_matter<E5m2D256>(o, 16000);
  }
  {
    RandomProblemOptions o = d128_fp16();
    o.page_size = 784;
    o.seq_lens = {1, 783, 785, 300};
    o.batch = 4;
    garbage_does_not_matter<Fp16D128>(o, 16001);
  }
}
