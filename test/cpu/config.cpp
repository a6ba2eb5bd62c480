// DecodeConfig's derived constants (checked at compile time against numbers worked out by
// hand from the shared-memory map: Q tile, then per warp [K/V tile | S | P | alpha]), and
// the split plan's arithmetic: choose_chunk_tokens, choose_wave_chunk_tokens and plan_workspace_bytes.
#include <catch2/catch.hpp>

#include <vxqa/kernel/config.cuh>
#include <vxqa/kernel/split_plan.cuh>
#include <vxqa/pipeline/smem_layout.cuh>

#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>

namespace {

using vxqa::DecodeConfig;
namespace opt = vxqa::opt;
using vxqa::KvType;

// ---------------------------------------------------------------------------------------
// Derived constants
// ---------------------------------------------------------------------------------------

// The shared-memory formula, from the sizes of its parts spelled out:
//   Q tile       8 rows of (2D + 16) bytes
//   K/V tile     32 tokens x D x elem bytes, one a team (D 512: two warps; else one)
//   S            8 x 36 floats  = 1152 bytes, one a warp
//   P            8 x 40 halves  =  640 bytes, one a warp
//   alpha        16 floats      =   64 bytes, one a warp
constexpr int smem_formula(int d, int elem_bytes, int warps) {
  const int parts = d > 256 ? 2 : 1;
  return 8 * (2 * d + 16) + warps / parts * (32 * d * elem_bytes + parts * (1152 + 640 + 64));
}
static_assert(smem_formula(256, 2, 5) <= 96 * 1024, "D256 fp16 fits 5 warps");
static_assert(smem_formula(256, 2, 6) > 96 * 1024, "but not 6");
static_assert(smem_formula(256, 2, 8) == 150144 && smem_formula(256, 2, 8) > vxqa::kSm70MaxSmemBytes,
              "DecodeConfig<256, kFp16, opt::Warps<8>> (test/compile_fail/smem_over_budget.cu) is over the budget");
static_assert(vxqa::kSm70MaxSmemBytes == 98304, "96 KB");
static_assert(smem_formula(512, 2, 4) <= 96 * 1024 && smem_formula(512, 2, 6) > 96 * 1024,
              "D512 fp16 fits two teams on SM70, not three (the SM80 body's stages take one)");

template <class C, int kD, KvType kKv, int kWarps, int kStages, int kPage, int kExpectSmem, int kExpectPieceTokens>
constexpr bool check_config() {
  constexpr int eb = kKv == KvType::kE5M2 ? 1 : 2;
  constexpr int parts = kD > 256 ? 2 : 1;  // warps sharing a tile, each with kD / parts dims of O
  static_assert(C::kHeadDim == kD && C::kKv == kKv && C::kWarps == kWarps && C::kStages == kStages &&
                    C::kPageSize == kPage,
                "the parameters come back");
  static_assert(C::kElemBytes == eb, "elem bytes");
  static_assert(C::kThreads == 32 * kWarps, "a warp is 32 threads");
  static_assert(C::kParts == parts && C::kTeams == kWarps / parts, "teams of warps sharing a tile");
  static_assert(C::kCtaTokens == 32 * kWarps / parts, "each team takes a 32-token tile per round");
  static_assert(C::kSm80CtaTokens == 16 * kWarps, "each SM80 warp takes a 16-token tile per round, at 512 too");
  static_assert(C::kChunkMultiple == 16 * kWarps, "chunks are whole rounds of the finer body");
  static_assert(C::kHeadsPerCta == 8, "one M tile of 8 heads");
  static_assert(std::is_same<typename C::Geometry, vxqa::pipeline::WarpTileGeometry<kD, kKv>>::value,
                "geometry");
  static_assert(std::is_same<typename C::LoadPolicy, vxqa::pipeline::Sm70RegisterStaged<kStages>>::value,
                "load policy");
  // Pieces: at most 8 KB of a warp's tile per register stage.
  static_assert(C::kPieceTokens == kExpectPieceTokens, "piece tokens");
  static_assert(C::kPieceTokens * kD * eb <= 8192, "a piece is at most 8 KB a warp (64 registers a lane)");
  static_assert(C::kPiecesPerTile * C::kPieceTokens * parts == 32, "a team's pieces tile a 32-token tile");
  static_assert((2 * C::kPiecesPerTile) % kStages == 0 && kStages <= 2 * C::kPiecesPerTile, "stages");
  // The shared-memory map.
  static_assert(C::kQBytes == 8 * (2 * kD + 16), "Q tile");
  static_assert(C::kWarpTileOffset == 0, "tile first");
  static_assert(C::kWarpScoreOffset == 32 * kD * eb, "S after the tile");
  static_assert(C::kWarpProbOffset == C::kWarpScoreOffset + 1152, "P after S");
  static_assert(C::kWarpAlphaOffset == C::kWarpProbOffset + 640, "alpha after P");
  static_assert(C::kWarpStateBytes == 1152 + 640 + 64, "a warp's S, P and alpha");
  static_assert(C::kTeamBytes == C::kWarpScoreOffset + parts * C::kWarpStateBytes, "a team's area");
  static_assert(C::warp_state_offset(parts - 1) + C::kWarpStateBytes == C::kTeamBytes, "the last warp's state ends it");
  static_assert(C::kSmemBytes == C::kQBytes + kWarps / parts * C::kTeamBytes, "Q + teams");
  static_assert(C::kSmemBytes == smem_formula(kD, eb, kWarps), "the formula");
  static_assert(C::kSmemBytes == kExpectSmem, "the number worked out by hand");
  static_assert(C::kSmemBytes <= vxqa::kSm70MaxSmemBytes, "within 96 KB");
  // 16-byte accesses need every area 16-byte aligned; the merge reuses tile and S.
  static_assert(C::kQBytes % 16 == 0 && C::kTeamBytes % 16 == 0 && C::kWarpScoreOffset % 16 == 0 &&
                    C::kWarpProbOffset % 16 == 0 && C::kWarpAlphaOffset % 16 == 0,
                "aligned areas");
  static_assert(8 * kD * 4 <= C::kWarpScoreOffset, "merge O (8 x D fp32, its parts side by side) fits the tile");
  static_assert(16 * 4 <= C::kWarpProbOffset - C::kWarpScoreOffset, "merge (m, l) fits S");
  return true;
}

//                                      D    kv              W  S  page   smem   piece
static_assert(check_config<DecodeConfig<64, KvType::kE5M2>, 64, KvType::kE5M2, 4, 1, 0, 16768, 32>(), "");
static_assert(check_config<DecodeConfig<128, KvType::kE5M2>, 128, KvType::kE5M2, 4, 1, 0, 25984, 32>(), "");
static_assert(check_config<DecodeConfig<256, KvType::kE5M2>, 256, KvType::kE5M2, 4, 1, 0, 44416, 32>(), "");
static_assert(check_config<DecodeConfig<256, KvType::kE5M2, opt::Warps<8>, opt::PageSize<800>>, 256, KvType::kE5M2, 8, 1, 800, 84608, 32>(), "");
static_assert(check_config<DecodeConfig<64, KvType::kFp16, opt::Warps<1>>, 64, KvType::kFp16, 1, 1, 0, 7104, 32>(), "");
static_assert(check_config<DecodeConfig<128, KvType::kFp16, opt::Warps<8>, opt::Sm70Stages<2>>, 128, KvType::kFp16, 8, 2, 0, 82560, 32>(), "");
static_assert(check_config<DecodeConfig<256, KvType::kFp16, opt::PageSize<16>>, 256, KvType::kFp16, 4, 1, 16, 77184, 16>(), "");
static_assert(check_config<DecodeConfig<256, KvType::kFp16, opt::Warps<5>>, 256, KvType::kFp16, 5, 1, 0, 95424, 16>(), "");
static_assert(check_config<DecodeConfig<512, KvType::kE5M2>, 512, KvType::kE5M2, 4, 1, 0, 48512, 16>(), "");
static_assert(check_config<DecodeConfig<512, KvType::kE5M2, opt::Warps<6>>, 512, KvType::kE5M2, 6, 1, 0, 68608, 16>(), "");
static_assert(check_config<DecodeConfig<512, KvType::kFp16, opt::Warps<2>>, 512, KvType::kFp16, 2, 1, 0, 44800, 8>(), "");
static_assert(DecodeConfig<256, KvType::kFp16>::kPiecesPerTile == 2, "D256 fp16: two 16-token pieces");
static_assert(DecodeConfig<512, KvType::kFp16, opt::Warps<2>>::kPiecesPerTile == 2, "D512 fp16: a warp's 16 rows, two pieces of 8");
static_assert(DecodeConfig<128, KvType::kFp16>::kPiecesPerTile == 1, "D128 fp16: 8 KB tile, one piece");

// ---------------------------------------------------------------------------------------
// choose_chunk_tokens
// ---------------------------------------------------------------------------------------

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct ChunkCase {
  int batch, context, head_tiles, cta, target;
};

template <class F>
void for_each_case(F&& f) {
  for (int batch : {1, 2, 3, 8, 16, 64})
    for (int context : {1, 31, 32, 100, 128, 129, 1000, 4096, 8192, 17800, 65536, 262144})
      for (int head_tiles : {1, 2, 8})
        for (int cta : {32, 64, 128, 256})
          for (int target : {1, 80, 320, 528, 100000}) f(ChunkCase{batch, context, head_tiles, cta, target});
}

std::string describe(const ChunkCase& c, int chunk) {
  std::ostringstream os;
  os << "B " << c.batch << " ctx " << c.context << " tiles " << c.head_tiles << " cta " << c.cta << " target "
     << c.target << " -> " << chunk;
  return os.str();
}

// What either chunk rule returns: a multiple of the CTA round, 1..64 of them, and never
// longer than one chunk needs to cover the context (except the minimum).
void require_allowed_chunk(const ChunkCase& c, int chunk) {
  REQUIRE(chunk % c.cta == 0);
  REQUIRE(chunk >= c.cta);
  REQUIRE(chunk <= 64 * c.cta);
  REQUIRE((chunk == c.cta || chunk < c.context + c.cta));
}

}  // namespace

