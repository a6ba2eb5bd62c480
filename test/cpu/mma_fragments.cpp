// The mma.m8n8k4 fragment functions of vxqa/mma/fragments.cuh against the PTX ISA table, and
// the QK and PV consumers' own index functions (which token or dim each lane's operands and
// accumulators are) against each other:
//   (a) every quad pair's 8 lanes hold each element of A, B (.col and .row) and C once;
//   (b) the fragment functions say what the PTX ISA table says (written out here);
//   (c) QkConsumer::b_token / c_token and PvConsumer::span / c_dim cover the S and O blocks
//       once each and agree on which token (QK) or dims (PV) a B column carries.
//
// No replay of the consumer loops here. An earlier version replayed QkConsumer::run and
// PvConsumer::run on a CPU-emulated warp MMA, but the replay re-implemented their loops
// (which words of K, V, Q and P feed which MMA) instead of calling them, so it tested a copy.
// The device code is what test/gpu/pieces.cu runs: its QkConsumer and PvConsumer cases call
// run() for D = 64/128/256 with E5M2 and fp16 tiles through the real layouts and compare
// with CPU products, which is the point the replay made. The replay and the emulator it
// needed are gone; what stays here checks library code against an independent source.
#include <catch2/catch.hpp>

#include <vxqa/mma/fragments.cuh>
#include <vxqa/mma/pv_consumer.cuh>
#include <vxqa/mma/qk_consumer.cuh>
#include <vxqa/pipeline/smem_layout.cuh>

#include <vector>

namespace {

using namespace vxqa;

// The PTX ISA fragment table (../shared/design.md §3), written out independently of the
// library.
namespace ptx {
int hi(int lane) { return lane >= 16 ? 4 : 0; }
int quad_pair(int lane) { return (lane % 16) / 4; }
int a_row(int lane) { return lane % 4 + hi(lane); }
int b_col_row(int /*lane*/, int i) { return i; }
int b_col_col(int lane) { return lane % 4 + hi(lane); }
int b_row_row(int lane) { return lane % 4; }
int b_row_col(int lane, int i) { return i + hi(lane); }
int c_row(int lane, int i) { return (lane & 1) + (i & 2) + hi(lane); }
int c_col(int lane, int i) { return (i & 4) + (lane & 2) + (i & 1); }
}  // namespace ptx

// (c) QK: S column n of quad pair q is the token whose K row the lane with B column n reads.
template <int D, int E>
void check_qk_indices() {
  using Qk = mma::QkConsumer<pipeline::WarpTileGeometry<D, E == 1 ? KvType::kE5M2 : KvType::kFp16>>;
  INFO("QK, head dim " << D << ", " << E << "-byte elements");
  int seen[8][32] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int q = mma::quad_pair(lane);
    REQUIRE(Qk::b_token(lane) / 8 == q);  // quad pair q owns tokens 8q..8q+7
    for (int i = 0; i < 8; ++i) {
      const int head = mma::c_row(lane, i), token = Qk::c_token(lane, i);
      REQUIRE((token >= 0 && token < 32));
      ++seen[head][token];
      // The lane of this quad pair whose B fragment holds column c_col(lane, i).
      int b_lanes = 0;
      for (int other = 0; other < 32; ++other) {
        if (mma::quad_pair(other) != q || mma::b_col_major_col(other) != mma::c_col(lane, i)) continue;
        ++b_lanes;
        CHECK(Qk::b_token(other) == token);
      }
      CHECK(b_lanes == 1);
    }
  }
  for (int h = 0; h < 8; ++h)
    for (int t = 0; t < 32; ++t) REQUIRE(seen[h][t] == 1);
}

// (c) PV: the dim of O column n (n-block j) lies in the span of P/8 dims that the lanes with
// B column n read from the V row (P: the warp's part of the head dims, D up to 256).
template <int D, int E>
void check_pv_indices() {
  using Pv = mma::PvConsumer<pipeline::WarpTileGeometry<D, E == 1 ? KvType::kE5M2 : KvType::kFp16>>;
  INFO("PV, head dim " << D << ", " << E << "-byte elements");
  constexpr int P = Pv::kPartDims;
  constexpr int kSpanDims = P / 8;
  std::vector<int> seen(8 * P, 0);
  for (int lane = 0; lane < 32; ++lane) {
    const int q = mma::quad_pair(lane);
    for (int nblock = 0; nblock < Pv::kNBlocks; ++nblock)
      for (int i = 0; i < 8; ++i) {
        const int head = mma::c_row(lane, i), dim = Pv::c_dim(lane, nblock, i);
        REQUIRE((dim >= 0 && dim < P));
        ++seen[head * P + dim];
        int b_lanes = 0;
        for (int other = 0; other < 32; ++other)
          for (int k = 0; k < 4; ++k) {
            if (mma::quad_pair(other) != q || mma::b_row_major_col(other, k) != mma::c_col(lane, i)) continue;
            ++b_lanes;
            const int first = Pv::span(other) * kSpanDims;
            CHECK((dim >= first && dim < first + kSpanDims));
          }
        CHECK(b_lanes == 4);  // one per k row (token) of the k-step
      }
  }
  for (int x = 0; x < 8 * P; ++x) REQUIRE(seen[x] == 1);
}

}  // namespace

