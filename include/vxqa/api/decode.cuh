// vxqa/api/decode.cuh — plan once, then launch a decode step on a stream.
//
//   DecodePlan plan;
//   make_decode_plan<Config>(max_batch, max_context, num_kv_heads, group, sm_count, &plan);
//   cudaMalloc(&ws, plan.workspace_bytes);
//   decode<Config>(params, plan, ws, plan.workspace_bytes, stream);   // every step
//
// decode() checks the parameters (validate), then enqueues the decode kernel and, with more
// than one chunk, the combine kernel (with one chunk, reset_errors_kernel first: the error
// word starts as the device scales' bits; with
// several the kernels keep it themselves). With sm_90 code and several chunks both kernels
// are their predecessors' programmatic dependents, so a launch overlaps the end of the
// kernel before it (each waits for that kernel, and so for all earlier work, before it
// touches memory). It never synchronises and never reads device memory, so it can be
// captured in a CUDA graph.
//
// What a captured graph fixes: every pointer and stride, `batch` (sequences at or past it
// are not written: capture one graph per batch size, as engines do, or capture max_batch
// and give unused sequences length 0) and the plan. What it reads at each replay: the
// lengths, the block table, q and the cache.
//
// The plan's chunk comes from its capacity (max_batch, max_context): plan for the batch
// sizes you run (a plan for 16 sequences cuts a lone sequence into few chunks).
// A workspace belongs to one decode at a time: decodes that may run concurrently (other
// streams, or other layers in flight) need their own.
#pragma once
#include <cuda_runtime.h>
#include <atomic>
#include <vxqa/api/params.cuh>
#include <vxqa/api/plan.cuh>
#include <vxqa/api/validate.cuh>
#include <vxqa/kernel/combine_kernel.cuh>
#include <vxqa/kernel/config.cuh>
#include <vxqa/kernel/decode_args.cuh>
#include <vxqa/kernel/decode_kernel.cuh>
#include <vxqa/kernel/split_plan.cuh>

