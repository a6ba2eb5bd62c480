// Tutorial example (docs/tutorial.md): compose your own decode kernel from vxqa's pieces,
// and run one GQA attention layer the way a serving loop does.
//
// 1. The kernel is a DecodeConfig: head dim 128, E5M2 cache, 2 warps a CTA, pages of 32
//    tokens fixed at compile time (the page divide becomes a shift), block-table ids checked.
//    The Config names the pieces the kernel is built from; its static_asserts refuse shapes
//    that cannot work, at compile time.
// 2. Each step appends one new K/V row per sequence (append_kv: fp16 -> E5M2 into the pages
//    the block table gives) and decodes, both captured once in a CUDA graph and replayed
//    while the lengths grow (the graph reads lengths, slots, q and the cache at replay).
// 3. The last step is checked against the float64 reference over the same cache.
//
// Without a GPU it says so and exits 0 (CI builds it and runs it as a test).
#include <cuda_fp16.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>
#include <vxqa/vxqa.cuh>
#include <vxqa/testing/compare.h>
#include <vxqa/testing/problem_params.cuh>
#include "gpu_timing.cuh"

// --- 1. The kernel ----------------------------------------------------------------------
using MyConfig = vxqa::DecodeConfig<128, vxqa::KvType::kE5M2, vxqa::opt::Warps<2>, vxqa::opt::PageSize<32>>;
static_assert(MyConfig::kThreads == 64, "2 warps a CTA");
static_assert(MyConfig::kPageSize == 32, "the page size is a compile-time constant");

