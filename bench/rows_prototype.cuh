// rows_prototype.cuh — the harness of the multi-token prototypes (wgmma_rows.cu,
// dims_split_rows.cu): a problem of E5M2 pages of 16 tokens, D 256, one KV head, `rows`
// query rows a sequence that every key is visible to (no causal limits: the few keys they
// mask change no time), its device copies, a timed launch, and a check of one chunk a
// sequence against float64. The kernels write one pass of split-KV partials (O / l, and
// m, l a row), no combine.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "../examples/gpu_timing.cuh"
#include "bench_shapes.cuh"

namespace vxqa_rows {

constexpr int kD = 256, kPage = 16;

struct Args {
  const uint8_t* k;          // [pages][16][256] E5M2
  const uint8_t* v;
  const int32_t* block_table;  // [batch][max_pages]
  int max_pages;
  const int32_t* lengths;
  const uint16_t* q;         // [batch][rows][256] fp16
  int rows;
  int chunk_tokens;          // a multiple of the tile
  int chunks;
  float scale_log2;          // softmax scale · log2(e)
  uint32_t v_lead, v_stride;  // wgmma_rows: V's descriptor offsets (exchanged if the first check fails); else 0
  float* o;                  // [batch][chunks][rows][256]: O / l
  float* ml;                 // [batch][chunks][rows][2]: m (base 2), l
};

struct Problem {
  int batch, rows, pages_per_seq;
  std::vector<int32_t> lengths, table;
  std::vector<uint8_t> k, v;
  std::vector<uint16_t> q;
};

Problem make(const std::vector<int32_t>& lengths, int rows, uint64_t seed) {
  Problem p;
  p.batch = int(lengths.size());
  p.rows = rows;
  p.lengths = lengths;
  int max_len = *std::max_element(lengths.begin(), lengths.end());
  p.pages_per_seq = (max_len + kPage - 1) / kPage;
  const int pages = p.batch * p.pages_per_seq;
  std::vector<int32_t> ids(pages);
  for (int i = 0; i < pages; ++i) ids[i] = i;
  std::mt19937_64 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  p.table = ids;
  p.k.resize(size_t(pages) * kPage * kD);
  p.v.resize(p.k.size());
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (size_t i = 0; i < p.k.size(); ++i) {
    p.k[i] = vxqa::reference::e5m2_from_double(u(rng));
    p.v[i] = vxqa::reference::e5m2_from_double(u(rng));
  }
  p.q.resize(size_t(p.batch) * rows * kD);
  for (auto& x : p.q) x = vxqa::reference::fp16_from_double(8.0 * u(rng));  // peaked weights: a token out of place shows
  return p;
}

struct Device {
  uint8_t *k = nullptr, *v = nullptr;
  int32_t *table = nullptr, *lengths = nullptr;
  uint16_t* q = nullptr;
  float *o = nullptr, *ml = nullptr;
};

int chunks_of(const Problem& p, int chunk_tokens) {
  const int max_len = *std::max_element(p.lengths.begin(), p.lengths.end());
  return (max_len + chunk_tokens - 1) / chunk_tokens;
}

// Times a kernel (median of `reps` launches after one untimed, gpu_timing.cuh); reps 0: one
// launch.
float time_kernel(void (*kernel)(Args), const Args& a, dim3 grid, int threads, int smem, int reps, cudaStream_t stream) {
  DEMO_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<grid, threads, smem, stream>>>(a);
  DEMO_CHECK(cudaGetLastError());
  DEMO_CHECK(cudaStreamSynchronize(stream));
  if (reps == 0) return 0.f;
  return float(vxqa_demo::median_us([&] { kernel<<<grid, threads, smem, stream>>>(a); }, stream, reps, 1, 0));
}

Device to_device(const Problem& p, int chunks) {
  Device d;
  d.k = vxqa_demo::upload(p.k);
  d.v = vxqa_demo::upload(p.v);
  d.table = vxqa_demo::upload(p.table);
  d.lengths = vxqa_demo::upload(p.lengths);
  d.q = vxqa_demo::upload(p.q);
  DEMO_CHECK(cudaMalloc(&d.o, size_t(p.batch) * chunks * p.rows * kD * sizeof(float)));
  DEMO_CHECK(cudaMalloc(&d.ml, size_t(p.batch) * chunks * p.rows * 2 * sizeof(float)));
  return d;
}

void release(Device& d) {
  cudaFree(d.k); cudaFree(d.v); cudaFree(d.table); cudaFree(d.lengths); cudaFree(d.q); cudaFree(d.o); cudaFree(d.ml);
}

// The timed runs' problem: the seed shape's lengths (page 16), Q for 128 rows (a run uses
// the first p.rows), partials for chunks of 1,216 tokens or more; prints its size.
struct SeedRuns {
  Problem p;
  Device d;
  double mbytes;  // K and V
};
inline SeedRuns seed_runs() {
  const std::vector<int32_t> lengths = vxqa_bench::lengths(vxqa_bench::kShapes[1]);
  long long tokens = 0;
  for (int x : lengths) tokens += x;
  SeedRuns r{make(lengths, 128, 9), Device{}, double(tokens) * kD * 2 / 1e6};
  r.d = to_device(r.p, chunks_of(r.p, 1216));
  std::printf("seed shape's lengths (B16 ragged ~17.8K, %lld tokens, %.1f MB of K and V), page 16, D 256\n", tokens,
              r.mbytes);
  return r;
}

// One chunk a sequence, against float64: the largest error over the largest |O|. launch(p, d,

template <class Launch>
bool check_with(const char* name, int rows, Launch launch) {
  const Problem p = make({1000, 777, 64, 3}, rows, 5);
  const int chunk = 1024;
  Device d = to_device(p, 1);
  launch(p, d, chunk);
  std::vector<float> o(size_t(p.batch) * p.rows * kD);
  DEMO_CHECK(cudaMemcpy(o.data(), d.o, o.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double worst = 0, largest = 0;
  int shown = 0;
  for (int b = 0; b < p.batch; ++b)
    for (int r = 0; r < p.rows; ++r) {
      const int len = p.lengths[b];
      std::vector<double> s(len);
      double mx = -INFINITY;
      for (int tk = 0; tk < len; ++tk) {
        const int64_t row = (int64_t(p.table[b * p.pages_per_seq + tk / kPage]) * kPage + tk % kPage) * kD;
        double acc = 0;
        for (int x = 0; x < kD; ++x)
          acc += vxqa::reference::fp16_to_double(p.q[(size_t(b) * p.rows + r) * kD + x]) *
                 vxqa::reference::e5m2_to_double(p.k[row + x]);
        s[tk] = acc / 16.0;
        mx = std::max(mx, s[tk]);
      }
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int x = 0; x < kD; ++x) {
        double acc = 0;
        for (int tk = 0; tk < len; ++tk) {
          const int64_t row = (int64_t(p.table[b * p.pages_per_seq + tk / kPage]) * kPage + tk % kPage) * kD;
          acc += s[tk] * vxqa::reference::e5m2_to_double(p.v[row + x]);
        }
        const double want = acc / sum, got = o[(size_t(b) * p.rows + r) * kD + x];
        if (!(std::fabs(want - got) <= 0.05) && shown < 6) {  // a wrong answer's first places, to tell the pattern
          std::printf("  sequence %d row %d dim %d: want %.4f got %.4f\n", b, r, x, want, got);
          ++shown;
        }
        worst = std::max(worst, std::fabs(want - got));
        largest = std::max(largest, std::fabs(want));
      }
    }
  release(d);
  const bool ok = worst <= 1e-2 * largest;
  std::printf("check %s rows %d: largest error %.3g of max |O| %.3g: %s\n", name, rows, worst, largest, ok ? "ok" : "WRONG");
  return ok;
}

}  // namespace vxqa_rows