TEST_CASE("choose_chunk_tokens: a multiple of the CTA tokens, at most 64 of them", "[config]") {
  for_each_case([](const ChunkCase& c) {
    const int chunk = vxqa::choose_chunk_tokens(c.batch, c.context, c.head_tiles, c.cta, c.target);
    INFO(describe(c, chunk));
    require_allowed_chunk(c, chunk);
  });
}

TEST_CASE("choose_chunk_tokens: the largest chunk that still reaches the target", "[config]") {
  for_each_case([](const ChunkCase& c) {
    const int chunk = vxqa::choose_chunk_tokens(c.batch, c.context, c.head_tiles, c.cta, c.target);
    INFO("B " << c.batch << " ctx " << c.context << " tiles " << c.head_tiles << " cta " << c.cta << " target "
              << c.target << " -> " << chunk);
    const int64_t per_chunk = int64_t(c.batch) * c.head_tiles;
    const bool reachable = ceil_div(c.context, c.cta) * per_chunk >= c.target;
    if (reachable) {
      REQUIRE(ceil_div(c.context, chunk) * per_chunk >= c.target);
      // One more multiple would fall short (or is past the cap / the whole context).
      if (chunk < 64 * c.cta && chunk < c.context)
        REQUIRE(ceil_div(c.context, chunk + c.cta) * per_chunk < c.target);
    } else {
      REQUIRE(chunk == c.cta);  // as many CTAs as there can be
    }
  });
}

