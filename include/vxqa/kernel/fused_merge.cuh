// vxqa/kernel/fused_merge.cuh — the split-KV merge done by the decode kernel itself, for
// plans of a few chunks (DecodePlan::fused_merge): each CTA, once its chunk's partials are
// written, counts itself done for its (sequence, head tile), and the CTA that counts last
// merges every chunk of its heads. No combine launch and no wait for the whole grid: a
// sequence's output is written as soon as its own chunks are done.
//
// Deterministic: which CTA merges depends on timing, but what it computes does not — the
// chunks are read in chunk order and reduced by fixed shuffle trees, so the bits depend only
// on the sequence's partials. The rules are the combine kernel's: a NaN chunk LSE makes the
// whole result NaN; chunks whose scores were all -inf weigh 0, and if all were, the result
// is NaN (0 / 0); a sequence of length 0 gets O = 0 and LSE -inf.
#pragma once
#include <vxqa/common.cuh>
#include <vxqa/kernel/decode_args.cuh>
#include <vxqa/kernel/decode_cta_common.cuh>
#include <vxqa/kernel/split_plan.cuh>
#include <vxqa/numeric/act_type.cuh>
#include <vxqa/softmax/online_softmax.cuh>

namespace vxqa {

#if VXQA_IS_CUDA_COMPILER
// Shared memory the merge borrows from the body's (free again once the body has written its
// partials): the chunk weights of up to 8 heads, and their sums.
inline constexpr int kFusedMergeSmemBytes = (8 * kFusedMergeMaxChunks + 8) * 4;

// Call with every thread of a CTA that has written its chunk's partials (the decode kernel
// does, after the body). The chunk count of a sequence of length 0 is taken as 1: chunk 0
// then runs (empty) so that someone writes its zeros.
template <int kHeadsPerCta, int kHeadDim, int kThreads, ActType kOut>
VXQA_DEVICE void merge_if_last(const DecodeKernelArgs& a, uint8_t* smem) {
  static_assert(kHeadsPerCta <= 8, "merge_if_last: the weights area holds 8 heads");
  const CtaWork w = cta_tile<kHeadsPerCta>(a);
  constexpr int kWarps = kThreads / 32;
  const int len = a.seq_lens[w.seq_index];
  const int chunks = (len + a.chunk_tokens - 1) / a.chunk_tokens;

  // Release: every thread's partials are visible device-wide before the CTA is counted.
  __threadfence();
  __syncthreads();
  bool last = false;
  if (threadIdx.x == 0) {
    uint32_t* counter = a.merge_counters + int64_t(w.seq_index) * gridDim.y + blockIdx.y;
    last = atomicAdd(counter, 1u) == uint32_t((chunks > 0 ? chunks : 1) - 1);
  }
  if (!__syncthreads_or(last)) return;
  __threadfence();  // acquire: every other chunk's partials, read below through L2 (ld.cg)

  const int q_heads = a.num_kv_heads * a.group_size;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* weights = reinterpret_cast<float*>(smem);       // [head][chunk], chunk < 32
  float* sums = weights + 8 * kFusedMergeMaxChunks;      // [head]
  const float nan = quiet_nan();
  for (int head = warp; head < w.heads; head += kWarps) {
    const int64_t first = (int64_t(w.seq_index) * q_heads + w.q_head0 + head) * a.num_chunks;
    const float lse = lane < chunks ? __ldcg(a.partial_lse + first + lane) : negative_infinity();
    float m = lse;
#pragma unroll
    for (int step = 16; step > 0; step >>= 1) m = softmax::max_keep_nan(m, __shfl_xor_sync(0xffffffffu, m, step));
    const float weight = lane < chunks ? softmax::rescale_factor(lse, m) : 0.f;
    float sum = weight;
#pragma unroll
    for (int step = 16; step > 0; step >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, step);
    weights[head * kFusedMergeMaxChunks + lane] = weight;
    if (lane == 0) {
      // Live tokens whose scores were all -inf: no chunk has weight, the softmax is 0 / 0.
      const bool undefined = chunks > 0 && m == negative_infinity();
      sums[head] = undefined ? nan : sum;
      if (a.lse)
        a.lse[int64_t(w.seq_index) * q_heads + w.q_head0 + head] =
            undefined ? nan : chunks > 0 ? (m + log2f(sum)) * 0.69314718055994531f : negative_infinity();
    }
  }
  __syncthreads();

  const float v_scale = v_scale_of(a);
  for (int i = threadIdx.x; i < w.heads * kHeadDim; i += kThreads) {
    const int head = i / kHeadDim, dim = i % kHeadDim, q_head = w.q_head0 + head;
    const float* o_chunks = a.partial_o + (int64_t(w.seq_index) * q_heads + q_head) * a.num_chunks * kHeadDim + dim;
    const float* wt = weights + head * kFusedMergeMaxChunks;
    float o = 0.f;
#pragma unroll 4
    for (int c = 0; c < chunks; ++c) o += wt[c] * __ldcg(o_chunks + int64_t(c) * kHeadDim);
    store_out<kOut>(a, w.seq_index * a.out_batch_stride + q_head * a.out_head_stride + dim,
                    chunks > 0 ? o / sums[head] * v_scale : 0.f);
  }
}
#endif

}  // namespace vxqa
