// vxqa/kernel/config.cuh — the one knob a user turns: a DecodeConfig names the head dim and
// the cache's element type, then any of the options of vxqa::opt it changes (warps, page
// size, q/out type, MMA atom, SM70 stages, convert point, page-id check, async stages,
// attention variant, max query length, E4M3 decode path).
// Everything else is derived here, and every combination that cannot work fails here with
// a message.
#pragma once
#include <vxqa/common.cuh>
#include <vxqa/kernel/attention_variant.cuh>
#include <vxqa/numeric/act_type.cuh>
#include <vxqa/numeric/kv_decode.cuh>
#include <vxqa/numeric/kv_type.cuh>
#include <vxqa/pipeline/register_staged_load.cuh>
#include <vxqa/pipeline/smem_layout.cuh>
#include <vxqa/pipeline/smem_publisher.cuh>
#include <vxqa/mma/sm80_pv_consumer.cuh>
#include <vxqa/mma/sm80_qk_consumer.cuh>

namespace vxqa {

// Shared memory an SM70 CTA can use (96 KB per SM, all of it by one CTA with the opt-in).
inline constexpr int kSm70MaxSmemBytes = 96 * 1024;

using pipeline::ConvertAt;

// kOn: every block-table id a valid length uses is checked against DecodeParams::num_pages;
// a bad one sets kDecodeErrorBadPage, yields NaN for its sequence, and is never
// dereferenced. kOff trusts the table (an id outside the pool is an out-of-bounds read);
// it exists to measure what the check costs (docs/measurements.md).
enum class PageIdCheck { kOn, kOff };

// The MMA atom and the mainloop that goes with it, picked where the kernel is compiled:
//   kAuto  mma.m16n8k16 with a cp.async pipeline for sm_80 and newer; mma.m8n8k4 with
//          register-staged loads (the SM70 path) for sm_70 and sm_75. One instantiation
//          built for 70;80;90 carries both; the host launches what the device's code is.
//   kSm70  the SM70 path everywhere (on sm_80+ its m8n8k4 is emulated: the tests run the
//          SM70 path on newer GPUs this way).
enum class MmaAtom { kAuto, kSm70 };

// The atom a DecodeConfig gets when it names none; a build may define it (the GPU tests are
// built once more with -DVXQA_DEFAULT_MMA_ATOM=vxqa::MmaAtom::kSm70).
#ifndef VXQA_DEFAULT_MMA_ATOM
#define VXQA_DEFAULT_MMA_ATOM ::vxqa::MmaAtom::kAuto
#endif

// Shared memory one CTA of the SM80 path may take: two CTAs of that size fit the 228 KB of
// an sm_90 SM (1 KB of each reserved), so the next chunk's CTA streams while one finishes.
inline constexpr int kSm80CtaSmemTarget = 110 * 1024;
inline constexpr int kSm80MaxSmemBytes = 227 * 1024;

// The options a DecodeConfig takes after its head dim and cache type, each a small type
// named after what it sets; a Config spells only those it changes, in any order:
//   DecodeConfig<128, KvType::kE5M2, opt::PageSize<16>, opt::QoType<ActType::kBf16>>
namespace opt {
namespace detail {
// One tag a kind of option: a Config takes each kind at most once.
struct WarpsTag {};
struct PageSizeTag {};
struct QoTypeTag {};
struct AtomTag {};
struct Sm70StagesTag {};
struct ConvertTag {};
struct PageIdsTag {};
struct AsyncStagesTag {};
struct VariantTag {};
struct MaxQueryLenTag {};
struct E4m3PathTag {};
}  // namespace detail

// Warps a CTA (1..8; default 4).
template <int N>
struct Warps {
  using Tag = detail::WarpsTag;
  static constexpr int kValue = N;
};
// Tokens a page, fixed at compile time (default 0: given at run time in DecodeParams).
template <int N>
struct PageSize {
  using Tag = detail::PageSizeTag;
  static constexpr int kValue = N;
};
// The type of q and out (default fp16; DecodeParams::qo_type must say the same). bf16 q
// becomes fp16 where it is loaded, on every atom.
template <ActType T>
struct QoType {
  using Tag = detail::QoTypeTag;
  static constexpr ActType kValue = T;
};
// The MMA atom (default VXQA_DEFAULT_MMA_ATOM, normally MmaAtom::kAuto; a bf16 cache: kAuto).
template <MmaAtom A>
struct Atom {
  using Tag = detail::AtomTag;
  static constexpr MmaAtom kValue = A;
};
// The SM70 body's register stages of the load pipeline (default 1).
template <int N>
struct Sm70Stages {
  using Tag = detail::Sm70StagesTag;
  static constexpr int kValue = N;
};
// Where the SM70 body turns FP8 codes into fp16 (default ConvertAt::kConsume).
template <ConvertAt C>
struct Convert {
  using Tag = detail::ConvertTag;
  static constexpr ConvertAt kValue = C;
};
// Whether block-table ids are checked (default PageIdCheck::kOn).
template <PageIdCheck C>
struct PageIds {
  using Tag = detail::PageIdsTag;
  static constexpr PageIdCheck kValue = C;
};
// The SM80 body's cp.async stages a warp: 0 (default) picks as many (2..4) as keep the CTA
// within kSm80CtaSmemTarget; else 2..8.
template <int N>
struct AsyncStages {
  using Tag = detail::AsyncStagesTag;
  static constexpr int kValue = N;
};

// The few traits below are written here: NVRTC has no <type_traits>.
// The attention variant: VariantFlag bits or-ed (default 0: plain attention). A flag
// compiled in may be off at run time (kernel/attention_variant.cuh).
template <unsigned kFlags>
struct Variant {
  using Tag = detail::VariantTag;
  static constexpr unsigned kValue = kFlags;
};

// The most query tokens a sequence may have in one step, 1..16 (default 1: decode).
// Above 1 the kernel takes DecodeParams::q_indptr, and a CTA's rows are (query token, head)
// pairs, each with its own causal limit; in the SM80 body the warps then share each K/V tile
// and split the rows (row_tiling), so that the KV is read once for up to 8 · Warps rows.
template <int N>
struct MaxQueryLen {
  using Tag = detail::MaxQueryLenTag;
  static constexpr int kValue = N;
};

// How an E4M3 cache is decoded (default E4m3Decode::kAuto: the hardware cvt where compiled
// for sm_89+; E4m3Decode::kSoftware: the bit-move of SM70, SM75 and sm_80/86 everywhere).
template <E4m3Decode D>
struct E4m3Path {
  using Tag = detail::E4m3PathTag;
  static constexpr E4m3Decode kValue = D;
};

namespace detail {
template <class...>
using Void = void;
template <class A, class B>
inline constexpr bool kSame = false;
template <class A>
inline constexpr bool kSame<A, A> = true;
template <class T, class = void>
struct TagOf {
  using type = void;  // not an option
};
template <class T>
struct TagOf<T, Void<typename T::Tag>> {
  using type = typename T::Tag;
};
template <class T>
inline constexpr bool kIsOption = !kSame<typename TagOf<T>::type, void>;
// The option of kind Tag among Options, or Default.
template <class Tag, class Default, class... Options>
struct Find {
  using type = Default;
};
template <bool kFirst, class First, class Tag, class Default, class... Rest>
struct FindNext {
  using type = First;
};
template <class First, class Tag, class Default, class... Rest>
struct FindNext<false, First, Tag, Default, Rest...> {
  using type = typename Find<Tag, Default, Rest...>::type;
};
template <class Tag, class Default, class First, class... Rest>
struct Find<Tag, Default, First, Rest...> {
  using type = typename FindNext<kSame<typename TagOf<First>::type, Tag>, First, Tag, Default, Rest...>::type;
};
template <class Tag, class... Options>
inline constexpr int kCount = (0 + ... + int(kSame<typename TagOf<Options>::type, Tag>));
template <class Tag, class Default, class... Options>
inline constexpr auto kValue = Find<Tag, Default, Options...>::type::kValue;
}  // namespace detail
}  // namespace opt

template <int HeadDim, KvType Kv, class... Options>
struct DecodeConfig {
  static_assert((opt::detail::kIsOption<Options> && ...),
                "DecodeConfig: every argument after the head dim and the cache type must be an option "
                "of vxqa::opt (Warps, PageSize, QoType, Atom, Sm70Stages, Convert, PageIds, AsyncStages, "
                "Variant, MaxQueryLen, E4m3Path)");
  static_assert(((opt::detail::kCount<typename opt::detail::TagOf<Options>::type, Options...> == 1) && ...),
                "DecodeConfig: an option is given twice");