TEST_CASE("choose_chunk_tokens: one chunk when the context is small or the grid already full", "[config]") {
  for (int cta : {32, 128, 256})
    for (int context : {1, cta / 2, cta}) {
      INFO("cta " << cta << " ctx " << context);
      CHECK(vxqa::choose_chunk_tokens(16, context, 1, cta, 320) == cta);
      CHECK(vxqa::choose_chunk_tokens(1, context, 1, cta, 1) == cta);
    }
  // Batch x heads alone reach the target: no split up to 64 CTA rounds of context.
  for (int context : {129, 1000, 4096, 8192}) {
    INFO("ctx " << context);
    const int chunk = vxqa::choose_chunk_tokens(64, context, 8, 128, 320);
    CHECK(ceil_div(context, chunk) == 1);
  }
  // Beyond 64 rounds the chunk is capped and the context split.
  CHECK(vxqa::choose_chunk_tokens(64, 100000, 8, 128, 320) == 64 * 128);
}

TEST_CASE("choose_chunk_tokens: monotone in context, batch, heads and target", "[config]") {
  for (int cta : {32, 128, 256})
    for (int target : {80, 320, 528})
      for (int batch : {1, 3, 16}) {
        int previous = 0;
        for (int context = 1; context <= 40000; context += 37) {
          const int chunk = vxqa::choose_chunk_tokens(batch, context, 1, cta, target);
          INFO("cta " << cta << " target " << target << " B " << batch << " ctx " << context);
          REQUIRE(chunk >= previous);  // more context never gives a smaller chunk
          previous = chunk;
        }
      }
  for (int context : {100, 4096, 17800, 262144})
    for (int cta : {64, 128}) {
      INFO("ctx " << context << " cta " << cta);
      int previous = 0;
      for (int batch = 1; batch <= 64; ++batch) {
        const int chunk = vxqa::choose_chunk_tokens(batch, context, 2, cta, 320);
        REQUIRE(chunk >= previous);  // more sequences never split finer
        previous = chunk;
      }
      previous = 0;
      for (int tiles = 1; tiles <= 32; ++tiles) {
        const int chunk = vxqa::choose_chunk_tokens(4, context, tiles, cta, 320);
        REQUIRE(chunk >= previous);
        previous = chunk;
      }
      previous = 1 << 30;
      for (int target = 1; target <= 2000; target += 7) {
        const int chunk = vxqa::choose_chunk_tokens(4, context, 2, cta, target);
        REQUIRE(chunk <= previous);  // a higher CTA target never gives a coarser split
        previous = chunk;
      }
    }
}

