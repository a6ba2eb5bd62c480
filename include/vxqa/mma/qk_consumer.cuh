// vxqa/mma/qk_consumer.cuh — S = Q · Kᵀ for one warp tile on mma.m8n8k4 (f16 in, f32 acc).
//
// M = the 8 query heads of the M tile, N = tokens, K = head dims. Quad pair q computes the
// 8x8 block of tokens 8q..8q+7 over all of D: with B = Kᵀ col-major a lane holds 4
// consecutive dims of one token, i.e. one 32-bit word of FP8 (KvDecode makes its two
// half2) or two words of fp16. One LDS.128 of K feeds 4 (FP8) or 2 (fp16) MMAs.
#pragma once
#include <cuda_fp16.h>
#include <vxqa/arch/mma_m8n8k4.cuh>
#include <vxqa/common.cuh>
#include <vxqa/mma/fragments.cuh>
#include <vxqa/numeric/kv_decode.cuh>
#include <vxqa/pipeline/smem_layout.cuh>

namespace vxqa {
namespace mma {

template <class Geometry>
struct QkConsumer {
  using KLayout = pipeline::KTileLayout<Geometry>;
  using QLayout = pipeline::QTileLayout<Geometry::kHeadDimV>;
  using Decode = typename Geometry::Decode;

  // Token of the tile whose S column this lane's B fragment covers.
  VXQA_HD static int b_token(int lane) { return quad_pair(lane) * 8 + b_col_major_col(lane); }
  // Tile token of accumulator element i (its column in the quad pair's n-block).
  VXQA_HD static int c_token(int lane, int i) { return quad_pair(lane) * 8 + c_col(lane, i); }

#if VXQA_IS_CUDA_COMPILER
  // s: this lane's 8 accumulators of its quad pair's 8 heads x 8 tokens block.
  VXQA_DEVICE static void run(const uint8_t* q_tile, const uint8_t* k_tile, float (&s)[8]) {
    const int lane = threadIdx.x & 31;
    const int token = b_token(lane);
    const uint8_t* q_row = q_tile + QLayout::offset(a_row(lane), 0);
#pragma unroll
    for (int i = 0; i < 8; ++i) s[i] = 0.f;
#pragma unroll
    for (int chunk = 0; chunk < Geometry::kChunksPerRow; ++chunk) {
      const uint4 k = *reinterpret_cast<const uint4*>(k_tile + KLayout::chunk_offset(token, chunk));
      const uint32_t kw[4] = {k.x, k.y, k.z, k.w};
      const int dim0 = chunk * Geometry::kDimsPerChunk;
      // Q for the chunk's dims: 8 dims per 16-byte read.
      uint32_t qw[Geometry::kDimsPerChunk / 2];
#pragma unroll
      for (int r = 0; r < Geometry::kDimsPerChunk / 8; ++r) {
        const uint4 q = *reinterpret_cast<const uint4*>(q_row + 2 * (dim0 + 8 * r));
        qw[4 * r + 0] = q.x, qw[4 * r + 1] = q.y, qw[4 * r + 2] = q.z, qw[4 * r + 3] = q.w;
      }
#pragma unroll
      for (int step = 0; step < Geometry::kDimsPerChunk / 4; ++step) {
        uint32_t b[2];
        if constexpr (Decode::kConverts) {
          const uint2 h = Decode::four(kw[step]);
          b[0] = h.x, b[1] = h.y;
        } else {
          b[0] = kw[2 * step], b[1] = kw[2 * step + 1];
        }
        const uint32_t a[2] = {qw[2 * step], qw[2 * step + 1]};
        arch::mma_m8n8k4_row_col(s, a, b, s);
      }
    }
  }
#endif
};

}  // namespace mma
}  // namespace vxqa
