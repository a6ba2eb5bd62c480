// vxqa/mma/fragments.cuh — which matrix element each lane holds in mma.m8n8k4 (f16 inputs,
// f32 accumulators), from the PTX ISA's fragment tables, as __host__ __device__ functions so
// that a CPU test can emulate a warp's MMA from them.
//
// A warp is four independent quad pairs: quad pair q = lanes 4q..4q+3 and 16+4q..16+4q+3.
// `hi` is 4 for the upper 16 lanes. Element index i: 0..3 for A and B, 0..7 for C/D.
#pragma once
#include <vxqa/common.cuh>

namespace vxqa {
namespace mma {

VXQA_HD int quad_pair(int lane) { return (lane >> 2) & 3; }
VXQA_HD int lane_hi(int lane) { return lane >= 16 ? 4 : 0; }

// A, 8x4, row-major: a_i = A[row][i].
VXQA_HD int a_row(int lane) { return (lane & 3) + lane_hi(lane); }
VXQA_HD int a_col(int /*lane*/, int i) { return i; }

// B, 4x8, col-major (".col"): b_i = B[i][col].
VXQA_HD int b_col_major_row(int /*lane*/, int i) { return i; }
VXQA_HD int b_col_major_col(int lane) { return (lane & 3) + lane_hi(lane); }

// B, 4x8, row-major (".row"): b_i = B[lane % 4][i + hi].
VXQA_HD int b_row_major_row(int lane) { return lane & 3; }
VXQA_HD int b_row_major_col(int lane, int i) { return i + lane_hi(lane); }

// C/D, 8x8, f32: c_i = C[row][col].
VXQA_HD int c_row(int lane, int i) { return (lane & 1) + (i & 2) + lane_hi(lane); }
VXQA_HD int c_col(int lane, int i) { return (i & 4) + (lane & 2) + (i & 1); }

}  // namespace mma
}  // namespace vxqa
