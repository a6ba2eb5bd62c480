// vxqa decode benchmark: times a few decode shapes (eager launches and CUDA-graph replays,
// median of many runs with CUDA events) against the device-to-device copy bandwidth
// measured in the same run, prints a table and writes JSON.
//
//   decode_bench [--json FILE] [--commit HASH] [--label TEXT] [--experiment | --plans | --ramp |
//                 --contexts | --breakdown | --variants | --queries [--shape N] [--q-len Q] | --formats |
//                 --wide-ctas [--shape N] |
//                 --profile [--shape N] [--q-len Q]]
// --experiment [--shape N] times the default atom over chunk sizes (one wave of CTAs against
// several; N: only the N-th sweep);
// --plans times every shape with its default plan (choose_wave_chunk_tokens in the SM80
// body's 64-token rounds) and with the chunk of the rule it replaced (the same in the SM70
// body's 128-token rounds);
// --ramp times one wave of CTAs (2 an SM) of one chunk each, 256, 1024 and 2048 tokens long,
// and the same CTAs as two chunks of half as many sequences: a CTA's fixed cost is the intercept of
// time against tokens, the combine's the difference between the two; and the seed shape
// against equal lengths of the same tokens (the cost of unequal CTAs);
// --contexts times batch 1 and 16 over context lengths 1K .. 128K (the context plot);
// --breakdown replays, for a few shapes, graphs of parts of a step (the decode kernel alone,
// with the error word's reset, with the combine, an empty kernel) to place the fixed costs;
// --formats times an E4M3 cache (the hardware cvt, and the software decode an A100 or V100
// runs) against E5M2 on the same shapes, fp16 against bf16 caches (twice the bytes), and
// head dim 512 against 256 over the same bytes;
// --queries times several query tokens a sequence (q_len 1..16, the KV read once) and G 12
// against G 6 over the same KV; --shape N (0 or 3) and --q-len Q (1, 2, 4, 8 or 16) keep only
// that shape's or that q_len's rows (and the plain row; no G 12 rows): a short GPU call;
// --wide-ctas [--shape N] times each shape (or shape N) with the default Config and with one
// 8-warp, 3-stage CTA an SM in place of two 4-warp ones (half the chunks a sequence), and the
// seed shape's q_len 4 and 16 with the 8-warp multi-token Config at its 2 stages and at 3;
// --profile [--shape N] [--q-len Q] runs only shape N (default 0, the seed shape) with its default
// plan, for ncu; Q > 1: the --queries rows' multi-token Config (8 warps) with Q tokens a sequence.
//
// Bytes counted: every K and V byte of every sequence once (1 byte per element for FP8, 2
// for fp16 and bf16),
// plus q and out. Shapes whose data would sit in L2 rotate over enough cache copies to
// cover 4x the L2, so each step reads from DRAM.
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <list>
#include <random>
#include <string>
#include <vector>
#include <vxqa/vxqa.cuh>
#include <vxqa/testing/problem_params.cuh>
#include "../examples/gpu_timing.cuh"
#include "bench_shapes.cuh"

