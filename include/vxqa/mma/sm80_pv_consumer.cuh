// vxqa/mma/sm80_pv_consumer.cuh — Oᵀ += Vᵀ · Pᵀ for a 16-token tile on mma.m16n8k16.
//
// M = head dims (D / 16 m-tiles), N = the group's 8 query heads, K = the tile's 16 tokens.
// Pᵀ comes from the softmax in registers (movmatrix turns the Sᵀ accumulator layout into
// this B layout). Vᵀ has no transposing 8-bit ldmatrix, so bytes are permuted in registers:
// lane l (group r = l / 4, thread t = l % 4) reads, from each of its four token rows
// {2t, 2t+1, 2t+8, 2t+9}, the same span of dims, and byte-permutes pairs of rows into the
// A registers. The rows of an m-tile are a permutation of 16 dims (dim_of says which): a
// lane's rows r and r + 8 are two neighbouring dims of its span. At head dim 512 a warp's M
// is one part of 256 dims (Geometry::kParts), read from its part of each row as a 256-dim
// row would be.
#pragma once
#include <cuda_fp16.h>
#include <vxqa/arch/mma_m16n8k16.cuh>
#include <vxqa/common.cuh>
#include <vxqa/mma/fragments_m16n8k16.cuh>
#include <vxqa/mma/sm80_qk_consumer.cuh>
#include <vxqa/numeric/kv_decode.cuh>

namespace vxqa {
namespace mma {

// V tile: token rows padded by 16 bytes. A quarter warp reads one span of two groups
// (r = 2g, 2g + 1) from four rows (2t + const, t = 0..3): the padding moves row 2t by 2t
// bank groups, which the span index r then fills in.
template <class Geometry>
struct Sm80VTileLayout {
  static constexpr int kPitch = Geometry::kRowBytes + 16;
  static constexpr int kBytes = Geometry::kTokens * kPitch;
  VXQA_HD static int offset(int row, int byte) { return row * kPitch + byte; }
};

template <class Geometry>
struct Sm80PvConsumer {
  using Layout = Sm80VTileLayout<Geometry>;
  static constexpr int kPartDims = Geometry::kPartDims;  // the head dims of one warp's O
  using Decode = typename Geometry::Decode;
  static constexpr bool kFp8 = Decode::kConverts;
  static constexpr int kMTiles = kPartDims / 16;
  // A lane's span of one read: 16 bytes, or 8 where a row is too short for 8 lanes x 16.
  static constexpr int kReadBytes = Geometry::kPartBytes / 8 < 16 ? Geometry::kPartBytes / 8 : 16;
  static constexpr int kReads = Geometry::kPartBytes / (8 * kReadBytes);  // per token row (part)
  static constexpr int kWordsPerRead = kReadBytes / 4;
  static_assert(kReads * kWordsPerRead * (kFp8 ? 2 : 1) == kMTiles,
                "Sm80PvConsumer: the reads must cover every m-tile once");

