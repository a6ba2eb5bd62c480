// vxqa/mma/sm80_qk_consumer.cuh — Sᵀ = K · Qᵀ for a 16-token tile on mma.m16n8k16.
//
// Decode-shaped: tokens are M (16 rows of the tile), the group's query heads are N (8), head
// dims are K. Q then stays in registers for the whole loop (two f16x2 a k-step), and each
// lane's accumulators are two heads (2·(lane%4), +1) of two tokens (lane/4, +8), which is
// where the softmax keeps its statistics.
//
// The k order is permuted so that a lane's A registers come from whole words of its token
// rows: in k-step s, lane l's four k slots {2t, 2t+1, 2t+8, 2t+9} (t = l % 4) are the four
// consecutive dims dim0(s, t) .. +3 — one 32-bit word of FP8 codes, two of fp16. Q is loaded in
// the same order, so the product is the plain dot product. One LDS.128 of a K row feeds 4
// (FP8) or 2 (fp16) k-steps.
#pragma once
#include <cuda_fp16.h>
#include <vxqa/arch/mma_m16n8k16.cuh>
#include <vxqa/common.cuh>
#include <vxqa/mma/fragments_m16n8k16.cuh>
#include <vxqa/numeric/act_type.cuh>
#include <vxqa/numeric/kv_decode.cuh>
#include <vxqa/numeric/kv_type.cuh>

namespace vxqa {
namespace mma {

// A K (or V) tile of 16 token rows as the SM80 consumers see it.
template <int kHeadDim, KvType kKv, E4m3Decode kE4m3 = E4m3Decode::kAuto>
struct Sm80TileGeometry {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256 || kHeadDim == 512,
                "Sm80TileGeometry: head dim must be 64, 128, 256 or 512");
  static_assert(kKv == KvType::kE5M2 || kKv == KvType::kE4M3 || kKv == KvType::kFp16 || kKv == KvType::kBf16,
                "Sm80TileGeometry: KV elements are E5M2, E4M3, fp16 or bf16");
  static constexpr int kHeadDimV = kHeadDim;
  static constexpr KvType kKvV = kKv;
  using Decode = KvDecode<kKv, kE4m3>;  // the consumers' conversion
  // What the MMAs take: bf16 for a bf16 cache (with bf16 q and P), else fp16.
  static constexpr ActType kMmaIn = kKv == KvType::kBf16 ? ActType::kBf16 : ActType::kFp16;
  static constexpr int kElemBytes = KvTraits<kKv>::kElemBytes;
  static constexpr int kTokens = 16;
  static constexpr int kRowBytes = kHeadDim * kElemBytes;
  static constexpr int kChunksPerRow = kRowBytes / 16;
  static constexpr int kDimsPerChunk = 16 / kElemBytes;
};

// K tile: rows of D·E bytes, 16-byte chunks XOR-swizzled by the row's parity. A quarter warp
// reads the same chunks of two neighbouring rows (lanes 4g..4g+3 take row g); the swizzle
// puts the second row's chunks 4 bank groups away. 64-byte rows need none (two rows already
// fill one 128-byte bank line).
template <class Geometry>
struct Sm80KTileLayout {
  static constexpr int kBytes = Geometry::kTokens * Geometry::kRowBytes;
  VXQA_HD static int key(int row) { return Geometry::kChunksPerRow >= 8 ? (row & 1) << 2 : 0; }
  VXQA_HD static int chunk_offset(int row, int chunk) {
    return row * Geometry::kRowBytes + 16 * (chunk ^ key(row));
  }
};

template <class Geometry>
struct Sm80QkConsumer {
  using Layout = Sm80KTileLayout<Geometry>;
  static constexpr int kHeadDim = Geometry::kHeadDimV;
  using Decode = typename Geometry::Decode;
  static constexpr int kSteps = kHeadDim / 16;                        // k-steps per tile
  static constexpr int kStepsPerChunk = Geometry::kDimsPerChunk / 4;  // 4 (FP8) or 2 (fp16)
  static constexpr int kChunkReads = kSteps / kStepsPerChunk;  // chunks a lane reads of each of its rows
  static_assert(kChunkReads * 4 == Geometry::kChunksPerRow,
                "Sm80QkConsumer: the four lanes of a group must cover a row's chunks");

  // First of the four consecutive dims behind k-step s on a lane with thread-in-group t.
  VXQA_HD static int dim0(int s, int t) {
    return Geometry::kDimsPerChunk * (t + 4 * (s / kStepsPerChunk)) + 4 * (s % kStepsPerChunk);
  }
  // The k slot of dim0(s, t) + j, j = 0..3, in the A and B fragments.
  VXQA_HD static int k_slot(int t, int j) { return 2 * t + (j & 1) + (j >> 1) * 8; }

