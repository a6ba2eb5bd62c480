// vxqa/kernel/combine_kernel.cuh — merges a sequence's split-KV chunks by their LSE.
//
// One CTA per (query head, sequence, slice of 64 or 16 dims). The chunks are summed in an
// order fixed by the sequence's chunk count and the plan's slice width (CombineShape,
// combine_slice_dims), and every warp works out the max and the sum of the chunks' weights
// itself in one fixed order (lanes over chunks, then a butterfly, then lane 0's value), so
// the same input gives the same bits run after run, and a sequence's result does not depend
// on the rest of the batch (its chunks are cut at absolute token positions).
//
// Errors: the decode kernel zeroed the step's error word; the CTAs of slice 0 OR into it a
// bad length, and the bad-page bits of the chunks they merge, and one thread the bits of
// device scales that are not finite or not > 0.
//
// NaN: a NaN chunk LSE (a NaN score, or a bad page id in that chunk) makes the max, every
// weight and so the whole result NaN. A chunk whose live scores were all -inf arrives with
// LSE -inf and its O = 0 · V summed, and weighs 0: 0 · O is 0, or NaN where that O is NaN
// (a NaN or inf V under a zero probability), as in the float64 reference. If every chunk is
// like that, the result is NaN (0 / 0, as the reference gives).
#pragma once
#include <vxqa/arch/grid_dependency.cuh>
#include <vxqa/common.cuh>
#include <vxqa/kernel/attention_variant.cuh>
#include <vxqa/kernel/decode_args.cuh>
#include <vxqa/kernel/split_plan.cuh>
#include <vxqa/numeric/act_type.cuh>
#include <vxqa/softmax/online_softmax.cuh>

