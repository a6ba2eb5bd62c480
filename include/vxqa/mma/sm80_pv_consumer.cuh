// vxqa/mma/sm80_pv_consumer.cuh — Oᵀ += Vᵀ · Pᵀ for a 16-token tile on mma.m16n8k16.
//
// M = head dims (D / 16 m-tiles), N = the group's 8 query heads, K = the tile's 16 tokens.
// Pᵀ comes from the softmax in registers (movmatrix turns the Sᵀ accumulator layout into
// this B layout). Vᵀ has no transposing 8-bit ldmatrix, so bytes are permuted in registers:
// lane l (group r = l / 4, thread t = l % 4) reads, from each of its four token rows
// {2t, 2t+1, 2t+8, 2t+9}, the same span of dims, and byte-permutes pairs of rows into the
// A registers. The rows of an m-tile are a permutation of 16 dims (dim_of says which): a
// lane's rows r and r + 8 are two neighbouring dims of its span.
#pragma once
#include <cuda_fp16.h>
#include <vxqa/arch/mma_m16n8k16.cuh>
#include <vxqa/common.cuh>
#include <vxqa/mma/fragments_m16n8k16.cuh>
#include <vxqa/mma/sm80_qk_consumer.cuh>
#include <vxqa/numeric/kv_decode.cuh>

namespace vxqa {
namespace mma {

// V tile: token rows in pairs, 32 bytes of padding after each pair. A quarter warp reads one
// span of two groups (r = 2g, 2g + 1) from four rows (2t + const, t = 0..3): the padding moves
// row 2t by t bank groups, which the span index r then fills in. Every row starts on a 32-byte
// boundary, so a warp's cp.async of a row's 32-byte sector lands whole and L2 serves it once;
// 16 bytes after every row (the layout before) split the odd rows' sectors in two, and L2
// served each of those twice (ncu: a 23 % L2 hit rate on data read once).
template <class Geometry>
struct Sm80VTileLayout {
  static constexpr int kBytes = Geometry::kTokens * Geometry::kRowBytes + Geometry::kTokens / 2 * 32;
  // offset(row0 + e, b + d) = offset(row0, b) + offset(e, d) where row0 or e is even.
  VXQA_HD static int offset(int row, int byte) { return row * Geometry::kRowBytes + (row >> 1) * 32 + byte; }
};

template <class Geometry>
struct Sm80PvConsumer {
  using Layout = Sm80VTileLayout<Geometry>;
  using Decode = typename Geometry::Decode;
  static constexpr bool kFp8 = Decode::kConverts;
  static constexpr int kMTiles = Geometry::kHeadDimV / 16;  // all of O's head dims, a warp
  // A lane's span of one read: 16 bytes, or 8 where a row is too short for 8 lanes x 16.
  static constexpr int kReadBytes = Geometry::kRowBytes / 8 < 16 ? Geometry::kRowBytes / 8 : 16;
  static constexpr int kReads = Geometry::kRowBytes / (8 * kReadBytes);  // per token row
  static constexpr int kWordsPerRead = kReadBytes / 4;
  static_assert(kReads * kWordsPerRead * (kFp8 ? 2 : 1) == kMTiles,
                "Sm80PvConsumer: the reads must cover every m-tile once");

  // Head dim of accumulator element e of m-tile m on `lane` (its row in Oᵀ).
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

  // Layout::offset of read v from token row j of `lane`'s four: row 2t's span r, plus the
  // constant offset of row j - 2t and span 8v (2t is even: the layout's sum rule).
  VXQA_HD static int read_offset(int lane, int j, int v) {
    const int row0 = token_row(lane, 0);
    return Layout::offset(row0, m16n8k16::group(lane) * kReadBytes) +
           Layout::offset(token_row(lane, j) - row0, 8 * v * kReadBytes);
  }

#if VXQA_IS_CUDA_COMPILER && VXQA_HAS_MMA_M16N8K16
  // p[0], p[1]: the B fragment of Pᵀ (f16x2, bf16x2 for a bf16 cache; tokens 2t..2t+1 and
  // 2t+8..2t+9 of head lane/4).
  VXQA_DEVICE static void run(const uint8_t* v_tile, const uint32_t (&p)[2], float (&o)[kMTiles][4]) {
#pragma unroll
    for (int v = 0; v < kReads; ++v) {
      uint32_t w[4][kWordsPerRead];
      load_words(v_tile, v, w);
#pragma unroll
      for (int i = 0; i < kWordsPerRead; ++i) {
        uint32_t a[kMTilesPerWord][4];
        a_fragments(w, i, a);
#pragma unroll
        for (int h = 0; h < kMTilesPerWord; ++h) mma(o[kMTilesPerWord * (v * kWordsPerRead + i) + h], a[h], p);
      }
    }
  }

