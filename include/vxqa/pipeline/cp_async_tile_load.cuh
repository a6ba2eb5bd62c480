// vxqa/pipeline/cp_async_tile_load.cuh — the SM80+ load pipeline: a warp copies the K and
// V rows of a 16-token tile straight into its own shared-memory stage with 16-byte
// cp.async (no registers held while the copy is in flight), Stages tiles deep. Rows past
// the tile's valid ones are zero-filled without reading memory, so a NaN there never
// reaches P·V. The only SM80 piece that touches global KV memory.
#pragma once
#include <vxqa/arch/cp_async.cuh>
#include <vxqa/common.cuh>

namespace vxqa {
namespace pipeline {

// Policy tag: `Stages` tiles of a warp in shared memory, Stages - 1 of them in flight while
// the warp computes on the oldest.
template <int Stages>
struct Sm80CpAsync {
  static_assert(Stages >= 2 && Stages <= 8, "Sm80CpAsync: Stages must be 2..8");
  static constexpr int kStages = Stages;
};

// Geometry: 16-token rows (mma::Sm80TileGeometry); KLayout / VLayout: where the consumers
// want chunk c of row r (chunk_offset(r, c) and offset(r, byte)).
template <class Geometry, class KLayout, class VLayout>
struct CpAsyncTileLoad {
  static constexpr int kChunks = Geometry::kTokens * Geometry::kChunksPerRow;
  static_assert(kChunks % 32 == 0, "CpAsyncTileLoad: a tile must give every lane whole chunks");
  static constexpr int kChunksPerLane = kChunks / 32;

  // Lane l's i-th copy: consecutive lanes take consecutive chunks of a row.
  VXQA_HD static int row_of(int i, int lane) { return (i * 32 + lane) / Geometry::kChunksPerRow; }
  VXQA_HD static int chunk_of(int i, int lane) { return (i * 32 + lane) % Geometry::kChunksPerRow; }

#if VXQA_IS_CUDA_COMPILER && VXQA_HAS_CP_ASYNC
  // Issues (without committing) the copies of one tile: `lane_row_offset` is, on lane r < 16,
  // the byte offset of tile row r from both bases; rows >= valid_rows are zero-filled.
  VXQA_DEVICE static void issue(const uint8_t* k_base, const uint8_t* v_base, int64_t lane_row_offset,
                                int valid_rows, uint8_t* k_tile, uint8_t* v_tile) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < kChunksPerLane; ++i) {
      const int row = row_of(i, lane), chunk = chunk_of(i, lane);
      const int64_t offset = __shfl_sync(0xffffffffu, lane_row_offset, row);
      const bool read = row < valid_rows;
      const int64_t src = read ? offset + 16 * chunk : 0;  // never read when !read
      arch::cp_async_16_or_zero(k_tile + KLayout::chunk_offset(row, chunk), k_base + src, read);
      arch::cp_async_16_or_zero(v_tile + VLayout::offset(row, 16 * chunk), v_base + src, read);
    }
  }
#endif
};

}  // namespace pipeline
}  // namespace vxqa
