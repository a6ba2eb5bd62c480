// vxqa/pipeline/register_staged_load.cuh — the SM70 load pipeline (no cp.async): global ->
// registers with 16-byte non-coherent loads, issued a whole step before the registers are
// published to shared memory, so a warp always has a piece of the cache in flight while it
// computes. The only piece that touches global KV memory.
//
// A warp loads one "piece" at a time: kPieceTokens token rows of one tile. Consecutive lanes
// take consecutive 16-byte chunks of a row, so each load instruction covers whole rows
// (contiguous spans of at least 64 bytes).
#pragma once
#include <vxqa/arch/global_load.cuh>
#include <vxqa/common.cuh>

namespace vxqa {
namespace pipeline {

// Policy tag: `Stages` pieces in flight per warp, each held in registers.
template <int Stages>
struct Sm70RegisterStaged {
  static_assert(Stages == 1 || Stages == 2 || Stages == 4,
                "Sm70RegisterStaged: Stages must be 1, 2 or 4");
  static constexpr int kStages = Stages;
};

template <class Geometry, int kPieceTokens>
struct RegisterPiece {
  static_assert(Geometry::kTokens % kPieceTokens == 0, "RegisterPiece: pieces must tile a tile");
  static constexpr int kChunks = kPieceTokens * Geometry::kChunksPerRow;
  static_assert(kChunks % 32 == 0, "RegisterPiece: a piece must give every lane whole chunks");
  static constexpr int kLoadsPerLane = kChunks / 32;

  arch::Bytes16 chunk[kLoadsPerLane];

  // Row (token of the tile) and 16-byte chunk of this lane's i-th load.
  VXQA_HD static int row_of(int first_row, int i, int lane) {
    return first_row + (i * 32 + lane) / Geometry::kChunksPerRow;
  }
  VXQA_HD static int chunk_of(int i, int lane) { return (i * 32 + lane) % Geometry::kChunksPerRow; }

#if VXQA_IS_CUDA_COMPILER
  // Loads rows [first_row, first_row + kPieceTokens) of a tile. `lane_row_offset` is, on
  // lane l, the byte offset of tile row l from `base`; rows >= valid_rows are not read and
  // come back as zeros (their memory may be anything: a NaN there must not reach P·V).
  VXQA_DEVICE void load(const uint8_t* base, int64_t lane_row_offset, int first_row,
                        int valid_rows) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < kLoadsPerLane; ++i) {
      const int row = row_of(first_row, i, lane);
      const int64_t offset = __shfl_sync(0xffffffffu, lane_row_offset, row & 31);
      if (row < valid_rows) {
        chunk[i] = arch::ldg_nc_16(base + offset + 16 * chunk_of(i, lane));
      } else {
        chunk[i] = arch::Bytes16{{0u, 0u, 0u, 0u}};
      }
    }
  }
#endif
};

}  // namespace pipeline
}  // namespace vxqa
