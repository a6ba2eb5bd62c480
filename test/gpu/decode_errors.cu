// What decode reports and refuses (commit fc1accf), through the public API:
//  - device scales (k_scale_ptr / v_scale_ptr) holding 0, -1, NaN or +inf: the error word
//    gets kErrorBadKScale / kErrorBadVScale; a bad K scale makes every output of every
//    sequence with tokens NaN, O and LSE; a bad V scale makes O NaN and leaves the LSE the
//    reference's; length-0 sequences still give O = 0 and LSE -inf; one chunk and several;
//  - batch 0: decode() returns ok and enqueues nothing (out, lse and the workspace's error
//    word keep their poison; a capture of the call is an empty graph);
//  - cache_type: unset, or another format than the Config's, is refused naming
//    "cache_type", before anything is launched.
// Out and lse are poisoned with finite bytes wherever NaN is expected, so a NaN read back
// was written by the kernels.
#include "gpu/decode_harness.cuh"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace vxqa_test;

namespace {

// Finite poison: fp16 0x7B7B = 61280, fp32 0x7B7B7B7B ~ 1.3e36.
constexpr unsigned char kFinitePoison = 0x7B;

bool is_nan_half(uint16_t bits) { return (bits & 0x7C00u) == 0x7C00u && (bits & 0x03FFu) != 0; }

int round_up(int x, int m) { return (x + m - 1) / m * m; }

int longest(const RandomProblem& p) {
  int m = 1;
  for (int len : p.seq_lens) m = std::max(m, len);
  return m;
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Ragged lengths with an empty sequence and a one-token one, random pages (page 16), G 6.
template <class Config>
RandomProblem errors_problem(uint64_t seed) {
  RandomProblemOptions o = aligned_options<Config>();
  o.group = 6;
  o.kv_heads = 2;
  o.page_size = 16;
  o.seq_lens = {700, 0, 129, 1, 383};
  o.batch = int(o.seq_lens.size());
  o.k_scale = 0.75f;
  o.v_scale = 1.25f;
  return vxqa::reference::make_random_problem(o, seed);
}

// Plans: one chunk; the smallest chunk; three of it; automatic.
template <class Config>
std::vector<int> chunkings(const RandomProblem& p) {
  return {round_up(longest(p), Config::kCtaTokens), Config::kChunkMultiple, 3 * Config::kChunkMultiple, 0};
}

// The K and V scales a device pointer holds. A bad K scale: every output of a sequence with
// tokens NaN (O and LSE); a bad V scale: O NaN, the LSE still the reference's (it does not
// involve V). Length 0: O exactly 0, LSE -inf, whatever the scales.
// How the old behaviour fails: before fc1accf a device scale was used as it was (0 gave
// uniform weights and a finite O, -1 a negated finite O, +inf finite or inf values) and no
// bit was set; here each bad value must give exactly its bits and NaN outputs.
template <class Config>
void bad_device_scales(uint64_t seed) {
  const RandomProblem p = errors_problem<Config>(seed);
  const vxqa::reference::DecodeOutput ref = vxqa::reference::decode_reference(p.inputs());
  const vxqa::reference::ErrorModel model = vxqa::reference::decode_error_model(p.inputs(), ref);
  const DeviceProblem d(p);
  DeviceBuffer<float> scales(2);
  vxqa::DecodeParams params = make_params(p, d, nullptr, nullptr);
  params.k_scale = params.v_scale = -1.f;  // not read: the pointers win
  params.k_scale_ptr = scales.get();
  params.v_scale_ptr = scales.get() + 1;
  const int hq = p.query_heads(), D = p.head_dim;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float bad_values[] = {0.f, -1.f, nan, inf};
  for (const int chunk : chunkings<Config>(p)) {
    const vxqa::DecodePlan plan = plan_for<Config>(p, longest(p), chunk);
    INFO("chunk " << plan.chunk_tokens << ", " << plan.num_chunks << " chunks");
    DeviceBuffer<unsigned char> workspace(plan.workspace_bytes);
    workspace.poison(0xFF);
    // The control: good device scales give the reference (and no bit), on this workspace.
    scales.upload({p.k_scale, p.v_scale});
    check_against_reference(p, run_params<Config>(params, plan, p.batch, kFinitePoison, workspace.get()));
    for (const int which : {1, 2, 3}) {  // K, V, both
      const bool k_bad = which & 1, v_bad = which & 2;
      for (const float bad : bad_values) {
        INFO((k_bad ? "K " : "") << (v_bad ? "V " : "") << "scale " << bad);
        scales.upload({k_bad ? bad : p.k_scale, v_bad ? bad : p.v_scale});
        const DecodeResult r = run_params<Config>(params, plan, p.batch, kFinitePoison, workspace.get());
        const uint32_t bits = (k_bad ? uint32_t(vxqa::kErrorBadKScale) : 0u) |
                              (v_bad ? uint32_t(vxqa::kErrorBadVScale) : 0u);
        REQUIRE(r.errors == bits);
        for (int b = 0; b < p.batch; ++b) {
          for (int h = 0; h < hq; ++h) {
            INFO("seq " << b << " (len " << p.seq_lens[b] << ") head " << h);
            const size_t row = size_t(b) * hq + h;
            const float lse = r.lse[row];
            if (p.seq_lens[b] == 0) {
              for (int dd = 0; dd < D; ++dd) REQUIRE(half_bits_to_double(r.out[row * D + dd]) == 0.0);
              REQUIRE((std::isinf(lse) && lse < 0));
              continue;
            }
            for (int dd = 0; dd < D; ++dd) {
              INFO("dim " << dd << ": bits 0x" << std::hex << r.out[row * D + dd] << std::dec);
              REQUIRE(is_nan_half(r.out[row * D + dd]));
            }
            INFO("lse " << lse << ", reference " << ref.lse[row]);
            if (k_bad) {
              REQUIRE(std::isnan(lse));
            } else {  // the harness's LSE bound (vxqa/testing/compare.h)
              REQUIRE(std::isfinite(lse));
              REQUIRE(std::fabs(lse - ref.lse[row]) <= vxqa::reference::lse_bound(model, row));
            }
          }
        }
      }
    }
    // And good scales again, on the same workspace: the bits are the step's, not sticky.
    scales.upload({p.k_scale, p.v_scale});
    check_against_reference(p, run_params<Config>(params, plan, p.batch, kFinitePoison, workspace.get()));
  }
}

// RAII for a captured graph.
struct Graph {
  cudaGraph_t g = nullptr;
  ~Graph() {
    if (g) cudaGraphDestroy(g);
  }
};
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { VXQA_CUDA_CHECK(cudaStreamCreate(&s)); }
  ~Stream() { cudaStreamDestroy(s); }
};

// Out, lse and the whole workspace still hold their poison bytes.
void require_untouched(const DeviceBuffer<uint16_t>& out, const DeviceBuffer<float>& lse,
                       const DeviceBuffer<unsigned char>& workspace, unsigned char out_poison,
                       unsigned char workspace_poison) {
  VXQA_CUDA_CHECK(cudaDeviceSynchronize());
  const uint16_t out_bits = uint16_t(out_poison | (out_poison << 8));
  const uint32_t lse_bits = uint32_t(out_bits) | (uint32_t(out_bits) << 16);
  size_t changed = 0;
  for (uint16_t x : out.download()) changed += x != out_bits;
  for (float x : lse.download()) changed += float_bits(x) != lse_bits;
  for (unsigned char x : workspace.download()) changed += x != workspace_poison;
  REQUIRE(changed == 0);
  uint32_t word = 0;
  const vxqa::Status e = vxqa::read_decode_errors(workspace.get(), 0, &word);
  INFO(e.message());
  REQUIRE(e.ok());
  REQUIRE(word == uint32_t(workspace_poison) * 0x01010101u);
}

// Batch 0 with a plan for more: ok, and nothing enqueued. How the old behaviour fails:
// validate() refused batch 0 ("batch" outside 1..max_batch), so s.ok() was false.
template <class Config>
void batch_zero(uint64_t seed) {
  const RandomProblem p = errors_problem<Config>(seed);
  const DeviceProblem d(p);
  const int hq = p.query_heads();
  for (const int chunk : chunkings<Config>(p)) {
    const vxqa::DecodePlan plan = plan_for<Config>(p, longest(p), chunk);
    INFO("chunk " << plan.chunk_tokens << ", " << plan.num_chunks << " chunks");
    DeviceBuffer<uint16_t> out(size_t(p.batch) * hq * p.head_dim);
    DeviceBuffer<float> lse(size_t(p.batch) * hq);
    DeviceBuffer<unsigned char> workspace(plan.workspace_bytes);
    out.poison(kFinitePoison);
    lse.poison(kFinitePoison);
    workspace.poison(0x5A);  // the error word reads 0x5A5A5A5A
    vxqa::DecodeParams params = make_params(p, d, out.get(), lse.get());
    params.batch = 0;
    const vxqa::Status s = vxqa::decode<Config>(params, plan, workspace.get(), plan.workspace_bytes, 0);
    INFO(s.message());
    REQUIRE(s.ok());
    VXQA_CUDA_CHECK_LAUNCH();
    require_untouched(out, lse, workspace, kFinitePoison, 0x5A);

    // Captured, the call is an empty graph: not a kernel, not a memset.
    {
      Stream stream;
      Graph graph;
      VXQA_CUDA_CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
      const vxqa::Status captured = vxqa::decode<Config>(params, plan, workspace.get(), plan.workspace_bytes, stream.s);
      const cudaError_t ended = cudaStreamEndCapture(stream.s, &graph.g);  // always end the capture
      INFO(captured.message());
      REQUIRE(captured.ok());
      VXQA_CUDA_CHECK(ended);
      size_t nodes = ~size_t(0);
      VXQA_CUDA_CHECK(cudaGraphGetNodes(graph.g, nullptr, &nodes));
      REQUIRE(nodes == 0);
    }

    // Batch 0 reads no pointer: every one null, no workspace, is ok too.
    vxqa::DecodeParams empty = params;
    empty.q = nullptr;
    empty.out = nullptr;
    empty.lse = nullptr;
    empty.k_cache = empty.v_cache = nullptr;
    empty.block_table = nullptr;
    empty.seq_lens = nullptr;
    const vxqa::Status none = vxqa::decode<Config>(empty, plan, nullptr, 0, 0);
    INFO(none.message());
    REQUIRE(none.ok());
    VXQA_CUDA_CHECK_LAUNCH();

    // A batch outside 0..max_batch is still refused.
    params.batch = -1;
    REQUIRE(vxqa::decode<Config>(params, plan, workspace.get(), plan.workspace_bytes, 0).field() == "batch");
    params.batch = plan.max_batch + 1;
    REQUIRE(vxqa::decode<Config>(params, plan, workspace.get(), plan.workspace_bytes, 0).field() == "batch");
    VXQA_CUDA_CHECK_LAUNCH();
    require_untouched(out, lse, workspace, kFinitePoison, 0x5A);

    // And the same buffers with the batch given decode like the reference (the control).
    params.batch = p.batch;
    check_against_reference(p, run_params<Config>(params, plan, p.batch, kFinitePoison, workspace.get()));
  }
}

// cache_type unset, or another format than the Config's: refused, naming the field, and
// nothing launched. With it right, the same parameters decode like the reference.
template <class Config>
void cache_type_refused(uint64_t seed) {
  const RandomProblem p = errors_problem<Config>(seed);
  const DeviceProblem d(p);
  const int hq = p.query_heads();
  const vxqa::DecodePlan plan = plan_for<Config>(p, longest(p), Config::kChunkMultiple);
  DeviceBuffer<uint16_t> out(size_t(p.batch) * hq * p.head_dim);
  DeviceBuffer<float> lse(size_t(p.batch) * hq);
  DeviceBuffer<unsigned char> workspace(plan.workspace_bytes);
  out.poison(kFinitePoison);
  lse.poison(kFinitePoison);
  workspace.poison(0x5A);
  vxqa::DecodeParams params = make_params(p, d, out.get(), lse.get());
  REQUIRE(params.cache_type == Config::kKv);  // problem_params states it
  // Every other format, E4M3 for E5M2 codes and back among them: one byte never says which.
  for (const vxqa::KvType wrong :
       {vxqa::KvType::kUnset, vxqa::KvType::kE5M2, vxqa::KvType::kE4M3, vxqa::KvType::kFp16, vxqa::KvType::kBf16}) {
    if (wrong == Config::kKv) continue;
    params.cache_type = wrong;
    INFO("cache_type " << vxqa::kv_type_name(wrong));
    REQUIRE(vxqa::validate<Config>(params, plan, workspace.get(), plan.workspace_bytes).field() == "cache_type");
    const vxqa::Status s = vxqa::decode<Config>(params, plan, workspace.get(), plan.workspace_bytes, 0);
    INFO(s.message());
    REQUIRE(s.field() == "cache_type");
    VXQA_CUDA_CHECK_LAUNCH();
  }
  // A default-constructed DecodeParams says nothing about its cache: refused too.
  REQUIRE(vxqa::DecodeParams{}.cache_type == vxqa::KvType::kUnset);
  require_untouched(out, lse, workspace, kFinitePoison, 0x5A);
  params.cache_type = Config::kKv;
  check_against_reference(p, run_params<Config>(params, plan, p.batch, kFinitePoison, workspace.get()));
}

}  // namespace

TEST_CASE("device scales that are 0, negative, NaN or inf: their error bits and NaN outputs, every plan",
          "[decode_errors]") {
  bad_device_scales<vxqa::DecodeConfig<128, vxqa::KvType::kE5M2>>(8000);
  bad_device_scales<vxqa::DecodeConfig<64, vxqa::KvType::kFp16>>(8001);
}

TEST_CASE("batch 0: decode returns ok and enqueues nothing", "[decode_errors]") {
  batch_zero<vxqa::DecodeConfig<128, vxqa::KvType::kE5M2>>(8010);
  batch_zero<vxqa::DecodeConfig<64, vxqa::KvType::kFp16>>(8011);
}

TEST_CASE("decode refuses an unset or mismatching cache_type, naming it, before any launch", "[decode_errors]") {
  cache_type_refused<vxqa::DecodeConfig<128, vxqa::KvType::kE5M2>>(8020);
  cache_type_refused<vxqa::DecodeConfig<64, vxqa::KvType::kFp16>>(8021);
  cache_type_refused<vxqa::DecodeConfig<128, vxqa::KvType::kE4M3>>(8022);
}
