// vxqa/mma/fragments_m16n8k16.cuh — which matrix element each lane holds in
// mma.m16n8k16 (f16 inputs, f32 accumulators), from the PTX ISA's fragment tables, as
// __host__ __device__ functions so that a CPU test can emulate the warp's product.
//
// Lane l is "group" l / 4 (0..7) and "thread in group" l % 4 (0..3). Register j of A holds
// two f16 (elements 2j, 2j+1), of B two f16, of C one f32.
#pragma once
#include <vxqa/common.cuh>

namespace vxqa {
namespace mma {
namespace m16n8k16 {

VXQA_HD int group(int lane) { return lane >> 2; }
VXQA_HD int thread_in_group(int lane) { return lane & 3; }

// A, 16x16, row-major: element e (0..7) of the lane's four registers.
VXQA_HD int a_row(int lane, int e) { return group(lane) + ((e >> 1) & 1) * 8; }
VXQA_HD int a_col(int lane, int e) { return thread_in_group(lane) * 2 + (e & 1) + (e >> 2) * 8; }

// B, 16x8, col-major (".col"): element e (0..3) of the lane's two registers.
VXQA_HD int b_row(int lane, int e) { return thread_in_group(lane) * 2 + (e & 1) + (e >> 1) * 8; }
VXQA_HD int b_col(int lane, int /*e*/) { return group(lane); }

// C/D, 16x8, f32: element e (0..3).
VXQA_HD int c_row(int lane, int e) { return group(lane) + (e >> 1) * 8; }
VXQA_HD int c_col(int lane, int e) { return thread_in_group(lane) * 2 + (e & 1); }

}  // namespace m16n8k16
}  // namespace mma
}  // namespace vxqa
