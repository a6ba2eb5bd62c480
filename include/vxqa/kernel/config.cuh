// vxqa/kernel/config.cuh — the one knob a user turns: a DecodeConfig names the head dim,
// the cache's element type, the warps per CTA, the register stages of the load pipeline and
// the page size (0 = given at run time). Everything else is derived here, and every
// combination that cannot work fails here with a message.
#pragma once
#include <vxqa/common.cuh>
#include <vxqa/pipeline/register_staged_load.cuh>
#include <vxqa/pipeline/smem_layout.cuh>
#include <vxqa/pipeline/smem_publisher.cuh>

namespace vxqa {

enum class KvType { kE5M2, kFp16 };

template <KvType kKv>
struct KvTraits;
template <>
struct KvTraits<KvType::kE5M2> {
  static constexpr int kElemBytes = 1;
  static constexpr const char* kName = "e5m2";
};
template <>
struct KvTraits<KvType::kFp16> {
  static constexpr int kElemBytes = 2;
  static constexpr const char* kName = "fp16";
};

// Shared memory an SM70 CTA can use (96 KB per SM, all of it by one CTA with the opt-in).
inline constexpr int kSm70MaxSmemBytes = 96 * 1024;

using pipeline::ConvertAt;

template <int HeadDim, KvType Kv, int Warps = 4, int Stages = 1, int PageSize = 0,
          ConvertAt Convert = ConvertAt::kConsume>
struct DecodeConfig {
  static constexpr int kHeadDim = HeadDim;
  static constexpr KvType kKv = Kv;
  static constexpr int kElemBytes = KvTraits<Kv>::kElemBytes;
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = 32 * Warps;
  static constexpr int kPageSize = PageSize;  // 0: run-time page size
  static constexpr int kStages = Stages;

  static_assert(HeadDim == 64 || HeadDim == 128 || HeadDim == 256,
                "DecodeConfig: HeadDim must be 64, 128 or 256");
  static_assert(Warps >= 1 && Warps <= 8, "DecodeConfig: Warps must be 1..8");
  static_assert(PageSize >= 0, "DecodeConfig: PageSize is a page size >= 1, or 0 for run time");

  static constexpr ConvertAt kConvertAt = Convert;
  static_assert(Convert == ConvertAt::kConsume || Kv == KvType::kE5M2,
                "DecodeConfig: ConvertAt::kPublish only applies to E5M2 caches");
  // Rows as loaded from the cache, and as the consumers read them in shared memory.
  using LoadGeometry = pipeline::WarpTileGeometry<HeadDim, kElemBytes>;
  using Geometry = pipeline::WarpTileGeometry<HeadDim, Convert == ConvertAt::kPublish ? 2 : kElemBytes>;
  using LoadPolicy = pipeline::Sm70RegisterStaged<Stages>;

  // One M tile of 8 query heads per CTA; a group of up to kMaxGroup takes several CTAs.
  static constexpr int kHeadsPerCta = 8;
  static constexpr int kMaxGroup = 16;

  // A piece (what one register stage holds) is at most 8 KB per warp: 64 registers a lane.
  static constexpr int kPieceTokens =
      LoadGeometry::kTileBytes <= 8192 ? LoadGeometry::kTokens : 8192 / LoadGeometry::kRowBytes;
  static constexpr int kPiecesPerTile = LoadGeometry::kTokens / kPieceTokens;
  static_assert((2 * kPiecesPerTile) % Stages == 0,
                "DecodeConfig: Stages must divide the pieces of a K+V tile (2 or 4)");
  static_assert(Stages <= 2 * kPiecesPerTile,
                "DecodeConfig: more stages than pieces in a tile would load two tiles ahead");

  // Registers a lane holds for the staged pieces and the O accumulators. Measured with
  // CUDA 11.8 on sm_70: 160 fits without spilling (D = 128 fp16, 2 stages: 245 registers),
  // 192 spills (D = 256 with 2 stages: 24 bytes).
  static constexpr int kStagedRegisters =
      Stages * (kPieceTokens * LoadGeometry::kChunksPerRow / 32) * 4 + HeadDim / 4;
  static_assert(kStagedRegisters <= 160,
                "DecodeConfig: the staged pieces and O accumulators need more than 160 "
                "registers a lane, which spills on SM70; use fewer Stages");

  // Tokens a CTA consumes per round of its warps; split-KV chunks are multiples of it.
  static constexpr int kCtaTokens = Geometry::kTokens * Warps;

  // Shared memory: Q tile, then per warp [K/V tile | S | P | alpha].
  static constexpr int kQBytes = pipeline::QTileLayout<HeadDim>::kBytes;
  static constexpr int kWarpTileOffset = 0;
  static constexpr int kWarpScoreOffset = Geometry::kTileBytes;
  static constexpr int kWarpProbOffset = kWarpScoreOffset + pipeline::ScoreTileLayout::kBytes;
  static constexpr int kWarpAlphaOffset = kWarpProbOffset + pipeline::ProbTileLayout::kBytes;
  static constexpr int kWarpBytes = kWarpAlphaOffset + 16 * 4;
  static constexpr int kSmemBytes = kQBytes + Warps * kWarpBytes;

  // The cross-warp merge reuses each warp's tile for its 8 x D fp32 output rows and its
  // score area for (m, l).
  static_assert(pipeline::MergeTileLayout<HeadDim>::kBytes <= Geometry::kTileBytes,
                "DecodeConfig: the merge's O rows (MergeTileLayout) do not fit in a warp's tile");
  static_assert(kSmemBytes <= kSm70MaxSmemBytes,
                "DecodeConfig: shared memory over the 96 KB an SM70 CTA can have; use fewer "
                "Warps (fp16 tiles with HeadDim 256 take 18 KB a warp)");
  static_assert(kWarpBytes % 16 == 0 && kQBytes % 16 == 0, "DecodeConfig: areas must stay aligned");
};

}  // namespace vxqa
