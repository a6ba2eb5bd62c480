// Bank-conflict proofs for the shared-memory accesses of the decode kernel's main loop and
// warp merge, computed lane by lane from the same layout and fragment functions the device
// code uses, for every head dim and element size (at D 512 for each warp's part of the
// rows); and the layouts are bijections (no two
// logical pieces share bytes). Not covered: the Q tile's one-off stores, and kPublish's
// converting stores (2-way at D >= 128, docs/design.md).
#include <catch2/catch.hpp>
#include "cpu/bank_conflicts.h"
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

using vxqa_test::conflict_ways;
using vxqa_test::kInactive;


// Float index of a head's (m, l) in a warp's merge area, as DecodeCtaSm70 indexes merge_ml (its
// stores) and warp_ml (merge_and_write's reads).
int merge_m_index(int head) { return head; }
int merge_l_index(int head) { return 8 + head; }

template <int D, int E>
void check_geometry() {
  using G = pipeline::WarpTileGeometry<D, E == 1 ? KvType::kE5M2 : KvType::kFp16>;  // E: bytes an element
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
    for (int part = 0; part < G::kParts; ++part)
      for (int byte = 0; byte < G::kSpanBytes; byte += V::kGranule) {
        std::vector<int> v(32);
        for (int l = 0; l < 32; ++l)
          v[l] = V::granule_offset(4 * step + mma::b_row_major_row(l),
                                   part * G::kPartBytes + Pv::span(l) * G::kSpanBytes + byte);
        INFO("V read, step " << step << " part " << part << " byte " << byte);
        REQUIRE(conflict_ways(v, V::kGranule) == 1);
      }
  }
  // Publisher stores of a tile (STS.128, or STS.64 pairs for 8-byte V granules).
  using Piece = pipeline::RegisterPiece<G, 32 / G::kParts>;  // a team's warp stores its share
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

  // S stores (STS.64, DecodeCtaSm70::store_scores): accumulators i, i + 1 (i even) are adjacent
  // tokens of one head row; together the stores write each of the 8 x 32 scores once.
  using S = pipeline::ScoreTileLayout;
  std::set<int> s_written;
  for (int i = 0; i < 8; i += 2) {
    std::vector<int> a(32);
    for (int l = 0; l < 32; ++l) {
      const int head = mma::c_row(l, i), token = Qk::c_token(l, i);
      REQUIRE(mma::c_row(l, i + 1) == head);
      REQUIRE(Qk::c_token(l, i + 1) == token + 1);
      a[l] = S::offset(head, token);
      REQUIRE(a[l] % 8 == 0);
      s_written.insert(a[l]);
      s_written.insert(S::offset(head, token + 1));
    }
    INFO("S store, elements " << i << " and " << i + 1);
    REQUIRE(conflict_ways(a, 8) == 1);
  }
  REQUIRE(int(s_written.size()) == 8 * 32);

  // Merge O stores (STS.64 of accumulators i, i + 1: adjacent dims of one head row), each
  // warp of a team into its own part's area (M::kBytes apart).
  using M = pipeline::MergeTileLayout<G::kPartDims>;
  constexpr int P = G::kPartDims;
  std::set<int> o_written;
  for (int n = 0; n < Pv::kNBlocks; ++n)
    for (int i = 0; i < 8; i += 2) {
      std::vector<int> a(32);
      for (int l = 0; l < 32; ++l) {
        const int head = mma::c_row(l, i), dim = Pv::c_dim(l, n, i);
        REQUIRE(mma::c_row(l, i + 1) == head);
        REQUIRE(Pv::c_dim(l, n, i + 1) == dim + 1);
        REQUIRE(M::index(head, dim + 1) == M::index(head, dim) + 1);
        a[l] = 4 * M::index(head, dim);
        REQUIRE(a[l] % 8 == 0);
        o_written.insert(M::index(head, dim));
        o_written.insert(M::index(head, dim + 1));
      }
      INFO("merge O store, n-block " << n << ", elements " << i << " and " << i + 1);
      REQUIRE(conflict_ways(a, 8) == 1);
    }
  REQUIRE(int(o_written.size()) == 8 * P);
  // Merge reads (DecodeCtaSm70::merge_and_write): thread t takes (head, dim) = (t / D, t % D),
  // so a warp reads 32 consecutive dims of one head (of one part): O word by word, m and l
  // broadcast.
  for (int first = 0; first < 8 * D; first += 32) {
    std::vector<int> o(32), m(32), l_sum(32);
    for (int l = 0; l < 32; ++l) {
      const int head = (first + l) / D, dim = (first + l) % D;
      o[l] = 4 * (dim / P * (M::kBytes / 4) + M::index(head, dim % P));
      m[l] = 4 * merge_m_index(head);
      l_sum[l] = 4 * merge_l_index(head);
    }
    INFO("merge read of threads " << first << ".." << first + 31);
    REQUIRE(conflict_ways(o, 4) == 1);
    REQUIRE(conflict_ways(m, 4) == 1);
    REQUIRE(conflict_ways(l_sum, 4) == 1);
  }
  // Bijection of each part's merge area; the parts side by side inside the tile they reuse.
  std::set<int> o_places;
  for (int head = 0; head < 8; ++head)
    for (int dim = 0; dim < P; ++dim) {
      const int x = M::index(head, dim);
      REQUIRE(x >= 0);
      REQUIRE(4 * (x + 1) <= M::kBytes);
      o_places.insert(x);
    }
  REQUIRE(int(o_places.size()) == 8 * P);
  REQUIRE(G::kParts * M::kBytes <= G::kTileBytes);
}

}  // namespace

