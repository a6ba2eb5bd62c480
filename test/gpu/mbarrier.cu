// The producer warp's hand-over pieces on the GPU: arch/mbarrier.cuh (a warp copies stages
// of a ring with cp.async, arrive_when_copies_land on the stage's "full" barrier, the
// computing warps wait_parity on it, read the stage and arrive on its "empty" barrier, which
// the producer waits for before it refills the stage) and arch::named_barrier_sync_any (the
// vote on a barrier). Every value read is checked, over more rounds than stages, so a stage
// read before it landed or refilled before it was read shows. Skipped below sm_90.
#include "gpu/decode_harness.cuh"
#include "gpu/skip.h"

#include <vxqa/arch/cp_async.cuh>
#include <vxqa/arch/mbarrier.cuh>
#include <vxqa/arch/named_barrier.cuh>

#include <vector>

namespace {

using vxqa_test::DeviceBuffer;

constexpr int kRounds = 11, kConsumers = 128, kWords = 1024;

__global__ void has_mbarrier_kernel(int* has) { *has = VXQA_HAS_MBARRIER; }

// Round r copies words [r * kWords, (r + 1) * kWords) of `src` into stage r % kStages; each
// computing thread sums its 8 words of every round into sums[thread][round].
__global__ void handover_kernel(const uint32_t* src, uint32_t* sums) {
#if VXQA_HAS_MBARRIER
  constexpr int kStages = 3;  // a stage: 4 KB
  __shared__ __align__(16) uint32_t stages[kStages][kWords];
  __shared__ uint64_t full[kStages], empty[kStages];
  const int t = threadIdx.x;
  if (t == 0)
    for (int s = 0; s < kStages; ++s) vxqa::arch::mbarrier::init(full + s, 32), vxqa::arch::mbarrier::init(empty + s, kConsumers);
  __syncthreads();
  if (t >= kConsumers) {  // the producer warp: 8 16-byte copies a lane a round
    const int lane = t - kConsumers;
    for (int r = 0; r < kRounds; ++r) {
      const int s = r % kStages;
      if (r >= kStages) vxqa::arch::mbarrier::wait_parity(empty + s, uint32_t((r / kStages - 1) & 1));
      for (int i = 0; i < kWords / 4 / 32; ++i)
        vxqa::arch::cp_async_16_or_zero(&stages[s][4 * (lane + 32 * i)], src + r * kWords + 4 * (lane + 32 * i), true);
      vxqa::arch::mbarrier::arrive_when_copies_land(full + s);
    }
    vxqa::arch::cp_async_wait<0>();
    return;
  }
  for (int r = 0; r < kRounds; ++r) {
    const int s = r % kStages;
    vxqa::arch::mbarrier::wait_parity(full + s, uint32_t((r / kStages) & 1));
    uint32_t sum = 0;
    for (int i = 0; i < kWords / kConsumers; ++i) sum += stages[s][t + kConsumers * i];
    sums[t * kRounds + r] = sum;
    vxqa::arch::mbarrier::arrive(empty + s);
  }
#endif
}

// votes[t] = whether any of the 128 threads passed true: thread `who` only (who < 0: none).
__global__ void vote_kernel(int who, int* votes) {
  const bool any = vxqa::arch::named_barrier_sync_any(1, 128, int(threadIdx.x) == who);
  votes[threadIdx.x] = any ? 1 : 0;
}

bool runs_mbarrier() {
  DeviceBuffer<int> has(1);
  has_mbarrier_kernel<<<1, 1>>>(has.get());
  VXQA_CUDA_CHECK_LAUNCH();
  return has.download()[0] == 1;
}

}  // namespace

TEST_CASE("mbarrier: a producer warp's cp.async stages handed over and back, every value read as copied",
          "[mbarrier]") {
  if (!runs_mbarrier()) return vxqa_test::skip("the mbarrier hand-over is built for sm_90 and newer");
  std::vector<uint32_t> src(kRounds * kWords);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint32_t(i * 2654435761u) >> 8;
  DeviceBuffer<uint32_t> dsrc(src.size()), sums(kConsumers * kRounds);
  dsrc.upload(src);
  sums.poison();
  handover_kernel<<<1, kConsumers + 32>>>(dsrc.get(), sums.get());
  VXQA_CUDA_CHECK_LAUNCH();
  const std::vector<uint32_t> got = sums.download();
  int wrong = 0;
  for (int t = 0; t < kConsumers; ++t)
    for (int r = 0; r < kRounds; ++r) {
      uint32_t want = 0;
      for (int i = 0; i < kWords / kConsumers; ++i) want += src[r * kWords + t + kConsumers * i];
      wrong += got[t * kRounds + r] != want;
    }
  CHECK(wrong == 0);
}

TEST_CASE("mbarrier: named_barrier_sync_any tells every thread whether any passed true", "[mbarrier]") {
  if (!runs_mbarrier()) return vxqa_test::skip("the mbarrier hand-over is built for sm_90 and newer");
  for (int who : {-1, 0, 37, 127}) {
    DeviceBuffer<int> votes(128);
    vote_kernel<<<1, 128>>>(who, votes.get());
    VXQA_CUDA_CHECK_LAUNCH();
    const std::vector<int> v = votes.download();
    for (int x : v) CHECK(x == (who >= 0 ? 1 : 0));
  }
}
