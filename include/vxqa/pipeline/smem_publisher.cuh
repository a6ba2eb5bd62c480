// vxqa/pipeline/smem_publisher.cuh — stores a register piece into the warp's shared-memory
// tile in the layout its consumer reads, then publishes it to the warp with __syncwarp.
// The warp owns its tile, so no CTA-wide barrier is needed in the main loop. Where a tile
// is shared by Geometry::kParts warps (head dim 512), each stores its share of the rows and
// they publish to one another with a named barrier of their own.
//
// Where FP8 becomes fp16 is a policy (ConvertAt): kConsume stores the bytes as loaded and
// the consumers convert while reading (half the shared memory and store traffic);
// kPublish converts here, once per element, and the consumers read fp16 tiles.
#pragma once
#include <vxqa/arch/named_barrier.cuh>
#include <vxqa/common.cuh>
#include <vxqa/numeric/kv_decode.cuh>
#include <vxqa/numeric/kv_type.cuh>
#include <vxqa/pipeline/register_staged_load.cuh>
#include <vxqa/pipeline/smem_layout.cuh>

namespace vxqa {
namespace pipeline {

enum class ConvertAt { kConsume, kPublish };

#if VXQA_IS_CUDA_COMPILER
// Geometry: the shared-memory tile; LoadGeometry: the rows as loaded from global memory
// (the same, or 1-byte FP8 rows published as 2-byte fp16 ones, decoded by LoadGeometry's
// KvDecode: E4M3's values short of its factor, which the kernel's scales make up).
template <class Geometry, class LoadGeometry = Geometry>
struct SmemPublisher {
  static constexpr bool kConverts = LoadGeometry::Decode::kConverts && Geometry::kKvV == KvType::kFp16;
  static_assert(Geometry::kHeadDimV == LoadGeometry::kHeadDimV &&
                    (kConverts || Geometry::kKvV == LoadGeometry::kKvV),
                "SmemPublisher: the tile and the loaded rows must hold the same head dim, and "
                "may differ only by FP8 -> fp16");

  // The warp's tile buffer: Geometry::kTileBytes, 16-byte aligned.
  struct TempStorage {
    alignas(16) uint8_t bytes[Geometry::kTileBytes];
  };

  static constexpr int kSharers = Geometry::kParts;  // warps reading (and storing) the tile
  uint8_t* tile;
  int barrier;  // the sharing warps' named barrier (1..15), where kSharers > 1
  VXQA_DEVICE explicit SmemPublisher(TempStorage& storage, int barrier_id = 0)
      : tile(storage.bytes), barrier(barrier_id) {}

  // Every lane must be done reading the previous tile before it is overwritten.
  VXQA_DEVICE void wait_readers() const { sync(); }
  VXQA_DEVICE void publish() const { sync(); }

  template <int kPieceTokens>
  VXQA_DEVICE void store_k(const RegisterPiece<LoadGeometry, kPieceTokens>& piece, int first_row) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < RegisterPiece<LoadGeometry, kPieceTokens>::kLoadsPerLane; ++i) {
      const int row = piece.row_of(first_row, i, lane), c = piece.chunk_of(i, lane);
      if constexpr (kConverts) {  // 16 codes -> two 16-byte chunks of fp16
        arch::Bytes16 lo, hi;
        widen(piece.chunk[i], lo, hi);
        store16(tile + KTileLayout<Geometry>::chunk_offset(row, 2 * c), lo);
        store16(tile + KTileLayout<Geometry>::chunk_offset(row, 2 * c + 1), hi);
      } else {
        store16(tile + KTileLayout<Geometry>::chunk_offset(row, c), piece.chunk[i]);
      }
    }
  }

  template <int kPieceTokens>
  VXQA_DEVICE void store_v(const RegisterPiece<LoadGeometry, kPieceTokens>& piece, int first_row) {
    using Layout = VTileLayout<Geometry>;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < RegisterPiece<LoadGeometry, kPieceTokens>::kLoadsPerLane; ++i) {
      const int row = piece.row_of(first_row, i, lane), c = piece.chunk_of(i, lane);
      if constexpr (kConverts) {  // fp16 spans are at least 16 bytes: whole granules
        arch::Bytes16 lo, hi;
        widen(piece.chunk[i], lo, hi);
        store16(tile + Layout::granule_offset(row, 32 * c), lo);
        store16(tile + Layout::granule_offset(row, 32 * c + 16), hi);
      } else if (Layout::kGranule == 16) {
        store16(tile + Layout::granule_offset(row, 16 * c), piece.chunk[i]);
      } else {  // two 8-byte slots, each to its own swizzled place
        const arch::Bytes16& b = piece.chunk[i];
        store8(tile + Layout::granule_offset(row, 16 * c), b.w[0], b.w[1]);
        store8(tile + Layout::granule_offset(row, 16 * c + 8), b.w[2], b.w[3]);
      }
    }
  }

 private:
  VXQA_DEVICE void sync() const {
    if constexpr (kSharers == 1) {
      __syncwarp();
    } else {
      arch::named_barrier_sync(barrier, 32 * kSharers);
    }
  }
  VXQA_DEVICE static void store16(uint8_t* dst, const arch::Bytes16& c) {
    *reinterpret_cast<uint4*>(dst) = make_uint4(c.w[0], c.w[1], c.w[2], c.w[3]);
  }
  VXQA_DEVICE static void store8(uint8_t* dst, uint32_t a, uint32_t b) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(a, b);
  }
  // 16 FP8 codes -> 16 fp16: codes 0..7 in `lo`, 8..15 in `hi`.
  VXQA_DEVICE static void widen(const arch::Bytes16& codes, arch::Bytes16& lo, arch::Bytes16& hi) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint2 h = LoadGeometry::Decode::four(codes.w[w]);
      arch::Bytes16& dst = w < 2 ? lo : hi;
      dst.w[(w & 1) * 2] = h.x;
      dst.w[(w & 1) * 2 + 1] = h.y;
    }
  }
};
#endif

}  // namespace pipeline
}  // namespace vxqa
