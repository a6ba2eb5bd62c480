// cta_timeline: where a decode step's time goes, CTA by CTA. Each CTA's thread 0 stamps
// %globaltimer at the points of vxqa::TimelinePoint (VXQA_TIMELINE_PROBE, defined here
// before vxqa is included: the library's own builds compile the probes to nothing). A graph
// of back-to-back steps over rotating cache copies, as decode_bench times them, is replayed;
// the stamps of one replay are then read back and summarised per step: when the CTAs start,
// are released by the step before, know their length, hold their first tile, are done
// streaming and have written, and the same for the combine; how the stream ends (the tail).
//
//   cta_timeline [--json FILE] [--commit HASH]
#include <cstdint>

#include "globaltimer.cuh"

// Defined before the first vxqa include (common.cuh keeps it); it expands in the kernels,
// which are included after timeline::probe below.
#define VXQA_TIMELINE_PROBE(args, point) ::timeline::probe((args), (point))
#include <vxqa/common.cuh>

namespace timeline {
constexpr int kMaxCopies = 16, kMaxCtas = 8192;
__device__ unsigned long long stamps[kMaxCopies][kMaxCtas][vxqa::kProbePoints];
__device__ unsigned decode_sm[kMaxCopies][kMaxCtas];
// The cache copies lie in one allocation, 2^copy_shift bytes apart: a step's K pointer
// names its copy with a subtraction and a shift of constants (a probe must cost little).
__constant__ const unsigned char* cache_base;
__constant__ int copy_shift;

template <class Args>
__device__ __forceinline__ void probe(const Args& a, int point) {
  if (threadIdx.x != 0) return;
  const unsigned long long now = vxqa_bench::globaltimer_ns();
  const long long copy = (static_cast<const unsigned char*>(a.kv.k) - cache_base) >> copy_shift;
  const long long cta = blockIdx.x + gridDim.x * (blockIdx.y + static_cast<long long>(gridDim.y) * blockIdx.z);
  if (copy < 0 || copy >= kMaxCopies || cta >= kMaxCtas) return;
  stamps[copy][cta][point] = now;
  if (point == vxqa::kProbeDecodeEntry) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    decode_sm[copy][cta] = sm;
  }
}
}  // namespace timeline

#include <cuda_fp16.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>
#include <vxqa/vxqa.cuh>
#include <vxqa/testing/problem_params.cuh>
#include "../examples/gpu_timing.cuh"
#include "bench_shapes.cuh"

namespace {

using Config = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2>;
struct Stamps {
  unsigned long long at[timeline::kMaxCtas][vxqa::kProbePoints];
  const unsigned long long* operator[](int cta) const { return at[cta]; }
};

using vxqa_bench::Shape;
// The stamps' points (vxqa::TimelinePoint).
using vxqa::kProbeDecodeEntry, vxqa::kProbeDecodeReleased, vxqa::kProbeDecodeWork, vxqa::kProbeDecodeFirstTile,
    vxqa::kProbeDecodeStreamed, vxqa::kProbeDecodeGathered, vxqa::kProbeDecodeWritten, vxqa::kProbeCombineEntry,
    vxqa::kProbeCombineReleased, vxqa::kProbeCombineWritten;

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * (v.size() - 1) + 0.5))];
}

// "min / median / max" of a list of µs.
std::string spread(const std::vector<double>& v) {
  char s[96];
  std::snprintf(s, sizeof s, "%7.2f %7.2f %7.2f", quantile(v, 0), quantile(v, 0.5), quantile(v, 1));
  return s;
}

