// vxqa/kernel/combine_kernel.cuh — merges a sequence's split-KV chunks by their LSE.
//
// One CTA per (query head, sequence). The chunks are merged in their index order, and the
// max and sum come from CUB block reductions whose tree is fixed by the block size, so the
// same input gives the same bits run after run, and a sequence's result does not depend on
// the rest of the batch (its chunks are cut at absolute token positions).
#pragma once
#include <cub/block/block_reduce.cuh>
#include <cuda_fp16.h>
#include <vxqa/common.cuh>
#include <vxqa/kernel/decode_args.cuh>
#include <vxqa/softmax/online_softmax.cuh>

namespace vxqa {

#if VXQA_IS_CUDA_COMPILER
inline constexpr int kCombineThreads = 128;

// cub::Max is gone from CUB 3 and cuda::maximum is not in CUDA 11.8: our own operator.
struct MaxOp {
  VXQA_DEVICE float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <int kHeadDim>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const DecodeKernelArgs a) {
  using Reduce = cub::BlockReduce<float, kCombineThreads>;
  __shared__ typename Reduce::TempStorage reduce_storage;
  __shared__ float shared_max, shared_sum;
  __shared__ float weight[kCombineThreads];

  const int q_head = blockIdx.x, seq_index = blockIdx.y;
  if (seq_index >= a.batch) return;
  const int q_heads = a.num_kv_heads * a.group_size;
  __half* out = a.out + seq_index * a.out_batch_stride + q_head * a.out_head_stride;
  float* lse = a.lse ? a.lse + int64_t(seq_index) * q_heads + q_head : nullptr;

  const int len = a.seq_lens[seq_index];
  if (!length_is_valid(len, a)) {  // the decode kernel has flagged it
    for (int d = threadIdx.x; d < kHeadDim; d += kCombineThreads) out[d] = __float2half_rn(nanf(""));
    if (threadIdx.x == 0 && lse) *lse = nanf("");
    return;
  }
  const int chunks = (len + a.chunk_tokens - 1) / a.chunk_tokens;
  const int64_t first = (int64_t(seq_index) * q_heads + q_head) * a.num_chunks;
  const float* chunk_lse = a.partial_lse + first;
  const float* chunk_o = a.partial_o + first * kHeadDim;

  float local_max = negative_infinity();
  for (int c = threadIdx.x; c < chunks; c += kCombineThreads) local_max = fmaxf(local_max, chunk_lse[c]);
  const float block_max = Reduce(reduce_storage).Reduce(local_max, MaxOp());
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
#pragma unroll
  for (int k = 0; k < kDimsPerThread; ++k) {
    const int d = threadIdx.x + k * kCombineThreads;
    if (d < kHeadDim) out[d] = __float2half_rn(chunks > 0 ? o[k] / sum * a.v_scale : 0.f);
  }
  if (threadIdx.x == 0 && lse) *lse = chunks > 0 ? (m + log2f(sum)) * 0.69314718055994531f : negative_infinity();
}
#endif

}  // namespace vxqa
