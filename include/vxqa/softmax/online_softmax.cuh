// vxqa/softmax/online_softmax.cuh — running max and sum per head row, in fp32 and base 2.
//
// Scores arrive already multiplied by softmax_scale · k_scale · log2(e), so exp2 gives the
// natural-exponent softmax. A masked score is -inf; a row that has seen only -inf keeps
// m = -inf, l = 0 and yields p = 0 and a rescale factor of 1 (never exp2(-inf - -inf)).
//
// NaN follows IEEE arithmetic, as the float64 reference does: a NaN score makes the row's
// max NaN (max_keep_nan), and from there p, l, the rescale factor and O are all NaN. A +inf
// score gives exp2(inf - inf) = NaN the same way. Whoever writes the result decides what
// l = 0 means (no live token, or every live score -inf: see the decode kernel).
#pragma once
#include <cuda_fp16.h>
#include <vxqa/common.cuh>
#include <vxqa/pipeline/smem_layout.cuh>

namespace vxqa {
namespace softmax {

// Which head row and which 8 of the tile's 32 tokens a lane takes in the softmax step:
// lanes h, h+8, h+16, h+24 share row h, so an 8-lane phase touches 8 different rows (its
// 16-byte accesses to S and P are then conflict-free: test/cpu/smem_layout.cpp).
VXQA_HD int softmax_row(int lane) { return lane & 7; }
VXQA_HD int softmax_part(int lane) { return lane >> 3; }

// One head row's state; lanes sharing a row hold identical copies.
struct RowState {
  float m;  // running max (base-2 logits)
  float l;  // running sum of exp2(s - m), as rounded into P
};

VXQA_HD RowState empty_row() { return RowState{negative_infinity(), 0.f}; }

// Factor that moves a sum taken against max m_old onto max m_new (m_new >= m_old).
VXQA_HD float rescale_factor(float m_old, float m_new) {
  return m_new == negative_infinity() ? 1.f : exp2f(m_old - m_new);
}

// max(a, b), NaN when either is NaN. fmaxf drops a NaN operand: a row of NaN scores would
// then keep m = -inf and look empty (zeros instead of NaN, and a different answer under
// another split).
VXQA_HD float max_keep_nan(float a, float b) { return (a > b || a != a) ? a : b; }

#if VXQA_IS_CUDA_COMPILER
// The softmax step of one warp tile (8 heads x 32 tokens): reads S (fp32, ScoreTileLayout),
// writes P (fp16, ProbTileLayout) and each row's rescale factor to alpha[8]. Returns the
// updated state of row softmax_row(lane).
VXQA_DEVICE RowState online_softmax_step(RowState row, const uint8_t* s_tile, uint8_t* p_tile,
                                         float* alpha) {
  const int lane = threadIdx.x & 31, head = softmax_row(lane), part = softmax_part(lane);
  const float4* s = reinterpret_cast<const float4*>(
      s_tile + pipeline::ScoreTileLayout::offset(head, 8 * part));
  const float4 s0 = s[0], s1 = s[1];
  const float v[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
  float tile_max = v[0];
#pragma unroll
  for (int i = 1; i < 8; ++i) tile_max = max_keep_nan(tile_max, v[i]);
  tile_max = max_keep_nan(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 8));
  tile_max = max_keep_nan(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 16));
  const float m_new = max_keep_nan(row.m, tile_max);
  const bool empty = m_new == negative_infinity();
  uint32_t packed[4];
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 8; i += 2) {
    const __half2 p = __floats2half2_rn(empty ? 0.f : exp2f(v[i] - m_new),
                                        empty ? 0.f : exp2f(v[i + 1] - m_new));
    const float2 rounded = __half22float2(p);  // sum what P·V will actually use
    sum += rounded.x + rounded.y;
    packed[i / 2] = bit_cast<uint32_t>(p);
  }
  *reinterpret_cast<uint4*>(p_tile + pipeline::ProbTileLayout::offset(head, 8 * part)) =
      make_uint4(packed[0], packed[1], packed[2], packed[3]);
  sum += __shfl_xor_sync(0xffffffffu, sum, 8);
  sum += __shfl_xor_sync(0xffffffffu, sum, 16);
  const float a = rescale_factor(row.m, m_new);
  if (part == 0) alpha[head] = a;
  return RowState{m_new, row.l * a + sum};
}
#endif

}  // namespace softmax
}  // namespace vxqa
