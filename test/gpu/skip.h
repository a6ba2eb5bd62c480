// Skips for the GPU tests. Catch2 v2 has no SKIP: a test case that cannot run here (a GPU
// older than the code it tests) calls
//   if (!device_has_sm80()) return vxqa_test::skip("why");
// which prints "skipped: <test case>: why" and records the skip. test/gpu/main/gpu_main.cu
// then exits 77, which ctest reports as "Skipped", when every test case that ran skipped
// and none failed (a run where some skipped and others passed exits 0, as Catch2 v3's does,
// and its last line names the skipped ones). A test case that skips must return at once:
// what it asserts before the skip still counts, what it would assert after is not run.
#pragma once
#include <string>

namespace vxqa_test {

void skip(const std::string& why);  // defined in test/gpu/main/gpu_main.cu

}  // namespace vxqa_test
