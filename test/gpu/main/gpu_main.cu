// Entry point of the GPU tests: without a usable CUDA device they skip (exit 77, which ctest
// reports as "Skipped") and say why; otherwise Catch2 runs them.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cuda_runtime.h>
#include <cstdio>

int main(int argc, char* argv[]) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device (%s): GPU tests need a GPU\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
    return 77;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    std::printf("GPU tests on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  return Catch::Session().run(argc, argv);
}
