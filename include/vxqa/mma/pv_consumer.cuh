// vxqa/mma/pv_consumer.cuh — O += P · V for one warp tile on mma.m8n8k4 (f16 in, f32 acc).
//
// M = 8 heads, K = the tile's 32 tokens (8 k-steps of 4), N = the head dims of the warp's
// part (all of D up to 256; D 512: one of two parts of 256, the other warp sharing the tile
// takes the other). With P = kPartDims, quad pair q owns dims [q*P/4, (q+1)*P/4) of the part;
// within it the lower 16 lanes hold n-block columns 0..3 and the upper 16 columns 4..7, and
// n-block j covers dims 4j..4j+3 of each half. So a lane's B fragments for all its n-blocks
// are one contiguous span of P/8 dims of one token: 1–4 LDS.128 (or one LDS.64) feed P/32
// MMAs. P comes from shared memory in the A layout.
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
struct PvConsumer {
  using VLayout = pipeline::VTileLayout<Geometry>;
  static constexpr int kPartDims = Geometry::kPartDims;  // the head dims of one warp's O
  static constexpr int kNBlocks = kPartDims / 32;         // n-blocks per quad pair
  using Decode = typename Geometry::Decode;

  // Output dim, within the part, of accumulator element i of n-block `nblock` on `lane`.
  VXQA_HD static int c_dim(int lane, int nblock, int i) {
    const int col = c_col(lane, i);
    return quad_pair(lane) * (kPartDims / 4) + ((col & 4) ? kPartDims / 8 : 0) + nblock * 4 +
           (col & 3);
  }
  // Span (of kPartDims/8 dims) this lane reads of its part of a token row.
  VXQA_HD static int span(int lane) { return 2 * quad_pair(lane) + (lane >= 16 ? 1 : 0); }

#if VXQA_IS_CUDA_COMPILER
  // o[n][i]: accumulators of n-block n. p_tile: fp16 P (ProbTileLayout), v_tile: the V tile;
  // `part`: which kPartDims of the rows (0 but at D 512).
  VXQA_DEVICE static void run(const uint8_t* p_tile, const uint8_t* v_tile,
                              float (&o)[kNBlocks][8], int part = 0) {
    const int lane = threadIdx.x & 31;
    const int span_byte = part * Geometry::kPartBytes + span(lane) * Geometry::kSpanBytes;
    const uint8_t* p_row = p_tile + pipeline::ProbTileLayout::offset(a_row(lane), 0);
#pragma unroll
    for (int step = 0; step < 8; ++step) {
      const int token = 4 * step + b_row_major_row(lane);
      const uint2 pa = *reinterpret_cast<const uint2*>(p_row + 2 * 4 * step);
      const uint32_t a[2] = {pa.x, pa.y};
      uint32_t vw[Geometry::kSpanBytes / 4];
      load_span(v_tile, token, span_byte, vw);
#pragma unroll
      for (int n = 0; n < kNBlocks; ++n) {
        uint32_t b[2];
        b_fragment(vw, n, b);
        arch::mma_m8n8k4_row_row(o[n], a, b, o[n]);
      }
    }
  }

  // As run(), but row r (of rows_used) takes only the tile's tokens in [keys(r).x, keys(r).y)
  // (relative to the tile): V is 0 for it elsewhere, where run() would give it 0 · V, NaN
  // for a NaN or infinite V. One pass of MMAs a row: for the rare tile whose rows see
  // different keys and holds such a V (non_finite_outside).
  template <class RowKeys>
  VXQA_DEVICE static void run_rows_apart(const uint8_t* p_tile, const uint8_t* v_tile, float (&o)[kNBlocks][8],
                                         int rows_used, RowKeys keys, int part = 0) {
    const int lane = threadIdx.x & 31;
    const int span_byte = part * Geometry::kPartBytes + span(lane) * Geometry::kSpanBytes;
    const uint8_t* p_row = p_tile + pipeline::ProbTileLayout::offset(a_row(lane), 0);
#pragma unroll 1
    for (int r = 0; r < rows_used; ++r) {
      const int2 seen = keys(r);
#pragma unroll 1
      for (int step = 0; step < 8; ++step) {
        const int token = 4 * step + b_row_major_row(lane);
        const bool keep = token >= seen.x && token < seen.y;
        const uint2 pa = *reinterpret_cast<const uint2*>(p_row + 2 * 4 * step);
        const uint32_t a[2] = {pa.x, pa.y};
        uint32_t vw[Geometry::kSpanBytes / 4];
        load_span(v_tile, token, span_byte, vw);
#pragma unroll
        for (int n = 0; n < kNBlocks; ++n) {
          uint32_t b[2];
          b_fragment(vw, n, b);
          if (!keep) b[0] = b[1] = 0u;
          float t[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
          arch::mma_m8n8k4_row_row(t, a, b, t);
#pragma unroll
          for (int i = 0; i < 8; ++i)
            if (c_row(lane, i) == r) o[n][i] += t[i];
        }
      }
    }
  }

  // Whether a V value of the tile's tokens outside [lo, hi) (relative to the tile) is NaN or
  // infinite, in any part; the same answer on every lane.
  VXQA_DEVICE static bool non_finite_outside(const uint8_t* v_tile, int lo, int hi) {
    constexpr int kGranule = VLayout::kGranule, kGranules = Geometry::kRowBytes / kGranule;
    bool found = false;
    for (int i = threadIdx.x & 31; i < Geometry::kTokens * kGranules; i += 32) {
      const int token = i / kGranules;
      if (token >= lo && token < hi) continue;
      const uint32_t* g =
          reinterpret_cast<const uint32_t*>(v_tile + VLayout::granule_offset(token, (i % kGranules) * kGranule));
#pragma unroll
      for (int w = 0; w < kGranule / 4; ++w) found = found || Decode::has_non_finite(g[w]);
    }
    return __any_sync(0xffffffffu, found);
  }

 private:
  // The lane's span of V row `token`, as stored.
  VXQA_DEVICE static void load_span(const uint8_t* v_tile, int token, int span_byte,
                                    uint32_t (&vw)[Geometry::kSpanBytes / 4]) {
    if (VLayout::kGranule == 16) {
#pragma unroll
      for (int g = 0; g < Geometry::kSpanBytes / 16; ++g) {
        const uint4 v = *reinterpret_cast<const uint4*>(v_tile + VLayout::granule_offset(token, span_byte + 16 * g));
        vw[4 * g + 0] = v.x, vw[4 * g + 1] = v.y, vw[4 * g + 2] = v.z, vw[4 * g + 3] = v.w;
      }
    } else {
      const uint2 v = *reinterpret_cast<const uint2*>(v_tile + VLayout::granule_offset(token, span_byte));
      vw[0] = v.x, vw[1] = v.y;
    }
  }
  // The B fragment of n-block n from the span: four dims of the token, as fp16.
  VXQA_DEVICE static void b_fragment(const uint32_t (&vw)[Geometry::kSpanBytes / 4], int n, uint32_t (&b)[2]) {
    if constexpr (Decode::kConverts) {
      const uint2 h = Decode::four(vw[n]);
      b[0] = h.x, b[1] = h.y;
    } else {
      b[0] = vw[2 * n], b[1] = vw[2 * n + 1];
    }
  }
#endif
};

}  // namespace mma
}  // namespace vxqa
