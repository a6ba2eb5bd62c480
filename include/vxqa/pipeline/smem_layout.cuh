// vxqa/pipeline/smem_layout.cuh — where a warp's tile lives in shared memory.
//
// The consumers decide the layouts: every read they make is conflict-free across the warp
// (test/cpu/smem_layout.cpp computes every lane's bank for every access and proves it).
//
// Warp tile: 32 consecutive tokens. QK: quad pair q owns tokens 8q..8q+7 (its n-block) over
// all of D; a lane reads 16-byte chunks of one token row. PV: quad pair q owns dims
// [q*D/4, (q+1)*D/4); the lower/upper 16 lanes take the first/second half of that, so a lane
// reads one contiguous span of D/8 dims of one token per k-step.
//
// Head dim 512 is cut into parts of 256 dims (kParts = 2): a tile is then shared by two
// warps, which both run QK over the whole rows and each runs PV over its own part, so a
// warp's O stays at 256 dims (64 registers a lane, as at D 256). Within a row each part is
// laid out as a 256-dim row would be, so every PV read stays conflict-free.
#pragma once
#include <vxqa/common.cuh>
#include <vxqa/numeric/kv_decode.cuh>
#include <vxqa/numeric/kv_type.cuh>

namespace vxqa {
namespace pipeline {

template <int kHeadDim, KvType kKv, E4m3Decode kE4m3 = E4m3Decode::kAuto>
struct WarpTileGeometry {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256 || kHeadDim == 512,
                "WarpTileGeometry: head dim must be 64, 128, 256 or 512");
  static_assert(kKv == KvType::kE5M2 || kKv == KvType::kE4M3 || kKv == KvType::kFp16,
                "WarpTileGeometry: KV elements are E5M2, E4M3 or fp16");
  static constexpr int kHeadDimV = kHeadDim;
  static constexpr KvType kKvV = kKv;
  using Decode = KvDecode<kKv, kE4m3>;  // the consumers' conversion
  static constexpr int kElemBytes = KvTraits<kKv>::kElemBytes;
  static constexpr int kTokens = 32;
  static constexpr int kRowBytes = kHeadDim * kElemBytes;
  static constexpr int kChunksPerRow = kRowBytes / 16;
  static constexpr int kTileBytes = kTokens * kRowBytes;
  // PV: the warps sharing a tile, each owning kPartDims of the head dims (its O).
  static constexpr int kParts = kHeadDim > 256 ? kHeadDim / 256 : 1;
  static constexpr int kPartDims = kHeadDim / kParts;
  static constexpr int kPartBytes = kRowBytes / kParts;
  static constexpr int kSpanDims = kPartDims / 8;  // PV: dims a lane reads of one token
  static constexpr int kSpanBytes = kSpanDims * kElemBytes;
  static constexpr int kDimsPerChunk = 16 / kElemBytes;
};

// K tile, read by the QK consumer: lanes of one 8-lane phase read the same chunk of 8
// different tokens (4 of one n-block, 4 of the next), so the 16-byte chunks of a row are
// XOR-swizzled by a key built from the token's column and n-block parity.
template <class Geometry>
struct KTileLayout {
  static constexpr int kChunksPerRow = Geometry::kChunksPerRow;
  static_assert(kChunksPerRow >= 4, "KTileLayout: rows shorter than 64 bytes are not laid out");

  VXQA_HD static int key(int token) {
    const int col = token & 7, nblock = token >> 3;
    if (kChunksPerRow >= 8) return (col & 3) | ((nblock & 1) << 2);
    // 64-byte rows: two rows share a 128-byte bank line, the row parity separates them.
    return ((col >> 1) & 1) | ((nblock & 1) << 1);
  }
  // Byte offset of logical 16-byte chunk `chunk` of token row `token`.
  VXQA_HD static int chunk_offset(int token, int chunk) {
    return token * Geometry::kRowBytes + 16 * (chunk ^ key(token));
  }
};

// V tile, read by the PV consumer: in a k-step, lane reads token 4s + lane%4, span
// p = 2*quad_pair + (lane >= 16) of kPartDims/8 dims of its part. Spans of 16 bytes or more
// are read as 16-byte chunks and swizzled per chunk; 8-byte spans (FP8, D = 64) per 8-byte
// slot. Each part of a row (D 512: two) is swizzled on its own, as a row of kPartDims.
template <class Geometry>
struct VTileLayout {
  static constexpr int kSpanBytes = Geometry::kSpanBytes;
  static constexpr int kGranule = kSpanBytes >= 16 ? 16 : 8;
  static_assert(kSpanBytes == 8 || kSpanBytes == 16 || kSpanBytes == 32 || kSpanBytes == 64,
                "VTileLayout: unexpected span");