namespace {

// The default atom (the SM80 path on sm_80 and newer), the same with block-table ids
// trusted (what the id check costs), and the SM70 path forced, for the record.
using E5m2 = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2>;
using E5m2D128 = vxqa::DecodeConfig<128, vxqa::KvType::kE5M2>;
// --queries and --profile --q-len: 8 warps, up to 64 rows a CTA share each K/V tile (row_tiling).
using Multi = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::MaxQueryLen<16>, vxqa::opt::Warps<8>>;
using Multi4 = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::MaxQueryLen<16>>;
using Multi6 = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::MaxQueryLen<16>, vxqa::opt::Warps<6>>;
using E5m2Unchecked = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::PageIds<vxqa::PageIdCheck::kOff>>;
using E5m2Sm70 = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::Atom<vxqa::MmaAtom::kSm70>>;
// The SM70 path's other conversion policy (E5M2 -> fp16 when published to shared memory);
// its fp16 tiles take twice the shared memory, so 2 warps a CTA.
using E5m2Sm70Publish = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::Warps<2>, vxqa::opt::Convert<vxqa::ConvertAt::kPublish>, vxqa::opt::Atom<vxqa::MmaAtom::kSm70>>;

template <class Config>
std::string config_name() {
  if (Config::kAtom == vxqa::MmaAtom::kSm70)
    return Config::kConvertAt == vxqa::ConvertAt::kPublish ? "SM70 atom, convert at publish" : "SM70 atom";
  std::string name = Config::kChecksPageIds ? "default atom" : "default atom, ids unchecked";
  if (Config::kWarps != 4) name += ", " + std::to_string(Config::kWarps) + " warps";
  return name;
}

using vxqa_bench::Shape;

// Head dim 512 (two warps share each tile) against 256 over the same bytes, with 132 CTAs at
// both (one an SM at 512, two at 256): --formats' last rows, and --profile --equal-bytes.
using E5m2D512 = vxqa::DecodeConfig<512, vxqa::KvType::kE5M2>;
using E5m2D512ThreeStages = vxqa::DecodeConfig<512, vxqa::KvType::kE5M2, vxqa::opt::AsyncStages<3>>;
const Shape kD512FullWave{"D512 G8 B12 x 11K, page 16", 12, 11264, 16, 8, 1, false};
const Shape kD256FullWave{"D256 G8 B12 x 22K, page 16", 12, 22528, 16, 8, 1, false};

// A step's attention variant values (all off: plain attention). A window plans its chunks
// over the window (make_decode_plan's max_window), and its bytes are the keys it reads.
struct VariantValues {
  int window = 0;
  float softcap = 0.f;
  bool sinks = false;
  int q_len = 1;  // query tokens a sequence (> 1: q_indptr, uniform; the Config's MaxQueryLen)
};

struct Result {
  Shape shape;
  std::string config;
  int head_dim;
  long long tokens;
  double mbytes, eager_us, graph_us, gbs, pct_copy;
  int chunk, chunks, copies;
  std::vector<int32_t> lens;  // so a peer can run the same lengths
  VariantValues variant;      // and the same variant
};


// The pieces a decode step can be made of, each launched plainly or left out: where a step's
// fixed costs lie (--breakdown). The decode kernel is never a dependent launch here and the
// error word's reset is optional (decode() launches it only for one-chunk plans; a memset until fc1accf). No checks beyond the
// launches' own: decode() validated these parameters before.
enum StepPart : unsigned { kResetErrors = 1, kDecodeKernel = 2, kCombine = 4, kEmptyKernel = 8, kCombine16 = 16, kCombine64 = 32 };

__global__ void empty_kernel() {}

template <class Config>
void launch_parts(const vxqa::DecodeParams& p, const vxqa::DecodePlan& plan, void* workspace, unsigned parts,
                  cudaStream_t stream) {
  vxqa::DecodeKernelArgs args = vxqa::make_decode_args<Config>(p, plan, workspace);
  int smem = 0;
  if (!vxqa::decode_smem_bytes<Config>(&smem).ok() || !vxqa::apply_smem_opt_in<Config>(smem).ok()) std::exit(1);
  void* kernel_args[] = {&args};
  if (parts & kEmptyKernel) empty_kernel<<<1, 32, 0, stream>>>();
  if (parts & kResetErrors)
    DEMO_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(&vxqa::reset_errors_kernel<Config>), dim3(1), dim3(32),
                                kernel_args, 0, stream));
  if (parts & kDecodeKernel)
    DEMO_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(&vxqa::decode_kernel<Config>),
                                dim3(plan.num_chunks, p.num_kv_heads * args.m_tiles, plan.max_batch),
                                dim3(Config::kThreads), kernel_args, smem, stream));
  if ((parts & kCombine) && plan.num_chunks > 1) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t launch{};
    const void* combine = vxqa::combine_kernel_for<Config>(plan, p.num_kv_heads * p.group_size, &launch.gridDim);
    constexpr int kD = Config::kHeadDim;  // a slice width forced, whatever the plan's
    if (parts & kCombine16) {
      combine = reinterpret_cast<const void*>(&vxqa::combine_kernel<kD, Config::kQo, 16>);
      launch.gridDim.z = vxqa::CombineShape<kD, 16>::kSlices;
    }
    if (parts & kCombine64) {
      combine = reinterpret_cast<const void*>(&vxqa::combine_kernel<kD, Config::kQo, 64>);
      launch.gridDim.z = vxqa::CombineShape<kD, 64>::kSlices;
    }
    launch.blockDim = dim3(vxqa::kCombineThreads);
    launch.stream = stream;
    launch.attrs = &attribute;
    launch.numAttrs = 1;
    DEMO_CHECK(cudaLaunchKernelExC(&launch, combine, kernel_args));
  }
}

// Graph-replay µs a step of each part set, after the whole step's.
struct Breakdown {
  std::string shape;
  int chunk, chunks;
  std::vector<std::pair<std::string, double>> parts;
};
std::vector<Breakdown> breakdowns;

// The test library's cache format of a KV type.
vxqa::reference::KvFormat format_of(vxqa::KvType kv) {
  switch (kv) {
    case vxqa::KvType::kE4M3: return vxqa::reference::KvFormat::kE4M3;
    case vxqa::KvType::kFp16: return vxqa::reference::KvFormat::kFp16;
    case vxqa::KvType::kBf16: return vxqa::reference::KvFormat::kBf16;
    default: return vxqa::reference::KvFormat::kE5M2;
  }
}