  // Head dim, within the part, of accumulator element e of m-tile m on `lane` (its row in Oᵀ).
  VXQA_HD static int dim_of(int lane, int m, int e) {
    const int r = m16n8k16::group(lane), row_half = e >> 1;  // rows r and r + 8
    if (kFp8) {  // word w of read v holds dims +0..3: m-tile 2p takes +0/+1, 2p + 1 takes +2/+3
      const int pair = m >> 1, v = pair / kWordsPerRead, w = pair % kWordsPerRead;
      return (r + 8 * v) * kReadBytes + 4 * w + 2 * (m & 1) + row_half;
    }
    const int v = m / kWordsPerRead, w = m % kWordsPerRead;  // fp16: a word is one m-tile
    return ((r + 8 * v) * kReadBytes + 4 * w) / 2 + row_half;
  }
  // Query head (of the 8) of accumulator element e on `lane` (its column in Oᵀ).
  VXQA_HD static int head_of(int lane, int e) { return m16n8k16::c_col(lane, e); }
  // The lane's four token rows; k slots 2t, 2t+1, 2t+8, 2t+9 of the B fragment.
  VXQA_HD static int token_row(int lane, int j) {
    return 2 * m16n8k16::thread_in_group(lane) + (j & 1) + (j >> 1) * 8;
  }

#if VXQA_IS_CUDA_COMPILER && VXQA_HAS_MMA_M16N8K16
  // p[0], p[1]: the B fragment of Pᵀ (f16x2, bf16x2 for a bf16 cache; tokens 2t..2t+1 and
  // 2t+8..2t+9 of head lane/4). `part`: which kPartDims of the rows (0 but at D 512).
  VXQA_DEVICE static void run(const uint8_t* v_tile, const uint32_t (&p)[2], float (&o)[kMTiles][4], int part = 0) {
    const int lane = threadIdx.x & 31;
    v_tile += part * Geometry::kPartBytes;
    const int r = m16n8k16::group(lane);
#pragma unroll
    for (int v = 0; v < kReads; ++v) {
      uint32_t w[4][kWordsPerRead];  // [token row j][word]
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint8_t* src = v_tile + Layout::offset(token_row(lane, j), (r + 8 * v) * kReadBytes);
        if (kReadBytes == 16) {
          const uint4 x = *reinterpret_cast<const uint4*>(src);
          const uint32_t xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
          for (int i = 0; i < kWordsPerRead; ++i) w[j][i] = xs[i];
        } else {
          const uint2 x = *reinterpret_cast<const uint2*>(src);
          w[j][0] = x.x;
          w[j][kWordsPerRead - 1] = x.y;
        }
      }
#pragma unroll
      for (int i = 0; i < kWordsPerRead; ++i) {
        if constexpr (kFp8) {
          // Bytes k of rows (2t, 2t+1) side by side: selector 0x5140 takes bytes 0 and 1 of
          // both words, 0x7362 bytes 2 and 3; each half of the result is two codes of one dim.
          const uint32_t lo01 = __byte_perm(w[0][i], w[1][i], 0x5140), hi01 = __byte_perm(w[2][i], w[3][i], 0x5140);
          const uint32_t lo23 = __byte_perm(w[0][i], w[1][i], 0x7362), hi23 = __byte_perm(w[2][i], w[3][i], 0x7362);
          const int m = 2 * (v * kWordsPerRead + i);
          const uint2 l01 = Decode::four(lo01), h01 = Decode::four(hi01);
          const uint2 l23 = Decode::four(lo23), h23 = Decode::four(hi23);
          const uint32_t a0[4] = {l01.x, l01.y, h01.x, h01.y};
          const uint32_t a1[4] = {l23.x, l23.y, h23.x, h23.y};
          arch::mma_m16n8k16_row_col(o[m], a0, p, o[m]);
          arch::mma_m16n8k16_row_col(o[m + 1], a1, p, o[m + 1]);  // FP8 decodes to fp16
        } else {
          // 16-bit values of rows (2t, 2t+1): low halves are dim +0 (row r), high halves dim +1
          // (row r+8); p holds P as the same type (register_softmax_step).
          const int m = v * kWordsPerRead + i;
          const uint32_t a[4] = {__byte_perm(w[0][i], w[1][i], 0x5410), __byte_perm(w[0][i], w[1][i], 0x7632),
                                 __byte_perm(w[2][i], w[3][i], 0x5410), __byte_perm(w[2][i], w[3][i], 0x7632)};
          if constexpr (Geometry::kMmaIn == ActType::kBf16) {
            arch::mma_m16n8k16_row_col_bf16(o[m], a, p, o[m]);
          } else {
            arch::mma_m16n8k16_row_col(o[m], a, p, o[m]);
          }
        }
      }
    }
  }
#endif
};

}  // namespace mma
}  // namespace vxqa
