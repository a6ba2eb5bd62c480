// vxqa/kernel/combine_kernel.cuh — merges a sequence's split-KV chunks by their LSE.
//
// One CTA per (query head, sequence). The chunks are merged in their index order, and the
// max and sum come from CUB block reductions whose tree is fixed by the block size, so the
// same input gives the same bits run after run, and a sequence's result does not depend on
// the rest of the batch (its chunks are cut at absolute token positions).
//
// NaN: a NaN chunk LSE (a NaN score, or a bad page id in that chunk) makes the max, every
// weight and so the whole result NaN. A chunk whose live scores were all -inf arrives as
// O = 0, LSE -inf and weighs 0; if every chunk is like that, the result is NaN (0 / 0, as
// the float64 reference gives).
#pragma once
#include <cub/block/block_reduce.cuh>
#include <cuda_fp16.h>
#include <vxqa/arch/grid_dependency.cuh>
#include <vxqa/common.cuh>
#include <vxqa/kernel/decode_args.cuh>
#include <vxqa/softmax/online_softmax.cuh>

namespace vxqa {

#if VXQA_IS_CUDA_COMPILER
inline constexpr int kCombineThreads = 128;

// cub::Max is gone from CUB 3 and cuda::maximum is not in CUDA 11.8: our own operator,
// which keeps NaN (fmaxf would drop it).
struct MaxKeepNanOp {
  VXQA_DEVICE float operator()(float a, float b) const { return softmax::max_keep_nan(a, b); }
};

template <int kHeadDim>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const DecodeKernelArgs a) {
  using Reduce = cub::BlockReduce<float, kCombineThreads>;
  __shared__ typename Reduce::TempStorage reduce_storage;
  __shared__ float shared_max, shared_sum;
  __shared__ float weight[kCombineThreads];

  // Launched as the decode kernel's programmatic dependent on sm_90: wait for its partials.
  arch::grid_dependency_wait();
  const int q_head = blockIdx.x, seq_index = blockIdx.y;
  if (seq_index >= a.batch) return;
  const int q_heads = a.num_kv_heads * a.group_size;
  __half* out = a.out + seq_index * a.out_batch_stride + q_head * a.out_head_stride;
  float* lse = a.lse ? a.lse + int64_t(seq_index) * q_heads + q_head : nullptr;

  const int len = a.seq_lens[seq_index];
  if (!length_is_valid(len, a)) {  // the decode kernel has flagged it
    for (int d = threadIdx.x; d < kHeadDim; d += kCombineThreads) out[d] = __float2half_rn(quiet_nan());
    if (threadIdx.x == 0 && lse) *lse = quiet_nan();
    return;
  }
  const int chunks = (len + a.chunk_tokens - 1) / a.chunk_tokens;
  const int64_t first = (int64_t(seq_index) * q_heads + q_head) * a.num_chunks;
  const float* chunk_lse = a.partial_lse + first;
  const float* chunk_o = a.partial_o + first * kHeadDim;

  float local_max = negative_infinity();
  for (int c = threadIdx.x; c < chunks; c += kCombineThreads)
    local_max = softmax::max_keep_nan(local_max, chunk_lse[c]);
  const float block_max = Reduce(reduce_storage).Reduce(local_max, MaxKeepNanOp());
  if (threadIdx.x == 0) shared_max = block_max;
  __syncthreads();
  const float m = shared_max;

  float local_sum = 0.f;
  for (int c = threadIdx.x; c < chunks; c += kCombineThreads)
    local_sum += softmax::rescale_factor(chunk_lse[c], m);
  __syncthreads();  // reduce_storage is reused
  const float block_sum = Reduce(reduce_storage).Sum(local_sum);
  if (threadIdx.x == 0) shared_sum = block_sum;
  __syncthreads();
  const float sum = shared_sum;

  // Each chunk's weight is computed once, a block of chunks at a time, into shared memory;
  // every dim then sums its chunks in index order.
  constexpr int kDimsPerThread = (kHeadDim + kCombineThreads - 1) / kCombineThreads;
  float o[kDimsPerThread] = {};
  for (int c0 = 0; c0 < chunks; c0 += kCombineThreads) {
    __syncthreads();  // the previous block's weights are consumed
    if (c0 + int(threadIdx.x) < chunks) weight[threadIdx.x] = softmax::rescale_factor(chunk_lse[c0 + threadIdx.x], m);
    __syncthreads();
    const int block = min(kCombineThreads, chunks - c0);
#pragma unroll
    for (int k = 0; k < kDimsPerThread; ++k) {
      const int d = threadIdx.x + k * kCombineThreads;
      if (d < kHeadDim)
        for (int c = 0; c < block; ++c) o[k] += weight[c] * chunk_o[int64_t(c0 + c) * kHeadDim + d];
    }
  }
  // Live tokens whose scores are all -inf: no chunk has weight (m = -inf), the softmax is
  // 0/0. A NaN factor makes every output NaN (a select per output made ptxas 12.8 spill).
  const bool undefined = chunks > 0 && m == negative_infinity();
  const float v_scale = undefined ? quiet_nan() : a.v_scale;
#pragma unroll
  for (int k = 0; k < kDimsPerThread; ++k) {
    const int d = threadIdx.x + k * kCombineThreads;
    if (d < kHeadDim) out[d] = __float2half_rn(chunks > 0 ? o[k] / sum * v_scale : 0.f);
  }
  if (threadIdx.x == 0 && lse)
    *lse = undefined ? quiet_nan() : chunks > 0 ? (m + log2f(sum)) * 0.69314718055994531f : negative_infinity();
}
#endif

}  // namespace vxqa