namespace vxqa {

// The kernels' view of one step (no checks: decode() validates first). sm80_body: the SM80
// body runs it (decode_smem_bytes), whose warps may share rows' K/V tiles (row_tiling).
template <class Config>
DecodeKernelArgs make_decode_args(const DecodeParams& p, const DecodePlan& plan, void* workspace,
                                  bool sm80_body = false) {
  DecodeKernelArgs a{};
  a.q = p.q;
  a.q_batch_stride = p.q_batch_stride;
  a.q_head_stride = p.q_head_stride;
  a.out = p.out;
  a.out_batch_stride = p.out_batch_stride;
  a.out_head_stride = p.out_head_stride;
  a.lse = p.lse;
  a.kv = PagedKvLayout{p.k_cache,     p.v_cache,     p.page_stride,       p.token_stride,
                       p.head_stride, p.block_table, p.block_table_stride};
  a.page_size = p.page_size;
  a.page_divmod = PageSize<0>(p.page_size);
  a.max_pages_per_seq = p.max_pages_per_seq;
  a.num_pages = p.num_pages;
  a.seq_lens = p.seq_lens;
  a.batch = p.batch;
  a.num_kv_heads = p.num_kv_heads;
  a.group_size = p.group_size;
  const RowTiling rows = row_tiling<Config>(p.group_size, p.max_q_len, sm80_body);
  a.m_tiles = rows.m_tiles;
  a.q_indptr = p.q_indptr;
  a.max_q_len = p.max_q_len;
  a.row_warps = rows.row_warps;
  a.rows_per_cta = rows.rows_per_cta;
  a.max_context = plan.max_context;
  a.chunk_tokens = plan.chunk_tokens;
  a.num_chunks = plan.num_chunks;
  a.qk_scale_log2 = p.softmax_scale * (p.k_scale_ptr ? 1.f : p.k_scale) * 1.4426950408889634f;
  a.v_scale = p.v_scale;
  a.k_scale_ptr = p.k_scale_ptr;
  a.v_scale_ptr = p.v_scale_ptr;
  uint8_t* ws = static_cast<uint8_t*>(workspace);
  const WorkspaceLayout w =
      workspace_layout(plan.max_batch * plan.max_q_len, p.num_kv_heads * p.group_size, plan.num_chunks, Config::kHeadDim);
  a.errors = reinterpret_cast<uint32_t*>(ws);
  a.partial_lse = reinterpret_cast<float*>(ws + w.partial_lse);
  a.chunk_errors = plan.num_chunks > 1 ? reinterpret_cast<uint32_t*>(ws + w.chunk_errors) : nullptr;
  a.partial_o = reinterpret_cast<float*>(ws + w.partial_o);
  a.window = p.sliding_window;
  a.softcap_log2 = p.logit_softcap * 1.4426950408889634f;
  a.sinks = p.sinks;
  return a;
}

// Which body decode_kernel<Config> runs on the current device, and its dynamic shared
// memory: the SM80 one where the device's code was compiled for compute_80 or newer (the
// kernel's ptxVersion, which is what __CUDA_ARCH__ was), else the SM70 one; and whether
// that code waits for its predecessor (griddepcontrol, compiled in from compute_90 on: only
// then does decode() launch the kernels as programmatic dependents — code JIT-compiled for
// an H100 from compute_80 PTX has no wait). These are properties of the code a device runs:
// asked once per device, later calls read the cache.
namespace detail {

// A nonzero int known once per device (per cache: each caller keeps its own static array):
// `ask(device, &value)` fills it the first time, later calls read it. Devices past the
// array's size are asked every time.
inline constexpr int kMaxCachedDevices = 64;
template <class Ask>
Status cached_per_device(std::atomic<int> (&cache)[kMaxCachedDevices], int* value, Ask ask) {
  int device = 0;
  const cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return Status::cuda("cudaGetDevice", cudaGetErrorString(err));
  const bool cached = device < kMaxCachedDevices;
  *value = cached ? cache[device].load(std::memory_order_relaxed) : 0;
  if (*value != 0) return Status();
  const Status asked = ask(device, value);
  if (asked.ok() && cached) cache[device].store(*value, std::memory_order_relaxed);
  return asked;
}

// Dynamic shared memory a kernel may take without the opt-in.
inline constexpr int kDefaultMaxDynamicSmemBytes = 48 * 1024;

}  // namespace detail

template <class Config>
Status decode_smem_bytes(int* smem_bytes, bool* sm80_body = nullptr, bool* dependent_launch = nullptr) {
  // 4 * smem + 2 * (dependent launch) + (SM80 body)
  static std::atomic<int> cache[detail::kMaxCachedDevices] = {};
  int known = 0;
  const Status s = detail::cached_per_device(cache, &known, [](int, int* value) {
    cudaFuncAttributes attributes{};
    const cudaError_t err = cudaFuncGetAttributes(&attributes, decode_kernel<Config>);
    if (err != cudaSuccess) return Status::cuda("cudaFuncGetAttributes", cudaGetErrorString(err));
    const bool sm80 = Config::kHasSm80Path && attributes.ptxVersion >= 80;
    const int bytes = sm80 ? Config::kSm80SmemBytes : Config::kSmemBytes;
    *value = 4 * bytes + (attributes.ptxVersion >= 90 ? 2 : 0) + (sm80 ? 1 : 0);
    return Status();
  });
  if (!s.ok()) return s;
  // A bf16 cache needs the SM80 body: on a GPU that runs the SM70 one (sm_70, sm_75) it is
  // refused here, before any plan or launch (decode, make_decode_plan, Decoder::init).
  if (!Config::kHasSm70Body && !(known & 1))
    return Status::invalid("cache_type", "bf16 caches need the SM80 body (the bf16 MMA of sm_80 and newer); this "
                                         "GPU runs the SM70 body (sm_70 or sm_75)");
  *smem_bytes = known / 4;
  if (sm80_body) *sm80_body = known & 1;
  if (dependent_launch) *dependent_launch = (known & 2) != 0;
  return Status();
}

// Lets decode_kernel<Config> take `smem_bytes` of dynamic shared memory in the current
// context. The opt-in belongs to the context, not to the process: after cudaDeviceReset(),
// or in another context, it must be set again. So decode() sets it at every launch that
// needs more than 48 KB (a host-side attribute write, no device work and legal in a graph
// capture; bench/host_cost.cu measures its share of a call: docs/performance.md).
template <class Config>
Status apply_smem_opt_in(int smem_bytes) {
  if (smem_bytes <= detail::kDefaultMaxDynamicSmemBytes) return Status();
  const cudaError_t err =
      cudaFuncSetAttribute(decode_kernel<Config>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  return err == cudaSuccess ? Status() : Status::cuda("cudaFuncSetAttribute", cudaGetErrorString(err));
}

// A plan for the current device: its SM count, and for the SM80 body the CTAs per SM it
// keeps resident (decode_smem_bytes' shared memory), at most kSm80PlanCtasPerSm, whose
// slots choose_sm80_chunk_tokens fills in whole waves, in multiples of the SM80 body's round
// (kSm80CtaTokens, 64 tokens with 4 warps) and at least kSm80MinChunkRounds of them (one
// 16-token tile a warp made B16 x 1K 11.8 us against 9.3 with two). Measured (docs/performance.md):
// D = 128 keeps 3 CTAs an SM resident, and planning for 3 (256-token chunks) took 26.5 us
// where 2 (512-token chunks) took 23.4 us. The SM70 body keeps choose_chunk_tokens' rule
// for 4 CTAs an SM. Same contract as the make_decode_plan above.
inline constexpr int kSm80PlanCtasPerSm = 2;
inline constexpr int kSm80MinChunkRounds = 2;

template <class Config>
Status make_decode_plan(int max_batch, int max_context, int num_kv_heads, int group_size, DecodePlan* plan,
                        int max_window = 0, int max_q_len = 1) {
  int device = 0, sms = 0, smem = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return Status::cuda("cudaDeviceGetAttribute", cudaGetErrorString(err));
  bool sm80_body = false;
  const Status body = decode_smem_bytes<Config>(&smem, &sm80_body);
  if (!body.ok()) return body;
  const Status opt_in = apply_smem_opt_in<Config>(smem);  // the occupancy query counts it
  if (!opt_in.ok()) return opt_in;
  if (!sm80_body)  // the SM70 body: its plan asks for 4 CTAs per SM (docs/performance.md)
    return make_decode_plan<Config>(max_batch, max_context, num_kv_heads, group_size, sms, plan, 0, 4, 1, max_window,
                                    max_q_len);
  int resident = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, decode_kernel<Config>, Config::kThreads, smem);
  if (err != cudaSuccess) return Status::cuda("cudaOccupancyMaxActiveBlocksPerMultiprocessor", cudaGetErrorString(err));
  resident = resident < 1 ? 1 : resident > kSm80PlanCtasPerSm ? kSm80PlanCtasPerSm : resident;
  // Bad inputs get the plan's own error before any arithmetic on them.
  const Status valid = make_decode_plan<Config>(max_batch, max_context, num_kv_heads, group_size, sms, plan, 0,
                                                resident, 1, max_window, max_q_len, true);
  if (!valid.ok()) return valid;
  const int m_tiles = row_tiling<Config>(group_size, max_q_len, true).m_tiles;
  const int chunk =
      choose_sm80_chunk_tokens(max_batch, plan_span(max_context, max_window, max_q_len), num_kv_heads * m_tiles,
                               Config::kSm80CtaTokens, sms, resident, kSm80MinChunkRounds);
  return make_decode_plan<Config>(max_batch, max_context, num_kv_heads, group_size, sms, plan, chunk, resident, 1,
                                  max_window, max_q_len, true);
}

// The combine kernel of a split plan's steps and its grid: (query heads, max_batch x
// max_q_len (sequence, query token), slices of combine_slice_dims(num_chunks) dims).
template <class Config>
const void* combine_kernel_for(const DecodePlan& plan, int q_heads, dim3* grid) {
  constexpr int kD = Config::kHeadDim;
  const bool narrow = combine_slice_dims(plan.num_chunks) == 16;
  *grid = dim3(q_heads, plan.max_batch * plan.max_q_len,
               narrow ? CombineShape<kD, 16>::kSlices : CombineShape<kD, 64>::kSlices);
  using Variant = typename Config::Variant;
  constexpr bool kMulti = Config::kMultiToken;
  return narrow ? reinterpret_cast<const void*>(&combine_kernel<kD, Config::kQo, 16, Variant, kMulti>)
                : reinterpret_cast<const void*>(&combine_kernel<kD, Config::kQo, 64, Variant, kMulti>);
}

template <class Config>
Status decode(const DecodeParams& params, const DecodePlan& plan, void* workspace,
              size_t workspace_bytes, cudaStream_t stream) {
  const Status status = validate<Config>(params, plan, workspace, workspace_bytes);
  if (!status.ok() || params.batch == 0) return status;  // batch 0: nothing to do
  int smem_bytes = 0;
  bool pdl = false;  // the kernels' code waits for its predecessor (sm_90 code)
  bool sm80_body = false;
  const Status body = decode_smem_bytes<Config>(&smem_bytes, &sm80_body, &pdl);
  if (!body.ok()) return body;
  const DecodeKernelArgs args = make_decode_args<Config>(params, plan, workspace, sm80_body);
  const Status opt_in = apply_smem_opt_in<Config>(smem_bytes);
  if (!opt_in.ok()) return opt_in;
  const bool split = plan.num_chunks > 1;
  if (!split) {  // with several chunks the decode kernel zeroes the word and the combine adds the scales' bits
    void* kernel_args[] = {const_cast<DecodeKernelArgs*>(&args)};
    const cudaError_t err =
        cudaLaunchKernel(reinterpret_cast<const void*>(&reset_errors_kernel<Config>), dim3(1), dim3(32), kernel_args, 0, stream);
    if (err != cudaSuccess) return Status::cuda("reset_errors_kernel launch", cudaGetErrorString(err));
  }

  // On sm_90 a kernel launched as its predecessor's programmatic dependent starts while
  // that one ends, and waits for its results on the device (grid_dependency_wait): the
  // decode kernel after whatever kernel came before it, the combine
  // after the decode kernel. cudaLaunchKernelExC returns this launch's own status
  // (cudaGetLastError would also report, and clear, an earlier error of the caller's).
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  auto launch = [&](const void* kernel, dim3 grid, dim3 block, int smem, bool dependent, const char* what) {
    void* kernel_args[] = {const_cast<DecodeKernelArgs*>(&args)};
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = dependent ? &attribute : nullptr;
    config.numAttrs = dependent ? 1 : 0;
    const cudaError_t err = cudaLaunchKernelExC(&config, kernel, kernel_args);
    return err == cudaSuccess ? Status() : Status::cuda(what, cudaGetErrorString(err));
  };
  const Status decoded = launch(reinterpret_cast<const void*>(&decode_kernel<Config>),
                                dim3(plan.num_chunks, params.num_kv_heads * args.m_tiles, plan.max_batch),
                                dim3(Config::kThreads), smem_bytes, pdl && split, "decode_kernel launch");
  if (!decoded.ok() || !split) return decoded;
  dim3 combine_grid;
  const void* combine = combine_kernel_for<Config>(plan, params.num_kv_heads * params.group_size, &combine_grid);
  return launch(combine, combine_grid, dim3(kCombineThreads), 0, pdl, "combine_kernel launch");
}

// Reads the error bits the last decode() on `stream` left (ErrorBit). This one call
// synchronises the stream: use it in tests and checks, not in the serving loop.
inline Status read_decode_errors(const void* workspace, cudaStream_t stream, uint32_t* errors) {
  const cudaError_t err = cudaMemcpyAsync(errors, workspace, sizeof(uint32_t),
                                          cudaMemcpyDeviceToHost, stream);
  if (err != cudaSuccess) return Status::cuda("cudaMemcpyAsync", cudaGetErrorString(err));
  const cudaError_t sync = cudaStreamSynchronize(stream);
  if (sync != cudaSuccess) return Status::cuda("cudaStreamSynchronize", cudaGetErrorString(sync));
  return Status();
}

}  // namespace vxqa
