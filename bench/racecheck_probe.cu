// racecheck_probe: does compute-sanitizer's racecheck report hazards in a pattern that is
// race-free by construction, the one the SM70 body's merge has at head dim 512
// (docs/performance.md, "a racecheck finding")? Run it under the tool:
//   compute-sanitizer --tool racecheck --racecheck-report hazard vxqa_racecheck_probe
// Each CTA has 4 warps in two teams of two, as the SM70 body's D 512 Config. Team t syncs on
// its own named barrier (id 1 + t, 64 threads) rounds[t] times, as a team's publisher does a
// tile (team 0 first busy for `busy_ns`, as the finding's team 0 was with its tile while
// team 1, with none, waited at the CTA barrier), then the CTA ORs a flag through
// __syncthreads_or, each warp stores its (m, l) into its own area, __syncthreads, and every
// thread reads every warp's (m, l). A hazard racecheck
// reports here is the tool's, not the code's. The cases: the teams' round counts (the
// finding's launch had 1 and 0), each launched plainly and as a programmatic dependent with
// its trigger before the stores (decode_kernel's way), after a kernel that uses the same
// shared memory differently (the finding needed earlier cases' launches).
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include <vxqa/arch/grid_dependency.cuh>
#include <vxqa/arch/named_barrier.cuh>

#include "../examples/gpu_timing.cuh"
#include "globaltimer.cuh"

namespace {

constexpr int kThreads = 128, kBlocks = 528, kSmemBytes = 48 * 1024;

// Rounds of the teams' named barriers; stores and reads of (m, l) through a CTA barrier; the
// sum a thread reads goes to out[block] so that nothing is optimised away.
__global__ void __launch_bounds__(kThreads) merge_pattern(int rounds0, int rounds1, int busy_ns, float* out) {
  extern __shared__ __align__(16) float smem[];
  vxqa::arch::grid_dependency_wait();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, team = warp / 2;
  float* area = smem + warp * 1024;  // a warp's own 4 KB, as a team's score tiles
  const int rounds = team == 0 ? rounds0 : rounds1;
  if (team == 0 && busy_ns > 0) {
    const unsigned long long start = vxqa_bench::globaltimer_ns();
    while (vxqa_bench::globaltimer_ns() - start < static_cast<unsigned long long>(busy_ns)) {
    }
  }
  for (int r = 0; r < rounds; ++r) {
    area[lane] = float(r + lane);  // the warp's own scores, as the main loop writes them
    vxqa::arch::named_barrier_sync(1 + team, 64);
  }
  vxqa::arch::launch_dependents();
  const bool flag = __syncthreads_or(lane == 0 && rounds > 1);
  if (lane < 8) {
    area[lane] = float(blockIdx.x + warp + lane);  // m of row `lane`
    area[8 + lane] = float(flag);                  // l
  }
  __syncthreads();
  float sum = 0.f;
  for (int w = 0; w < kThreads / 32; ++w) sum += smem[w * 1024 + (threadIdx.x & 7)] + smem[w * 1024 + 8];
  if (threadIdx.x == 0) out[blockIdx.x] = sum;
}

// Every thread writes and reads its own words of the whole shared memory: leaves other
// accesses in the addresses merge_pattern uses next.
__global__ void __launch_bounds__(kThreads) other_layout(float* out) {
  extern __shared__ __align__(16) float smem[];
  float x = 0.f;
  for (int i = threadIdx.x; i < kSmemBytes / 4; i += kThreads) smem[i] = float(i);
  for (int i = threadIdx.x; i < kSmemBytes / 4; i += kThreads) x += smem[i];
  if (x == -1.f) out[blockIdx.x] = x;
}

}  // namespace

int main() {
  if (!vxqa_demo::has_gpu()) {
    std::printf("racecheck_probe: no GPU\n");
    return 0;
  }
  float* out = nullptr;
  DEMO_CHECK(cudaMalloc(&out, kBlocks * sizeof(float)));
  DEMO_CHECK(cudaFuncSetAttribute(merge_pattern, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  DEMO_CHECK(cudaFuncSetAttribute(other_layout, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  // {team 0's rounds, team 1's, team 0's busy ns}
  const int rounds[][3] = {{1, 0, 0}, {0, 1, 0},     {2, 0, 0},     {1, 1, 0},
                           {3, 0, 0}, {1, 0, 20000}, {4, 0, 20000}, {1, 0, 200000}};
  for (const bool dependent : {false, true}) {
    for (const auto& r : rounds) {
      other_layout<<<kBlocks, kThreads, kSmemBytes>>>(out);
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(kBlocks);
      config.blockDim = dim3(kThreads);
      config.dynamicSmemBytes = kSmemBytes;
      config.attrs = dependent ? &pdl : nullptr;
      config.numAttrs = dependent ? 1 : 0;
      DEMO_CHECK(cudaLaunchKernelEx(&config, merge_pattern, r[0], r[1], r[2], out));
      DEMO_CHECK(cudaDeviceSynchronize());
      std::vector<float> got(kBlocks);
      DEMO_CHECK(cudaMemcpy(got.data(), out, kBlocks * sizeof(float), cudaMemcpyDeviceToHost));
      // Thread 0 reads row 0 of each warp: m = block + warp, l = the flag (a team ran 2+ rounds).
      const float flag = (r[0] > 1 || r[1] > 1) ? 1.f : 0.f;
      bool ok = true;
      for (int b = 0; b < kBlocks; ++b) ok = ok && got[b] == 4.f * b + 6.f + 4.f * flag;
      std::printf("rounds %d / %d, team 0 busy %d ns, %s launch: outputs %s\n", r[0], r[1], r[2],
                  dependent ? "dependent" : "plain", ok ? "right" : "WRONG");
    }
  }
  DEMO_CHECK(cudaFree(out));
  return 0;
}
