// Helpers shared by the GPU tests: every CUDA call is checked, buffers are RAII.
#pragma once
#include <catch2/catch.hpp>
#include <cuda_runtime.h>
#include <cstddef>
#include <vector>

#define VXQA_CUDA_CHECK(call)                                                        \
  do {                                                                               \
    const cudaError_t vxqa_status_ = (call);                                         \
    INFO(#call << " -> " << cudaGetErrorString(vxqa_status_));                       \
    REQUIRE(vxqa_status_ == cudaSuccess);                                            \
  } while (0)

// Checks the launch and then the kernel's execution.
#define VXQA_CUDA_CHECK_LAUNCH()                  \
  do {                                            \
    VXQA_CUDA_CHECK(cudaGetLastError());          \
    VXQA_CUDA_CHECK(cudaDeviceSynchronize());     \
  } while (0)

namespace vxqa_test {

// A device buffer of T that frees itself.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    VXQA_CUDA_CHECK(cudaMalloc(&ptr_, (count ? count : 1) * sizeof(T)));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == count_);
    VXQA_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    VXQA_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fills every byte with `byte` (poison before a kernel writes, so unwritten outputs show).
  void poison(unsigned char byte = 0xFF) {
    VXQA_CUDA_CHECK(cudaMemset(ptr_, byte, (count_ ? count_ : 1) * sizeof(T)));
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace vxqa_test
