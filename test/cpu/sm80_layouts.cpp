// The SM80 path's index maps and shared-memory layouts, lane by lane, from the functions the
// device code uses: the QK k order and the PV m-tile rows are permutations of the head dims,
// the lanes' token rows cover the tile, the K and V reads and the cp.async writes are
// bank-conflict-free (or as stated), and the layouts keep every chunk apart.
#include <catch2/catch.hpp>
#include "cpu/bank_conflicts.h"
#include <map>
#include <set>
#include <vector>
#include <vxqa/mma/fragments_m16n8k16.cuh>
#include <vxqa/mma/sm80_pv_consumer.cuh>
#include <vxqa/mma/sm80_qk_consumer.cuh>
#include <vxqa/pipeline/cp_async_tile_load.cuh>

namespace {

using namespace vxqa;
namespace frag = mma::m16n8k16;

using vxqa_test::conflict_ways;

template <int D, int E>
void check() {
  using G = mma::Sm80TileGeometry<D, E == 1 ? KvType::kE5M2 : KvType::kFp16>;  // E: bytes an element
  using Qk = mma::Sm80QkConsumer<G>;
  using Pv = mma::Sm80PvConsumer<G>;
  using K = typename Qk::Layout;
  using V = typename Pv::Layout;
  using Load = pipeline::CpAsyncTileLoad<G, K, V>;
  INFO("head dim " << D << ", " << E << "-byte elements");

  // QK: in each k-step the 16 k slots are 16 distinct dims; over all steps, every dim once.
  std::set<int> all_dims;
  for (int s = 0; s < Qk::kSteps; ++s) {
    std::set<int> slots, dims;
    for (int t = 0; t < 4; ++t)
      for (int j = 0; j < 4; ++j) {
        slots.insert(Qk::k_slot(t, j));
        dims.insert(Qk::dim0(s, t) + j);
        all_dims.insert(Qk::dim0(s, t) + j);
      }
    REQUIRE(slots.size() == 16);
    REQUIRE(*slots.rbegin() == 15);
    REQUIRE(dims.size() == 16);
  }
  REQUIRE(int(all_dims.size()) == D);
  REQUIRE(*all_dims.rbegin() == D - 1);
  // The lane's k slots of its A registers are the B fragment's rows: the same permutation.
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) REQUIRE(frag::b_row(lane, e) == Qk::k_slot(frag::thread_in_group(lane), e));

  // PV: every (m-tile, element) of every lane is one (dim, head); all D x 8 once, in one warp
  // (at D 512 too).
  std::set<std::pair<int, int>> outputs;
  for (int lane = 0; lane < 32; ++lane)
    for (int m = 0; m < Pv::kMTiles; ++m)
      for (int e = 0; e < 4; ++e) {
        const int dim = Pv::dim_of(lane, m, e), head = Pv::head_of(lane, e);
        REQUIRE((dim >= 0 && dim < D && head >= 0 && head < 8));
        outputs.insert({dim, head});
        // Rows r and r + 8 of an m-tile are one lane's two neighbouring dims.
        if (e >= 2) REQUIRE(Pv::dim_of(lane, m, e) == Pv::dim_of(lane, m, e - 2) + 1);
        // ... and the first is even: the merge stores the pair as one float2 (or half2).
        if (e < 2) REQUIRE(dim % 2 == 0);
      }
  REQUIRE(int(outputs.size()) == D * 8);
  // The four lanes of a group take the tile's 16 tokens, in the B fragment's k order.
  for (int g = 0; g < 8; ++g) {
    std::set<int> tokens;
    for (int t = 0; t < 4; ++t)
      for (int j = 0; j < 4; ++j) {
        tokens.insert(Pv::token_row(4 * g + t, j));
        REQUIRE(Pv::token_row(4 * g + t, j) == frag::b_row(4 * g + t, j));
      }
    REQUIRE(tokens.size() == 16);
  }