 private:
  template <class Tag, class Default>
  static constexpr auto option = opt::detail::kValue<Tag, Default, Options...>;
  static constexpr int Warps = option<opt::detail::WarpsTag, opt::Warps<4>>;
  static constexpr int Stages = option<opt::detail::Sm70StagesTag, opt::Sm70Stages<1>>;
  static constexpr int PageSize = option<opt::detail::PageSizeTag, opt::PageSize<0>>;
  static constexpr ConvertAt Convert = option<opt::detail::ConvertTag, opt::Convert<ConvertAt::kConsume>>;
  static constexpr PageIdCheck Check = option<opt::detail::PageIdsTag, opt::PageIds<PageIdCheck::kOn>>;
  // A bf16 cache has only the SM80 body: a build's default atom does not reach it.
  static constexpr MmaAtom Atom =
      option<opt::detail::AtomTag, opt::Atom<Kv == KvType::kBf16 ? MmaAtom::kAuto : VXQA_DEFAULT_MMA_ATOM>>;
  static constexpr int AsyncStages = option<opt::detail::AsyncStagesTag, opt::AsyncStages<0>>;
  static constexpr ActType Qo = option<opt::detail::QoTypeTag, opt::QoType<ActType::kFp16>>;
  static constexpr unsigned kVariantFlags = option<opt::detail::VariantTag, opt::Variant<0u>>;
  static constexpr int MaxQueryLen = option<opt::detail::MaxQueryLenTag, opt::MaxQueryLen<1>>;
  static constexpr E4m3Decode E4m3 = option<opt::detail::E4m3PathTag, opt::E4m3Path<E4m3Decode::kAuto>>;

