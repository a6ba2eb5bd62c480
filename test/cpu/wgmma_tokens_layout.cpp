// The tokens-on-M fragments of the warpgroup MMA (mma/wgmma_tokens_layout.cuh) on the CPU:
// QK's dim order is a permutation whose k16 steps are exactly the codes of each thread's
// 16-byte loads, Oᵀ's rows are every dim once and a thread's are one run of consecutive
// codes, the swizzled stage loads of K and V are free of bank conflicts, and the token
// interleave pairs the right codes. The products themselves are checked on the GPU by the
// prototype (bench/wgmma_rows.cu, tokens_kernel) against a float64 reference.
#include <catch2/catch.hpp>
#include <set>
#include <vector>
#include <vxqa/mma/wgmma_layout.cuh>
#include <vxqa/mma/wgmma_tokens_layout.cuh>

namespace {

using namespace vxqa::mma::wgmma;

template <int kD>
void check_qk_order() {
  using L = TokensOnMLayout<kD>;
  std::vector<int> seen(kD, 0);
  for (int k = 0; k < kD; ++k) ++seen[L::qk_dim(k)];
  for (int count : seen) REQUIRE(count == 1);
  // Thread t's A element e of step s is logical k 16 s + a_col(t, e); its dim must be byte
  // 4 (s % 4) + (0, 1, 2, 3 for e = 0/1, 4/5 of row g; the same for row g + 8) of its chunk.
  for (int t = 0; t < 128; ++t)
    for (int s = 0; s < L::kSteps; ++s)
      for (int e = 0; e < 8; ++e) {
        const int c = t & 3;
        const int byte = 4 * (s % 4) + (e & 1) + 2 * (e >> 2);
        REQUIRE(L::qk_dim(16 * s + a_col(t, e)) == 16 * L::k_chunk(s / 4, c) + byte);
      }
}

template <int kD>
void check_o_rows() {
  using L = TokensOnMLayout<kD>;
  std::vector<int> seen(kD, 0);
  for (int mt = 0; mt < L::kMTiles; ++mt)
    for (int warp = 0; warp < 4; ++warp)
      for (int m = 0; m < 16; ++m) ++seen[L::o_dim(mt, warp, m)];
  for (int count : seen) REQUIRE(count == 1);
  // A thread's rows (g and g + 8 of every M tile) are kVBytes consecutive dims from v_byte,
  // row g + 8 h of tile mt at offset 2 mt + h.
  for (int warp = 0; warp < 4; ++warp)
    for (int g = 0; g < 8; ++g)
      for (int mt = 0; mt < L::kMTiles; ++mt)
        for (int h = 0; h < 2; ++h) REQUIRE(L::o_dim(mt, warp, g + 8 * h) == L::v_byte(warp, g) + 2 * mt + h);
}

// Lanes `lanes` of one shared-memory access of `bytes` each (4, 8 or 16): the hardware
// serves it in phases of 128 bytes of requests (32, 16 or 8 lanes); within a phase, two
// lanes conflict when they touch the same bank at different addresses.
int conflicts(const std::vector<int>& address, int bytes) {
  const int lanes_per_phase = 128 / bytes;
  int found = 0;
  for (int p = 0; p < 32; p += lanes_per_phase) {
    std::vector<std::set<int>> bank_words(32);
    for (int l = p; l < p + lanes_per_phase; ++l)
      for (int w = 0; w < bytes / 4; ++w) bank_words[(address[l] / 4 + w) % 32].insert(address[l] / 4 + w);
    for (const auto& words : bank_words) found += int(words.size()) > 1 ? int(words.size()) - 1 : 0;
  }
  return found;
}

template <int kD>
void check_k_loads() {
  using L = TokensOnMLayout<kD>;
  for (int warp = 0; warp < 4; ++warp)
    for (int i = 0; i < L::kSteps / 4; ++i)
      for (int h = 0; h < 2; ++h) {  // the load of token g, then of token g + 8
        std::vector<int> address(32);
        for (int lane = 0; lane < 32; ++lane) {
          const int token = 16 * warp + lane / 4 + 8 * h;
          address[lane] = token * kD + 16 * L::k_slot(token, L::k_chunk(i, lane % 4));
          REQUIRE(L::k_slot(token, L::k_chunk(i, lane % 4)) < L::kSteps);
        }
        REQUIRE(conflicts(address, 16) == 0);
      }
  // Each chunk of a token lands in its own slot.
  for (int token = 0; token < 64; ++token) {
    std::set<int> slots;
    for (int chunk = 0; chunk < L::kSteps; ++chunk) slots.insert(L::k_slot(token, chunk));
    REQUIRE(int(slots.size()) == L::kSteps);
  }
}

template <int kD>
void check_v_loads() {
  using L = TokensOnMLayout<kD>;
  const int bytes = L::kVBytes > 16 ? 16 : L::kVBytes;  // one load of up to 16 bytes
  for (int warp = 0; warp < 4; ++warp)
    for (int ks = 0; ks < 4; ++ks)
      for (int which = 0; which < 4; ++which) {  // tokens 2c, 2c + 1, 2c + 8, 2c + 9 of the step
        for (int part = 0; part < L::kVBytes / bytes; ++part) {
          std::vector<int> address(32);
          for (int lane = 0; lane < 32; ++lane) {
            const int c = lane % 4, g = lane / 4;
            const int token = 16 * ks + 2 * c + (which & 1) + 8 * (which >> 1);
            const int byte = L::v_byte(warp, g) + part * bytes;
            address[lane] = token * kD + 16 * L::v_slot(token, byte / 16) + byte % 16;
            REQUIRE(L::v_slot(token, byte / 16) < L::kSteps);
          }
          REQUIRE(conflicts(address, bytes) == 0);
        }
      }
  for (int token = 0; token < 64; ++token) {
    std::set<int> slots;
    for (int chunk = 0; chunk < L::kSteps; ++chunk) slots.insert(L::v_slot(token, chunk));
    REQUIRE(int(slots.size()) == L::kSteps);
  }
}

}  // namespace

TEST_CASE("wgmma tokens on M: QK's dim order is a permutation, a thread's steps its own loads",
          "[wgmma_tokens_layout]") {
  check_qk_order<128>();
  check_qk_order<256>();
  check_qk_order<512>();
}

TEST_CASE("wgmma tokens on M: O's rows are every dim once, a thread's one run of codes", "[wgmma_tokens_layout]") {
  check_o_rows<128>();
  check_o_rows<256>();
  check_o_rows<512>();
}

TEST_CASE("wgmma tokens on M: the swizzled K and V loads are free of bank conflicts", "[wgmma_tokens_layout]") {
  check_k_loads<128>();
  check_k_loads<256>();
  check_k_loads<512>();
  check_v_loads<128>();
  check_v_loads<256>();
  check_v_loads<512>();
  // The check can fail: without the swizzle, V's loads of tokens 0, 2, 4, 6 share banks.
  std::vector<int> plain(32);
  for (int lane = 0; lane < 32; ++lane) plain[lane] = (2 * (lane % 4)) * 256 + 8 * (lane / 4);
  REQUIRE(conflicts(plain, 8) > 0);
}

TEST_CASE("wgmma tokens on M: the interleave pairs each dim's codes of two tokens", "[wgmma_tokens_layout]") {
  uint32_t dims01 = 0, dims23 = 0;
  TokensOnMLayout<256>::interleave_tokens(0x13121110u, 0x23222120u, dims01, dims23);
  REQUIRE(dims01 == 0x21112010u);  // dim 0: t0, t1; dim 1: t0, t1
  REQUIRE(dims23 == 0x23132212u);
}
