// vxqa/mma/wgmma_layout.cuh — where sm_90a's warpgroup MMA (arch/wgmma.cuh) finds its
// 16-bit operands in shared memory, the 64-bit descriptor that tells it, and which element
// each thread of the warpgroup holds in registers (A, and the f32 accumulators D), from the
// PTX ISA's tables, as __host__ __device__ arithmetic so that a CPU test can check it.
//
// The layouts are the canonical ones without swizzle. Their unit is the core matrix: 8 rows
// of 16 bytes (8 elements), 128 contiguous bytes. An operand of R rows (M or N) by K:
//   K-major (a row's K elements contiguous: Q as A, a K tile as B of Q·Kᵀ): the core matrix
//     is 8 rows x 8 k; the next one along K is kLeadingBytes on, the next 8 rows kStrideBytes.
//   MN-major (an MN run contiguous: a V tile as B of P·V, its tokens on K, dims on N): the
//     core matrix is 8 k x 8 mn; along K kLeadingBytes on, along MN kStrideBytes.
// Either way an operand's 8 consecutive elements of its contiguous dimension are 16 aligned
// bytes: a thread that converts 8 codes of a cache row stores them with one 16-byte store.
#pragma once
#include <vxqa/common.cuh>

namespace vxqa {
namespace mma {
namespace wgmma {

// The descriptor of an operand whose first core matrix starts at shared-memory byte address
// `smem_address` (16-aligned), no swizzle: address, leading and stride byte offsets in 16-byte
// units (bits 0-13, 16-29, 32-45), base offset 0 (bits 49-51), layout type 0 (bits 62-63).
VXQA_HD constexpr uint64_t descriptor(uint32_t smem_address, uint32_t leading_bytes, uint32_t stride_bytes) {
  return uint64_t((smem_address >> 4) & 0x3FFFu) | (uint64_t((leading_bytes >> 4) & 0x3FFFu) << 16) |
         (uint64_t((stride_bytes >> 4) & 0x3FFFu) << 32);
}

// A [kRows x kK] 16-bit operand, K-major: element (row, k) at byte offset(row, k).
template <int kRows, int kK>
struct KMajorLayout {
  static_assert(kRows % 8 == 0 && kK % 16 == 0, "wgmma::KMajorLayout: rows a multiple of 8, K of 16");
  static constexpr int kLeadingBytes = 128;                // the next 8 k
  static constexpr int kStrideBytes = kK / 8 * 128;        // the next 8 rows
  static constexpr int kBytes = kRows * kK * 2;
  VXQA_HD static constexpr int offset(int row, int k) {
    return (row / 8) * kStrideBytes + (k / 8) * kLeadingBytes + (row % 8) * 16 + (k % 8) * 2;
  }
  // Where the k16 step `step` of rows [row0, row0 + M or N) starts.
  VXQA_HD static constexpr int step_offset(int row0, int step) { return offset(row0, 16 * step); }
};

// A [kMn x kK] 16-bit operand, MN-major: element (mn, k) at byte offset(mn, k).
template <int kMn, int kK>
struct MnMajorLayout {
  static_assert(kMn % 8 == 0 && kK % 16 == 0, "wgmma::MnMajorLayout: MN a multiple of 8, K of 16");
  static constexpr int kLeadingBytes = 128;          // the next 8 k
  static constexpr int kStrideBytes = kK / 8 * 128;  // the next 8 mn
  static constexpr int kBytes = kMn * kK * 2;
  VXQA_HD static constexpr int offset(int mn, int k) {
    return (mn / 8) * kStrideBytes + (k / 8) * kLeadingBytes + (k % 8) * 16 + (mn % 8) * 2;
  }
  VXQA_HD static constexpr int step_offset(int mn0, int step) { return offset(mn0, 16 * step); }
};

// Thread t (0..127) of the warpgroup: warp t / 32 holds rows 16 (t / 32) .. + 15; inside
// the warp, as in mma.m16n8k16, lane l is group l / 4 and thread-in-group l % 4.

// A in registers, 64 x 16, f16: element e (0..7) of the thread's four 32-bit registers.
VXQA_HD constexpr int a_row(int thread, int e) { return (thread >> 5) * 16 + ((thread & 31) >> 2) + ((e >> 1) & 1) * 8; }
VXQA_HD constexpr int a_col(int thread, int e) { return (thread & 3) * 2 + (e & 1) + (e >> 2) * 8; }

// The f32 accumulators of an m64nN: register i (0 .. N/2 - 1).
VXQA_HD constexpr int d_row(int thread, int i) { return (thread >> 5) * 16 + ((thread & 31) >> 2) + ((i >> 1) & 1) * 8; }
VXQA_HD constexpr int d_col(int thread, int i) { return (i >> 2) * 8 + (thread & 3) * 2 + (i & 1); }

}  // namespace wgmma
}  // namespace mma
}  // namespace vxqa