 public:
  static_assert(Kv != KvType::kUnset,
                "DecodeConfig: KvType::kUnset is not a cache format (kE5M2, kE4M3, kFp16 or kBf16)");
  static constexpr int kHeadDim = HeadDim;
  static constexpr KvType kKv = Kv;
  // The cache's codes to fp16, and the factor the kernels' scales make up (numeric/kv_decode.cuh).
  using KvDecoder = KvDecode<Kv, E4m3>;
  static constexpr E4m3Decode kE4m3Path = E4m3;
  static constexpr int kElemBytes = KvTraits<Kv>::kElemBytes;
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = 32 * Warps;
  static constexpr int kPageSize = PageSize;  // 0: run-time page size
  static constexpr int kStages = Stages;
  static constexpr ActType kQo = Qo;
  // The score path's mask, modifier and sinks (kernel/attention_variant.cuh).
  using Variant = AttentionVariant<kVariantFlags>;
  // Query tokens a sequence (opt::MaxQueryLen); kMultiToken: rows are (token, head) pairs.
  static constexpr int kMaxQueryLen = MaxQueryLen;
  static constexpr bool kMultiToken = MaxQueryLen > 1;
  static_assert(MaxQueryLen >= 1 && MaxQueryLen <= 16, "DecodeConfig: opt::MaxQueryLen must be 1..16");
  static_assert(MaxQueryLen == 1 || HeadDim <= 256,
                "DecodeConfig: multi-token queries (opt::MaxQueryLen > 1) stop at HeadDim 256 (at 512 a "
                "tile's warps already share it between the two halves of D)");

  static_assert(HeadDim == 64 || HeadDim == 128 || HeadDim == 256 || HeadDim == 512,
                "DecodeConfig: HeadDim must be 64, 128, 256 or 512");
  static_assert(Warps >= 1 && Warps <= 8, "DecodeConfig: opt::Warps must be 1..8");
  static_assert(PageSize >= 0, "DecodeConfig: opt::PageSize is a page size >= 1, or 0 for run time");

  static constexpr ConvertAt kConvertAt = Convert;
  static constexpr bool kChecksPageIds = Check == PageIdCheck::kOn;
  static_assert(Convert == ConvertAt::kConsume || kv_type_is_fp8(Kv),
                "DecodeConfig: opt::Convert<ConvertAt::kPublish> only applies to FP8 caches (E5M2, E4M3)");
  // A bf16 cache is read by the SM80 body alone: the bf16 MMA is sm_80+, and the m8n8k4 of
  // SM70 and SM75 has none. Its q and out are bf16 (the MMA takes q as it is).
  static constexpr bool kHasSm70Body = Kv != KvType::kBf16;
  static_assert(kHasSm70Body || Atom == MmaAtom::kAuto,
                "DecodeConfig: a bf16 cache needs the SM80 body (the bf16 MMA of sm_80 and newer): "
                "opt::Atom<MmaAtom::kSm70> cannot read it");
  static_assert(kHasSm70Body || Qo == ActType::kBf16,
                "DecodeConfig: a bf16 cache takes bf16 q and out (opt::QoType<ActType::kBf16>)");
  // Rows as loaded from the cache, and as the consumers read them in shared memory (for a
  // bf16 cache, which the SM70 body never reads, the fp16 shapes: the same sizes).
  static constexpr KvType kSm70Kv = kHasSm70Body ? Kv : KvType::kFp16;
  using LoadGeometry = pipeline::WarpTileGeometry<HeadDim, kSm70Kv, E4m3>;
  using Geometry = pipeline::WarpTileGeometry<HeadDim, Convert == ConvertAt::kPublish ? KvType::kFp16 : kSm70Kv, E4m3>;
  using LoadPolicy = pipeline::Sm70RegisterStaged<Stages>;

