// vxqa decode demo: one decode step of Qwen3.x-27B at tensor parallel 4 (6 query heads per
// KV head, 1 KV head, head dim 256) over a paged E5M2 cache with 800-token pages, 16
// sequences of ragged contexts around 17.8K tokens. It builds the cache on the host, runs
// the kernel through the public API, checks sampled sequences against the float64
// reference, and prints the time, the bytes per second and the copy bandwidth measured in
// the same run. Without a GPU it builds the problem, runs the reference on one sequence, says
// that the GPU part is skipped, and exits 0.
//
//   decode_demo [--batch N] [--context N] [--page N] [--seed N]
#include <cuda_fp16.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include <vxqa/vxqa.cuh>
#include <vxqa/testing/problem_params.cuh>
#include "gpu_timing.cuh"

namespace {

using Config = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2>;

struct Options {
  int batch = 16, context = 17800, page = 800, group = 6, kv_heads = 1;
  uint64_t seed = 2026;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const long v = std::strtol(argv[i + 1], nullptr, 10);
    if (k == "--batch") o.batch = int(v);
    else if (k == "--context") o.context = int(v);
    else if (k == "--page") o.page = int(v);
    else if (k == "--seed") o.seed = uint64_t(v);
    else { std::fprintf(stderr, "unknown option %s\n", argv[i]); std::exit(2); }
  }
  return o;
}

// Ragged lengths: the context ±5 %, at least 1.
std::vector<int32_t> ragged_lengths(const Options& o) {
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int> jitter(-o.context / 20, o.context / 20);
  std::vector<int32_t> lens(o.batch);
  for (auto& len : lens) len = std::max(1, o.context + jitter(rng));
  return lens;
}

