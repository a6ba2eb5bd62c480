// Bank-conflict proofs for every shared-memory access of the decode kernel, computed lane by
// lane from the same layout functions the device code uses, for every head dim and element
// size; and the layouts are bijections (no two logical pieces share bytes).
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <vector>
#include <vxqa/mma/fragments.cuh>
#include <vxqa/mma/pv_consumer.cuh>
#include <vxqa/mma/qk_consumer.cuh>
#include <vxqa/pipeline/register_staged_load.cuh>
#include <vxqa/pipeline/smem_layout.cuh>
#include <vxqa/softmax/online_softmax.cuh>

namespace {

using namespace vxqa;

struct Access {
  int address;  // byte address of lane's access
};

// Ways of the worst bank conflict of one warp-wide access of `width` bytes per lane.
// Shared memory has 32 banks of 4 bytes; a 16-byte access is served in 4 phases of 8 lanes,
// an 8-byte one in 2 phases of 16, a 4-byte one in 1 phase. Lanes reading the same word are
// served together (broadcast).
int conflict_ways(const std::vector<int>& address, int width) {
  const int lanes_per_phase = 32 / (width / 4);
  int worst = 1;
  for (int phase = 0; phase < 32 / lanes_per_phase; ++phase) {
    std::map<int, std::set<int>> words_of_bank;
    for (int l = phase * lanes_per_phase; l < (phase + 1) * lanes_per_phase; ++l)
      for (int w = 0; w < width / 4; ++w) {
        const int word = address[l] / 4 + w;
        words_of_bank[word % 32].insert(word);
      }
    for (auto& [bank, words] : words_of_bank) worst = std::max<int>(worst, int(words.size()));
  }
  return worst;
}

template <int D, int E>
void check_geometry() {
  using G = pipeline::WarpTileGeometry<D, E>;
  using K = pipeline::KTileLayout<G>;
  using V = pipeline::VTileLayout<G>;
  using Q = pipeline::QTileLayout<D>;
  using Qk = mma::QkConsumer<G>;
  using Pv = mma::PvConsumer<G>;
  INFO("head dim " << D << ", " << E << "-byte elements");

  // QK: K chunk reads (LDS.128), one per chunk of the row.
  for (int chunk = 0; chunk < G::kChunksPerRow; ++chunk) {
    std::vector<int> a(32);
    for (int l = 0; l < 32; ++l) a[l] = K::chunk_offset(Qk::b_token(l), chunk);
    INFO("K read, chunk " << chunk);
    REQUIRE(conflict_ways(a, 16) == 1);
  }
  // QK: Q reads (LDS.128 of 8 dims).
  for (int dim = 0; dim < D; dim += 8) {
    std::vector<int> a(32);
    for (int l = 0; l < 32; ++l) a[l] = Q::offset(mma::a_row(l), dim);
    INFO("Q read, dim " << dim);
    REQUIRE(conflict_ways(a, 16) == 1);
  }
  // PV: P reads (LDS.64) and V reads (LDS.128 per 16 bytes of the span, or one LDS.64).
  for (int step = 0; step < 8; ++step) {
    std::vector<int> p(32);
    for (int l = 0; l < 32; ++l) p[l] = pipeline::ProbTileLayout::offset(mma::a_row(l), 4 * step);
    INFO("P read, step " << step);
    REQUIRE(conflict_ways(p, 8) == 1);
    for (int byte = 0; byte < G::kSpanBytes; byte += V::kGranule) {
      std::vector<int> v(32);
      for (int l = 0; l < 32; ++l)
        v[l] = V::granule_offset(4 * step + mma::b_row_major_row(l), Pv::span(l) * G::kSpanBytes + byte);
      INFO("V read, step " << step << " byte " << byte);
      REQUIRE(conflict_ways(v, V::kGranule) == 1);
    }
  }
  // Publisher stores of a tile (STS.128, or STS.64 pairs for 8-byte V granules).
  using Piece = pipeline::RegisterPiece<G, 32>;
  for (int i = 0; i < Piece::kLoadsPerLane; ++i) {
    std::vector<int> k(32), v0(32), v1(32);
    for (int l = 0; l < 32; ++l) {
      const int row = Piece::row_of(0, i, l), chunk = Piece::chunk_of(i, l);
      k[l] = K::chunk_offset(row, chunk);
      v0[l] = V::granule_offset(row, 16 * chunk);
      v1[l] = V::granule_offset(row, 16 * chunk + 8);
    }
    INFO("store " << i);
    REQUIRE(conflict_ways(k, 16) == 1);
    if (V::kGranule == 16) {
      REQUIRE(conflict_ways(v0, 16) == 1);
    } else {
      REQUIRE(conflict_ways(v0, 8) == 1);
      REQUIRE(conflict_ways(v1, 8) == 1);
    }
  }
  // Bijections: every logical piece of the tile lands on its own bytes, inside the tile.
  std::set<int> k_places, v_places;
  for (int t = 0; t < G::kTokens; ++t) {
    for (int c = 0; c < G::kChunksPerRow; ++c) {
      const int o = K::chunk_offset(t, c);
      REQUIRE(o >= 0);
      REQUIRE(o + 16 <= G::kTileBytes);
      REQUIRE(o % 16 == 0);
      k_places.insert(o);
    }
    for (int b = 0; b < G::kRowBytes; b += V::kGranule) {
      const int o = V::granule_offset(t, b);
      REQUIRE(o >= t * G::kRowBytes);
      REQUIRE(o + V::kGranule <= (t + 1) * G::kRowBytes);
      v_places.insert(o);
    }
  }
  REQUIRE(int(k_places.size()) == G::kTokens * G::kChunksPerRow);
  REQUIRE(int(v_places.size()) == G::kTokens * G::kRowBytes / V::kGranule);
}

}  // namespace

TEST_CASE("decode shared-memory accesses are bank-conflict-free, E5M2", "[smem_layout]") {
  check_geometry<64, 1>();
  check_geometry<128, 1>();
  check_geometry<256, 1>();
}

TEST_CASE("decode shared-memory accesses are bank-conflict-free, fp16", "[smem_layout]") {
  check_geometry<64, 2>();
  check_geometry<128, 2>();
  check_geometry<256, 2>();
}

TEST_CASE("softmax reads and writes of S and P are conflict-free", "[smem_layout]") {
  std::vector<int> s0(32), s1(32), p(32);
  for (int l = 0; l < 32; ++l) {
    const int row = softmax::softmax_row(l), token = 8 * softmax::softmax_part(l);
    s0[l] = pipeline::ScoreTileLayout::offset(row, token);
    s1[l] = s0[l] + 16;
    p[l] = pipeline::ProbTileLayout::offset(row, token);
  }
  CHECK(conflict_ways(s0, 16) == 1);
  CHECK(conflict_ways(s1, 16) == 1);
  CHECK(conflict_ways(p, 16) == 1);
}

TEST_CASE("the bank model itself sees conflicts", "[smem_layout]") {
  std::vector<int> same_bank(32), broadcast(32, 64), spread(32);
  for (int l = 0; l < 32; ++l) {
    same_bank[l] = l * 128;  // every lane on bank 0, different words
    spread[l] = l * 4;
  }
  CHECK(conflict_ways(same_bank, 4) == 32);
  CHECK(conflict_ways(broadcast, 4) == 1);
  CHECK(conflict_ways(spread, 4) == 1);
  std::vector<int> rows256(32);
  for (int l = 0; l < 32; ++l) rows256[l] = l * 256;  // a plain [token][256] row layout
  CHECK(conflict_ways(rows256, 16) == 8);
}
