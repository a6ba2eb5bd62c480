// The shared-memory opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize) belongs to the CUDA
// context, not to the process: after cudaDeviceReset() the next context has none, and a
// kernel that needs more than 48 KB of dynamic shared memory fails to launch unless it is
// set again. Since fc1accf decode() sets it at every launch (apply_smem_opt_in).
//
// The test decodes with a Config that needs more than 48 KB on the running device (D 256,
// fp16 cache, 4 warps: 77 KB on the SM70 body, 130 KB on the SM80 one), one chunk and
// several, and compares with the float64 reference; frees every device buffer; resets the
// device; uploads everything again into fresh buffers and decodes again with the plans made
// before the reset. Each decode must succeed and match the reference, bit for bit what it
// gave before the reset. Only decode() may set the opt-in here: the plans come from the
// sm-count overload of make_decode_plan, which touches no context (the device overload
// sets the opt-in too, and called after the reset would hide a decode() that does not).
// How the old behaviour fails: the opt-in was set once per device and process (with the
// body's shared memory, in decode_smem_bytes' cache), so the launch after the reset failed
// ("invalid argument") and decode() returned a CUDA error status.
//
// A reset kills every allocation, stream and graph of the process's context, so the reset
// runs in a child process of its own: the "[context_reset]" test re-runs this binary with
// the hidden "[context_reset_child]" test alone, and requires that it passed (exit status 0
// and the file it writes when all its checks passed). So the whole suite in one process,
// and ctest's gpu.context_reset, both run it, and nothing else shares its context.
#include "gpu/decode_harness.cuh"
#include "gpu/skip.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

extern char** environ;

using namespace vxqa_test;

namespace {

using Big = vxqa::DecodeConfig<256, vxqa::KvType::kFp16>;
static_assert(Big::kSmemBytes > 48 * 1024 && Big::kSm80SmemBytes > 48 * 1024,
              "the context-reset test needs a Config over 48 KB of dynamic shared memory on either body");

// The child writes "passed" to the file this variable names once every check has passed.
constexpr const char* kDoneVariable = "VXQA_CONTEXT_RESET_DONE";

int round_up(int x, int m) { return (x + m - 1) / m * m; }

bool same_bits(const DecodeResult& a, const DecodeResult& b) {
  return a.out == b.out && a.lse.size() == b.lse.size() &&
         std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0 && a.errors == b.errors;
}

}  // namespace

TEST_CASE("context reset child: decode before and after cudaDeviceReset", "[.][context_reset_child]") {
  int smem = 0;
  bool sm80_body = false;
  const vxqa::Status body = vxqa::decode_smem_bytes<Big>(&smem, &sm80_body);
  INFO(body.message());
  REQUIRE(body.ok());
  INFO("dynamic shared memory " << smem << " bytes (" << (sm80_body ? "SM80" : "SM70") << " body)");
  REQUIRE(smem > 48 * 1024);

  RandomProblemOptions o = aligned_options<Big>();
  o.group = 6;
  o.kv_heads = 2;
  o.page_size = 48;
  o.seq_lens = {900, 1, 0, 333, 129};
  o.batch = int(o.seq_lens.size());
  o.k_scale = 0.75f;
  o.v_scale = 1.25f;
  const RandomProblem p = vxqa::reference::make_random_problem(o, 8100);
  const int max_len = 900;
  // Plans are host data: made once, before the reset, and used on both sides of it
  // (plan_for: the sm-count overload, no opt-in).
  const std::vector<vxqa::DecodePlan> plans = {plan_for<Big>(p, max_len, round_up(max_len, Big::kCtaTokens)),
                                               plan_for<Big>(p, max_len, 2 * Big::kChunkMultiple)};
  REQUIRE(plans[0].num_chunks == 1);
  REQUIRE(plans[1].num_chunks > 1);

  std::vector<DecodeResult> before;
  {
    const DeviceProblem d(p);
    for (const vxqa::DecodePlan& plan : plans) {
      INFO("before the reset: " << plan.num_chunks << " chunks");
      before.push_back(run_decode<Big>(p, d, plan));
      check_against_reference(p, before.back());
    }
  }  // every device buffer of this test is freed here, before the reset
  VXQA_CUDA_CHECK(cudaDeviceSynchronize());
  VXQA_CUDA_CHECK(cudaDeviceReset());  // a new context on the next call: no opt-in in it

  {
    const DeviceProblem d(p);  // fresh buffers in the new context
    for (size_t i = 0; i < plans.size(); ++i) {
      INFO("after the reset: " << plans[i].num_chunks << " chunks");
      const DecodeResult after = run_decode<Big>(p, d, plans[i]);  // decode() must set the opt-in again
      check_against_reference(p, after);
      REQUIRE(same_bits(after, before[i]));
    }
  }

  if (const char* done = std::getenv(kDoneVariable)) {
    std::ofstream file(done);
    file << "passed\n";
    REQUIRE(file.good());
  }
}

TEST_CASE("decode after cudaDeviceReset sets the shared-memory opt-in again (in a child process)",
          "[context_reset]") {
  // The child needs a context of its own beside the parent's: not under an exclusive or
  // prohibited compute mode.
  int device = 0, mode = 0;
  VXQA_CUDA_CHECK(cudaGetDevice(&device));
  VXQA_CUDA_CHECK(cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, device));
  if (mode != cudaComputeModeDefault)
    return skip("the device's compute mode (" + std::to_string(mode) +
                ") lets no second process make a context; the test needs one for its child");

  std::vector<char> exe(4096);
  const ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  REQUIRE(n > 0);
  exe[size_t(n)] = '\0';

  // A fresh file name for the child's verdict, absent until the child writes it.
  const char* tmp = std::getenv("TMPDIR");
  std::string done = std::string(tmp && *tmp ? tmp : "/tmp") + "/vxqa_context_reset_XXXXXX";
  const int fd = mkstemp(&done[0]);
  REQUIRE(fd >= 0);
  close(fd);
  REQUIRE(std::remove(done.c_str()) == 0);

  // The environment as it is (CUDA_VISIBLE_DEVICES and all), plus the file's name.
  const std::string variable = std::string(kDoneVariable) + "=" + done;
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, kDoneVariable, std::strlen(kDoneVariable)) != 0) env.push_back(*e);
  env.push_back(const_cast<char*>(variable.c_str()));
  env.push_back(nullptr);
  // The child test alone; "--warn NoTests" makes a filter that matches nothing exit 2.
  std::string filter = "[context_reset_child]", warn = "--warn", no_tests = "NoTests";
  char* argv[] = {exe.data(), &filter[0], &warn[0], &no_tests[0], nullptr};

  std::cout.flush();
  std::fflush(stdout);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, exe.data(), nullptr, nullptr, argv, env.data());
  INFO("posix_spawn " << exe.data() << ": " << std::strerror(spawned));
  REQUIRE(spawned == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child " << (WIFEXITED(status) ? "exit status " : "killed by signal ")
                << (WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? WTERMSIG(status) : -1)
                << " (its output is above)");
  std::ifstream file(done);
  std::string verdict;
  file >> verdict;
  std::remove(done.c_str());
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(verdict == "passed");
}