  // Sets every NaN or infinite V value of the tile's tokens outside [lo, hi) (relative to
  // the tile) to 0; whether the lane set one. For the tiles whose keys some
  // rows do not see: P is 0 there for them, and 0 · NaN would reach them.
  VXQA_DEVICE static bool zero_non_finite_outside(uint8_t* v_tile, int lo, int hi) {
    constexpr int kChunks = Geometry::kRowBytes / 16;
    bool found = false;
    for (int i = threadIdx.x & 31; i < Geometry::kTokens * kChunks; i += 32) {
      const int token = i / kChunks;
      if (token >= lo && token < hi) continue;
      uint4& x = *reinterpret_cast<uint4*>(v_tile + Layout::offset(token, 16 * (i % kChunks)));
      const uint4 clean = make_uint4(Decode::zero_non_finite(x.x), Decode::zero_non_finite(x.y),
                                     Decode::zero_non_finite(x.z), Decode::zero_non_finite(x.w));
      if (clean.x != x.x || clean.y != x.y || clean.z != x.z || clean.w != x.w) {
        x = clean;
        found = true;
      }
    }
    return found;
  }

  // The pieces of run, for a loop that feeds one A fragment to several N tiles of rows.
  static constexpr int kMTilesPerWord = kFp8 ? 2 : 1;  // a word of four codes feeds two m-tiles

  // Read v of the lane's span from its four token rows, as stored: w[token row j][word].
  VXQA_DEVICE static void load_words(const uint8_t* v_tile, int v, uint32_t (&w)[4][kWordsPerRead]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint8_t* src = v_tile + read_offset(lane, j, v);
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
  }

  // The A fragments of word i of a read: m-tiles 2(v·W + i) and + 1 (FP8), or v·W + i.
  VXQA_DEVICE static void a_fragments(const uint32_t (&w)[4][kWordsPerRead], int i, uint32_t (&a)[kMTilesPerWord][4]) {
    if constexpr (kFp8) {
      // Bytes k of rows (2t, 2t+1) side by side: selector 0x5140 takes bytes 0 and 1 of
      // both words, 0x7362 bytes 2 and 3; each half of the result is two codes of one dim.
      const uint32_t lo01 = __byte_perm(w[0][i], w[1][i], 0x5140), hi01 = __byte_perm(w[2][i], w[3][i], 0x5140);
      const uint32_t lo23 = __byte_perm(w[0][i], w[1][i], 0x7362), hi23 = __byte_perm(w[2][i], w[3][i], 0x7362);
      const uint2 l01 = Decode::four(lo01), h01 = Decode::four(hi01);
      const uint2 l23 = Decode::four(lo23), h23 = Decode::four(hi23);
      a[0][0] = l01.x, a[0][1] = l01.y, a[0][2] = h01.x, a[0][3] = h01.y;
      a[kMTilesPerWord - 1][0] = l23.x, a[kMTilesPerWord - 1][1] = l23.y;
      a[kMTilesPerWord - 1][2] = h23.x, a[kMTilesPerWord - 1][3] = h23.y;
    } else {
      // 16-bit values of rows (2t, 2t+1): low halves are dim +0 (row r), high halves dim +1
      // (row r+8); p holds P as the same type (register_softmax_step).
      a[0][0] = __byte_perm(w[0][i], w[1][i], 0x5410), a[0][1] = __byte_perm(w[0][i], w[1][i], 0x7632);
      a[0][2] = __byte_perm(w[2][i], w[3][i], 0x5410), a[0][3] = __byte_perm(w[2][i], w[3][i], 0x7632);
    }
  }

  VXQA_DEVICE static void mma(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&p)[2]) {
    if constexpr (!kFp8 && Geometry::kMmaIn == ActType::kBf16) {  // FP8 decodes to fp16
      arch::mma_m16n8k16_row_col_bf16(acc, a, p, acc);
    } else {
      arch::mma_m16n8k16_row_col(acc, a, p, acc);
    }
  }
#endif
};

}  // namespace mma
}  // namespace vxqa
