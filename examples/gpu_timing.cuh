// Helpers shared by the demo and the benchmarks: device copies of host vectors, CUDA events,
// medians, and the copy bandwidth of the same GPU measured in the same run (the ceiling
// every number is read against).
#pragma once
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define DEMO_CHECK(call)                                                                   \
  do {                                                                                     \
    const cudaError_t demo_status_ = (call);                                               \
    if (demo_status_ != cudaSuccess) {                                                     \
      std::fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call,                 \
                   cudaGetErrorString(demo_status_));                                      \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

namespace vxqa_demo {

// A device copy of a host vector (cudaMalloc, then a copy; the caller frees it).
template <class T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  DEMO_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
  DEMO_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median over `samples` of the time (µs) of one call, each sample timing `per_sample` calls
// between two events on `stream`, after `warmup` untimed calls.
inline double median_us(const std::function<void()>& work, cudaStream_t stream, int samples = 30,
                        int per_sample = 10, int warmup = 5) {
  for (int i = 0; i < warmup; ++i) work();
  cudaEvent_t start, stop;
  DEMO_CHECK(cudaEventCreate(&start));
  DEMO_CHECK(cudaEventCreate(&stop));
  std::vector<double> us;
  for (int s = 0; s < samples; ++s) {
    DEMO_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < per_sample; ++i) work();
    DEMO_CHECK(cudaEventRecord(stop, stream));
    DEMO_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    DEMO_CHECK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(1000.0 * ms / per_sample);
  }
  DEMO_CHECK(cudaGetLastError());
  DEMO_CHECK(cudaEventDestroy(start));
  DEMO_CHECK(cudaEventDestroy(stop));
  return median(us);
}

// Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written.
inline double copy_bandwidth_gbs(cudaStream_t stream, size_t bytes = size_t(1) << 30) {
  void *src = nullptr, *dst = nullptr;
  DEMO_CHECK(cudaMalloc(&src, bytes));
  DEMO_CHECK(cudaMalloc(&dst, bytes));
  DEMO_CHECK(cudaMemsetAsync(src, 0x5A, bytes, stream));
  const double us = median_us(
      [&] { DEMO_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream)); },
      stream, 15, 2, 2);
  DEMO_CHECK(cudaFree(src));
  DEMO_CHECK(cudaFree(dst));
  return 2.0 * bytes / (us * 1e3);
}

inline bool has_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace vxqa_demo