  // K reads (LDS.128): rows r and r + 8, chunk t + 4g, for every g.
  for (int g = 0; g < Qk::kChunkReads; ++g)
    for (int half : {0, 8}) {
      std::vector<int> a(32);
      for (int l = 0; l < 32; ++l) a[l] = K::chunk_offset(frag::group(l) + half, frag::thread_in_group(l) + 4 * g);
      INFO("K read g " << g << " rows +" << half);
      REQUIRE(conflict_ways(a, 16) == 1);
    }
  // V reads: span (r + 8v) of each of the lane's four token rows.
  for (int v = 0; v < Pv::kReads; ++v)
    for (int j = 0; j < 4; ++j) {
      std::vector<int> a(32);
      for (int l = 0; l < 32; ++l) {
        a[l] = V::offset(Pv::token_row(l, j), (frag::group(l) + 8 * v) * Pv::kReadBytes);
        REQUIRE(Pv::read_offset(l, j, v) == a[l]);  // the consumer's shortcut
      }
      INFO("V read v " << v << " row " << j);
      REQUIRE(conflict_ways(a, Pv::kReadBytes) == 1);
    }

  // cp.async writes: every chunk of the tile once, inside the tile, 16-byte aligned and
  // conflict-free; and every 32-byte sector of a row whole (chunks 2s and 2s + 1 side by side
  // from a 32-byte boundary), so that L2 serves a warp's copy of it once.
  std::set<int> k_chunks, v_chunks;
  for (int i = 0; i < Load::kChunksPerLane; ++i) {
    std::vector<int> ka(32), va(32);
    for (int l = 0; l < 32; ++l) {
      const int row = Load::row_of(i, l), chunk = Load::chunk_of(i, l);
      ka[l] = K::chunk_offset(row, chunk);
      va[l] = V::offset(row, 16 * chunk);
      if (Load::kRowsPerCopy > 0)  // issue_one_page's shortcut: copy 0's offset plus a constant
        REQUIRE(va[l] == V::offset(Load::row_of(0, l), 16 * Load::chunk_of(0, l)) + V::offset(i * Load::kRowsPerCopy, 0));
      REQUIRE((ka[l] % 16 == 0 && ka[l] + 16 <= K::kBytes && va[l] % 16 == 0 && va[l] + 16 <= V::kBytes));
      k_chunks.insert(ka[l]);
      v_chunks.insert(va[l]);
    }
    REQUIRE(conflict_ways(ka, 16) == 1);
    REQUIRE(conflict_ways(va, 16) == 1);
  }
  for (int row = 0; row < G::kTokens; ++row)
    for (int chunk = 0; chunk < G::kChunksPerRow; chunk += 2) {
      INFO("row " << row << ", chunk " << chunk);
      REQUIRE(K::chunk_offset(row, chunk) % 32 == 0);
      REQUIRE(K::chunk_offset(row, chunk + 1) == K::chunk_offset(row, chunk) + 16);
      REQUIRE(V::offset(row, 16 * chunk) % 32 == 0);
      REQUIRE(V::offset(row, 16 * chunk + 16) == V::offset(row, 16 * chunk) + 16);
    }
  REQUIRE(int(k_chunks.size()) == G::kTokens * G::kChunksPerRow);
  REQUIRE(int(v_chunks.size()) == G::kTokens * G::kChunksPerRow);
}

}  // namespace

TEST_CASE("SM80 path: k order, m-tile rows and token rows are permutations", "[sm80_layouts]") {
  check<64, 1>();
  check<128, 1>();
  check<256, 1>();
  check<512, 1>();
  check<64, 2>();
  check<128, 2>();
  check<256, 2>();
  check<512, 2>();
}

TEST_CASE("m16n8k16 fragments: every element of A, B and C held by exactly one lane", "[sm80_layouts]") {
  std::set<std::pair<int, int>> a, b, c;
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 8; ++e) a.insert({frag::a_row(lane, e), frag::a_col(lane, e)});
    for (int e = 0; e < 4; ++e) b.insert({frag::b_row(lane, e), frag::b_col(lane, e)});
    for (int e = 0; e < 4; ++e) c.insert({frag::c_row(lane, e), frag::c_col(lane, e)});
  }
  CHECK(a.size() == 256);
  CHECK(b.size() == 128);
  CHECK(c.size() == 128);
  // The PTX ISA's first rows: lane 0 holds A[0][0..1], A[8][0..1], A[0][8..9], A[8][8..9].
  CHECK((frag::a_row(0, 2) == 8 && frag::a_col(0, 4) == 8 && frag::a_col(5, 1) == 3 && frag::a_row(5, 0) == 1));
  CHECK((frag::b_row(1, 2) == 10 && frag::b_col(9, 0) == 2));
  CHECK((frag::c_row(6, 3) == 9 && frag::c_col(6, 3) == 5));
}
