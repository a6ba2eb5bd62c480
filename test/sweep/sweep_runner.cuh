// The sweep's GPU side: device buffers that only grow (one set, reused case after case) and
// one decode of a prepared case with one Config through the public API (and, for graph
// cases, the same step replayed from a captured CUDA graph).
#pragma once

#include "sweep/sweep_configs.h"
#include "sweep/sweep_prepare.h"

#include <cuda_runtime.h>
#include <vxqa/vxqa.cuh>
#include <vxqa/testing/problem_params.cuh>

#include <array>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace vxqa_sweep {

// A CUDA call failed: the context may be lost, so the sweep stops.
struct CudaFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw CudaFailure(std::string(what) + ": " + cudaGetErrorString(status));
}

// Device memory that is reallocated only when a case needs more than it has.
class GrowBuffer {
 public:
  GrowBuffer() = default;
  GrowBuffer(const GrowBuffer&) = delete;
  GrowBuffer& operator=(const GrowBuffer&) = delete;
  ~GrowBuffer() { cudaFree(ptr_); }
  void* reserve(size_t bytes) {
    if (bytes > capacity_) {
      check_cuda(cudaFree(ptr_), "cudaFree");
      ptr_ = nullptr;
      capacity_ = std::max(bytes, capacity_ + capacity_ / 2);
      check_cuda(cudaMalloc(&ptr_, capacity_), "cudaMalloc");
    }
    return ptr_;
  }
  void* get() const { return ptr_; }
  size_t capacity() const { return capacity_; }

 private:
  void* ptr_ = nullptr;
  size_t capacity_ = 0;
};

// One case on the device.
struct DeviceCase {
  GrowBuffer cache, q, q_bf16, table, lens, out, lse, workspace, scales, sinks, q_indptr;
  DeviceCase() = default;
  DeviceCase(const DeviceCase&) = delete;
  DeviceCase& operator=(const DeviceCase&) = delete;
  ~DeviceCase() {
    if (graph_stream_) cudaStreamDestroy(graph_stream_);
  }

  template <class T>
  static void upload(GrowBuffer& buffer, const T* host, size_t count) {
    check_cuda(cudaMemcpy(buffer.reserve(count * sizeof(T)), host, count * sizeof(T), cudaMemcpyHostToDevice),
               "cudaMemcpy to the device");
  }
  template <class T>
  static void upload(GrowBuffer& buffer, const std::vector<T>& host) {
    upload(buffer, host.data(), host.size());
  }
  void upload(const PreparedCase& c) {
    upload(cache, c.problem.cache);
    upload(q, c.device_q);
    if (!c.device_q_bf16.empty()) upload(q_bf16, c.device_q_bf16);
    upload(table, c.device_table);
    upload(lens, c.device_lens);
    if (!c.problem.sinks.empty()) upload(sinks, c.problem.sinks);
    if (!c.problem.q_indptr.empty()) upload(q_indptr, c.problem.q_indptr);
    out.reserve(size_t(c.spec.io.out_elements) * sizeof(uint16_t));
    lse.reserve(std::max<size_t>(lse_count(c), 1) * sizeof(float));  // a step may have no rows
    set_scales(device_scales(c.spec));
  }
  void set_scales(const std::array<float, 2>& values) { upload(scales, values.data(), values.size()); }
  // lse's elements: [rows, Hq] (rows: the problem's query tokens).
  static size_t lse_count(const PreparedCase& c) { return size_t(c.problem.num_tokens) * c.problem.query_heads(); }

  CaseBuffers buffers(vxqa::ActType qo) const {
    CaseBuffers b;
    b.cache = cache.get();
    b.q = qo == vxqa::ActType::kBf16 ? q_bf16.get() : q.get();
    b.block_table = static_cast<const int32_t*>(table.get());
    b.seq_lens = static_cast<const int32_t*>(lens.get());
    b.out = out.get();
    b.lse = static_cast<float*>(lse.get());
    b.scales = static_cast<const float*>(scales.get());
    b.sinks = static_cast<const float*>(sinks.get());
    b.q_indptr = static_cast<const int32_t*>(q_indptr.get());
    return b;
  }
  // The stream graph runs are captured on: blocking, so ordered after legacy-stream copies.
  cudaStream_t graph_stream() {
    if (!graph_stream_) check_cuda(cudaStreamCreate(&graph_stream_), "cudaStreamCreate");
    return graph_stream_;
  }