int main() {
  constexpr int kSteps = 8;
  // The layer: 4 KV heads, 4 query heads each (GQA), 5 sequences; the final lengths are
  // what the cache holds after kSteps appends.
  vxqa::reference::RandomProblemOptions o;
  o.batch = 5;
  o.kv_heads = 4;
  o.group = 4;
  o.head_dim = MyConfig::kHeadDim;
  o.page_size = MyConfig::kPageSize;
  o.min_seq_len = kSteps;
  o.max_seq_len = 900;
  o.layout = vxqa::reference::CacheLayout::kVllm;
  o.stride_align = 16;
  o.k_scale = 0.5f;
  o.v_scale = 2.0f;
  const vxqa::reference::RandomProblem p = vxqa::reference::make_random_problem(o, 7);
  std::printf("custom Config: D %d, %s cache, %d warps, page %d; %d sequences, %d steps\n", MyConfig::kHeadDim,
              vxqa::KvTraits<MyConfig::kKv>::kName, MyConfig::kWarps, MyConfig::kPageSize, p.batch, kSteps);
  if (!vxqa_demo::has_gpu()) {
    std::printf("no CUDA device: GPU part skipped\n");
    return 0;
  }

  // The new rows each step appends: token len - kSteps + step of every sequence, as fp16 of
  // its stored value times the scale (so append_kv's x / scale gives back the stored code).
  const int hkv = p.kv_heads, d = p.head_dim, row = hkv * d;
  std::vector<std::vector<uint16_t>> keys(kSteps), values(kSteps);
  std::vector<std::vector<int64_t>> slots(kSteps);
  std::vector<std::vector<int32_t>> lens(kSteps);
  std::vector<unsigned char> cache = p.cache;  // the rows still to be appended start as NaN
  for (int step = 0; step < kSteps; ++step)
    for (int b = 0; b < p.batch; ++b) {
      const int t = p.seq_lens[b] - kSteps + step;
      lens[step].push_back(t + 1);
      slots[step].push_back(int64_t(p.block_table[b * p.table_stride + t / p.page_size]) * p.page_size +
                            t % p.page_size);
      for (int h = 0; h < hkv; ++h)
        for (int i = 0; i < d; ++i) {
          keys[step].push_back(vxqa::reference::fp16_from_double(p.k_at(b, t, h, i) * p.k_scale));
          values[step].push_back(vxqa::reference::fp16_from_double(p.v_at(b, t, h, i) * p.v_scale));
          cache[p.k_offset + p.element_index(b, t, h, i)] = 0x7F;
          cache[p.v_offset + p.element_index(b, t, h, i)] = 0x7F;
        }
    }

  cudaStream_t stream;
  DEMO_CHECK(cudaStreamCreate(&stream));
  unsigned char* dcache;
  uint16_t *dq, *dout, *dkey, *dvalue;
  float* dlse;
  int32_t *dtable, *dlens;
  int64_t* dslots;
  DEMO_CHECK(cudaMalloc(&dcache, cache.size()));
  DEMO_CHECK(cudaMalloc(&dq, p.q.size() * 2));
  DEMO_CHECK(cudaMalloc(&dout, p.q.size() * 2));
  DEMO_CHECK(cudaMalloc(&dlse, size_t(p.batch) * p.query_heads() * 4));
  DEMO_CHECK(cudaMalloc(&dtable, p.block_table.size() * 4));
  DEMO_CHECK(cudaMalloc(&dlens, p.batch * 4));
  DEMO_CHECK(cudaMalloc(&dkey, size_t(p.batch) * row * 2));
  DEMO_CHECK(cudaMalloc(&dvalue, size_t(p.batch) * row * 2));
  DEMO_CHECK(cudaMalloc(&dslots, p.batch * 8));
  DEMO_CHECK(cudaMemcpy(dcache, cache.data(), cache.size(), cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemcpy(dq, p.q.data(), p.q.size() * 2, cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemcpy(dtable, p.block_table.data(), p.block_table.size() * 4, cudaMemcpyHostToDevice));

  // Plan once for the capacity (the step's lengths stay on the device), one workspace.
  int max_len = 1;
  for (int len : p.seq_lens) max_len = std::max(max_len, len);
  vxqa::DecodePlan plan;
  vxqa::Status s = vxqa::make_decode_plan<MyConfig>(p.batch, max_len, hkv, p.group, &plan);
  if (!s.ok()) { std::fprintf(stderr, "plan: %s\n", s.message().c_str()); return 1; }
  void* workspace;
  DEMO_CHECK(cudaMalloc(&workspace, plan.workspace_bytes));
  const vxqa::DecodeParams params = vxqa::problem_params(p, {dcache, dq, dtable, dlens, dout, dlse});

  vxqa::AppendKvParams append;
  append.key = dkey;
  append.value = dvalue;
  append.key_token_stride = append.value_token_stride = row;
  append.key_head_stride = append.value_head_stride = d;
  append.slot_mapping = dslots;
  append.num_tokens = p.batch;  // one new token per sequence
  append.num_kv_heads = hkv;
  append.head_dim = d;
  append.k_cache = const_cast<void*>(params.k_cache);
  append.v_cache = const_cast<void*>(params.v_cache);
  append.cache_type = params.cache_type;
  append.page_stride = params.page_stride;
  append.token_stride = params.token_stride;
  append.head_stride = params.head_stride;
  append.page_size = params.page_size;
  append.num_pages = params.num_pages;
  append.k_scale = p.k_scale;
  append.v_scale = p.v_scale;

  // --- 2. One layer step, captured once --------------------------------------------------
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DEMO_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  s = vxqa::append_kv(append, stream);
  if (s.ok()) s = vxqa::decode<MyConfig>(params, plan, workspace, plan.workspace_bytes, stream);
  DEMO_CHECK(cudaStreamEndCapture(stream, &graph));
  if (!s.ok()) { std::fprintf(stderr, "capture: %s\n", s.message().c_str()); return 1; }
  DEMO_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int step = 0; step < kSteps; ++step) {
    DEMO_CHECK(cudaMemcpyAsync(dkey, keys[step].data(), keys[step].size() * 2, cudaMemcpyHostToDevice, stream));
    DEMO_CHECK(cudaMemcpyAsync(dvalue, values[step].data(), values[step].size() * 2, cudaMemcpyHostToDevice, stream));
    DEMO_CHECK(cudaMemcpyAsync(dslots, slots[step].data(), p.batch * 8, cudaMemcpyHostToDevice, stream));
    DEMO_CHECK(cudaMemcpyAsync(dlens, lens[step].data(), p.batch * 4, cudaMemcpyHostToDevice, stream));
    DEMO_CHECK(cudaGraphLaunch(exec, stream));
  }
  std::vector<uint16_t> out(p.q.size());
  std::vector<float> lse(size_t(p.batch) * p.query_heads());
  DEMO_CHECK(cudaMemcpyAsync(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost, stream));
  DEMO_CHECK(cudaMemcpyAsync(lse.data(), dlse, lse.size() * 4, cudaMemcpyDeviceToHost, stream));
  uint32_t errors = 0;
  s = vxqa::read_decode_errors(workspace, stream, &errors);  // synchronises
  if (!s.ok()) { std::fprintf(stderr, "errors: %s\n", s.message().c_str()); return 1; }

  // --- 3. The last step against the float64 reference ------------------------------------
  namespace ref = vxqa::reference;
  const ref::DecodeOutput reference = ref::decode_reference(p.inputs());
  const ref::Comparison c = ref::compare_with_reference(reference, ref::decode_error_model(p.inputs(), reference),
                                                        ref::expect_from_lengths(p.seq_lens), p.query_heads(),
                                                        p.head_dim, {out.data(), lse.data(), errors}, 0u);
  std::printf("after %d replayed steps: %s (worst error %.2f of the bound)\n", kSteps,
              c.ok() ? "matches the float64 reference" : c.first.c_str(), c.worst);
  DEMO_CHECK(cudaGraphExecDestroy(exec));
  DEMO_CHECK(cudaGraphDestroy(graph));
  for (void* ptr : {static_cast<void*>(dcache), static_cast<void*>(dq), static_cast<void*>(dout), static_cast<void*>(dlse),
                    static_cast<void*>(dtable), static_cast<void*>(dlens), static_cast<void*>(dkey),
                    static_cast<void*>(dvalue), static_cast<void*>(dslots), workspace})
    DEMO_CHECK(cudaFree(ptr));
  return c.ok() ? 0 : 1;
}