  // One M tile of 8 rows (query heads; with kMultiToken, (token, head) pairs) a warp: a KV
  // head's rows take row_tiling's CTAs. Any G works; the grid limit (num_kv_heads x M tiles
  // <= 65535) is the only bound.
  static constexpr int kHeadsPerCta = 8;

  // Warps sharing a tile (Geometry::kParts: 2 at head dim 512, else 1) form a team: both
  // load half of each K and V tile, run QK over whole rows, and PV over their own part of D.
  static constexpr int kParts = Geometry::kParts;
  static_assert(Warps % kParts == 0, "DecodeConfig: at head dim 512 opt::Warps must be even (two warps share a tile)");
  static constexpr int kTeams = Warps / kParts;
  static constexpr int kTeamRows = Geometry::kTokens / kParts;  // rows of a tile a warp loads

  // A piece (what one register stage holds) is at most 8 KB per warp: 64 registers a lane.
  static constexpr int kPieceTokens =
      kTeamRows * LoadGeometry::kRowBytes <= 8192 ? kTeamRows : 8192 / LoadGeometry::kRowBytes;
  static constexpr int kPiecesPerTile = kTeamRows / kPieceTokens;  // a warp's, per K (and per V) tile
  static_assert((2 * kPiecesPerTile) % Stages == 0,
                "DecodeConfig: opt::Sm70Stages must divide the pieces of a K+V tile (2 or 4)");
  static_assert(Stages <= 2 * kPiecesPerTile,
                "DecodeConfig: more opt::Sm70Stages than pieces in a tile would load two tiles ahead");

  // Registers a lane holds for the staged pieces and the O accumulators. Measured with
  // CUDA 11.8 on sm_70: 160 fits without spilling (D = 128 fp16, 2 stages: 245 registers),
  // 192 spills (D = 256 with 2 stages: 24 bytes).
  static constexpr int kStagedRegisters =
      Stages * (kPieceTokens * LoadGeometry::kChunksPerRow / 32) * 4 + Geometry::kPartDims / 4;
  static_assert(kStagedRegisters <= 160,
                "DecodeConfig: the staged pieces and O accumulators need more than 160 "
                "registers a lane, which spills on SM70; use fewer opt::Sm70Stages");

  // Tokens the SM70 body's CTA consumes per round of its teams (32-token tiles); its plans
  // (make_decode_plan's choose_chunk_tokens rule) pick multiples of it.
  static constexpr int kCtaTokens = Geometry::kTokens * kTeams;

  // Shared memory: Q tile, then per team [K/V tile | per warp: S | P | alpha] (a team of one
  // warp up to head dim 256).
  static constexpr int kQBytes = pipeline::QTileLayout<HeadDim>::kBytes;
  static constexpr int kWarpTileOffset = 0;
  static constexpr int kWarpScoreOffset = Geometry::kTileBytes;
  static constexpr int kWarpProbOffset = kWarpScoreOffset + pipeline::ScoreTileLayout::kBytes;
  static constexpr int kWarpAlphaOffset = kWarpProbOffset + pipeline::ProbTileLayout::kBytes;
  static constexpr int kWarpStateBytes = kWarpAlphaOffset + 16 * 4 - kWarpScoreOffset;  // S, P, alpha
  static constexpr int kTeamBytes = Geometry::kTileBytes + kParts * kWarpStateBytes;
  static constexpr int kSmemBytes = kQBytes + kTeams * kTeamBytes;
  // A warp's area in a team: offsets from the team's base of its S (and P, alpha after it).
  VXQA_HD static constexpr int warp_state_offset(int part) { return kWarpScoreOffset + part * kWarpStateBytes; }

  // The cross-warp merge reuses each team's tile for its warps' 8 x kPartDims fp32 output
  // rows and each warp's score area for (m, l).
  static_assert(kParts * pipeline::MergeTileLayout<Geometry::kPartDims>::kBytes <= Geometry::kTileBytes,
                "DecodeConfig: the merge's O rows (MergeTileLayout) do not fit in a team's tile");
  static_assert(kSmemBytes <= kSm70MaxSmemBytes,
                "DecodeConfig: shared memory over the 96 KB an SM70 CTA can have; use fewer "
                "opt::Warps (fp16 tiles with HeadDim 256 take 18 KB a warp)");
  static_assert(kTeamBytes % 16 == 0 && kWarpStateBytes % 16 == 0 && kQBytes % 16 == 0,
                "DecodeConfig: areas must stay aligned");