 private:
  cudaStream_t graph_stream_ = nullptr;
};

// What one Config gave for a case.
struct ConfigRun {
  std::string refused;  // make_decode_plan or decode refused the case ("field: why")
  std::string failure;  // out written outside its rows, or a graph replay that differs from the eager run
  vxqa::ActType qo = vxqa::ActType::kFp16;
  vxqa::DecodePlan plan;
  std::vector<uint16_t> out;  // the rows, as fp16 bits [rows, Hq, D] (gather_out)
  std::vector<float> lse;
  uint32_t errors = 0;
  bool graph_replayed = false;
};

namespace detail {

// The raw outputs of a step: the whole out buffer, lse and the error word.
struct RawOutputs {
  std::vector<uint16_t> out;
  std::vector<float> lse;
  uint32_t errors = 0;
};

inline RawOutputs download(const PreparedCase& c, DeviceCase& d, const void* workspace) {
  RawOutputs r;
  r.out.resize(size_t(c.spec.io.out_elements));
  r.lse.resize(DeviceCase::lse_count(c));
  check_cuda(cudaMemcpy(r.out.data(), d.out.get(), r.out.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost),
             "cudaMemcpy out");
  if (!r.lse.empty())  // a multi-token step may have no rows
    check_cuda(cudaMemcpy(r.lse.data(), d.lse.get(), r.lse.size() * sizeof(float), cudaMemcpyDeviceToHost),
               "cudaMemcpy lse");
  const vxqa::Status s = vxqa::read_decode_errors(workspace, 0, &r.errors);
  if (!s.ok()) throw CudaFailure("read_decode_errors: " + s.message());
  return r;
}

// Poison: 0x7B bytes in out (all of its buffer) and lse are finite far from any output, so
// an output the kernels never wrote fails wherever it is compared, also where NaN is
// expected (NaN poison, 0xFF, would pass there) and where a length is 0 (exactly 0, -inf),
// and a write outside out's rows shows. The workspace too: decode() owes no memset of it
// (its error words are the kernels' own). NaN garbage for even seeds, finite garbage for odd
// ones: a partial the kernels never wrote then shows as a wrong finite value or as a NaN
// where none belongs.
inline void poison(const PreparedCase& c, DeviceCase& d, void* workspace, size_t workspace_bytes) {
  check_cuda(cudaMemset(d.out.get(), kOutPoisonByte, size_t(c.spec.io.out_elements) * sizeof(uint16_t)),
             "cudaMemset out");
  check_cuda(cudaMemset(d.lse.get(), kOutPoisonByte, DeviceCase::lse_count(c) * sizeof(float)), "cudaMemset lse");
  check_cuda(cudaMemset(workspace, c.spec.seed % 2 ? 0x7B : 0xFF, workspace_bytes), "cudaMemset workspace");
}

struct GraphHandles {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~GraphHandles() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

// The step captured in a CUDA graph while the device scales hold other valid values, then
// replayed twice: with those, and, after out, lse and the workspace are poisoned again and
// the case's scales written, with the case's. The second replay must give `eager`'s bits
// (the whole out buffer, lse, the error word). Returns what differs, or "".
template <class Config>
std::string graph_replay(const PreparedCase& c, DeviceCase& d, const vxqa::DecodeParams& params,
                         const vxqa::DecodePlan& plan, void* workspace, const RawOutputs& eager) {
  const std::array<float, 2> scales = device_scales(c.spec);
  cudaStream_t stream = d.graph_stream();
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  d.set_scales({2 * scales[0], 0.5f * scales[1]});
  GraphHandles g;
  check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  const vxqa::Status s = vxqa::decode<Config>(params, plan, workspace, d.workspace.capacity(), stream);
  const cudaError_t ended = cudaStreamEndCapture(stream, &g.graph);  // always end the capture
  if (s.code() == vxqa::StatusCode::kCudaError) throw CudaFailure("decode in a graph capture: " + s.message());
  if (!s.ok()) return "decode in a graph capture refused what it ran eagerly: " + s.message();
  check_cuda(ended, "cudaStreamEndCapture");
  check_cuda(cudaGraphInstantiateWithFlags(&g.exec, g.graph, 0), "cudaGraphInstantiateWithFlags");
  check_cuda(cudaGraphLaunch(g.exec, stream), "cudaGraphLaunch");
  check_cuda(cudaStreamSynchronize(stream), "graph replay with other scales");
  poison(c, d, workspace, plan.workspace_bytes);
  d.set_scales(scales);
  check_cuda(cudaGraphLaunch(g.exec, stream), "cudaGraphLaunch");
  check_cuda(cudaStreamSynchronize(stream), "graph replay");
  const RawOutputs replay = download(c, d, workspace);
  if (replay.errors != eager.errors)
    return "graph replay: error word " + std::to_string(replay.errors) + ", eager " + std::to_string(eager.errors);
  for (size_t i = 0; i < replay.out.size(); ++i)
    if (replay.out[i] != eager.out[i])
      return "graph replay: out buffer element " + std::to_string(i) + " differs from the eager run's";
  for (size_t i = 0; i < replay.lse.size(); ++i)
    if (std::memcmp(&replay.lse[i], &eager.lse[i], sizeof(float)) != 0)
      return "graph replay: lse " + std::to_string(i) + " differs from the eager run's";
  return "";
}

}  // namespace detail

// The case with Config: eagerly (outputs gathered from out's rows, and nothing written
// outside them), then, for a graph case, replayed from a captured graph.
template <class Config>
ConfigRun run_config(const PreparedCase& c, DeviceCase& d) {
  ConfigRun run;
  run.qo = Config::kQo;
  vxqa::Status s = make_case_plan<Config>(c.spec, &run.plan);
  if (!s.ok()) {
    run.refused = "make_decode_plan: " + s.message();
    return run;
  }
  const RandomProblem& p = c.problem;
  void* workspace = d.workspace.reserve(run.plan.workspace_bytes);
  detail::poison(c, d, workspace, run.plan.workspace_bytes);
  const vxqa::DecodeParams params = case_params(c, d.buffers(Config::kQo), Config::kQo);
  s = vxqa::decode<Config>(params, run.plan, workspace, d.workspace.capacity(), 0);
  if (s.code() == vxqa::StatusCode::kCudaError) throw CudaFailure("decode: " + s.message());
  if (!s.ok()) {
    run.refused = "decode: " + s.message();
    return run;
  }
  const detail::RawOutputs eager = detail::download(c, d, workspace);
  GatheredOut gathered = gather_out(eager.out, c.spec.io, p.num_tokens, p.query_heads(), p.head_dim, Config::kQo);
  run.out = std::move(gathered.rows);
  run.lse = eager.lse;
  run.errors = eager.errors;
  if (gathered.stray)
    run.failure = "out written outside its rows: " + std::to_string(gathered.stray) + " elements, the first at " +
                  std::to_string(gathered.first_stray) + " of the buffer";
  if (c.spec.graph) {
    run.graph_replayed = true;
    const std::string graph = detail::graph_replay<Config>(c, d, params, run.plan, workspace, eager);
    if (!graph.empty()) run.failure += (run.failure.empty() ? "" : "; ") + graph;
  }
  return run;
}

// A Config ready to run on any case it accepts.
struct SweepConfig {
  ConfigInfo info;
  ConfigRun (*run)(const PreparedCase&, DeviceCase&);
};

template <class... Configs>
std::vector<SweepConfig> sweep_configs(ConfigList<Configs...>) {
  return {SweepConfig{config_info<Configs>(), &run_config<Configs>}...};
}

// One family each, instantiated in sweep_d64.cu, sweep_d128.cu, sweep_d256.cu and sweep_d512.cu.
std::vector<SweepConfig> d64_configs();
std::vector<SweepConfig> d128_configs();
std::vector<SweepConfig> d256_configs();
std::vector<SweepConfig> d512_configs();

}  // namespace vxqa_sweep