// ---------------------------------------------------------------------------------------

TEST_CASE("fragment functions: quad pairs, and each quad pair covers A, B and C once", "[mma_fragments]") {
  int lanes_of[4] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int q = mma::quad_pair(lane);
    REQUIRE(q == ptx::quad_pair(lane));  // lanes 4q..4q+3 and 16+4q..16+4q+3
    REQUIRE(mma::lane_hi(lane) == ptx::hi(lane));
    ++lanes_of[q];
  }
  for (int q = 0; q < 4; ++q) REQUIRE(lanes_of[q] == 8);

  for (int q = 0; q < 4; ++q) {
    INFO("quad pair " << q);
    int a[8][4] = {}, b_col[4][8] = {}, b_row[4][8] = {}, c[8][8] = {};
    for (int lane = 0; lane < 32; ++lane) {
      if (mma::quad_pair(lane) != q) continue;
      for (int i = 0; i < 4; ++i) {
        const int ar = mma::a_row(lane), ac = mma::a_col(lane, i);
        const int cr = mma::b_col_major_row(lane, i), cc = mma::b_col_major_col(lane);
        const int rr = mma::b_row_major_row(lane), rc = mma::b_row_major_col(lane, i);
        REQUIRE((ar >= 0 && ar < 8 && ac >= 0 && ac < 4));
        REQUIRE((cr >= 0 && cr < 4 && cc >= 0 && cc < 8));
        REQUIRE((rr >= 0 && rr < 4 && rc >= 0 && rc < 8));
        ++a[ar][ac], ++b_col[cr][cc], ++b_row[rr][rc];
      }
      for (int i = 0; i < 8; ++i) {
        const int r = mma::c_row(lane, i), n = mma::c_col(lane, i);
        REQUIRE((r >= 0 && r < 8 && n >= 0 && n < 8));
        ++c[r][n];
      }
    }
    for (int r = 0; r < 8; ++r)
      for (int k = 0; k < 4; ++k) {
        CHECK(a[r][k] == 1);
        CHECK(b_col[k][r] == 1);
        CHECK(b_row[k][r] == 1);
      }
    for (int r = 0; r < 8; ++r)
      for (int n = 0; n < 8; ++n) CHECK(c[r][n] == 1);
  }
}

TEST_CASE("fragment functions say what the PTX ISA table says", "[mma_fragments]") {
  for (int lane = 0; lane < 32; ++lane) {
    INFO("lane " << lane);
    REQUIRE(mma::a_row(lane) == ptx::a_row(lane));
    REQUIRE(mma::b_col_major_col(lane) == ptx::b_col_col(lane));
    REQUIRE(mma::b_row_major_row(lane) == ptx::b_row_row(lane));
    for (int i = 0; i < 4; ++i) {
      REQUIRE(mma::a_col(lane, i) == i);
      REQUIRE(mma::b_col_major_row(lane, i) == ptx::b_col_row(lane, i));
      REQUIRE(mma::b_row_major_col(lane, i) == ptx::b_row_col(lane, i));
    }
    for (int i = 0; i < 8; ++i) {
      REQUIRE(mma::c_row(lane, i) == ptx::c_row(lane, i));
      REQUIRE(mma::c_col(lane, i) == ptx::c_col(lane, i));
    }
  }
}

TEST_CASE("QK consumer: b_token and c_token cover the 8 x 32 S block once and agree", "[mma_fragments]") {
  check_qk_indices<64, 1>();
  check_qk_indices<128, 1>();
  check_qk_indices<256, 1>();
  check_qk_indices<64, 2>();
  check_qk_indices<128, 2>();
  check_qk_indices<256, 2>();
}

TEST_CASE("PV consumer: c_dim covers the 8 x D O block once, inside the spans the lanes read",
          "[mma_fragments]") {
  check_pv_indices<64, 1>();
  check_pv_indices<128, 1>();
  check_pv_indices<256, 1>();
  check_pv_indices<512, 1>();
  check_pv_indices<64, 2>();
  check_pv_indices<128, 2>();
  check_pv_indices<256, 2>();
  check_pv_indices<512, 2>();
}