  // The SM80+ path (kAuto where compiled for sm_80 and newer): warp-private rings of
  // kSm80Stages 16-token stages [K tile | V tile], as many stages (2..4) as keep the CTA
  // within kSm80CtaSmemTarget, or opt::AsyncStages. Sm70Stages and Convert are SM70 knobs.
  static constexpr MmaAtom kAtom = Atom;
  static constexpr bool kHasSm80Path = Atom == MmaAtom::kAuto;
  using Sm80Geometry = mma::Sm80TileGeometry<HeadDim, Kv, E4m3>;
  static constexpr int kSm80StageBytes = mma::Sm80KTileLayout<Sm80Geometry>::kBytes +
                                         mma::Sm80VTileLayout<Sm80Geometry>::kBytes;
  static_assert(AsyncStages == 0 || (AsyncStages >= 2 && AsyncStages <= 8),
                "DecodeConfig: opt::AsyncStages is 0 (auto) or 2..8");
  static constexpr int kAsyncStages = AsyncStages;
  static constexpr int kSm80Stages = AsyncStages                                         ? AsyncStages
                                     : Warps * 4 * kSm80StageBytes <= kSm80CtaSmemTarget ? 4
                                     : Warps * 3 * kSm80StageBytes <= kSm80CtaSmemTarget ? 3
                                                                                         : 2;
  // The SM80 body's round (16-token tiles), which its plans pick multiples of.
  static constexpr int kSm80CtaTokens = Sm80Geometry::kTokens * Warps;  // a warp a tile, at every head dim
  // What every split-KV chunk must be a multiple of, whichever body runs it: the smaller
  // round. The SM70 body takes a chunk that is not whole rounds of its own as it takes a
  // sequence's short last chunk (its last warps get a tile fewer); the SM80 body's finer
  // chunks let one wave of CTAs fill more of the SMs (docs/performance.md, "Chunks of 64
  // tokens").
  static constexpr int kChunkMultiple = kSm80CtaTokens;
  static_assert(kCtaTokens % kSm80CtaTokens == 0, "DecodeConfig: the SM70 round must be whole SM80 rounds");
  static constexpr int kSm80WarpBytes = kSm80Stages * kSm80StageBytes;
  // The warps' rings, then (head dim 512) the CTA's one copy of Q's fragments.
  static constexpr int kSm80QOffset = Warps * kSm80WarpBytes;
  static constexpr int kSm80SmemBytes = kSm80QOffset + mma::Sm80QkConsumer<Sm80Geometry>::kQSharedBytes;
  static_assert(!kHasSm80Path || kSm80SmemBytes <= kSm80MaxSmemBytes,
                "DecodeConfig: the SM80 path's two stages a warp need more than 227 KB; use "
                "fewer opt::Warps");
  static_assert(kSm80StageBytes % 16 == 0, "DecodeConfig: SM80 stages must stay aligned");
};

// How the rows of one (sequence, KV head) — G · max_q_len (query token, head) pairs, token
// major: row r is token r / G, head r % G — are cut into CTAs. The SM80 body of a kMultiToken
// Config gives each of row_warps warps an 8-row tile, and those warps share every K/V tile
// (the CTA's other warps stream other tiles for the same rows): the KV is read once a CTA
// for up to 8 · kWarps rows. Otherwise (the SM70 body, or one query token) a CTA has 8 rows,
// and every warp streams its own tiles for them.
struct RowTiling {
  int row_warps;     // divides the Config's warps
  int rows_per_cta;  // 8 · row_warps
  int m_tiles;       // CTAs a (sequence, KV head): ceil(rows / rows_per_cta)
};
template <class Config>
VXQA_HD RowTiling row_tiling(int group_size, int max_q_len, bool sm80_body) {
  const int rows = group_size * max_q_len;
  int row_warps = 1;
  if (Config::kMultiToken && sm80_body) {
    row_warps = Config::kWarps;  // the smallest divisor of the warps whose tiles hold every row
    for (int w = Config::kWarps; w >= 1; --w)
      if (Config::kWarps % w == 0 && Config::kHeadsPerCta * w >= rows) row_warps = w;
  }
  const int rows_per_cta = Config::kHeadsPerCta * row_warps;
  return RowTiling{row_warps, rows_per_cta, (rows + rows_per_cta - 1) / rows_per_cta};
}

}  // namespace vxqa
