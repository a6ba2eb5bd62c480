// Entry point of the GPU tests (vxqa_gpu_tests, vxqa_gpu_tests_sm70). Exit status: Catch2's
// (the number of failed assertions, at most 255), except
//   77  "skipped" to ctest (SKIP_RETURN_CODE): without a usable CUDA device, and when every
//       test case that ran reported a skip (vxqa_test::skip, gpu/skip.h) and none failed;
//   1   where Catch2's count of failed assertions is 77, which ctest would read as a skip.
// A run where some test cases skipped and others passed exits 0 (as Catch2 v3 does); its last
// line, "SKIPPED n of m test cases: ...", names the skipped ones.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cuda_runtime.h>
#include <cstdio>
#include <string>
#include <vector>
#include "gpu/skip.h"

namespace {

// What the run did: test cases ended, and those that reported a skip ("name (why)").
struct SkipRegistry {
  int cases_ended = 0;
  std::string current;           // the running test case's name
  bool current_skipped = false;  // it called skip() (a case with sections may call it again)
  std::vector<std::string> skipped;
};

SkipRegistry& registry() {
  static SkipRegistry r;
  return r;
}

struct SkipListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(Catch::TestCaseInfo const& info) override {
    TestEventListenerBase::testCaseStarting(info);
    registry().current = info.name;
    registry().current_skipped = false;
  }
  void testCaseEnded(Catch::TestCaseStats const& stats) override {
    ++registry().cases_ended;
    TestEventListenerBase::testCaseEnded(stats);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(SkipListener)

void vxqa_test::skip(const std::string& why) {
  SkipRegistry& r = registry();
  std::printf("skipped: %s: %s\n", r.current.c_str(), why.c_str());
  std::fflush(stdout);
  if (!r.current_skipped) r.skipped.push_back(r.current + " (" + why + ")");
  r.current_skipped = true;
}

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
  std::fflush(stdout);
  const int rc = Catch::Session().run(argc, argv);
  const SkipRegistry& r = registry();
  const int skipped = int(r.skipped.size());
  if (skipped > 0) {
    std::string names;
    for (const std::string& s : r.skipped) names += (names.empty() ? "" : "; ") + s;
    std::printf("SKIPPED %d of %d test cases%s: %s\n", skipped, r.cases_ended,
                rc == 0 && skipped == r.cases_ended ? " (exit 77: nothing ran)" : "", names.c_str());
    std::fflush(stdout);
  }
  if (rc == 0 && r.cases_ended > 0 && skipped == r.cases_ended) return 77;
  return rc == 77 ? 1 : rc;
}