void run(const Shape& shape, cudaStream_t stream, int l2_bytes, FILE* json, bool first) {
  const auto p = vxqa_bench::make_problem(shape, Config::kHeadDim);
  int max_len = 1;
  for (int len : p.seq_lens) max_len = std::max(max_len, len);

  // At least two copies, so that every step but the first follows a step of its own.
  const int copies = std::min(timeline::kMaxCopies, std::max(2, int(4.0 * l2_bytes / p.cache.size()) + 1));
  int shift = 12;
  while ((1ll << shift) < static_cast<long long>(p.cache.size())) ++shift;
  const long long stride = 1ll << shift;
  unsigned char* caches;
  DEMO_CHECK(cudaMalloc(&caches, stride * copies));
  for (int i = 0; i < copies; ++i)
    DEMO_CHECK(cudaMemcpy(caches + i * stride, p.cache.data(), p.cache.size(), cudaMemcpyHostToDevice));
  const unsigned char* base = caches;
  DEMO_CHECK(cudaMemcpyToSymbol(timeline::cache_base, &base, sizeof base));
  DEMO_CHECK(cudaMemcpyToSymbol(timeline::copy_shift, &shift, sizeof shift));
  uint16_t *q, *out;
  int32_t *table, *lens;
  DEMO_CHECK(cudaMalloc(&q, p.q.size() * 2));
  DEMO_CHECK(cudaMalloc(&out, p.q.size() * 2));
  DEMO_CHECK(cudaMalloc(&table, p.block_table.size() * 4));
  DEMO_CHECK(cudaMalloc(&lens, p.seq_lens.size() * 4));
  DEMO_CHECK(cudaMemcpy(q, p.q.data(), p.q.size() * 2, cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemcpy(table, p.block_table.data(), p.block_table.size() * 4, cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemcpy(lens, p.seq_lens.data(), p.seq_lens.size() * 4, cudaMemcpyHostToDevice));

  vxqa::DecodePlan plan;
  if (!vxqa::make_decode_plan<Config>(p.batch, max_len, p.kv_heads, p.group, &plan).ok()) std::exit(1);
  void* workspace;
  DEMO_CHECK(cudaMalloc(&workspace, plan.workspace_bytes));
  std::vector<vxqa::DecodeParams> params(copies);
  for (int i = 0; i < copies; ++i) params[i] = vxqa::problem_params(p, {caches + i * stride, q, table, lens, out, nullptr});

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DEMO_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < copies; ++i) {
    const vxqa::Status s = vxqa::decode<Config>(params[i], plan, workspace, plan.workspace_bytes, stream);
    if (!s.ok()) { std::fprintf(stderr, "decode: %s\n", s.message().c_str()); std::exit(1); }
  }
  DEMO_CHECK(cudaStreamEndCapture(stream, &graph));
  DEMO_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double step_us = vxqa_demo::median_us([&] { DEMO_CHECK(cudaGraphLaunch(exec, stream)); }, stream) / copies;

  // One more replay, stamped: the graph's launches before it leave stamps of their own, so
  // the array is cleared first.
  void* stamps_ptr;
  DEMO_CHECK(cudaGetSymbolAddress(&stamps_ptr, timeline::stamps));
  DEMO_CHECK(cudaMemsetAsync(stamps_ptr, 0, sizeof(timeline::stamps), stream));
  DEMO_CHECK(cudaGraphLaunch(exec, stream));
  DEMO_CHECK(cudaStreamSynchronize(stream));
  std::vector<Stamps> host(copies);
  std::vector<std::vector<unsigned>> sms(copies, std::vector<unsigned>(timeline::kMaxCtas));
  for (int i = 0; i < copies; ++i) {
    DEMO_CHECK(cudaMemcpyFromSymbol(host[i].at, timeline::stamps, sizeof(Stamps), i * sizeof(Stamps)));
    DEMO_CHECK(cudaMemcpyFromSymbol(sms[i].data(), timeline::decode_sm, timeline::kMaxCtas * sizeof(unsigned),
                                    i * timeline::kMaxCtas * sizeof(unsigned)));
  }

  const int m_tiles = (p.group + Config::kHeadsPerCta - 1) / Config::kHeadsPerCta;
  const int heads_y = p.kv_heads * m_tiles;
  const int decode_ctas = plan.num_chunks * heads_y * plan.max_batch;
  dim3 combine_grid(0);
  if (plan.num_chunks > 1) vxqa::combine_kernel_for<Config>(plan, p.kv_heads * p.group, &combine_grid);
  const int combine_ctas = int(combine_grid.x * combine_grid.y * combine_grid.z);
  std::printf("\n## %s: chunk %d x %d, %d decode CTAs, %d combine CTAs, %d copies, graph %.2f us a step\n", shape.name,
              plan.chunk_tokens, plan.num_chunks, decode_ctas, combine_ctas, copies, step_us);
  std::printf("step | us from the step's first decode entry: min median max\n");

  // Per step c >= 1 (step 0 follows the previous replay's last step, unstamped).
  std::map<std::string, std::vector<double>> totals;  // medians over steps
  for (int c = 1; c < copies; ++c) {
    const Stamps& s = host[c];
    unsigned long long t0 = ~0ull;
    for (int b = 0; b < decode_ctas; ++b)
      if (s[b][kProbeDecodeEntry]) t0 = std::min(t0, s[b][kProbeDecodeEntry]);
    auto us = [&](unsigned long long t) { return (double(t) - double(t0)) / 1000.0; };
    std::vector<double> entry, released, work, first_tile, streamed, gathered, written, ramp, stream_time, rate;
    std::map<unsigned, int> per_sm;
    std::map<unsigned, std::vector<double>> sm_rates;  // GB/s of the CTAs of each SM
    for (int b = 0; b < decode_ctas; ++b) {
      if (!s[b][kProbeDecodeEntry]) continue;
      entry.push_back(us(s[b][kProbeDecodeEntry]));
      released.push_back(us(s[b][kProbeDecodeReleased]));
      ++per_sm[sms[c][b]];
      if (!s[b][kProbeDecodeWork]) continue;  // no tokens
      const int chunk = b % plan.num_chunks, seq = b / (plan.num_chunks * heads_y);
      const int tokens = std::min(plan.chunk_tokens, p.seq_lens[seq] - chunk * plan.chunk_tokens);
      work.push_back(us(s[b][kProbeDecodeWork]));
      first_tile.push_back(us(s[b][kProbeDecodeFirstTile]));
      streamed.push_back(us(s[b][kProbeDecodeStreamed]));
      gathered.push_back(us(s[b][kProbeDecodeGathered]));
      written.push_back(us(s[b][kProbeDecodeWritten]));
      ramp.push_back((double(s[b][kProbeDecodeFirstTile]) - double(s[b][kProbeDecodeReleased])) / 1000.0);
      stream_time.push_back((double(s[b][kProbeDecodeStreamed]) - double(s[b][kProbeDecodeFirstTile])) / 1000.0);
      if (tokens >= 4 * 16) {
        const double ns = double(s[b][kProbeDecodeStreamed]) - double(s[b][kProbeDecodeReleased]);
        rate.push_back(tokens * 2.0 * Config::kHeadDim / ns);
        sm_rates[sms[c][b]].push_back(rate.back());
      }
    }
    std::vector<double> c_entry, c_released, c_written;
    for (int b = 0; b < combine_ctas; ++b) {
      if (!s[b][kProbeCombineEntry]) continue;
      c_entry.push_back(us(s[b][kProbeCombineEntry]));
      c_released.push_back(us(s[b][kProbeCombineReleased]));
      if (s[b][kProbeCombineWritten]) c_written.push_back(us(s[b][kProbeCombineWritten]));
    }
    const double end = c_written.empty() ? quantile(written, 1) : quantile(c_written, 1);
    unsigned long long next_release = ~0ull;
    if (c + 1 < copies)
      for (int b = 0; b < decode_ctas; ++b)
        if (host[c + 1][b][kProbeDecodeReleased]) next_release = std::min(next_release, host[c + 1][b][kProbeDecodeReleased]);
    const double period = next_release != ~0ull ? us(next_release) - quantile(released, 0) : 0;
    int most = 0, least = 1 << 30;
    for (const auto& kv : per_sm) most = std::max(most, kv.second), least = std::min(least, kv.second);

    std::printf("%d | decode entry   %s\n", c, spread(entry).c_str());
    std::printf("%d | released       %s\n", c, spread(released).c_str());
    std::printf("%d | length known   %s   (%zu CTAs with tokens)\n", c, spread(work).c_str(), work.size());
    std::printf("%d | first tile     %s\n", c, spread(first_tile).c_str());
    std::printf("%d | streamed       %s   p10 %.2f p90 %.2f\n", c, spread(streamed).c_str(), quantile(streamed, 0.1),
                quantile(streamed, 0.9));
    std::printf("%d | gathered       %s\n", c, spread(gathered).c_str());
    std::printf("%d | written        %s\n", c, spread(written).c_str());
    if (!c_entry.empty()) {
      std::printf("%d | combine entry  %s\n", c, spread(c_entry).c_str());
      std::printf("%d | combine released %s\n", c, spread(c_released).c_str());
      std::printf("%d | combine written  %s\n", c, spread(c_written).c_str());
    }
    std::printf("%d | a CTA: release -> first tile %s, first tile -> streamed %s, GB/s from release %s; "
                "SMs %zu, CTAs an SM %d..%d; step ends %.2f, next step released %.2f after this one\n",
                c, spread(ramp).c_str(), spread(stream_time).c_str(), spread(rate).c_str(), per_sm.size(), least, most,
                end, period);
    // Whether a CTA's rate follows its SM: CTAs alone on theirs against those sharing one,
    // and how far apart the two CTAs of one SM are against two CTAs taken at random.
    std::vector<double> alone, shared, pair_gap;
    for (const auto& kv : sm_rates) {
      for (double r : kv.second) (kv.second.size() == 1 ? alone : shared).push_back(r);
      if (kv.second.size() == 2) pair_gap.push_back(std::fabs(kv.second[0] - kv.second[1]));
    }
    std::vector<double> random_gap;
    for (size_t i = 0; i + 1 < rate.size(); i += 2) random_gap.push_back(std::fabs(rate[i] - rate[i + 1]));
    std::printf("%d | GB/s a CTA alone on its SM (%zu) %.2f, sharing it (%zu) %.2f; the gap of an SM's two CTAs "
                "%.2f against two in launch order %.2f (medians)\n",
                c, alone.size(), quantile(alone, 0.5), shared.size(), quantile(shared, 0.5), quantile(pair_gap, 0.5),
                quantile(random_gap, 0.5));
    // How the stream ends: CTAs still streaming at fractions of the last one's end.
    const double last = quantile(streamed, 1), firsts = quantile(first_tile, 0.5);
    std::printf("%d | CTAs not yet streamed at", c);
    for (double f : {0.5, 0.8, 0.9, 0.95, 0.98})
      std::printf(" %.0f%% (%.1f us): %ld;", 100 * f, firsts + f * (last - firsts),
                  std::count_if(streamed.begin(), streamed.end(), [&](double t) { return t > firsts + f * (last - firsts); }));
    std::printf("\n");
    totals["entry_spread"].push_back(quantile(entry, 1) - quantile(entry, 0));
    totals["released_min"].push_back(quantile(released, 0));
    totals["released_to_length"].push_back(quantile(work, 0.5) - quantile(released, 0.5));
    totals["length_to_first_tile"].push_back(quantile(first_tile, 0.5) - quantile(work, 0.5));
    totals["first_tile_median"].push_back(quantile(first_tile, 0.5));
    totals["streamed_median"].push_back(quantile(streamed, 0.5));
    totals["streamed_max"].push_back(quantile(streamed, 1));
    totals["written_max"].push_back(quantile(written, 1));
    totals["streamed_to_gathered"].push_back(quantile(gathered, 0.5) - quantile(streamed, 0.5));
    totals["gathered_to_written"].push_back(quantile(written, 0.5) - quantile(gathered, 0.5));
    if (!c_entry.empty()) {
      totals["combine_released_min"].push_back(quantile(c_released, 0));
      totals["combine_written_max"].push_back(quantile(c_written, 1));
    }
    totals["step_end"].push_back(end);
    if (period > 0) totals["period"].push_back(period);
  }
  std::printf("summary (median over steps, us from the first decode entry):");
  for (const auto& kv : totals) std::printf(" %s %.2f;", kv.first.c_str(), quantile(kv.second, 0.5));
  std::printf("\n");
  if (json) {
    std::fprintf(json, "%s    {\"shape\": \"%s\", \"chunk_tokens\": %d, \"num_chunks\": %d, \"graph_us\": %.2f", first ? "" : ",\n",
                 shape.name, plan.chunk_tokens, plan.num_chunks, step_us);
    for (const auto& kv : totals) std::fprintf(json, ", \"%s\": %.3f", kv.first.c_str(), quantile(kv.second, 0.5));
    std::fprintf(json, "}");
  }

  DEMO_CHECK(cudaGraphExecDestroy(exec));
  DEMO_CHECK(cudaGraphDestroy(graph));
  for (void* ptr : {static_cast<void*>(caches), static_cast<void*>(q), static_cast<void*>(out),
                    static_cast<void*>(table), static_cast<void*>(lens), workspace})
    DEMO_CHECK(cudaFree(ptr));
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, commit = "unknown";
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (k == "--commit" && i + 1 < argc) commit = argv[++i];
    else {
      std::fprintf(stderr, "cta_timeline: unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (!vxqa_demo::has_gpu()) {
    std::printf("no CUDA device: timeline skipped\n");
    return 0;
  }
  cudaStream_t stream;
  DEMO_CHECK(cudaStreamCreate(&stream));
  cudaDeviceProp prop{};
  DEMO_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s (sm_%d%d), commit %s\n", prop.name, prop.major, prop.minor, commit.c_str());
  FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
  if (json) std::fprintf(json, "{\n  \"device\": \"%s\",\n  \"commit\": \"%s\",\n  \"steps\": [\n", prop.name, commit.c_str());
  bool first = true;
  // The benchmark's shapes but the seed's page-16 twin (the same steps a tile apart).
  for (int i : {0, 3, 2, 4, 5}) {
    run(vxqa_bench::kShapes[i], stream, prop.l2CacheSize, json, first);
    first = false;
  }
  if (json) {
    std::fprintf(json, "\n  ]\n}\n");
    std::fclose(json);
  }
  return 0;
}