  // Q as B fragments, loaded once: q[s] holds head lane/4's dims dim0(s, t) .. +3.
  struct QFragments {
    uint32_t q[kSteps][2];
  };
  // Head dim 512: O takes 128 registers a lane, and Q's 64 more would spill, so the CTA keeps
  // one copy of the fragments in shared memory, in fragment order (step s, lane l at
  // 8 bytes at 8 (32 s + l): a warp's read of a step is 256 contiguous bytes), read a step
  // at a time.
  static constexpr bool kQShared = kHeadDim > 256;
  static constexpr int kQSharedBytes = kQShared ? kSteps * 32 * 8 : 0;
  struct QShared {
    const uint8_t* area;
  };
  // What the main loop holds of Q (no <type_traits>: NVRTC builds this header too).
  template <bool kShared, int = 0>
  struct QSourceOf {
    using Type = QFragments;
  };
  template <int kUnused>
  struct QSourceOf<true, kUnused> {
    using Type = QShared;
  };
  using QSource = typename QSourceOf<kQShared>::Type;

#if VXQA_IS_CUDA_COMPILER
  // `q_head_row`: the lane's head row of q (fp16 or bf16 bits, D contiguous), null for a
  // padded head; bf16 becomes fp16 here, but for the bf16 MMA (a bf16 cache), which takes it
  // as it is.
  template <ActType kQ>
  VXQA_DEVICE static QFragments load_q(const uint16_t* q_head_row) {
    static_assert(Geometry::kMmaIn == ActType::kFp16 || kQ == ActType::kBf16,
                  "Sm80QkConsumer: a bf16 cache takes bf16 q");
    const int t = m16n8k16::thread_in_group(threadIdx.x & 31);
    QFragments f;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      uint2 v = make_uint2(0u, 0u);
      if (q_head_row) v = *reinterpret_cast<const uint2*>(q_head_row + dim0(s, t));
      if constexpr (Geometry::kMmaIn == ActType::kBf16) {
        f.q[s][0] = v.x;
        f.q[s][1] = v.y;
      } else {
        f.q[s][0] = detail::act2_to_half2_bits<kQ>(v.x);
        f.q[s][1] = detail::act2_to_half2_bits<kQ>(v.y);
      }
    }
    return f;
  }

  // The warp's copy of its fragments into the CTA's shared Q (kQShared; one warp writes it).
  VXQA_DEVICE static void store_shared(uint8_t* q_area, const QFragments& f) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
      reinterpret_cast<uint2*>(q_area)[s * 32 + lane] = make_uint2(f.q[s][0], f.q[s][1]);
  }

#if VXQA_HAS_MMA_M16N8K16
  // s[e]: Sᵀ[token c_row(lane, e)][head c_col(lane, e)] of the tile (unscaled).
  VXQA_DEVICE static void run(const uint8_t* k_tile, const QSource& qf, float (&s)[4]) {
    const int lane = threadIdx.x & 31;
    const int row = m16n8k16::group(lane), t = m16n8k16::thread_in_group(lane);
    // Even and odd k-steps accumulate apart: two chains of D/32 MMAs instead of one of D/16.
    float acc[2][4];
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[0][e] = acc[1][e] = 0.f;
#pragma unroll
    for (int g = 0; g < kChunkReads; ++g) {
      const uint4 lo = *reinterpret_cast<const uint4*>(k_tile + Layout::chunk_offset(row, t + 4 * g));
      const uint4 hi = *reinterpret_cast<const uint4*>(k_tile + Layout::chunk_offset(row + 8, t + 4 * g));
      const uint32_t wl[4] = {lo.x, lo.y, lo.z, lo.w}, wh[4] = {hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int i = 0; i < kStepsPerChunk; ++i) {
        uint32_t a[4];
        if constexpr (Decode::kConverts) {  // one word = dims +0..3: the low two to slots 2t, 2t+1, the high two to +8
          const uint2 l = Decode::four(wl[i]), h = Decode::four(wh[i]);
          a[0] = l.x;
          a[1] = h.x;
          a[2] = l.y;
          a[3] = h.y;
        } else {  // two words of f16x2 (bf16x2)
          a[0] = wl[2 * i];
          a[1] = wh[2 * i];
          a[2] = wl[2 * i + 1];
          a[3] = wh[2 * i + 1];
        }
        const int step = g * kStepsPerChunk + i;
        uint32_t b[2];
        if constexpr (kQShared) {
          const uint2 q = reinterpret_cast<const uint2*>(qf.area)[step * 32 + lane];
          b[0] = q.x;
          b[1] = q.y;
        } else {
          b[0] = qf.q[step][0];
          b[1] = qf.q[step][1];
        }
        if constexpr (Geometry::kMmaIn == ActType::kBf16) {
          arch::mma_m16n8k16_row_col_bf16(acc[step & 1], a, b, acc[step & 1]);
        } else {
          arch::mma_m16n8k16_row_col(acc[step & 1], a, b, acc[step & 1]);
        }
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) s[e] = acc[0][e] + acc[1][e];
  }
#endif
#endif
};

}  // namespace mma
}  // namespace vxqa