// Largest |gpu - ref| over one sequence, in units of max|V|.
double sequence_error(const vxqa::reference::RandomProblem& p, const std::vector<uint16_t>& out, int b) {
  vxqa::reference::RandomProblem one = p;
  one.batch = 1;
  one.seq_lens = {p.seq_lens[b]};
  one.q.assign(p.q.begin() + size_t(b) * p.query_heads() * p.head_dim,
               p.q.begin() + size_t(b + 1) * p.query_heads() * p.head_dim);
  one.block_table.assign(p.block_table.begin() + b * p.table_stride,
                         p.block_table.begin() + (b + 1) * p.table_stride);
  const auto ref = vxqa::reference::decode_reference(one.inputs());
  double worst = 0;
  for (size_t i = 0; i < ref.out.size(); ++i) {
    const double got = vxqa::reference::fp16_to_double(out[size_t(b) * ref.out.size() + i]);
    worst = std::max(worst, std::isfinite(got) ? std::fabs(got - ref.out[i]) : 1e30);
  }
  return worst / (2.0 * p.v_scale);  // V is uniform in [-2, 2]
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  vxqa::reference::RandomProblemOptions po;
  po.batch = o.batch;
  po.kv_heads = o.kv_heads;
  po.group = o.group;
  po.head_dim = Config::kHeadDim;
  po.page_size = o.page;
  po.format = vxqa::reference::KvFormat::kE5M2;
  po.seq_lens = ragged_lengths(o);
  po.layout = vxqa::reference::CacheLayout::kVllm;
  po.stride_align = 16;
  po.k_scale = 0.5f;
  po.v_scale = 1.5f;
  const vxqa::reference::RandomProblem p = vxqa::reference::make_random_problem(po, o.seed);
  long long tokens = 0;
  int max_len = 1;
  for (int len : p.seq_lens) tokens += len, max_len = std::max(max_len, len);
  const double kv_bytes = double(tokens) * p.kv_heads * p.head_dim * 2;  // K and V, 1 byte each
  const double io_bytes = kv_bytes + 2.0 * 2 * p.batch * p.query_heads() * p.head_dim;  // + q, out
  std::printf("vxqa decode demo: B=%d G=%d Hkv=%d D=%d page=%d E5M2, %lld tokens (%.1f MB of KV)\n",
              p.batch, p.group, p.kv_heads, p.head_dim, p.page_size, tokens, kv_bytes / 1e6);

  if (!vxqa_demo::has_gpu()) {
    vxqa::reference::RandomProblem one = p;
    one.batch = 1;
    const auto ref = vxqa::reference::decode_reference(one.inputs());
    std::printf("CPU reference of sequence 0 (len %d): lse[0] = %.6f, out[0] = %.6f\n",
                p.seq_lens[0], ref.lse[0], ref.out[0]);
    std::printf("no CUDA device: GPU part skipped\n");
    return 0;
  }

  cudaStream_t stream;
  DEMO_CHECK(cudaStreamCreate(&stream));
  cudaDeviceProp prop{};
  DEMO_CHECK(cudaGetDeviceProperties(&prop, 0));

  unsigned char* cache;
  uint16_t *q, *out;
  int32_t *table, *lens;
  float* lse;
  DEMO_CHECK(cudaMalloc(&cache, p.cache.size()));
  DEMO_CHECK(cudaMalloc(&q, p.q.size() * 2));
  DEMO_CHECK(cudaMalloc(&out, p.q.size() * 2));
  DEMO_CHECK(cudaMalloc(&lse, size_t(p.batch) * p.query_heads() * 4));
  DEMO_CHECK(cudaMalloc(&table, p.block_table.size() * 4));
  DEMO_CHECK(cudaMalloc(&lens, p.seq_lens.size() * 4));
  DEMO_CHECK(cudaMemcpy(cache, p.cache.data(), p.cache.size(), cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemcpy(q, p.q.data(), p.q.size() * 2, cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemcpy(table, p.block_table.data(), p.block_table.size() * 4, cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemcpy(lens, p.seq_lens.data(), p.seq_lens.size() * 4, cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemset(out, 0xFF, p.q.size() * 2));

  vxqa::DecodePlan plan;  // for this device: its SM count and the body it runs
  vxqa::Status s = vxqa::make_decode_plan<Config>(p.batch, max_len, p.kv_heads, p.group, &plan);
  if (!s.ok()) { std::fprintf(stderr, "plan: %s\n", s.message().c_str()); return 1; }
  void* workspace;
  DEMO_CHECK(cudaMalloc(&workspace, plan.workspace_bytes));

  const vxqa::DecodeParams params = vxqa::problem_params(p, {cache, q, table, lens, out, lse});

  s = vxqa::decode<Config>(params, plan, workspace, plan.workspace_bytes, stream);
  if (!s.ok()) { std::fprintf(stderr, "decode: %s\n", s.message().c_str()); return 1; }
  DEMO_CHECK(cudaStreamSynchronize(stream));
  std::vector<uint16_t> host_out(p.q.size());
  DEMO_CHECK(cudaMemcpy(host_out.data(), out, host_out.size() * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int b : {0, p.batch / 2, p.batch - 1}) worst = std::max(worst, sequence_error(p, host_out, b));
  const bool ok = worst <= 2e-3;
  std::printf("check vs float64 reference (sequences 0, %d, %d): max |err| = %.2e of max|V| %s\n",
              p.batch / 2, p.batch - 1, worst, ok ? "ok" : "FAILED");

  const double us = vxqa_demo::median_us(
      [&] { vxqa::decode<Config>(params, plan, workspace, plan.workspace_bytes, stream); }, stream);
  const double copy = vxqa_demo::copy_bandwidth_gbs(stream);
  const double gbs = io_bytes / (us * 1e3);
  int smem = 0;
  bool sm80_body = false;  // which body this device runs (the default atom picks per architecture)
  if (!vxqa::decode_smem_bytes<Config>(&smem, &sm80_body).ok()) return 1;
  std::printf("%s: %.1f us per step (median), %.0f GB/s = %.0f %% of the %.0f GB/s copy bandwidth "
              "(chunk %d tokens, %d chunks, %s path)\n",
              prop.name, us, gbs, 100.0 * gbs / copy, copy, plan.chunk_tokens, plan.num_chunks,
              sm80_body ? "SM80 m16n8k16" : "SM70 m8n8k4");
  return ok ? 0 : 1;
}