namespace vxqa {

#if VXQA_IS_CUDA_COMPILER
inline constexpr int kCombineThreads = 128;

// The max (keeping NaN) and the sum of a value over the warp's lanes, in a butterfly whose
// order is fixed, then lane 0's result for every lane: the same bits in every warp that
// reduces the same values.
VXQA_DEVICE float warp_max_keep_nan(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x = softmax::max_keep_nan(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return __shfl_sync(0xffffffffu, x, 0);
}
VXQA_DEVICE float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return __shfl_sync(0xffffffffu, x, 0);
}

// How the combine cuts one (query head, sequence): gridDim.z slices of kSliceDims dims, so a
// long sequence's many chunks are read by several CTAs at once. In a CTA the threads form
// kStreams chunk streams of kSliceDims / 2 threads (two dims a thread): stream s sums chunks
// s, s + kStreams, ... (kUnroll chunks' loads in flight), and the streams' sums are added in
// stream order. The order depends only on the sequence's chunk count and the slice width,
// which the plan fixes (combine_slice_dims).
template <int kHeadDim, int kSliceWidth = 64>
struct CombineShape {
  static constexpr int kSliceDims = kSliceWidth;
  static constexpr int kSlices = kHeadDim / kSliceDims;
  static constexpr int kThreadsPerChunk = kSliceDims / 2;
  static constexpr int kStreams = kCombineThreads / kThreadsPerChunk;
  static constexpr int kUnroll = 4;
  static_assert(kSliceDims == 16 || kSliceDims == 64, "CombineShape: slices of 16 or 64 dims");
  static_assert(kHeadDim % kSliceDims == 0, "CombineShape: the head dim must be a multiple of the slice");
};

// Variant: the Config's (kernel/attention_variant.cuh): where a windowed sequence's chunks
// start, and the sinks, which join here once, as one more term of every head's sum.
// kMultiToken: blockIdx.y is (sequence, query token) = sequence · max_q_len + token.
template <int kHeadDim, ActType kOut = ActType::kFp16, int kSliceWidth = 64, class Variant = PlainAttention,
          bool kMultiToken = false>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const DecodeKernelArgs a) {
  using Shape = CombineShape<kHeadDim, kSliceWidth>;
  __shared__ float2 stream_sum[Shape::kStreams][Shape::kThreadsPerChunk];

  // Launched as the decode kernel's programmatic dependent on sm_90: nothing is read before
  // the wait, the lengths included. The kernel before the decode kernel may have written
  // them, and the PTX ISA promises griddepcontrol.wait only the memory of this grid's own
  // prerequisite grid (the decode kernel), not of that grid's prerequisites
  // (docs/design.md, "Programmatic launches"). The next step's decode kernel may launch once
  // this one waits.
  VXQA_TIMELINE_PROBE(a, kProbeCombineEntry);
  const int q_head = blockIdx.x, dim0 = blockIdx.z * Shape::kSliceDims;
  const int seq_index = kMultiToken ? blockIdx.y / a.max_q_len : blockIdx.y;
  const int token = kMultiToken ? blockIdx.y % a.max_q_len : 0;
  arch::grid_dependency_wait();
  VXQA_TIMELINE_PROBE(a, kProbeCombineReleased);
  arch::launch_dependents();
  if ((blockIdx.x | blockIdx.y | blockIdx.z | threadIdx.x) == 0) {  // the step's device scales, once
    const uint32_t scale_errors = device_scale_errors(a);
    if (scale_errors) atomicOr(a.errors, scale_errors);
  }
  if (seq_index >= a.batch) return;
  const int len = __ldcg(a.seq_lens + seq_index);  // through L2: never an L1 line of an earlier step
  // The sequence's query tokens (through L2 as the length); a token past them has no row.
  SeqQueries queries = SeqQueries{seq_index, 1, true};
  if constexpr (kMultiToken) {
    if (a.q_indptr) {
      queries.first = __ldcg(a.q_indptr + seq_index);
      queries.count = __ldcg(a.q_indptr + seq_index + 1) - queries.first;
      queries.valid = queries.first >= 0 && queries.count >= 0 && queries.count <= a.max_q_len;
    }
  }
  const bool reports = blockIdx.z == 0;  // one CTA a (query head, row) reports errors
  if (!queries.valid) {  // nothing of the sequence is written: its rows are not trusted
    if (reports && token == 0 && threadIdx.x == 0) atomicOr(a.errors, uint32_t(kDecodeErrorBadLength));
    return;
  }
  if (token >= queries.count) {  // no row; a sequence without a query token still reports a bad length
    const bool bad_length = !length_is_valid(len, a);
    if (bad_length && queries.count == 0 && reports && token == 0 && threadIdx.x == 0)
      atomicOr(a.errors, uint32_t(kDecodeErrorBadLength));
    return;
  }
  const int out_row = queries.first + token;
  const int q_heads = a.num_kv_heads * a.group_size;
  uint16_t* out = static_cast<uint16_t*>(a.out) + out_row * a.out_batch_stride + q_head * a.out_head_stride + dim0;
  float* lse = a.lse && blockIdx.z == 0 ? a.lse + int64_t(out_row) * q_heads + q_head : nullptr;

  // The O of this stream's first kUnroll chunks is loaded with the length, before anything
  // depends on it (up to the plan's chunk count; those past the sequence's are never used),
  // so that one memory round trip, not two, follows the wait.
  const int64_t first = (int64_t(kMultiToken ? seq_index * a.max_q_len + token : seq_index) * q_heads + q_head) *
                        a.num_chunks;
  const int stream = threadIdx.x / Shape::kThreadsPerChunk, pair = threadIdx.x % Shape::kThreadsPerChunk;
  const float2* chunk_o = reinterpret_cast<const float2*>(a.partial_o + first * kHeadDim + dim0) + pair;
  constexpr int kStride = kHeadDim / 2, kStep = Shape::kStreams;  // float2s between chunks
  float2 early[Shape::kUnroll];
#pragma unroll
  for (int u = 0; u < Shape::kUnroll; ++u) {
    const int c = stream + u * kStep;
    early[u] = c < a.num_chunks ? chunk_o[int64_t(c) * kStride] : make_float2(0.f, 0.f);
  }
  // With q_indptr the query tokens are the sequence's last: it has at least as many keys.
  if (!length_is_valid(len, a) || (kMultiToken && a.q_indptr && len < queries.count)) {
    if (reports && threadIdx.x == 0) atomicOr(a.errors, uint32_t(kDecodeErrorBadLength));
    if (threadIdx.x < Shape::kSliceDims) out[threadIdx.x] = detail::float_to_act<kOut>(quiet_nan());
    if (threadIdx.x == 0 && lse) *lse = quiet_nan();
    return;
  }
  const int chunks = (len - Variant::chunk_base(a, len, queries.count) + a.chunk_tokens - 1) / a.chunk_tokens;
  const float* chunk_lse = a.partial_lse + first;

  // Each warp reduces every chunk's LSE itself: no block-wide reduction or barrier.
  const int lane = threadIdx.x & 31;
  float local_max = negative_infinity();
  uint32_t local_errors = 0u;
#pragma unroll 4
  for (int c = lane; c < chunks; c += 32) {
    local_max = softmax::max_keep_nan(local_max, chunk_lse[c]);
    if (reports) local_errors |= a.chunk_errors[first + c];
  }
  if (reports && threadIdx.x < 32 && __any_sync(0xffffffffu, local_errors != 0u) && lane == 0)
    atomicOr(a.errors, uint32_t(kDecodeErrorBadPage));
  float m = warp_max_keep_nan(local_max);
  float local_sum = 0.f;
#pragma unroll 4
  for (int c = lane; c < chunks; c += 32) local_sum += softmax::rescale_factor(chunk_lse[c], m);
  float sum = warp_sum(local_sum);
  // The sink joins the chunks' (m, sum) once, before any chunk's weight is taken in m's
  // frame; without a token it is the whole LSE.
  bool sink_folded = false;
  if constexpr (Variant::kSinks) {
    if (a.sinks) {
      Variant::fold_sink(Variant::sink_log2(a, q_head), m, sum);
      sink_folded = true;
    }
  }

  // Chunk order: stream, stream + kStep, ... (the early ones first), whatever the unrolling.
  float2 acc = make_float2(0.f, 0.f);
#pragma unroll
  for (int u = 0; u < Shape::kUnroll; ++u) {
    const int c = stream + u * kStep;
    if (c < chunks) {
      const float w = softmax::rescale_factor(chunk_lse[c], m);
      acc.x += w * early[u].x;
      acc.y += w * early[u].y;
    }
  }
  int c = stream + Shape::kUnroll * kStep;
  for (; c + (Shape::kUnroll - 1) * kStep < chunks; c += Shape::kUnroll * kStep) {
    float2 x[Shape::kUnroll];
    float w[Shape::kUnroll];
#pragma unroll
    for (int u = 0; u < Shape::kUnroll; ++u) {
      x[u] = chunk_o[int64_t(c + u * kStep) * kStride];
      w[u] = softmax::rescale_factor(chunk_lse[c + u * kStep], m);
    }
#pragma unroll
    for (int u = 0; u < Shape::kUnroll; ++u) {
      acc.x += w[u] * x[u].x;
      acc.y += w[u] * x[u].y;
    }
  }
  for (; c < chunks; c += kStep) {
    const float2 x = chunk_o[int64_t(c) * kStride];
    const float w = softmax::rescale_factor(chunk_lse[c], m);
    acc.x += w * x.x;
    acc.y += w * x.y;
  }
  stream_sum[stream][pair] = acc;
  __syncthreads();
  if (threadIdx.x >= Shape::kSliceDims) return;
  float o = 0.f;
#pragma unroll
  for (int s_index = 0; s_index < Shape::kStreams; ++s_index) {
    const float2 s = stream_sum[s_index][threadIdx.x >> 1];
    o += threadIdx.x & 1 ? s.y : s.x;
  }
  // Live tokens whose scores are all -inf: no chunk has weight (m = -inf), the softmax is
  // 0/0. A NaN factor makes every output NaN (a select per output made ptxas 12.8 spill).
  const bool undefined = chunks > 0 && m == negative_infinity();
  const float v_scale = undefined ? quiet_nan() : v_scale_of(a);
  out[threadIdx.x] = detail::float_to_act<kOut>(chunks > 0 ? o / sum * v_scale : 0.f);
  if (threadIdx.x == 0 && lse)
    *lse = undefined                   ? quiet_nan()
           : chunks > 0 || sink_folded ? (m + log2f(sum)) * 0.69314718055994531f
                                       : negative_infinity();
  VXQA_TIMELINE_PROBE(a, kProbeCombineWritten);
}
#endif

}  // namespace vxqa
