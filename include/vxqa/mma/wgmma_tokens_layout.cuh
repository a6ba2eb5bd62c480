// vxqa/mma/wgmma_tokens_layout.cuh — where a warpgroup's threads find their A registers when
// the tokens of a 64-token tile ride the warpgroup MMA's M and the rows (G · q_len) its N:
// Sᵀ = K·Qᵀ and Oᵀ += Vᵀ·Pᵀ with m64nNk16, K and V decoded from the tile's cache codes in
// shared memory straight into A registers (docs/design.md, "Multi-token queries on the
// warpgroup MMA"). Warp w of the warpgroup holds tokens 16 w .. 16 w + 15 of Sᵀ (mma/
// wgmma_layout.cuh: a_row, a_col, d_row, d_col). Host-usable, so that a CPU test checks it.
//
// QK: the sum over the head dims does not care about their order, so logical k of QK's K
// dimension holds cache dim qk_dim(k): a thread's A registers for steps 4i .. 4i + 3 are the
// 16 codes of one 16-byte load of its token (chunk k_chunk(i, c)), and Qᵀ holds the same dims
// at the same k.
// PV: Oᵀ's M rows are the head dims, in the order o_dim: a thread's rows over the M tiles are
// kHeadDim / 32 consecutive codes of each of its tokens (one load from v_byte), paired across
// two tokens by interleave_tokens and then decoded as any four codes are.
// The stages' 16-byte chunks are swizzled per token (k_slot, v_slot) so that both loads are
// free of bank conflicts.
#pragma once
#include <vxqa/common.cuh>

namespace vxqa {
namespace mma {
namespace wgmma {

template <int kHeadDim>
struct TokensOnMLayout {
  // (At 64 a token's row is 4 chunks, fewer than the swizzles move a chunk across.)
  static_assert(kHeadDim == 128 || kHeadDim == 256 || kHeadDim == 512,
                "wgmma::TokensOnMLayout: head dim 128, 256 or 512");
  static constexpr int kSteps = kHeadDim / 16;   // k16 steps of QK, and 16-byte chunks of a row of codes
  static constexpr int kMTiles = kHeadDim / 64;  // m64 tiles of Oᵀ
  static constexpr int kVBytes = kHeadDim / 32;  // a thread's consecutive codes of a token's V

  // The cache dim that logical k (0 .. kHeadDim - 1) of QK's K dimension holds. Thread-in-
  // group c holds k 2c, 2c + 1 (registers 0, 1) and 2c + 8, 2c + 9 (registers 2, 3) of step s:
  // bytes 4 (s % 4) + 0, 1 and + 2, 3 of its chunk k_chunk(s / 4, c).
  VXQA_HD static constexpr int qk_dim(int k) {
    const int s = k / 16, kk = k % 16, c = (kk % 8) / 2;
    return 16 * k_chunk(s / 4, c) + 4 * (s % 4) + (kk & 1) + 2 * (kk >> 3);
  }
  // The 16-byte chunk of its token that thread-in-group c loads for steps 4i .. 4i + 3.
  VXQA_HD static constexpr int k_chunk(int i, int c) { return 4 * i + c; }
  // Where chunk `chunk` of `token`'s K row sits in its stage row.
  VXQA_HD static constexpr int k_slot(int token, int chunk) { return chunk ^ ((token & 1) << 2); }

  // The cache dim of row m (0 .. 15, the warp's rows: g and g + 8) of warp `warp` in Oᵀ's
  // M tile mt.
  VXQA_HD static constexpr int o_dim(int mt, int warp, int m) {
    return warp * (kHeadDim / 4) + (m & 7) * kVBytes + 2 * mt + (m >> 3);
  }
  // The first of the kVBytes codes a thread (warp, group g) loads of each of its tokens' V.
  VXQA_HD static constexpr int v_byte(int warp, int g) { return o_dim(0, warp, g); }
  // Where chunk `chunk` of `token`'s V row sits in its stage row.
  VXQA_HD static constexpr int v_slot(int token, int chunk) { return chunk ^ (token & 6); }

  // Four codes of token t0 (`first`) and of token t1 (`second`) as two words of four codes
  // each, in the order a pair decoder takes them: dims01 is dim 0 of t0, dim 0 of t1, dim 1
  // of t0, dim 1 of t1; dims23 the same for dims 2 and 3. A pair decoder (two codes into a
  // half2) turns each pair into the A register of one Oᵀ row over tokens t0, t1.
  VXQA_HD static void interleave_tokens(uint32_t first, uint32_t second, uint32_t& dims01, uint32_t& dims23) {
#if defined(__CUDA_ARCH__)
    dims01 = __byte_perm(first, second, 0x5140);
    dims23 = __byte_perm(first, second, 0x7362);
#else
    auto byte = [](uint32_t w, int n) { return (w >> (8 * n)) & 0xFFu; };
    dims01 = byte(first, 0) | byte(second, 0) << 8 | byte(first, 1) << 16 | byte(second, 1) << 24;
    dims23 = byte(first, 2) | byte(second, 2) << 8 | byte(first, 3) << 16 | byte(second, 3) << 24;
#endif
  }
};

}  // namespace wgmma
}  // namespace mma
}  // namespace vxqa