TEST_CASE("decode shared-memory accesses are bank-conflict-free, E5M2", "[smem_layout]") {
  check_geometry<64, 1>();
  check_geometry<128, 1>();
  check_geometry<256, 1>();
  check_geometry<512, 1>();
}

TEST_CASE("decode shared-memory accesses are bank-conflict-free, fp16", "[smem_layout]") {
  check_geometry<64, 2>();
  check_geometry<128, 2>();
  check_geometry<256, 2>();
  check_geometry<512, 2>();
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

TEST_CASE("alpha, merge m and l stores and alpha reads are conflict-free", "[smem_layout]") {
  // Lanes of part 0 store their row's alpha (online_softmax_step), then m and l (DecodeCtaSm70).
  std::vector<int> alpha(32, kInactive), m(32, kInactive), l_sum(32, kInactive);
  std::set<int> stored_rows;
  for (int l = 0; l < 32; ++l) {
    if (softmax::softmax_part(l) != 0) continue;
    const int row = softmax::softmax_row(l);
    alpha[l] = 4 * row;
    m[l] = 4 * merge_m_index(row);
    l_sum[l] = 4 * merge_l_index(row);
    stored_rows.insert(row);
  }
  CHECK(stored_rows.size() == 8);
  CHECK(conflict_ways(alpha, 4) == 1);
  CHECK(conflict_ways(m, 4) == 1);
  CHECK(conflict_ways(l_sum, 4) == 1);
  // DecodeCtaSm70::rescale: alpha of the accumulators' two rows.
  std::vector<int> a0(32), a2(32);
  for (int l = 0; l < 32; ++l) {
    a0[l] = 4 * mma::c_row(l, 0);
    a2[l] = 4 * mma::c_row(l, 2);
  }
  CHECK(conflict_ways(a0, 4) == 1);
  CHECK(conflict_ways(a2, 4) == 1);
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
  std::vector<int> half_inactive = same_bank;
  for (int l = 1; l < 32; l += 2) half_inactive[l] = kInactive;
  CHECK(conflict_ways(half_inactive, 4) == 16);
  std::vector<int> rows256(32);
  for (int l = 0; l < 32; ++l) rows256[l] = l * 256;  // a plain [token][256] row layout
  CHECK(conflict_ways(rows256, 16) == 8);
  // The S and merge stores these layouts replaced: one float at a time into S, and pairs
  // into a plain row-major 8 x 128 O area.
  using Qk = mma::QkConsumer<pipeline::WarpTileGeometry<128, KvType::kE5M2>>;
  using Pv = mma::PvConsumer<pipeline::WarpTileGeometry<128, KvType::kE5M2>>;
  std::vector<int> s_floats(32), o_row_major(32);
  for (int l = 0; l < 32; ++l) {
    s_floats[l] = pipeline::ScoreTileLayout::offset(mma::c_row(l, 0), Qk::c_token(l, 0));
    o_row_major[l] = 4 * (mma::c_row(l, 0) * 128 + Pv::c_dim(l, 0, 0));
  }
  CHECK(conflict_ways(s_floats, 4) == 2);
  CHECK(conflict_ways(o_row_major, 8) == 8);
}
