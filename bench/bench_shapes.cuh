// The decode steps the benchmarks time, and how each one's problem is drawn: one place, so
// that decode_bench, cta_timeline and (through the bench JSON's lengths) flashinfer_peer.py
// all see the same steps.
#pragma once
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>
#include <vxqa/testing/random_problem.h>

namespace vxqa_bench {

struct Shape {
  const char* name;
  int batch, context, page, group, kv_heads;
  bool ragged;
};

// The shapes of docs/performance.md's table (D 256), in its order; the D = 128 one apart.
inline constexpr Shape kShapes[] = {
    {"B16 ragged ~17.8K, page 800", 16, 17800, 800, 6, 1, true},
    {"B16 ragged ~17.8K, page 16", 16, 17800, 16, 6, 1, true},
    {"B1 x 64K, page 800", 1, 65536, 800, 6, 1, false},
    {"B16 x 1K, page 800", 16, 1024, 800, 6, 1, false},
    {"B4 ragged ~32K, page 784", 4, 32768, 784, 6, 1, true},
    {"TP1: G6 Hkv4 B16 x 16K, page 16", 16, 16384, 16, 6, 4, false},
};
inline constexpr int kShapeCount = int(sizeof kShapes / sizeof kShapes[0]);
inline constexpr Shape kD128Shape{"D128 G8 Hkv2 B8 ragged ~8K, page 16", 8, 8192, 16, 8, 2, true};

// The step's lengths: the context, or where ragged the context +- 5 %.
inline std::vector<int32_t> lengths(const Shape& s, uint64_t seed = 7) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> jitter(-s.context / 20, s.context / 20);
  std::vector<int32_t> v(s.batch, s.context);
  if (s.ragged)
    for (auto& len : v) len = std::max(1, s.context + jitter(rng));
  return v;
}

// Random E5M2 pages in vLLM's layout, random page ids, the lengths above.
inline vxqa::reference::RandomProblem make_problem(const Shape& s, int head_dim,
                                                   vxqa::reference::KvFormat format = vxqa::reference::KvFormat::kE5M2) {
  vxqa::reference::RandomProblemOptions po;
  po.batch = s.batch;
  po.kv_heads = s.kv_heads;
  po.group = s.group;
  po.head_dim = head_dim;
  po.page_size = s.page;
  po.format = format;
  po.seq_lens = lengths(s);
  po.layout = vxqa::reference::CacheLayout::kVllm;
  po.stride_align = 16;
  po.spare_pages = 0;
  return vxqa::reference::make_random_problem(po, 11);
}

}  // namespace vxqa_bench
