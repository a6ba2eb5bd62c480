// vxqa host cost: what one decode() call costs the host, and what of it the shared-memory
// opt-in takes now that decode() sets it at every launch (the opt-in belongs to the CUDA
// context, so a cache keyed by device missed it after cudaDeviceReset()).
//
//   host_cost [--json FILE] [--commit HASH]
//
// A small step (4 sequences of up to 1K tokens, D 256, G 6, E5M2, page 16) whose kernels
// take a few microseconds. Each figure is the median over rounds of the mean host time of a
// call in a round of kCalls, measured with std::chrono around the calls only; the stream is
// synchronised between rounds, so the launch queue never fills and blocks a call.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>
#include <vxqa/vxqa.cuh>
#include <vxqa/testing/problem_params.cuh>
#include "../examples/gpu_timing.cuh"

namespace {

using Config = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2>;
constexpr int kCalls = 200, kRounds = 25;

// Median over rounds of the mean ns a call of `call` takes.
template <class Call>
double ns_per_call(Call call, cudaStream_t stream) {
  std::vector<double> rounds;
  for (int r = 0; r < kRounds + 1; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) call();
    const auto stop = std::chrono::steady_clock::now();
    DEMO_CHECK(cudaStreamSynchronize(stream));
    if (r > 0) rounds.push_back(std::chrono::duration<double, std::nano>(stop - start).count() / kCalls);  // 0: warm-up
  }
  std::nth_element(rounds.begin(), rounds.begin() + rounds.size() / 2, rounds.end());
  return rounds[rounds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, commit = "unknown";
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (k == "--commit" && i + 1 < argc) commit = argv[++i];
    else {
      std::fprintf(stderr, "host_cost: unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (!vxqa_demo::has_gpu()) {
    std::printf("no CUDA device: host cost skipped\n");
    return 0;
  }
  vxqa::reference::RandomProblemOptions o;
  o.batch = 4;
  o.group = 6;
  o.head_dim = 256;
  o.min_seq_len = 512;
  o.max_seq_len = 1024;
  o.layout = vxqa::reference::CacheLayout::kVllm;
  o.stride_align = 16;
  const vxqa::reference::RandomProblem p = vxqa::reference::make_random_problem(o, 1);

  cudaStream_t stream;
  DEMO_CHECK(cudaStreamCreate(&stream));
  cudaDeviceProp prop{};
  DEMO_CHECK(cudaGetDeviceProperties(&prop, 0));
  unsigned char* cache;
  uint16_t *q, *out;
  int32_t *table, *lens;
  DEMO_CHECK(cudaMalloc(&cache, p.cache.size()));
  DEMO_CHECK(cudaMalloc(&q, p.q.size() * 2));
  DEMO_CHECK(cudaMalloc(&out, p.q.size() * 2));
  DEMO_CHECK(cudaMalloc(&table, p.block_table.size() * 4));
  DEMO_CHECK(cudaMalloc(&lens, p.seq_lens.size() * 4));
  DEMO_CHECK(cudaMemcpy(cache, p.cache.data(), p.cache.size(), cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemcpy(q, p.q.data(), p.q.size() * 2, cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemcpy(table, p.block_table.data(), p.block_table.size() * 4, cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemcpy(lens, p.seq_lens.data(), p.seq_lens.size() * 4, cudaMemcpyHostToDevice));
  vxqa::DecodePlan plan;
  vxqa::Status s = vxqa::make_decode_plan<Config>(p.batch, p.max_pages * p.page_size, p.kv_heads, p.group, &plan);
  if (!s.ok()) { std::fprintf(stderr, "plan: %s\n", s.message().c_str()); return 1; }
  void* workspace;
  DEMO_CHECK(cudaMalloc(&workspace, plan.workspace_bytes));
  const vxqa::DecodeParams params = vxqa::problem_params(p, {cache, q, table, lens, out, nullptr});
  int smem = 0;
  s = vxqa::decode_smem_bytes<Config>(&smem);
  if (!s.ok()) { std::fprintf(stderr, "decode_smem_bytes: %s\n", s.message().c_str()); return 1; }

  bool failed = false;
  auto check = [&](const vxqa::Status& st) { failed |= !st.ok(); };
  const double decode_ns =
      ns_per_call([&] { check(vxqa::decode<Config>(params, plan, workspace, plan.workspace_bytes, stream)); }, stream);
  const double opt_in_ns = ns_per_call([&] { check(vxqa::apply_smem_opt_in<Config>(smem)); }, stream);
  const double validate_ns = ns_per_call(
      [&] { check(vxqa::validate<Config>(params, plan, workspace, plan.workspace_bytes)); }, stream);
  const double smem_query_ns = ns_per_call([&] { check(vxqa::decode_smem_bytes<Config>(&smem)); }, stream);
  if (failed) {
    std::fprintf(stderr, "host_cost: a call failed\n");
    return 1;
  }

  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::printf("%s, %s, commit %s; D256 E5M2 B%d, chunk %d x %d, %d B shared memory\n", prop.name, date,
              commit.c_str(), p.batch, plan.chunk_tokens, plan.num_chunks, smem);
  std::printf("decode() %.0f ns a call; of it: apply_smem_opt_in %.0f ns (%.1f %%), validate %.0f ns, "
              "decode_smem_bytes (cached) %.0f ns\n",
              decode_ns, opt_in_ns, 100.0 * opt_in_ns / decode_ns, validate_ns, smem_query_ns);
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) { std::perror(json_path.c_str()); return 1; }
    std::fprintf(f,
                 "{\n  \"device\": \"%s\",\n  \"date\": \"%s\",\n  \"commit\": \"%s\",\n  \"config\": \"D256 E5M2\",\n"
                 "  \"batch\": %d,\n  \"chunk_tokens\": %d,\n  \"num_chunks\": %d,\n  \"smem_bytes\": %d,\n"
                 "  \"calls_per_round\": %d,\n  \"rounds\": %d,\n  \"decode_ns\": %.1f,\n  \"apply_smem_opt_in_ns\": %.1f,\n"
                 "  \"validate_ns\": %.1f,\n  \"decode_smem_bytes_ns\": %.1f\n}\n",
                 prop.name, date, commit.c_str(), p.batch, plan.chunk_tokens, plan.num_chunks, smem, kCalls, kRounds,
                 decode_ns, opt_in_ns, validate_ns, smem_query_ns);
    std::fclose(f);
  }
  return 0;
}
