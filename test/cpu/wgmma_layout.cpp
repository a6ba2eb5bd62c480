// The warpgroup MMA's layouts, descriptor and fragment tables (mma/wgmma_layout.cuh) on the
// CPU: every layout places each element once inside its bytes, its core matrices are 128
// contiguous bytes, 8 elements of the contiguous dimension are one aligned 16-byte run, the
// descriptor's fields sit at their bits, and the fragment tables give each element of A and
// of the accumulators to exactly one (thread, register) of the warpgroup. What the hardware
// reads through them is checked on the GPU (test/gpu/wgmma.cu).
#include <catch2/catch.hpp>
#include <set>
#include <utility>
#include <vector>
#include <vxqa/mma/fragments_m16n8k16.cuh>
#include <vxqa/mma/wgmma_layout.cuh>

namespace {

using namespace vxqa::mma;

// Each (row, k) of a [rows x k] layout at a distinct, 2-aligned offset inside its bytes.
template <class Layout>
void check_bijection(int rows, int k_size) {
  std::vector<int> seen(Layout::kBytes / 2, 0);
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < k_size; ++k) {
      const int offset = Layout::offset(r, k);
      REQUIRE(offset >= 0);
      REQUIRE(offset + 2 <= Layout::kBytes);
      REQUIRE(offset % 2 == 0);
      ++seen[offset / 2];
    }
  for (int count : seen) REQUIRE(count == 1);
}

}  // namespace

TEST_CASE("wgmma layouts: K-major places every element once, in core matrices of 128 bytes", "[wgmma_layout]") {
  using L = wgmma::KMajorLayout<64, 256>;  // a 64-token K tile at head dim 256, or Q of 64 rows
  check_bijection<L>(64, 256);
  // A core matrix: 8 rows of 16 bytes, back to back.
  for (int r0 = 0; r0 < 64; r0 += 8)
    for (int k0 = 0; k0 < 256; k0 += 8) {
      const int base = L::offset(r0, k0);
      CHECK(base % 128 == 0);
      for (int r = 0; r < 8; ++r)
        for (int k = 0; k < 8; ++k) REQUIRE(L::offset(r0 + r, k0 + k) == base + 16 * r + 2 * k);
      // The next core matrix along K and along the rows, as the descriptor says.
      if (k0 + 8 < 256) CHECK(L::offset(r0, k0 + 8) - base == L::kLeadingBytes);
      if (r0 + 8 < 64) CHECK(L::offset(r0 + 8, k0) - base == L::kStrideBytes);
    }
  CHECK(L::step_offset(8, 3) == L::offset(8, 48));
}

TEST_CASE("wgmma layouts: MN-major places every element once; 8 elements along MN are 16 aligned bytes",
          "[wgmma_layout]") {
  using L = wgmma::MnMajorLayout<256, 64>;  // a 64-token V tile at head dim 256: dims on MN, tokens on K
  check_bijection<L>(256, 64);
  for (int mn0 = 0; mn0 < 256; mn0 += 8)
    for (int k0 = 0; k0 < 64; k0 += 8) {
      const int base = L::offset(mn0, k0);
      CHECK(base % 128 == 0);
      for (int k = 0; k < 8; ++k)
        for (int mn = 0; mn < 8; ++mn) REQUIRE(L::offset(mn0 + mn, k0 + k) == base + 16 * k + 2 * mn);
      if (k0 + 8 < 64) CHECK(L::offset(mn0, k0 + 8) - base == L::kLeadingBytes);
      if (mn0 + 8 < 256) CHECK(L::offset(mn0 + 8, k0) - base == L::kStrideBytes);
    }
  // The K-major layout's rows are the same: a cache row's 8 codes make one 16-byte store.
  using K = wgmma::KMajorLayout<64, 256>;
  for (int token = 0; token < 64; ++token)
    for (int dim = 0; dim < 256; dim += 8) {
      CHECK(L::offset(dim, token) % 16 == 0);
      CHECK(K::offset(token, dim) % 16 == 0);
      CHECK(L::offset(dim + 7, token) == L::offset(dim, token) + 14);
      CHECK(K::offset(token, dim + 7) == K::offset(token, dim) + 14);
    }
}

TEST_CASE("wgmma descriptor: address, leading and stride offsets in 16-byte units at bits 0, 16 and 32",
          "[wgmma_layout]") {
  CHECK(wgmma::descriptor(0, 0, 0) == 0u);
  CHECK(wgmma::descriptor(16, 0, 0) == 1u);
  CHECK(wgmma::descriptor(0x3FFF0u, 0, 0) == 0x3FFFu);
  CHECK(wgmma::descriptor(0, 128, 0) == (uint64_t(8) << 16));
  CHECK(wgmma::descriptor(0, 0, 4096) == (uint64_t(256) << 32));
  const uint64_t d = wgmma::descriptor(0x1230u, 0x3FFF0u, 0x3FFF0u);
  CHECK((d & 0x3FFFu) == 0x123u);
  CHECK(((d >> 16) & 0x3FFFu) == 0x3FFFu);
  CHECK(((d >> 32) & 0x3FFFu) == 0x3FFFu);
  // No swizzle (bits 62-63), base offset 0 (bits 49-51), and the reserved bits clear.
  CHECK((d & ~(uint64_t(0x3FFF) | (uint64_t(0x3FFF) << 16) | (uint64_t(0x3FFF) << 32))) == 0u);
}

TEST_CASE("wgmma fragments: each element of A (64 x 16) and of an m64n64 accumulator is one thread's",
          "[wgmma_layout]") {
  std::set<std::pair<int, int>> a, d;
  for (int t = 0; t < 128; ++t) {
    for (int e = 0; e < 8; ++e) {
      const int row = wgmma::a_row(t, e), col = wgmma::a_col(t, e);
      REQUIRE((row >= 0 && row < 64 && col >= 0 && col < 16));
      a.insert({row, col});
      CHECK(row / 16 == t / 32);  // a warp holds its own 16 rows
    }
    for (int i = 0; i < 32; ++i) {
      const int row = wgmma::d_row(t, i), col = wgmma::d_col(t, i);
      REQUIRE((row >= 0 && row < 64 && col >= 0 && col < 64));
      d.insert({row, col});
      CHECK(row / 16 == t / 32);
    }
  }
  CHECK(a.size() == 64u * 16u);
  CHECK(d.size() == 64u * 64u);
  // Inside a warp, A is mma.m16n8k16's A, and each 8 columns of D its C: the accumulators
  // of a k16 slice of S become P's A registers as they are (two f32 to one f16x2).
  for (int t = 0; t < 128; ++t) {
    const int lane = t % 32, warp = t / 32;
    for (int e = 0; e < 8; ++e) {
      CHECK(wgmma::a_row(t, e) == 16 * warp + m16n8k16::a_row(lane, e));
      CHECK(wgmma::a_col(t, e) == m16n8k16::a_col(lane, e));
    }
    for (int i = 0; i < 32; ++i) {
      CHECK(wgmma::d_row(t, i) == 16 * warp + m16n8k16::c_row(lane, i % 4));
      CHECK(wgmma::d_col(t, i) == 8 * (i / 4) + m16n8k16::c_col(lane, i % 4));
    }
    // Registers 8s .. 8s + 7 of D are A's elements of the k16 slice s, in A's order.
    for (int s = 0; s < 4; ++s)
      for (int e = 0; e < 8; ++e) {
        CHECK(wgmma::d_row(t, 8 * s + e) == wgmma::a_row(t, e));
        CHECK(wgmma::d_col(t, 8 * s + e) == 16 * s + wgmma::a_col(t, e));
      }
  }
}