TEST_CASE("choose_chunk_tokens: worked examples", "[config]") {
  // Qwen shape on a V100 (80 SMs, 4 CTAs per SM): B16, 17800 tokens, one KV head tile,
  // 4 warps (128 tokens a round): 20 chunks reach 320 CTAs; 896 = 7 x 128 gives 20, 1024 gives 18.
  CHECK(vxqa::choose_chunk_tokens(16, 17800, 1, 128, 320) == 896);
  // B1 x 64K on 132 SMs: the smallest chunk cannot reach 528 CTAs either way.
  CHECK(vxqa::choose_chunk_tokens(1, 65536, 1, 128, 528) == 128);
  // B1 x 256K: 2048 chunks of 128 is plenty; 496 = ceil(262144 / 528) -> chunk 384 (683 chunks),
  // 512 gives 512 chunks < 528.
  CHECK(vxqa::choose_chunk_tokens(1, 262144, 1, 128, 528) == 384);
}

// The wave rule's cost of a chunk, as its comment defines it.
int64_t wave_cost(const ChunkCase& c, int chunk) {
  const int64_t ctas = ceil_div(c.context, chunk) * c.batch * c.head_tiles;
  return ceil_div(ctas, c.target) * (chunk + c.cta);
}

TEST_CASE("choose_wave_chunk_tokens: the allowed chunk of least waves x (chunk + round), the larger on ties",
          "[config]") {
  for_each_case([](const ChunkCase& c) {
    const int chunk = vxqa::choose_wave_chunk_tokens(c.batch, c.context, c.head_tiles, c.cta, c.target);
    INFO(describe(c, chunk));
    require_allowed_chunk(c, chunk);
    for (int multiple = 1; multiple <= 64 && (multiple - 1) * c.cta < c.context; ++multiple) {
      const int other = multiple * c.cta;
      REQUIRE(wave_cost(c, chunk) <= wave_cost(c, other));
      if (other > chunk) REQUIRE(wave_cost(c, chunk) < wave_cost(c, other));
    }
  });
}

