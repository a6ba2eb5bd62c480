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

  static_assert(32 % Geometry::kChunksPerRow == 0 || Geometry::kChunksPerRow % 32 == 0,
                "CpAsyncTileLoad: a row must take a whole fraction of a warp, or whole warps");
  // Rows one copy instruction covers; 0 where a row takes more than one (16-bit rows of 512).
  static constexpr int kRowsPerCopy = Geometry::kChunksPerRow <= 32 ? 32 / Geometry::kChunksPerRow : 0;

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

  // The same copies for a tile whose 16 rows lie in one page, `row_bytes` apart from row 0
  // (k_row0 / v_row0, the same on every lane). Lane l's copy i is row r0 + i·R of its chunk
  // (R = 32 / chunks a row), so its global addresses step by R rows and, where R is even (the
  // K swizzle then keeps its key), its shared ones by a constant: the loop is two pointer
  // bumps a copy. Rows past valid_rows are still inside the page: their addresses are valid,
  // and they are zero-filled without being read. kSkipsRows: so are rows below first_row
  // (keys before a sliding window, in its first page).
  template <bool kSkipsRows = false>
  VXQA_DEVICE static void issue_one_page(const uint8_t* k_row0, const uint8_t* v_row0, int64_t row_bytes,
                                         int valid_rows, uint8_t* k_tile, uint8_t* v_tile, int first_row = 0) {
    constexpr int R = kRowsPerCopy;
    const int lane = threadIdx.x & 31;
    if constexpr (R == 0) {  // rows of more than 32 chunks: each copy's row and chunk as issue() has them
#pragma unroll
      for (int i = 0; i < kChunksPerLane; ++i) {
        const int row = row_of(i, lane), chunk = chunk_of(i, lane);
        const bool read = row < valid_rows && (!kSkipsRows || row >= first_row);
        const int64_t src = row * row_bytes + 16 * chunk;
        arch::cp_async_16_or_zero(k_tile + KLayout::chunk_offset(row, chunk), k_row0 + src, read);
        arch::cp_async_16_or_zero(v_tile + VLayout::offset(row, 16 * chunk), v_row0 + src, read);
      }
      return;
    }
    const int r0 = row_of(0, lane), chunk = chunk_of(0, lane);
    const int64_t lane_offset = r0 * row_bytes + 16 * chunk, step = R * row_bytes;
    const uint8_t* k = k_row0 + lane_offset;
    const uint8_t* v = v_row0 + lane_offset;
    uint8_t* k_dst = k_tile + KLayout::chunk_offset(r0, chunk);
    uint8_t* v_dst = v_tile + VLayout::offset(r0, 16 * chunk);
    const int rows_left = valid_rows - r0;  // copy i reads when i·R < rows_left
#pragma unroll
    for (int i = 0; i < kChunksPerLane; ++i) {
      uint8_t* kd = R % 2 == 0 ? k_dst + i * R * Geometry::kRowBytes
                               : k_tile + KLayout::chunk_offset(r0 + i * R, chunk);
      const bool read = i * R < rows_left && (!kSkipsRows || r0 + i * R >= first_row);
      arch::cp_async_16_or_zero(kd, k + i * step, read);
      arch::cp_async_16_or_zero(v_dst + VLayout::offset(i * R, 0), v + i * step, read);  // R even, or r0 = 0
    }
  }
#endif
};

}  // namespace pipeline
}  // namespace vxqa
