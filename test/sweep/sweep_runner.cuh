// The sweep's GPU side: device buffers that only grow (one set, reused case after case) and
// one decode of a prepared case with one Config through the public API.
#pragma once

#include "sweep/sweep_configs.h"
#include "sweep/sweep_prepare.h"

#include <cuda_runtime.h>
#include <vxqa/vxqa.cuh>
#include <vxqa/testing/problem_params.cuh>

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
  GrowBuffer cache, q, table, lens, out, lse, workspace;

  template <class T>
  static void upload(GrowBuffer& buffer, const std::vector<T>& host) {
    check_cuda(cudaMemcpy(buffer.reserve(host.size() * sizeof(T)), host.data(), host.size() * sizeof(T),
                          cudaMemcpyHostToDevice),
               "cudaMemcpy to the device");
  }
  void upload(const PreparedCase& c) {
    upload(cache, c.problem.cache);
    upload(q, c.problem.q);
    upload(table, c.device_table);
    upload(lens, c.device_lens);
    const size_t rows = size_t(c.problem.batch) * c.problem.query_heads();
    out.reserve(rows * c.problem.head_dim * sizeof(uint16_t));
    lse.reserve(rows * sizeof(float));
  }
};

// What one Config gave for a case.
struct ConfigRun {
  std::string refused;  // make_decode_plan or decode refused the case ("field: why")
  vxqa::DecodePlan plan;
  std::vector<uint16_t> out;
  std::vector<float> lse;
  uint32_t errors = 0;
};

template <class Config>
ConfigRun run_config(const PreparedCase& c, DeviceCase& d) {
  ConfigRun run;
  vxqa::Status s = make_case_plan<Config>(c.spec, &run.plan);
  if (!s.ok()) {
    run.refused = "make_decode_plan: " + s.message();
    return run;
  }
  const RandomProblem& p = c.problem;
  const size_t rows = size_t(p.batch) * p.query_heads();
  void* workspace = d.workspace.reserve(run.plan.workspace_bytes);
  // Poison: 0x7B bytes are finite far from any output (fp16 61280, fp32 ~1.3e36), so an
  // output the kernels never wrote fails wherever it is compared, also where NaN is expected
  // (NaN poison, 0xFF, would pass there) and where a length is 0 (exactly 0, -inf).
  check_cuda(cudaMemsetAsync(d.out.get(), 0x7B, rows * p.head_dim * sizeof(uint16_t)), "cudaMemsetAsync out");
  check_cuda(cudaMemsetAsync(d.lse.get(), 0x7B, rows * sizeof(float)), "cudaMemsetAsync lse");
  // The workspace too: decode() owes no memset of it (its error words are the kernels' own).
  // NaN garbage for even seeds, finite garbage for odd ones: a partial the kernels never
  // wrote then shows as a wrong finite value or as a NaN where none belongs.
  const int garbage = c.spec.seed % 2 ? 0x7B : 0xFF;
  check_cuda(cudaMemsetAsync(workspace, garbage, run.plan.workspace_bytes), "cudaMemsetAsync workspace");
  const vxqa::DecodeParams params = vxqa::problem_params(
      p, {d.cache.get(), d.q.get(), static_cast<const int32_t*>(d.table.get()),
          static_cast<const int32_t*>(d.lens.get()), d.out.get(), static_cast<float*>(d.lse.get())});
  s = vxqa::decode<Config>(params, run.plan, workspace, d.workspace.capacity(), 0);
  if (s.code() == vxqa::StatusCode::kCudaError) throw CudaFailure("decode: " + s.message());
  if (!s.ok()) {
    run.refused = "decode: " + s.message();
    return run;
  }
  run.out.resize(rows * p.head_dim);
  run.lse.resize(rows);
  check_cuda(cudaMemcpy(run.out.data(), d.out.get(), run.out.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost),
             "cudaMemcpy out");
  check_cuda(cudaMemcpy(run.lse.data(), d.lse.get(), run.lse.size() * sizeof(float), cudaMemcpyDeviceToHost),
             "cudaMemcpy lse");
  s = vxqa::read_decode_errors(workspace, 0, &run.errors);
  if (!s.ok()) throw CudaFailure("read_decode_errors: " + s.message());
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

// One family each, instantiated in sweep_d64.cu, sweep_d128.cu and sweep_d256.cu.
std::vector<SweepConfig> d64_configs();
std::vector<SweepConfig> d128_configs();
std::vector<SweepConfig> d256_configs();

}  // namespace vxqa_sweep