template <class Config>
Result run_shape(const Shape& shape, cudaStream_t stream, int sms, int l2_bytes, double copy_gbs,
                 int chunk_tokens = 0, std::string name = "", bool breakdown = false, VariantValues variant = {}) {
  const auto p = vxqa_bench::make_problem(shape, Config::kHeadDim, format_of(Config::kKv));
  long long tokens = 0;
  int max_len = 1;
  for (int len : p.seq_lens)
    tokens += variant.window > 0 ? std::min(len, variant.window) : len, max_len = std::max(max_len, len);
  const int q_len = variant.q_len;
  const double bytes = double(tokens) * p.kv_heads * p.head_dim * 2 * Config::kElemBytes +
                       4.0 * p.batch * q_len * p.query_heads() * p.head_dim;

  const int copies = std::min(16, std::max(1, int(4.0 * l2_bytes / p.cache.size()) + 1));
  std::vector<unsigned char*> caches(copies);
  for (auto& c : caches) {
    DEMO_CHECK(cudaMalloc(&c, p.cache.size()));
    DEMO_CHECK(cudaMemcpy(c, p.cache.data(), p.cache.size(), cudaMemcpyHostToDevice));
  }
  uint16_t *q, *out;
  int32_t *table, *lens, *q_indptr = nullptr;
  DEMO_CHECK(cudaMalloc(&q, p.q.size() * 2 * q_len));
  DEMO_CHECK(cudaMalloc(&out, p.q.size() * 2 * q_len));
  DEMO_CHECK(cudaMalloc(&table, p.block_table.size() * 4));
  DEMO_CHECK(cudaMalloc(&lens, p.seq_lens.size() * 4));
  for (int t = 0; t < q_len; ++t)  // each query token a copy of the problem's q rows
    DEMO_CHECK(cudaMemcpy(q + t * p.q.size(), p.q.data(), p.q.size() * 2, cudaMemcpyHostToDevice));
  if (q_len > 1) {  // sequence b's tokens: rows b · q_len ...
    std::vector<int32_t> indptr(p.batch + 1);
    for (int b = 0; b <= p.batch; ++b) indptr[b] = b * q_len;
    DEMO_CHECK(cudaMalloc(&q_indptr, indptr.size() * 4));
    DEMO_CHECK(cudaMemcpy(q_indptr, indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
  }
  DEMO_CHECK(cudaMemcpy(table, p.block_table.data(), p.block_table.size() * 4, cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemcpy(lens, p.seq_lens.data(), p.seq_lens.size() * 4, cudaMemcpyHostToDevice));

  vxqa::DecodePlan plan;
  const vxqa::Status planned =
      chunk_tokens ? vxqa::make_decode_plan<Config>(p.batch, max_len, p.kv_heads, p.group, sms, &plan, chunk_tokens, 4,
                                                    1, variant.window, q_len)
                   : vxqa::make_decode_plan<Config>(p.batch, max_len, p.kv_heads, p.group, &plan, variant.window, q_len);
  if (!planned.ok()) {
    std::fprintf(stderr, "make_decode_plan: %s\n", planned.message().c_str());
    std::exit(1);
  }
  float* sinks = nullptr;  // one logit a query head, about the scores' size
  if (variant.sinks) {
    std::vector<float> values(p.query_heads());
    for (int h = 0; h < p.query_heads(); ++h) values[h] = 0.5f + 0.25f * float(h % 4);
    DEMO_CHECK(cudaMalloc(&sinks, values.size() * 4));
    DEMO_CHECK(cudaMemcpy(sinks, values.data(), values.size() * 4, cudaMemcpyHostToDevice));
  }
  void* workspace;
  DEMO_CHECK(cudaMalloc(&workspace, plan.workspace_bytes));

  std::vector<vxqa::DecodeParams> params(copies);
  for (int i = 0; i < copies; ++i) {
    params[i] = vxqa::problem_params(p, {caches[i], q, table, lens, out, nullptr});
    params[i].sliding_window = variant.window;
    params[i].logit_softcap = variant.softcap;
    params[i].sinks = sinks;
    params[i].q_indptr = q_indptr;
    params[i].max_q_len = q_len;
    params[i].qo_type = Config::kQo;  // a bf16 cache's q: the fp16 bits read as bf16, finite (timing only)
  }
  auto step_all = [&] {
    for (int i = 0; i < copies; ++i) {
      const vxqa::Status s = vxqa::decode<Config>(params[i], plan, workspace, plan.workspace_bytes, stream);
      if (!s.ok()) { std::fprintf(stderr, "decode: %s\n", s.message().c_str()); std::exit(1); }
    }
  };
  const double eager = vxqa_demo::median_us(step_all, stream) / copies;

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DEMO_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  step_all();
  DEMO_CHECK(cudaStreamEndCapture(stream, &graph));
  DEMO_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double replay = vxqa_demo::median_us([&] { DEMO_CHECK(cudaGraphLaunch(exec, stream)); }, stream) / copies;
  DEMO_CHECK(cudaGraphExecDestroy(exec));
  DEMO_CHECK(cudaGraphDestroy(graph));
  if (breakdown) {
    Breakdown b{shape.name, plan.chunk_tokens, plan.num_chunks, {{"step (decode())", replay}}};
    const std::pair<const char*, unsigned> sets[] = {
        {"decode kernel", kDecodeKernel},
        {"reset + decode kernel", kResetErrors | kDecodeKernel},
        {"decode kernel + combine", kDecodeKernel | kCombine},
        {"decode kernel + combine of 16-dim slices", kDecodeKernel | kCombine | kCombine16},
        {"decode kernel + combine of 64-dim slices", kDecodeKernel | kCombine | kCombine64},
        {"reset + decode + combine", kResetErrors | kDecodeKernel | kCombine},
        {"empty kernel", kEmptyKernel},
        {"empty kernel + reset", kEmptyKernel | kResetErrors}};
    for (const auto& set : sets) {
      DEMO_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      for (int i = 0; i < copies; ++i) launch_parts<Config>(params[i], plan, workspace, set.second, stream);
      DEMO_CHECK(cudaStreamEndCapture(stream, &graph));
      DEMO_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      b.parts.push_back({set.first, vxqa_demo::median_us([&] { DEMO_CHECK(cudaGraphLaunch(exec, stream)); }, stream) / copies});
      DEMO_CHECK(cudaGraphExecDestroy(exec));
      DEMO_CHECK(cudaGraphDestroy(graph));
    }
    breakdowns.push_back(b);
  }

  for (auto c : caches) DEMO_CHECK(cudaFree(c));
  DEMO_CHECK(cudaFree(q));
  DEMO_CHECK(cudaFree(out));
  DEMO_CHECK(cudaFree(table));
  DEMO_CHECK(cudaFree(lens));
  DEMO_CHECK(cudaFree(workspace));
  if (sinks) DEMO_CHECK(cudaFree(sinks));
  if (q_indptr) DEMO_CHECK(cudaFree(q_indptr));

  const double best = std::min(eager, replay);
  Result r{shape, name.empty() ? config_name<Config>() : name, Config::kHeadDim, tokens, bytes / 1e6, eager, replay, bytes / (best * 1e3), 0,
           plan.chunk_tokens, plan.num_chunks, copies, p.seq_lens, variant};
  r.pct_copy = 100.0 * r.gbs / copy_gbs;
  // As it goes, so that a run cut short still shows what it measured (the table is printed last).
  std::fprintf(stderr, "measured: %s | %s | graph %.2f us | %.1f %% of copy | chunk %d x %d\n", shape.name,
               r.config.c_str(), replay, r.pct_copy, r.chunk, r.chunks);
  return r;
}

// append_kv of a prefill-sized chunk (fp16 in, E5M2 cache, shuffled slots): GB/s of the
// bytes it reads and writes, against the copy bandwidth.
struct AppendResult {
  int tokens, kv_heads, head_dim;
  double mbytes, us, gbs, pct_copy;
};

AppendResult run_append(int tokens, int kv_heads, int head_dim, cudaStream_t stream, double copy_gbs) {
  const int page = 16, pages = (tokens + page - 1) / page;
  const size_t row = size_t(kv_heads) * head_dim;
  std::vector<uint16_t> rows(size_t(tokens) * row);
  std::mt19937_64 rng(5);
  for (auto& x : rows) x = uint16_t(0x3000 + rng() % 0x1000);
  std::vector<int64_t> slots(tokens);
  for (int t = 0; t < tokens; ++t) slots[t] = t;
  std::shuffle(slots.begin(), slots.end(), rng);
  uint16_t *key, *value;
  int64_t* dslots;
  unsigned char *kc, *vc;
  DEMO_CHECK(cudaMalloc(&key, rows.size() * 2));
  DEMO_CHECK(cudaMalloc(&value, rows.size() * 2));
  DEMO_CHECK(cudaMalloc(&dslots, slots.size() * 8));
  DEMO_CHECK(cudaMalloc(&kc, size_t(pages) * page * row));
  DEMO_CHECK(cudaMalloc(&vc, size_t(pages) * page * row));
  DEMO_CHECK(cudaMemcpy(key, rows.data(), rows.size() * 2, cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemcpy(value, rows.data(), rows.size() * 2, cudaMemcpyHostToDevice));
  DEMO_CHECK(cudaMemcpy(dslots, slots.data(), slots.size() * 8, cudaMemcpyHostToDevice));
  vxqa::AppendKvParams p;
  p.key = key;
  p.value = value;
  p.key_token_stride = p.value_token_stride = int64_t(row);
  p.key_head_stride = p.value_head_stride = head_dim;
  p.slot_mapping = dslots;
  p.num_tokens = tokens;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.k_cache = kc;
  p.v_cache = vc;
  p.cache_type = vxqa::KvType::kE5M2;
  p.page_stride = int64_t(page) * row;
  p.token_stride = int64_t(row);
  p.head_stride = head_dim;
  p.page_size = page;
  p.num_pages = pages;
  const double us = vxqa_demo::median_us([&] {
    const vxqa::Status s = vxqa::append_kv(p, stream);
    if (!s.ok()) { std::fprintf(stderr, "append_kv: %s\n", s.message().c_str()); std::exit(1); }
  }, stream);
  for (void* ptr : {static_cast<void*>(key), static_cast<void*>(value), static_cast<void*>(dslots),
                    static_cast<void*>(kc), static_cast<void*>(vc)})
    DEMO_CHECK(cudaFree(ptr));
  const double bytes = 2.0 * tokens * row * (2 + 1) + 8.0 * tokens;  // fp16 in, E5M2 out, K and V
  AppendResult r{tokens, kv_heads, head_dim, bytes / 1e6, us, bytes / (us * 1e3), 0};
  r.pct_copy = 100 * r.gbs / copy_gbs;
  return r;
}

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, commit = "unknown", label = "vxqa decode", mode = "shapes";
  int shape_arg = -1;  // --shape N: --profile's shape (default 0), --experiment's sweep (default all)
  int q_len_arg = -1;  // --q-len Q: --profile's query tokens a sequence (default 1), --queries' only q_len
  int equal_bytes = 0;  // --equal-bytes 256|512: --profile's head dim of the formats' B12 pair (for ncu)
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const bool has_value = i + 1 < argc;
    if (k == "--json" && has_value) json_path = argv[++i];
    else if (k == "--commit" && has_value) commit = argv[++i];
    else if (k == "--label" && has_value) label = argv[++i];
    else if (k == "--experiment" || k == "--plans" || k == "--profile" || k == "--contexts" || k == "--breakdown" ||
             k == "--ramp" || k == "--variants" || k == "--queries" || k == "--formats" || k == "--wide-ctas")
      mode = k.substr(2);
    else if (k == "--shape" && has_value) shape_arg = std::atoi(argv[++i]);
    else if (k == "--q-len" && has_value) q_len_arg = std::atoi(argv[++i]);
    else if (k == "--equal-bytes" && has_value) equal_bytes = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "decode_bench: unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (!vxqa_demo::has_gpu()) {
    std::printf("no CUDA device: benchmark skipped\n");
    return 0;
  }
  cudaStream_t stream;
  DEMO_CHECK(cudaStreamCreate(&stream));
  cudaDeviceProp prop{};
  DEMO_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy = vxqa_demo::copy_bandwidth_gbs(stream);

  const Shape* shapes = vxqa_bench::kShapes;
  const Shape d128 = vxqa_bench::kD128Shape;  // the D = 128 Config's
  const int sms = prop.multiProcessorCount, l2 = prop.l2CacheSize;
  std::vector<Result> results;
  std::vector<AppendResult> appends;
  auto equal_bytes_rows = [&](int head_dim) {  // the formats' B12 pair, one head dim (132 CTAs at both)
    if (head_dim == 256) {
      results.push_back(run_shape<E5m2>(kD256FullWave, stream, sms, l2, copy, 0, "E5M2, D 256 (same bytes)"));
    } else {
      results.push_back(run_shape<E5m2D512>(kD512FullWave, stream, sms, l2, copy, 0, "E5M2"));
      results.push_back(run_shape<E5m2D512ThreeStages>(kD512FullWave, stream, sms, l2, copy, 0, "E5M2, 3 stages"));
    }
  };
  if (mode == "experiment") {  // the default atom over chunk sizes: one wave of CTAs against several
    // Smaller chunks give more CTAs than an SM's slots hold, so the block scheduler hands the
    // next CTA to whichever SM frees a slot first (docs/performance.md, "unequal rates").
    // One sequence of 16K, 32K and 128K, and B16 x 2K: the plan's wave rule does not count
    // the combine, whose cost grows with the chunks (B1 x 32K took 256 chunks of 128 tokens).
    const std::pair<Shape, std::vector<int>> sweeps[] = {
        {shapes[0], {0, 640, 512, 384, 256}},  // seed, page 800
        {shapes[5], {0, 2048, 1024, 512}},     // TP1
        {shapes[4], {0, 256, 1024}},           // B4 ragged ~32K
        {shapes[3], {0, 256}},                 // B16 x 1K
        {shapes[2], {0, 512}},                 // B1 x 64K
        {{"B1 x 16K, page 800", 1, 16384, 800, 6, 1, false}, {0, 256}},
        {{"B1 x 32K, page 800", 1, 32768, 800, 6, 1, false}, {0, 256, 512}},
        {{"B1 x 128K, page 800", 1, 131072, 800, 6, 1, false}, {0, 1024}},
        {{"B16 x 2K, page 800", 16, 2048, 800, 6, 1, false}, {0, 256}}};
    constexpr int kSweeps = int(sizeof sweeps / sizeof sweeps[0]);
    if (shape_arg >= kSweeps) {
      std::fprintf(stderr, "decode_bench: --experiment --shape must be 0..%d\n", kSweeps - 1);
      return 2;
    }
    for (int i = 0; i < kSweeps; ++i)
      if (shape_arg < 0 || shape_arg == i)
        for (int c : sweeps[i].second)
          results.push_back(run_shape<E5m2>(sweeps[i].first, stream, sms, l2, copy, c,
                                            c ? std::to_string(c) + "-token chunks" : "default plan"));
    if (shape_arg < 0)
      for (int c : {0, 256})
        results.push_back(run_shape<E5m2D128>(d128, stream, sms, l2, copy, c,
                                              c ? std::to_string(c) + "-token chunks" : "default plan"));
  } else if (mode == "wide-ctas") {  // one 8-warp CTA an SM against two of 4 warps, the same stages a warp
    // The 8-warp Config's own stage rule gives it 2 stages a warp (135 KB); with 3 it holds
    // what two default CTAs hold (198 KB), so its plan cuts the seed shape into 8 chunks a
    // sequence, not 16: few enough for a thread-block cluster a sequence (docs/performance.md,
    // "A step's partials merged inside a thread-block cluster"), if it streams as fast.
    using Wide = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::Warps<8>, vxqa::opt::AsyncStages<3>>;
    if (shape_arg >= vxqa_bench::kShapeCount) {
      std::fprintf(stderr, "decode_bench: --wide-ctas --shape must be 0..%d\n", vxqa_bench::kShapeCount - 1);
      return 2;
    }
    for (int i = 0; i < vxqa_bench::kShapeCount; ++i)
      if (shape_arg < 0 || shape_arg == i) {
        results.push_back(run_shape<E5m2>(shapes[i], stream, sms, l2, copy, 0, "default atom"));
        results.push_back(run_shape<Wide>(shapes[i], stream, sms, l2, copy, 0, "8 warps, 3 stages, one CTA an SM"));
      }
    // The multi-token 8-warp Config has one CTA an SM by its registers anyway, with 2 stages a
    // warp by its stage rule: the same with 3.
    using MultiWide = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::MaxQueryLen<16>, vxqa::opt::Warps<8>,
                                         vxqa::opt::AsyncStages<3>>;
    // The 6-warp one (issue 20's best q_len 4 row) is one CTA an SM by its registers too.
    using Multi6Wide = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::MaxQueryLen<16>, vxqa::opt::Warps<6>,
                                          vxqa::opt::AsyncStages<3>>;
    if (shape_arg <= 0)
      for (int q_len : {4, 16}) {
        const std::string q = ", q_len " + std::to_string(q_len);
        const VariantValues rows{0, 0.f, false, q_len};
        results.push_back(run_shape<Multi>(shapes[0], stream, sms, l2, copy, 0, "multi-token, 8 warps" + q, false, rows));
        results.push_back(
            run_shape<MultiWide>(shapes[0], stream, sms, l2, copy, 0, "multi-token, 8 warps, 3 stages" + q, false, rows));
        results.push_back(run_shape<Multi6>(shapes[0], stream, sms, l2, copy, 0, "multi-token, 6 warps" + q, false, rows));
        results.push_back(
            run_shape<Multi6Wide>(shapes[0], stream, sms, l2, copy, 0, "multi-token, 6 warps, 3 stages" + q, false, rows));
      }
  } else if (mode == "plans") {  // the default plan against the rule it replaced
    auto compare = [&](auto config, const Shape& s) {
      using C = decltype(config);
      const std::vector<int32_t> lens = vxqa_bench::lengths(s);  // the lengths run_shape makes
      const int longest = *std::max_element(lens.begin(), lens.end());
      const int head_tiles = s.kv_heads * ((s.group + C::kHeadsPerCta - 1) / C::kHeadsPerCta);
      // Until the SM80 plan took 64-token rounds: whole waves of 128-token rounds.
      const int before = vxqa::choose_wave_chunk_tokens(s.batch, longest, head_tiles, C::kCtaTokens,
                                                        vxqa::kSm80PlanCtasPerSm * sms);  // f5e80c5's run: seed
      // 46.3 against 46.0 us, page 16 47.1 / 46.4, B4 27.5 / 26.8, D128 19.6 / 19.1 (and B16 x 1K
      // 9.3 against 11.8 with 64-token chunks, which kSm80MinChunkRounds now rules out).
      results.push_back(run_shape<C>(s, stream, sms, l2, copy, 0, "default plan"));
      results.push_back(run_shape<C>(s, stream, sms, l2, copy, before,
                                     "128-token rounds: " + std::to_string(before) + "-token chunks"));
    };
    for (const Shape& s : vxqa_bench::kShapes) compare(E5m2(), s);
    compare(E5m2D128(), d128);
  } else if (mode == "ramp") {  // one wave of CTAs, each one chunk long: a CTA's fixed cost
    static std::list<std::string> names;  // Shape keeps a pointer to its name
    const int slots = vxqa::kSm80PlanCtasPerSm * sms;
    auto ramp = [&](int batch, int context, int chunk, const char* what) {
      names.push_back("ramp: B" + std::to_string(batch) + " x " + std::to_string(context) + ", page 16");
      results.push_back(run_shape<E5m2>({names.back().c_str(), batch, context, 16, 6, 1, false}, stream, sms, l2, copy,
                                        chunk, what));
    };
    for (int context : {256, 1024, 2048}) ramp(slots, context, context, "one chunk a sequence");
    // Half the sequences, twice as long, in two chunks: the same CTAs as the one-chunk rows
    // of half the context, plus the combine.
    for (int context : {2048, 4096}) ramp(slots / 2, context, context / 2, "two chunks a sequence");
    // The seed shape's ragged lengths against 16 equal ones of about the same tokens: what
    // the CTAs' unequal work (a sequence's last chunk is partial) costs in one wave.
    results.push_back(run_shape<E5m2>(shapes[0], stream, sms, l2, copy, 0, "default plan"));
    const int seed_chunk = results.back().chunk;  // the same chunks for both
    results.push_back(run_shape<E5m2>({"B16 x 17890 (the seed's tokens, equal lengths), page 800", 16, 17890, 800, 6, 1,
                                       false},
                                      stream, sms, l2, copy, seed_chunk, "the seed shape's chunks"));
  } else if (mode == "contexts") {  // % of copy against context length, batch 1 and 16
    static std::list<std::string> names;  // Shape keeps a pointer to its name
    for (int batch : {1, 16})
      for (int context = 1024; context <= 131072; context *= 2) {
        names.push_back("B" + std::to_string(batch) + " x " + std::to_string(context / 1024) + "K, page 800");
        results.push_back(run_shape<E5m2>({names.back().c_str(), batch, context, 800, 6, 1, false}, stream, sms, l2, copy));
      }
  } else if (mode == "breakdown") {  // where a step's fixed costs lie
    for (int i : {0, 2, 3, 4, 5}) results.push_back(run_shape<E5m2>(shapes[i], stream, sms, l2, copy, 0, "", true));
    results.push_back(run_shape<E5m2D128>(d128, stream, sms, l2, copy, 0, "", true));
  } else if (mode == "variants") {  // the attention variants against plain attention, same run
    namespace opt = vxqa::opt;
    using SoftCap = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, opt::Variant<vxqa::kLogitSoftCap>>;
    using Sinks = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, opt::Variant<vxqa::kAttentionSinks>>;
    using Window = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, opt::Variant<vxqa::kSlidingWindow>>;
    using All = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, opt::Variant<vxqa::kAllVariantFlags>>;
    for (int i : {0, 1, 3}) {
      results.push_back(run_shape<E5m2>(shapes[i], stream, sms, l2, copy, 0, "plain"));
      results.push_back(run_shape<SoftCap>(shapes[i], stream, sms, l2, copy, 0, "soft-cap 30", false, {0, 30.f, false}));
      results.push_back(run_shape<Sinks>(shapes[i], stream, sms, l2, copy, 0, "sinks", false, {0, 0.f, true}));
      results.push_back(run_shape<All>(shapes[i], stream, sms, l2, copy, 0, "every flag compiled in, all off"));
      results.push_back(run_shape<All>(shapes[i], stream, sms, l2, copy, 0, "window 4096 + soft-cap 30 + sinks", false,
                                       {4096, 30.f, true}));
    }
    // A window of 4,096 keys over the seed shape's ~17.8K contexts, against plain attention
    // over 4,096-token sequences: the same keys read.
    static const Shape seed_4k{"B16 x 4096, page 800", 16, 4096, 800, 6, 1, false};
    static const Shape page16_4k{"B16 x 4096, page 16", 16, 4096, 16, 6, 1, false};
    results.push_back(run_shape<E5m2>(seed_4k, stream, sms, l2, copy, 0, "plain"));
    results.push_back(run_shape<Window>(shapes[0], stream, sms, l2, copy, 0, "window 4096", false, {4096, 0.f, false}));
    results.push_back(run_shape<E5m2>(page16_4k, stream, sms, l2, copy, 0, "plain"));
    results.push_back(run_shape<Window>(shapes[1], stream, sms, l2, copy, 0, "window 4096", false, {4096, 0.f, false}));
  } else if (mode == "formats") {  // E4M3 (hardware cvt, software decode) against E5M2, same run
    using E4m3 = vxqa::DecodeConfig<256, vxqa::KvType::kE4M3>;
    using E4m3Software = vxqa::DecodeConfig<256, vxqa::KvType::kE4M3, vxqa::opt::E4m3Path<vxqa::E4m3Decode::kSoftware>>;
    for (int i : {0, 1, 3}) {
      results.push_back(run_shape<E5m2>(shapes[i], stream, sms, l2, copy, 0, "E5M2"));
      results.push_back(run_shape<E4m3>(shapes[i], stream, sms, l2, copy, 0, "E4M3"));
      results.push_back(run_shape<E4m3Software>(shapes[i], stream, sms, l2, copy, 0, "E4M3, software decode"));
    }
    using Fp16Cache = vxqa::DecodeConfig<256, vxqa::KvType::kFp16, vxqa::opt::Warps<2>>;
    using Bf16Cache =
        vxqa::DecodeConfig<256, vxqa::KvType::kBf16, vxqa::opt::Warps<2>, vxqa::opt::QoType<vxqa::ActType::kBf16>>;
    for (int i : {0, 3}) {
      results.push_back(run_shape<Fp16Cache>(shapes[i], stream, sms, l2, copy, 0, "fp16 cache"));
      results.push_back(run_shape<Bf16Cache>(shapes[i], stream, sms, l2, copy, 0, "bf16 cache, bf16 q"));
    }
    results.push_back(run_shape<E5m2D128>(d128, stream, sms, l2, copy, 0, "E5M2"));
    results.push_back(run_shape<vxqa::DecodeConfig<128, vxqa::KvType::kE4M3>>(d128, stream, sms, l2, copy, 0, "E4M3"));
    results.push_back(run_shape<vxqa::DecodeConfig<128, vxqa::KvType::kE4M3, vxqa::opt::E4m3Path<vxqa::E4m3Decode::kSoftware>>>(
        d128, stream, sms, l2, copy, 0, "E4M3, software decode"));
    // Head dim 512 (two warps share each tile) against 256 over the same bytes: B16 x 8K
    // against B16 x 16K, G 8, one KV head, page 16.
    static const Shape d512{"D512 G8 B16 x 8K, page 16", 16, 8192, 16, 8, 1, false};
    static const Shape d256_same_bytes{"D256 G8 B16 x 16K, page 16", 16, 16384, 16, 8, 1, false};
    results.push_back(run_shape<E5m2>(d256_same_bytes, stream, sms, l2, copy, 0, "E5M2, D 256 (same bytes)"));
    results.push_back(run_shape<vxqa::DecodeConfig<512, vxqa::KvType::kE5M2>>(d512, stream, sms, l2, copy, 0, "E5M2"));
    // The same at 2 and 6 warps: 6 warps an SM either way (3 CTAs of 2, or 1 of 6), where
    // 4 warps' 133 KB let one CTA in.
    results.push_back(run_shape<vxqa::DecodeConfig<512, vxqa::KvType::kE5M2, vxqa::opt::Warps<2>>>(
        d512, stream, sms, l2, copy, 0, "E5M2, 2 warps"));
    results.push_back(run_shape<vxqa::DecodeConfig<512, vxqa::KvType::kE5M2, vxqa::opt::Warps<6>>>(
        d512, stream, sms, l2, copy, 0, "E5M2, 6 warps"));
    results.push_back(run_shape<vxqa::DecodeConfig<512, vxqa::KvType::kE4M3>>(d512, stream, sms, l2, copy, 0, "E4M3"));
    // Three stages a warp: 4 warps' 200 KB, one CTA an SM as two stages' 133 KB, more bytes in
    // flight an SM. (2 warps take three stages already: 100 KB, two CTAs an SM.)
    results.push_back(run_shape<E5m2D512ThreeStages>(d512, stream, sms, l2, copy, 0, "E5M2, 3 stages"));
    equal_bytes_rows(256);
    equal_bytes_rows(512);
  } else if (mode == "queries") {  // several query tokens a sequence, and groups past one 8-row tile
    static constexpr int kQueryLens[] = {1, 2, 4, 8, 16};
    if ((shape_arg >= 0 && shape_arg != 0 && shape_arg != 3) ||
        (q_len_arg >= 0 && std::find(std::begin(kQueryLens), std::end(kQueryLens), q_len_arg) == std::end(kQueryLens))) {
      std::fprintf(stderr, "decode_bench --queries: --shape must be 0 or 3, --q-len 1, 2, 4, 8 or 16\n");
      return 2;
    }
    auto keep = [&](int q_len) { return q_len_arg < 0 || q_len == q_len_arg; };
    for (int i : {0, 3}) {
      if (shape_arg >= 0 && i != shape_arg) continue;
      results.push_back(run_shape<E5m2>(shapes[i], stream, sms, l2, copy, 0, "plain, q_len 1"));
      for (int q_len : kQueryLens) {
        if (!keep(q_len)) continue;
        const std::string name = "multi-token, 8 warps, q_len " + std::to_string(q_len);
        results.push_back(run_shape<Multi>(shapes[i], stream, sms, l2, copy, 0, name, false, {0, 0.f, false, q_len}));
      }
      for (int q_len : kQueryLens) {
        if (!keep(q_len)) continue;
        const std::string name = "multi-token, 6 warps, q_len " + std::to_string(q_len);
        results.push_back(run_shape<Multi6>(shapes[i], stream, sms, l2, copy, 0, name, false, {0, 0.f, false, q_len}));
      }
      for (int q_len : {4, 16}) {
        if (!keep(q_len)) continue;
        const std::string name = "multi-token, 4 warps, q_len " + std::to_string(q_len);
        results.push_back(run_shape<Multi4>(shapes[i], stream, sms, l2, copy, 0, name, false, {0, 0.f, false, q_len}));
      }
    }
    if (shape_arg < 0 && q_len_arg < 0) {
      // G 12 (two 8-row tiles) against G 6 over the same KV: the plain Config's two CTAs a KV
      // head, and the multi-token Config's one.
      static const Shape g12{"G12 B16 ragged ~17.8K, page 800", 16, 17800, 800, 12, 1, true};
      static const Shape g12_1k{"G12 B16 x 1K, page 800", 16, 1024, 800, 12, 1, false};
      for (const Shape* g : {&g12, &g12_1k}) {
        results.push_back(run_shape<E5m2>(*g, stream, sms, l2, copy, 0, "plain (two CTAs a KV head)"));
        results.push_back(run_shape<Multi>(*g, stream, sms, l2, copy, 0, "multi-token, 8 warps (one CTA)"));
        results.push_back(run_shape<Multi4>(*g, stream, sms, l2, copy, 0, "multi-token, 4 warps (one CTA)"));
        results.push_back(run_shape<Multi6>(*g, stream, sms, l2, copy, 0, "multi-token, 6 warps (one CTA)"));
      }
    }
  } else if (mode == "profile") {  // one shape, for ncu
    const int profile_shape = shape_arg < 0 ? 0 : shape_arg;
    if (profile_shape >= vxqa_bench::kShapeCount) {
      std::fprintf(stderr, "decode_bench: --shape must be 0..%d\n", vxqa_bench::kShapeCount - 1);
      return 2;
    }
    if (equal_bytes != 0 && equal_bytes != 256 && equal_bytes != 512) {
      std::fprintf(stderr, "decode_bench: --equal-bytes must be 256 or 512\n");
      return 2;
    }
    const int q_len = q_len_arg < 0 ? 1 : q_len_arg;
    if (q_len < 1 || q_len > 16) {
      std::fprintf(stderr, "decode_bench: --q-len must be 1..16\n");
      return 2;
    }
    if (equal_bytes != 0) {
      equal_bytes_rows(equal_bytes);
    } else if (q_len == 1) {
      results.push_back(run_shape<E5m2>(shapes[profile_shape], stream, sms, l2, copy));
    } else {
      results.push_back(run_shape<Multi>(shapes[profile_shape], stream, sms, l2, copy, 0, "multi-token, 8 warps", false,
                                         {0, 0.f, false, q_len}));
    }
  } else {
    for (const Shape& s : vxqa_bench::kShapes) results.push_back(run_shape<E5m2>(s, stream, sms, l2, copy));
    results.push_back(run_shape<E5m2D128>(d128, stream, sms, l2, copy));
    for (int i : {0, 1, 3}) results.push_back(run_shape<E5m2Unchecked>(shapes[i], stream, sms, l2, copy));
    // Two stages a warp: 67 KB a CTA, so 3 CTAs share an sm_90 SM (12 warps) instead of 2.
    using E5m2TwoStages = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::Atom<vxqa::MmaAtom::kAuto>, vxqa::opt::AsyncStages<2>>;
    for (int i : {0, 2, 3})
      results.push_back(run_shape<E5m2TwoStages>(shapes[i], stream, sms, l2, copy, 0, "default atom, 2 stages"));
    for (int i : {0, 2, 3}) results.push_back(run_shape<E5m2Sm70>(shapes[i], stream, sms, l2, copy));
    results.push_back(run_shape<E5m2Sm70Publish>(shapes[0], stream, sms, l2, copy));
    appends.push_back(run_append(32768, 8, 128, stream, copy));
    appends.push_back(run_append(16, 8, 128, stream, copy));  // one decode step of B16
  }

  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::printf("%s (sm_%d%d), copy bandwidth %.0f GB/s, %s, %s, commit %s\n", prop.name, prop.major,
              prop.minor, copy, label.c_str(), date, commit.c_str());
  std::printf("| shape | Config | D | tokens | MB | eager us | graph us | GB/s | %% of copy | chunk x n |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Result& r : results)
    std::printf("| %s | %s | %d | %lld | %.1f | %.1f | %.1f | %.0f | %.1f | %d x %d |\n", r.shape.name, r.config.c_str(), r.head_dim,
                r.tokens, r.mbytes, r.eager_us, r.graph_us, r.gbs, r.pct_copy, r.chunk, r.chunks);

  for (const Breakdown& b : breakdowns) {
    std::printf("breakdown, %s (chunk %d x %d), graph us a step:", b.shape.c_str(), b.chunk, b.chunks);
    for (const auto& part : b.parts) std::printf(" %s %.2f;", part.first.c_str(), part.second);
    std::printf("\n");
  }
  for (const AppendResult& a : appends)
    std::printf("append_kv fp16 -> E5M2, %d tokens x %d heads x %d: %.1f MB in %.2f us, %.0f GB/s, %.1f %% of copy\n",
                a.tokens, a.kv_heads, a.head_dim, a.mbytes, a.us, a.gbs, a.pct_copy);

  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) { std::perror(json_path.c_str()); return 1; }
    std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"sm\": %d%d,\n  \"date\": \"%s\",\n  \"commit\": \"%s\",\n",
                 prop.name, prop.major, prop.minor, date, commit.c_str());
    std::fprintf(f, "  \"label\": \"%s\",\n  \"copy_gbs\": %.1f,\n  \"results\": [\n", label.c_str(), copy);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(f,
                   "    {\"shape\": \"%s\", \"config\": \"%s\", \"batch\": %d, \"context\": %d, \"page\": %d, \"group\": %d, "
                   "\"kv_heads\": %d, \"head_dim\": %d, \"ragged\": %s, \"tokens\": %lld, \"mbytes\": %.3f, "
                   "\"eager_us\": %.2f, \"graph_us\": %.2f, \"gbs\": %.1f, \"pct_copy\": %.2f, "
                   "\"chunk_tokens\": %d, \"num_chunks\": %d, \"cache_copies\": %d, \"window\": %d, "
                   "\"softcap\": %.1f, \"sinks\": %s, \"q_len\": %d, \"lens\": [%s]}%s\n",
                   r.shape.name, r.config.c_str(), r.shape.batch, r.shape.context, r.shape.page, r.shape.group, r.shape.kv_heads,
                   r.head_dim, r.shape.ragged ? "true" : "false", r.tokens, r.mbytes, r.eager_us, r.graph_us, r.gbs,
                   r.pct_copy, r.chunk, r.chunks, r.copies, r.variant.window, double(r.variant.softcap),
                   r.variant.sinks ? "true" : "false", r.variant.q_len, join(r.lens).c_str(),
                   i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "  ],\n  \"append\": [\n");
    for (size_t i = 0; i < appends.size(); ++i) {
      const AppendResult& a = appends[i];
      std::fprintf(f, "    {\"tokens\": %d, \"kv_heads\": %d, \"head_dim\": %d, \"mbytes\": %.3f, \"us\": %.2f, "
                   "\"gbs\": %.1f, \"pct_copy\": %.2f}%s\n", a.tokens, a.kv_heads, a.head_dim, a.mbytes, a.us, a.gbs,
                   a.pct_copy, i + 1 < appends.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
  }
  return 0;
}