  // The XOR key of granule `granule` (in units of kGranule) of row `token`.
  VXQA_HD static int key(int token, int granule) {
    const int r = token & 3;
    switch (kSpanBytes) {
      case 8: return (r >> 1) & 1;
      case 16: return (r & 1) | ((r & 2) << 1);
      case 32: return r;
      default: return r | (((granule >> 3) & 1) << 2);  // 64: spans 2 apart share bank bits
    }
  }
  // Byte offset of the logical granule that starts at byte `byte` of row `token`.
  VXQA_HD static int granule_offset(int token, int byte) {
    int row = token * Geometry::kRowBytes;
    if constexpr (Geometry::kParts > 1) {  // the part's own span of the row
      row += byte / Geometry::kPartBytes * Geometry::kPartBytes;
      byte %= Geometry::kPartBytes;
    }
    const int g = byte / kGranule;
    return row + kGranule * (g ^ key(token, g));
  }
};

// Q (fp16, one M tile of 8 heads): rows padded by 16 bytes so the 8 rows a quad pair reads
// fall in 8 different bank groups; all quad pairs read the same addresses (broadcast).
template <int kHeadDim>
struct QTileLayout {
  static constexpr int kRowBytes = kHeadDim * 2 + 16;
  static constexpr int kBytes = 8 * kRowBytes;
  VXQA_HD static int offset(int head, int dim) { return head * kRowBytes + dim * 2; }
};

// S (fp32 scores) and P (fp16 probabilities) of one warp tile: 8 heads x 32 tokens.
// S is stored as 8-byte pairs of adjacent tokens: a 16-lane phase writes 8 pairs of each of
// 2 rows, 4 words out of every 8 of a row, and the pitch's 4-bank row skew puts the second
// row on the other 16 banks. The softmax reads 16 bytes of each of 8 rows per phase: the
// skew again gives 8 x 4 banks.
struct ScoreTileLayout {
  static constexpr int kPitch = 32 + 4;  // floats; rows 16-byte aligned, 4 banks apart
  static constexpr int kBytes = 8 * kPitch * 4;
  VXQA_HD static int offset(int head, int token) { return (head * kPitch + token) * 4; }
};
struct ProbTileLayout {
  static constexpr int kPitch = 32 + 8;  // halves: 80-byte rows, 8 rows in distinct banks
  static constexpr int kBytes = 8 * kPitch * 2;
  VXQA_HD static int offset(int head, int token) { return (head * kPitch + token) * 2; }
};

// O (fp32) of one warp for the cross-warp merge: 8 heads x D, in the warp's K/V tile area
// (for FP8 exactly 8 x D floats: no room for padding, hence an XOR swizzle). Lanes store
// pairs of adjacent dims (8 bytes); a 16-lane phase covers 2 head rows (head parity) x 4
// quad pairs x 2 pairs, and row-major the rows and the quad pairs share banks. The key XORs
// head parity and quad pair into dim bits 2..4, so the 16 pairs of a phase differ in dim
// bits 1..4: 16 bank pairs. The merge reads 32 consecutive dims of one head per warp; the
// XOR stays inside their aligned group of 32, so they still cover the 32 banks.
template <int kHeadDim>
struct MergeTileLayout {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "MergeTileLayout: a warp's O is 64, 128 or 256 dims (D 512: one part)");
  static constexpr int kBytes = 8 * kHeadDim * 4;
  // At D = 64 the quad pair's low bit is dim bit 4, which the key also flips; each flipped
  // bit still depends only on the head or on higher dim bits, so the map is one-to-one.
  VXQA_HD static int key(int head, int dim) {
    return (head & 1) | ((dim / (kHeadDim / 4)) << 1);
  }
  // Index, in floats, of O[head][dim]. Dim bit 0 is kept: pairs stay adjacent, 8-byte aligned.
  VXQA_HD static int index(int head, int dim) {
    return head * kHeadDim + (dim ^ (key(head, dim) << 2));
  }
};

}  // namespace pipeline
}  // namespace vxqa
