// vxqa/softmax/register_softmax.cuh — the online softmax on Sᵀ accumulators in registers
// (the SM80 path: tokens on M, heads on N of mma.m16n8k16).
//
// Lane l holds scores of heads 2t, 2t+1 (t = l % 4) for tokens l/4 and l/4 + 8 of the tile;
// the eight lanes that share t hold all 16 tokens of those two heads, so a head's max is
// three xor-shuffles (4, 8, 16) away and its running (m, l) lives in those lanes. Each lane
// sums only its own tokens into l; the eight partial sums are added once, at the end.
// Semantics as softmax/online_softmax.cuh: base-2 logits, -inf masks, NaN kept.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vxqa/arch/fast_float.cuh>
#include <vxqa/arch/movmatrix.cuh>
#include <vxqa/common.cuh>
#include <vxqa/numeric/act_type.cuh>
#include <vxqa/softmax/online_softmax.cuh>

namespace vxqa {
namespace softmax {

// The running state of the lane's two heads.
struct HeadPairState {
  float m[2];  // running max (base-2 logits); equal on the eight lanes of a head pair
  float l[2];  // this lane's share of the running sum, as rounded into P
};

VXQA_HD HeadPairState empty_head_pair() {
  return HeadPairState{{negative_infinity(), negative_infinity()}, {0.f, 0.f}};
}

#if VXQA_IS_CUDA_COMPILER && VXQA_HAS_MOVMATRIX
// max_keep_nan, in one instruction where the hardware has one (sm_80+).
VXQA_DEVICE float max_of_pair(float a, float b) {
#if VXQA_HAS_MAX_NAN
  return arch::max_nan(a, b);
#else
  return max_keep_nan(a, b);
#endif
}

// One 16-token tile: s[e] are base-2 logits (masked ones -inf) of head 2t + (e & 1), token
// l/4 + 8 (e >> 1). Returns P (as kP: fp16, or bf16 for the bf16 MMA) as the B fragment of
// Pᵀ for mma.m16n8k16 (via movmatrix) and the factor each of the two heads' earlier sums
// and outputs must be scaled by.
template <ActType kP = ActType::kFp16>
VXQA_DEVICE void register_softmax_step(HeadPairState& st, const float (&s)[4], uint32_t (&p_frag)[2],
                                       float (&alpha)[2]) {
  float p[4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float tile_max = max_of_pair(s[h], s[h + 2]);
    tile_max = max_of_pair(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 4));
    tile_max = max_of_pair(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 8));
    tile_max = max_of_pair(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 16));
    const float m_new = max_of_pair(st.m[h], tile_max);
    const bool empty = m_new == negative_infinity();  // rescale_factor's rule, with exp2_ftz
    p[h] = empty ? 0.f : arch::exp2_ftz(s[h] - m_new);
    p[h + 2] = empty ? 0.f : arch::exp2_ftz(s[h + 2] - m_new);
    alpha[h] = empty ? 1.f : arch::exp2_ftz(st.m[h] - m_new);
    st.m[h] = m_new;
  }
  // Rows of the two 8x8 halves of Pᵀ (tokens l/4 and l/4 + 8), as f16x2 (bf16x2) of heads
  // 2t, 2t+1.
  if constexpr (kP == ActType::kFp16) {
    const __half2 top = __floats2half2_rn(p[0], p[1]), bottom = __floats2half2_rn(p[2], p[3]);
    const float2 t = __half22float2(top), b = __half22float2(bottom);  // sum what P·V uses
    st.l[0] = st.l[0] * alpha[0] + (t.x + b.x);
    st.l[1] = st.l[1] * alpha[1] + (t.y + b.y);
    p_frag[0] = arch::movmatrix_trans_b16(bit_cast<uint32_t>(__half2_raw(top)));
    p_frag[1] = arch::movmatrix_trans_b16(bit_cast<uint32_t>(__half2_raw(bottom)));
  } else {
    const __nv_bfloat162 top = __floats2bfloat162_rn(p[0], p[1]), bottom = __floats2bfloat162_rn(p[2], p[3]);
    const float2 t = __bfloat1622float2(top), b = __bfloat1622float2(bottom);
    st.l[0] = st.l[0] * alpha[0] + (t.x + b.x);
    st.l[1] = st.l[1] * alpha[1] + (t.y + b.y);
    p_frag[0] = arch::movmatrix_trans_b16(bit_cast<uint32_t>(__nv_bfloat162_raw(top)));
    p_frag[1] = arch::movmatrix_trans_b16(bit_cast<uint32_t>(__nv_bfloat162_raw(bottom)));
  }
}

// The head pair's whole sum: the eight lanes' shares added (once, after the last tile).
VXQA_DEVICE float head_sum(float l_share) {
  l_share += __shfl_xor_sync(0xffffffffu, l_share, 4);
  l_share += __shfl_xor_sync(0xffffffffu, l_share, 8);
  l_share += __shfl_xor_sync(0xffffffffu, l_share, 16);
  return l_share;
}
#endif

}  // namespace softmax
}  // namespace vxqa