TEST_CASE("choose_wave_chunk_tokens: measured shapes on 132 SMs x 2 CTAs (264 slots)", "[config]") {
  // TP1, B16 x 16K, 4 KV heads: 4096 fills one wave (256 CTAs); 3968, what choose_chunk_tokens
  // takes, needs 5 chunks (320 CTAs, two waves). Measured 144.5 against 155.7 us.
  CHECK(vxqa::choose_wave_chunk_tokens(16, 16384, 4, 128, 264) == 4096);
  CHECK(vxqa::choose_chunk_tokens(16, 16384, 4, 128, 264, 2) == 3968);
  // B16 x 1K: 128-token chunks, 128 CTAs in one wave (measured 12.1 against 12.6 us for 256).
  CHECK(vxqa::choose_wave_chunk_tokens(16, 1024, 1, 128, 264) == 128);
  // B1 x 64K: 256 (256 CTAs, one wave: cost 384) beats 128 (512 CTAs, two waves: 512).
  CHECK(vxqa::choose_wave_chunk_tokens(1, 65536, 1, 128, 264) == 256);
  // The seed shape's capacity: 15 chunks of 1280 (240 CTAs); 1152 would need 17 (272).
  CHECK(vxqa::choose_wave_chunk_tokens(16, 18690, 1, 128, 264) == 1280);
  // A batch that fills the grid with one chunk a sequence: no split.
  CHECK(vxqa::choose_wave_chunk_tokens(256, 1024, 1, 128, 264) == 1024);
  // The SM80 plan's 64-token rounds, at least 2 of them (api/decode.cuh): the seed shape 1216
  // (16 chunks, 256 CTAs), B4 ~32K 576, B16 x 1K 128 (not 64: measured 9.3 against 11.8 us).
  CHECK(vxqa::choose_wave_chunk_tokens(16, 18690, 1, 64, 264, 2) == 1216);
  CHECK(vxqa::choose_wave_chunk_tokens(4, 34240, 1, 64, 264, 2) == 576);
  CHECK(vxqa::choose_wave_chunk_tokens(16, 1024, 1, 64, 264, 2) == 128);
  CHECK(vxqa::choose_wave_chunk_tokens(16, 16384, 4, 64, 264, 2) == 4096);
  CHECK(vxqa::choose_wave_chunk_tokens(1, 65536, 1, 64, 264, 2) == 256);
  // choose_sm80_chunk_tokens: one CTA an SM where two would only get the floor of 2 rounds.
  CHECK(vxqa::choose_sm80_chunk_tokens(1, 32768, 1, 64, 132, 2, 2) == 256);  // 128 CTAs, not 256 of 128
  CHECK(vxqa::choose_sm80_chunk_tokens(16, 2048, 1, 64, 132, 2, 2) == 256);
  CHECK(vxqa::choose_sm80_chunk_tokens(16, 1024, 1, 64, 132, 2, 2) == 128);  // the same either way
  CHECK(vxqa::choose_sm80_chunk_tokens(1, 16384, 1, 64, 132, 2, 2) == 128);
  CHECK(vxqa::choose_sm80_chunk_tokens(1, 65536, 1, 64, 132, 2, 2) == 256);  // 256 CTAs of 256: two an SM
  // The benchmark table's shapes keep two CTAs an SM (docs/performance.md's table).
  CHECK(vxqa::choose_sm80_chunk_tokens(16, 18600, 1, 64, 132, 2, 2) == 1216);
  CHECK(vxqa::choose_sm80_chunk_tokens(4, 34240, 1, 64, 132, 2, 2) == 576);
  CHECK(vxqa::choose_sm80_chunk_tokens(16, 16384, 4, 64, 132, 2, 2) == 4096);
  CHECK(vxqa::choose_sm80_chunk_tokens(8, 8560, 2, 64, 132, 2, 2) == 576);
  CHECK(vxqa::choose_sm80_chunk_tokens(1, 32768, 1, 64, 132, 1, 2) == 256);  // one resident: the wave rule
  CHECK(vxqa::choose_sm80_chunk_tokens(1, 32768, 1, 64, 132, 1, 2) ==
        vxqa::choose_wave_chunk_tokens(1, 32768, 1, 64, 132, 2));
  // min_multiple is a floor.
  CHECK(vxqa::choose_wave_chunk_tokens(16, 1024, 1, 128, 264, 2) == 256);
  CHECK(vxqa::choose_wave_chunk_tokens(4, 100, 1, 128, 264, 4) == 512);
}

