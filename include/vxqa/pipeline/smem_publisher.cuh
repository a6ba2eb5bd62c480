// vxqa/pipeline/smem_publisher.cuh — stores a register piece into the warp's shared-memory
// tile in the layout its consumer reads, then publishes it to the warp with __syncwarp.
// Bytes are stored as loaded (E5M2 stays 1 byte): the consumers convert while reading.
// The warp owns its tile, so no CTA-wide barrier is needed in the main loop.
#pragma once
#include <vxqa/common.cuh>
#include <vxqa/pipeline/register_staged_load.cuh>
#include <vxqa/pipeline/smem_layout.cuh>

namespace vxqa {
namespace pipeline {

#if VXQA_IS_CUDA_COMPILER
template <class Geometry>
struct SmemPublisher {
  // The warp's tile buffer: Geometry::kTileBytes, 16-byte aligned.
  struct TempStorage {
    alignas(16) uint8_t bytes[Geometry::kTileBytes];
  };

  uint8_t* tile;
  VXQA_DEVICE explicit SmemPublisher(TempStorage& storage) : tile(storage.bytes) {}

  // Every lane must be done reading the previous tile before it is overwritten.
  VXQA_DEVICE void wait_readers() const { __syncwarp(); }
  VXQA_DEVICE void publish() const { __syncwarp(); }

  template <int kPieceTokens>
  VXQA_DEVICE void store_k(const RegisterPiece<Geometry, kPieceTokens>& piece, int first_row) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < RegisterPiece<Geometry, kPieceTokens>::kLoadsPerLane; ++i) {
      const int row = piece.row_of(first_row, i, lane), c = piece.chunk_of(i, lane);
      store16(tile + KTileLayout<Geometry>::chunk_offset(row, c), piece.chunk[i]);
    }
  }

  template <int kPieceTokens>
  VXQA_DEVICE void store_v(const RegisterPiece<Geometry, kPieceTokens>& piece, int first_row) {
    using Layout = VTileLayout<Geometry>;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < RegisterPiece<Geometry, kPieceTokens>::kLoadsPerLane; ++i) {
      const int row = piece.row_of(first_row, i, lane), byte = 16 * piece.chunk_of(i, lane);
      const arch::Bytes16& c = piece.chunk[i];
      if (Layout::kGranule == 16) {
        store16(tile + Layout::granule_offset(row, byte), c);
      } else {  // two 8-byte slots, each to its own swizzled place
        store8(tile + Layout::granule_offset(row, byte), c.w[0], c.w[1]);
        store8(tile + Layout::granule_offset(row, byte + 8), c.w[2], c.w[3]);
      }
    }
  }

 private:
  VXQA_DEVICE static void store16(uint8_t* dst, const arch::Bytes16& c) {
    *reinterpret_cast<uint4*>(dst) = make_uint4(c.w[0], c.w[1], c.w[2], c.w[3]);
  }
  VXQA_DEVICE static void store8(uint8_t* dst, uint32_t a, uint32_t b) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(a, b);
  }
};
#endif

}  // namespace pipeline
}  // namespace vxqa