TEST_CASE("plan_workspace_bytes: error word, padded partial LSE and chunk error words, partial O", "[config]") {
  // One chunk: only the error word (its 256-byte slot).
  for (int batch : {1, 16, 1000})
    for (int d : {64, 128, 256}) CHECK(vxqa::plan_workspace_bytes(batch, 48, 1, d) == 256);
  // Worked by hand.
  CHECK(vxqa::plan_workspace_bytes(1, 1, 2, 64) == 256 + 256 + 256 + 2 * 64 * 4);                  // 1280
  CHECK(vxqa::plan_workspace_bytes(16, 6, 20, 256) == 256 + 7680 + 7680 + size_t(1920) * 256 * 4);  // 1981696
  CHECK(vxqa::plan_workspace_bytes(16, 6, 20, 256) == 1981696);
  CHECK(vxqa::plan_workspace_bytes(3, 7, 5, 128) == 256 + 512 + 512 + size_t(105) * 128 * 4);  // 105 slots: 420 -> 512
  // Past 4 GiB without wrapping.
  CHECK(vxqa::plan_workspace_bytes(256, 64, 2048, 256) == size_t(34628174080ull));

  // The layout the kernel args use (api/decode.cuh make_decode_args): partial LSE at 256,
  // the chunk error words after the LSE area rounded up to 256 bytes, partial O after
  // theirs, ending at the workspace size.
  for (int batch : {1, 2, 7, 16})
    for (int heads : {1, 6, 48})
      for (int chunks : {2, 3, 31, 512})
        for (int d : {64, 128, 256}) {
          const size_t slots = size_t(batch) * heads * chunks;
          const vxqa::WorkspaceLayout w = vxqa::workspace_layout(batch, heads, chunks, d);
          const size_t total = vxqa::plan_workspace_bytes(batch, heads, chunks, d);
          INFO("B " << batch << " heads " << heads << " chunks " << chunks << " D " << d);
          REQUIRE(w.partial_lse == 256);
          REQUIRE(w.chunk_errors % 256 == 0);
          REQUIRE(w.chunk_errors >= w.partial_lse + slots * 4);
          REQUIRE(w.chunk_errors - (w.partial_lse + slots * 4) < 256);
          REQUIRE(w.partial_o % 256 == 0);
          REQUIRE(w.partial_o >= w.chunk_errors + slots * 4);
          REQUIRE(w.partial_o - (w.chunk_errors + slots * 4) < 256);
          REQUIRE(total == w.partial_o + slots * d * 4);
          REQUIRE(total == w.bytes);
          REQUIRE(total > vxqa::plan_workspace_bytes(batch, heads, chunks - 1, d));
        }
}

TEST_CASE("combine_slice_dims: 64-dim slices up to 32 chunks, 16-dim ones past it", "[config]") {
  for (int chunks : {2, 4, 17, 31, 32}) CHECK(vxqa::combine_slice_dims(chunks) == 64);
  for (int chunks : {33, 67, 256, 4096}) CHECK(vxqa::combine_slice_dims(chunks) == 16);
  static_assert(vxqa::combine_slice_dims(vxqa::kCombineNarrowAbove) == 64, "the threshold itself stays wide");
  // Every head dim the kernels take is a whole number of slices of either width.
  for (int d : {64, 128, 256}) CHECK(d % vxqa::combine_slice_dims(2) == 0);
}

TEST_CASE("choose_chunk_tokens: min_multiple keeps chunks at least that many CTA rounds", "[config]") {
  // B1 x 64K, one KV head, 264 CTAs wanted: 128-token chunks alone, 256 with a minimum of 2.
  CHECK(vxqa::choose_chunk_tokens(1, 65536, 1, 128, 264) == 128);
  CHECK(vxqa::choose_chunk_tokens(1, 65536, 1, 128, 264, 2) == 256);
  // The minimum never lowers a chunk the target already allows.
  CHECK(vxqa::choose_chunk_tokens(16, 18690, 1, 128, 264, 2) == vxqa::choose_chunk_tokens(16, 18690, 1, 128, 264));
  CHECK(vxqa::choose_chunk_tokens(16, 18690, 1, 128, 264) == 1152);  // 17 chunks x 16 = 272
  // A context shorter than the minimum: one chunk of the minimum.
  CHECK(vxqa::choose_chunk_tokens(4, 100, 1, 128, 264, 4) == 512);
}
