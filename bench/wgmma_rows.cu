// wgmma_rows: what a multi-token CTA body on sm_90a's warpgroup MMA would stream at, before
// it is built into the library (docs/performance.md, "Multi-token queries on the warpgroup
// MMA: a prototype timed"). A measurement, not a kernel of the library: plain attention over
// E5M2 pages of 16 tokens, D 256, one KV head, no variants, no causal limits among the query
// tokens (every row sees every key: the few keys a causal limit masks change no time), one
// pass of split-KV chunks whose partials (O / l, m, l a row) are written, no combine.
//
// rows_kernel<W, Tile, Lean>: a CTA of W warpgroups of 64 rows each (rows = G · q_len,
// padded), one (sequence, chunk). Every thread copies the chunk's tiles (32 or 64 tokens) of
// E5M2 K and V with cp.async into a ring of two stages, and converts each tile into fp16
// tiles in the warpgroup MMA's canonical layouts (K K-major, V MN-major:
// mma/wgmma_layout.cuh), which every warpgroup then reads:
//   S = Q·Kᵀ   16 wgmma m64nTk16, Q and K from shared memory;
//   softmax    on S's accumulators (a row is 4 threads of a quad), O rescaled;
//   O += P·V   wgmma m64n64k16, P from registers (S's accumulators as fp16), V MN-major.
// So the KV is read from global memory once for up to 64 W rows. Lean: ex2.approx, and the
// rescale skipped when no row's max moved.
// specialized_kernel<Pipelined, Consumers>: the same loop with the copies and the conversion
// in a warpgroup of their own (below).
// tokens_kernel<W, N, Stages, EarlyV>: tokens on the MMA's M and rows on its N, K and V
// decoded straight into A registers (below).
//
//   vxqa_wgmma_rows [--check | --tokens | --only ROWS TILE CHUNK | --only-tokens CHUNK]
//   --check: a small problem against a float64 reference only; --tokens: the checks, then
//   tokens_kernel's timings alone; --only, --only-tokens: three launches of one
//   configuration (rows_kernel lean; tokens_kernel at 24 rows, V early), for ncu.
// Prints one line per configuration: µs (median of 30 launches, CUDA events), GB/s of K and
// V bytes.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <vxqa/arch/cp_async.cuh>
#include <vxqa/arch/fast_float.cuh>
#include <vxqa/arch/mbarrier.cuh>
#include <vxqa/arch/named_barrier.cuh>
#include <vxqa/arch/wgmma.cuh>
#include <vxqa/mma/wgmma_layout.cuh>
#include <vxqa/mma/wgmma_tokens_layout.cuh>
#include <vxqa/numeric/e5m2.cuh>

#include "rows_prototype.cuh"

namespace {

using namespace vxqa_rows;
namespace wg = vxqa::mma::wgmma;
using QLayout = wg::KMajorLayout<64, kD>;  // a warpgroup's 64 rows of Q

// W warpgroups, tiles of kTile (64 or 32) tokens.
template <int W, int kTile>
struct Shape {
  using KLayout = wg::KMajorLayout<kTile, kD>;   // (token, dim)
  using VLayout = wg::MnMajorLayout<kD, kTile>;  // (dim, token)
  static constexpr int kFp8TileBytes = kTile * kD;  // K or V of a tile, E5M2, row-major
  static constexpr int kQ = 0;
  static constexpr int kRing = kQ + W * QLayout::kBytes;  // 2 stages of [K | V] E5M2
  static constexpr int kK = kRing + 2 * 2 * kFp8TileBytes;
  static constexpr int kV = kK + KLayout::kBytes;
  static constexpr int kBytes = kV + VLayout::kBytes;
  static constexpr int kCtasPerSm = 2 * kBytes <= 227 * 1024 ? 2 : 1;
};

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

#if VXQA_HAS_WGMMA
// The pieces both kernels are made of. A thread's accumulator register i holds row r0 + 8
// ((i >> 1) & 1) of its warp's 16 and column d_col(i): a token of S, a dim of O.

// Q rows [0, 64 · groups) of sequence `seq` into one K-major tile a warpgroup, rows past
// a.rows zero.
template <int kThreads>
__device__ void load_q(const Args& a, int seq, int groups, uint8_t* q_tiles) {
  for (int i = threadIdx.x; i < groups * 64 * (kD / 8); i += kThreads) {
    const int row = i / (kD / 8), d0 = (i % (kD / 8)) * 8;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (row < a.rows) x = *reinterpret_cast<const uint4*>(a.q + (int64_t(seq) * a.rows + row) * kD + d0);
    *reinterpret_cast<uint4*>(q_tiles + (row / 64) * QLayout::kBytes + QLayout::offset(row % 64, d0)) = x;
  }
}

// The kTile tokens from token0 (zeros at `end` and past it) of K, then of V, into `stage`
// with cp.async, one commit group. A stage is row-major, 256 codes a token, its 16-byte
// chunk c at c ^ (token % 8): convert_tile reads 8 tokens' chunk c at once, which the
// swizzle puts in 8 distinct bank slots. Thread t (of kThreads) copies one token's chunks
// [part · C, (part + 1) · C) of K and of V: one block-table id a tile.
template <int kTile, int kThreads>
__device__ void issue_tile(const Args& a, const int32_t* table, int token0, int end, uint8_t* stage, int t) {
  constexpr int kThreadsPerRow = kThreads / kTile, kChunksPerThread = kD / 16 / kThreadsPerRow;
  const int row = t / kThreadsPerRow, part = t % kThreadsPerRow;
  const int token = token0 + row;
  const bool live = token < end;
  const int64_t offset = (int64_t(live ? table[token / kPage] : 0) * kPage + token % kPage) * kD;
#pragma unroll
  for (int which = 0; which < 2; ++which)
#pragma unroll
    for (int u = 0; u < kChunksPerThread; ++u) {
      const int c = part * kChunksPerThread + u;
      vxqa::arch::cp_async_16_or_zero(stage + which * kTile * kD + row * kD + 16 * (c ^ (row % 8)),
                                      (which ? a.v : a.k) + offset + 16 * c, live);
    }
}

// A stage's K and V codes into fp16 tiles (K K-major, V MN-major): a token's 16 codes a
// step, two 16-byte stores. A quarter-warp takes 8 consecutive tokens' chunk c: its stores
// land in one core matrix's 8 rows, its loads in the swizzle's 8 slots (no conflict).
template <int kTile, int kThreads>
__device__ void convert_tile(const uint8_t* stage, uint8_t* k_tile, uint8_t* v_tile, int t) {
  using KLayout = wg::KMajorLayout<kTile, kD>;
  using VLayout = wg::MnMajorLayout<kD, kTile>;
#pragma unroll
  for (int which = 0; which < 2; ++which)
#pragma unroll
    for (int n = 0; n < kTile * (kD / 16) / kThreads; ++n) {
      const int i = t + n * kThreads;
      const int row = (i / 128) * 8 + i % 8, c = (i / 8) % 16, d0 = 16 * c;
      const uint4 x = *reinterpret_cast<const uint4*>(stage + which * kTile * kD + row * kD + 16 * (c ^ (row % 8)));
      const uint2 h0 = vxqa::e5m2x4_to_half2x2_bits(x.x), h1 = vxqa::e5m2x4_to_half2x2_bits(x.y);
      const uint2 h2 = vxqa::e5m2x4_to_half2x2_bits(x.z), h3 = vxqa::e5m2x4_to_half2x2_bits(x.w);
      uint8_t* lo = which == 0 ? k_tile + KLayout::offset(row, d0) : v_tile + VLayout::offset(d0, row);
      uint8_t* hi = which == 0 ? k_tile + KLayout::offset(row, d0 + 8) : v_tile + VLayout::offset(d0 + 8, row);
      *reinterpret_cast<uint4*>(lo) = make_uint4(h0.x, h0.y, h1.x, h1.y);
      *reinterpret_cast<uint4*>(hi) = make_uint4(h2.x, h2.y, h3.x, h3.y);
    }
}

// S = Q·Kᵀ of a tile issued, one commit group (wait, then fence_registers(s), before use).
template <int kTile>
__device__ void issue_qk(float (&s)[kTile / 2], uint32_t q_base, uint32_t k_base) {
  using KLayout = wg::KMajorLayout<kTile, kD>;
  vxqa::arch::wgmma::fence_operands();
#pragma unroll
  for (int step = 0; step < kD / 16; ++step) {
    const uint64_t q_desc =
        wg::descriptor(q_base + QLayout::step_offset(0, step), QLayout::kLeadingBytes, QLayout::kStrideBytes);
    const uint64_t k_desc =
        wg::descriptor(k_base + KLayout::step_offset(0, step), KLayout::kLeadingBytes, KLayout::kStrideBytes);
    if constexpr (kTile == 64) {
      vxqa::arch::wgmma::mma_m64n64k16_ss<false>(s, q_desc, k_desc, step > 0);
    } else {
      vxqa::arch::wgmma::mma_m64n32k16_ss<false>(s, q_desc, k_desc, step > 0);
    }
  }
  vxqa::arch::wgmma::commit();
}

// The online softmax on a tile's landed S (tokens from tile_end on masked): the rows' max and
// sum updated, P into p (S's accumulators as fp16 A registers), O rescaled (no P·V of O may
// be in flight). Lean: ex2.approx, and the rescale skipped when no row's max in the warp moved.
template <int kTile, bool kLean>
__device__ void softmax_tile(float (&s)[kTile / 2], int tile_end, float scale_log2, float (&m)[2], float (&l)[2],
                             float (&o)[4][32], uint32_t (&p)[kTile / 16][4]) {
  const int wg_t = threadIdx.x & 127;
  float mx[2] = {m[0], m[1]};
#pragma unroll
  for (int i = 0; i < kTile / 2; ++i) {
    s[i] = wg::d_col(wg_t, i) < tile_end ? s[i] * scale_log2 : -INFINITY;
    mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
  }
  float alpha[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    alpha[r] = kLean ? vxqa::arch::exp2_ftz(m[r] - mx[r]) : exp2f(m[r] - mx[r]);
    m[r] = mx[r];
    l[r] *= alpha[r];
  }
#pragma unroll
  for (int i = 0; i < kTile / 2; i += 2) {
    const int r = (i >> 1) & 1;
    const float p0 = kLean ? vxqa::arch::exp2_ftz(s[i] - m[r]) : exp2f(s[i] - m[r]);
    const float p1 = kLean ? vxqa::arch::exp2_ftz(s[i + 1] - m[r]) : exp2f(s[i + 1] - m[r]);
    l[r] += p0 + p1;
    p[i >> 3][(i >> 1) & 3] = pack_half2(p0, p1);
  }
  if (!kLean || __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int i = 0; i < 32; ++i) o[n][i] *= alpha[(i >> 1) & 1];
  }
}

// O += P·V of a tile issued, one commit group; V's descriptor offsets from the arguments.
template <int kTile>
__device__ void issue_pv(const Args& a, float (&o)[4][32], const uint32_t (&p)[kTile / 16][4], uint32_t v_base) {
  using VLayout = wg::MnMajorLayout<kD, kTile>;
  vxqa::arch::wgmma::fence_operands();
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int step = 0; step < kTile / 16; ++step)
      vxqa::arch::wgmma::MmaRs<64, true>::run(
          o[n], p[step], wg::descriptor(v_base + VLayout::step_offset(64 * n, step), a.v_lead, a.v_stride), true);
  vxqa::arch::wgmma::commit();
}

__device__ void fence_o(float (&o)[4][32]) {
#pragma unroll
  for (int n = 0; n < 4; ++n) vxqa::arch::wgmma::fence_registers(o[n]);
}

// A row's sum over its quad (each thread summed its own columns).
__device__ void quad_sum(float (&l)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
}

// The warpgroup's rows row0 .. row0 + 63 of partial slot `slot`: O / l, and (m, l).
__device__ void write_rows(const Args& a, int64_t slot, int row0, const float (&o)[4][32], const float (&m)[2],
                           const float (&l)[2]) {
  const int wg_t = threadIdx.x & 127;
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const int r = (i >> 1) & 1, row = row0 + wg::d_row(wg_t, i);
      if (row >= a.rows) continue;
      const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
      *reinterpret_cast<float2*>(a.o + (slot * a.rows + row) * kD + 64 * n + wg::d_col(wg_t, i)) =
          make_float2(o[n][i] * inv, o[n][i + 1] * inv);
    }
  if ((wg_t & 3) == 0) {
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + wg::d_row(wg_t, 2 * r);
      if (row < a.rows) *reinterpret_cast<float2*>(a.ml + (slot * a.rows + row) * 2) = make_float2(m[r], l[r]);
    }
  }
}
#endif

template <int W, int kTile, bool kLean>
__global__ void __launch_bounds__(128 * W, Shape<W, kTile>::kCtasPerSm) rows_kernel(Args a) {
#if VXQA_HAS_WGMMA
  extern __shared__ __align__(1024) uint8_t smem[];
  using S = Shape<W, kTile>;
  constexpr int kThreads = 128 * W;
  const int t = threadIdx.x, group = t >> 7;
  const int seq = blockIdx.y, chunk = blockIdx.x;
  const int length = a.lengths[seq];
  const int begin = chunk * a.chunk_tokens, end = min(length, begin + a.chunk_tokens);
  const int tiles = end > begin ? (end - begin + kTile - 1) / kTile : 0;
  const int32_t* table = a.block_table + int64_t(seq) * a.max_pages;
  load_q<kThreads>(a, seq, W, smem + S::kQ);
  auto stage = [&](int j) { return smem + S::kRing + (j & 1) * 2 * S::kFp8TileBytes; };  // ring of two
  auto issue = [&](int j) {
    if (j < tiles) issue_tile<kTile, kThreads>(a, table, begin + j * kTile, end, stage(j), t);
    vxqa::arch::cp_async_commit();
  };

  float o[4][32];
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[n][i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows r0 and r0 + 8 of the thread
  const uint32_t q_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem + S::kQ + group * QLayout::kBytes));
  const uint32_t k_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem + S::kK));
  const uint32_t v_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem + S::kV));

  issue(0);
  issue(1);
  // Each tile: convert K and V, then QK, softmax, PV, waited for before the next conversion.
  // (Converting tile j + 1's K while P·V(j) runs, as the first runs did, changed nothing.)
  for (int j = 0; j < tiles; ++j) {
    vxqa::arch::cp_async_wait<1>();
    __syncthreads();  // tile j's copies; every warpgroup done with the fp16 tiles
    convert_tile<kTile, kThreads>(stage(j), smem + S::kK, smem + S::kV, t);
    vxqa::arch::wgmma::fence_shared_for_async();
    __syncthreads();  // the fp16 tiles written, stage j % 2 free
    issue(j + 2);
    float s[kTile / 2];
    uint32_t p[kTile / 16][4];
    issue_qk<kTile>(s, q_base, k_base);
    vxqa::arch::wgmma::wait<0>();
    vxqa::arch::wgmma::fence_registers(s);
    softmax_tile<kTile, kLean>(s, end - (begin + j * kTile), a.scale_log2, m, l, o, p);
    issue_pv<kTile>(a, o, p, v_base);
    vxqa::arch::wgmma::wait<0>();
    fence_o(o);
  }
  vxqa::arch::cp_async_wait<0>();
  quad_sum(l);
  write_rows(a, int64_t(seq) * a.chunks + chunk, group * 64, o, m, l);
#endif
}

// Warp-specialized: warpgroup 0 copies and converts, warpgroups 1 .. kConsumers compute the
// same 64 rows over alternate tiles (merged at the end), so that one's softmax runs while the
// other's MMAs do. Tiles of 32 tokens; a ring of kRing stages of codes (the producer's alone)
// and 2 · kConsumers fp16 tiles that the producer fills and the consumers empty, handed over
// on named barriers: kFull + b (the producer arrives, a consumer waits), kEmpty + b (the
// other way round). So the conversion of tile j + 1 runs while tile j's QK, softmax and P·V
// do. With two consumers the producer gives its registers to them (setmaxnreg).
constexpr int kRing = 3;
template <int kConsumers>
struct SpecShape {
  static constexpr int kTile = 32;
  static constexpr int kBuffers = 2 * kConsumers;
  using KLayout = wg::KMajorLayout<kTile, kD>;
  using VLayout = wg::MnMajorLayout<kD, kTile>;
  static constexpr int kFp8TileBytes = kTile * kD;
  static constexpr int kQ = 0;
  static constexpr int kRingOffset = QLayout::kBytes;
  static constexpr int kFp16 = kRingOffset + kRing * 2 * kFp8TileBytes;  // kBuffers of [K | V]
  static constexpr int kFp16Bytes = KLayout::kBytes + VLayout::kBytes;
  static constexpr int kBytes = kFp16 + kBuffers * kFp16Bytes;
  static_assert(kConsumers == 1 || 64 * kD * 4 + 64 * 4 * 4 <= kBuffers * kFp16Bytes,
                "SpecShape: the second consumer's O and (m, l) must fit in the fp16 tiles");
};
enum SpecBarrier : int { kProducers = 1, kFull = 2, kEmpty = 6, kConsumersMerge = 10 };

template <bool kPipelined, int kConsumers>
__global__ void __launch_bounds__(128 * (1 + kConsumers), 1) specialized_kernel(Args a) {
#if VXQA_HAS_WGMMA
  extern __shared__ __align__(1024) uint8_t smem[];
  using S = SpecShape<kConsumers>;
  constexpr int kTile = S::kTile, kBuffers = S::kBuffers, kThreads = 128 * (1 + kConsumers);
  const int t = threadIdx.x, wg_t = t & 127;
  const bool producer = t < 128;
  const int consumer = (t >> 7) - 1;
  const int seq = blockIdx.y, chunk = blockIdx.x;
  const int length = a.lengths[seq];
  const int begin = chunk * a.chunk_tokens, end = min(length, begin + a.chunk_tokens);
  const int tiles = end > begin ? (end - begin + kTile - 1) / kTile : 0;
  const int32_t* table = a.block_table + int64_t(seq) * a.max_pages;
  auto k_tile = [&](int j) { return smem + S::kFp16 + (j % kBuffers) * S::kFp16Bytes; };

  load_q<kThreads>(a, seq, 1, smem + S::kQ);
  vxqa::arch::wgmma::fence_shared_for_async();
  __syncthreads();

  if (producer) {
    if constexpr (kConsumers == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    auto stage = [&](int j) { return smem + S::kRingOffset + (j % kRing) * 2 * S::kFp8TileBytes; };
    auto issue = [&](int j) {
      if (j < tiles) issue_tile<kTile, 128>(a, table, begin + j * kTile, end, stage(j), t);
      vxqa::arch::cp_async_commit();
    };
#pragma unroll
    for (int j = 0; j < kRing - 1; ++j) issue(j);
    for (int j = 0; j < tiles; ++j) {
      vxqa::arch::cp_async_wait<kRing - 2>();
      vxqa::arch::named_barrier_sync(kProducers, 128);  // tile j landed; tile j - 1's stage converted
      issue(j + kRing - 1);
      const int b = j % kBuffers;
      if (j >= kBuffers) vxqa::arch::named_barrier_sync(kEmpty + b, 256);  // its consumer is done with tile j - kBuffers
      convert_tile<kTile, 128>(stage(j), k_tile(j), k_tile(j) + S::KLayout::kBytes, t);
      vxqa::arch::wgmma::fence_shared_for_async();
      vxqa::arch::named_barrier_arrive(kFull + b, 256);
    }
    vxqa::arch::cp_async_wait<0>();
    return;
  }
  if constexpr (kConsumers == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");

  float o[4][32];
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[n][i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const uint32_t q_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem + S::kQ));
  auto k_base = [&](int j) { return static_cast<uint32_t>(__cvta_generic_to_shared(k_tile(j))); };
  float s[kTile / 2];
  uint32_t p[kTile / 16][4];
  auto qk = [&](int j) {  // S = Q·Kᵀ of tile j issued, once its fp16 tiles are full
    vxqa::arch::named_barrier_sync(kFull + j % kBuffers, 256);
    issue_qk<kTile>(s, q_base, k_base(j));
  };
  auto softmax = [&](int j) {
    vxqa::arch::wgmma::fence_registers(s);
    softmax_tile<kTile, true>(s, end - (begin + j * kTile), a.scale_log2, m, l, o, p);
  };
  auto pv = [&](int j) { issue_pv<kTile>(a, o, p, k_base(j) + S::KLayout::kBytes); };
  auto release = [&](int j) {  // the producer waits for tile j's fp16 tiles only to refill them
    if (j + kBuffers < tiles) vxqa::arch::named_barrier_arrive(kEmpty + j % kBuffers, 256);
  };
  if constexpr (!kPipelined) {
    for (int j = consumer; j < tiles; j += kConsumers) {
      qk(j);
      vxqa::arch::wgmma::wait<0>();
      softmax(j);
      pv(j);
      vxqa::arch::wgmma::wait<0>();
      fence_o(o);
      release(j);
    }
  } else if (consumer < tiles) {
    // P·V of tile j in flight while the consumer's next tile is waited for and its QK issued.
    qk(consumer);
    vxqa::arch::wgmma::wait<0>();
    softmax(consumer);
    for (int j = consumer; j < tiles; j += kConsumers) {
      pv(j);
      if (j + kConsumers < tiles) {
        qk(j + kConsumers);
        vxqa::arch::wgmma::wait<1>();  // P·V(j) (groups complete in order)
        fence_o(o);
        release(j);
        vxqa::arch::wgmma::wait<0>();
        softmax(j + kConsumers);
      } else {
        vxqa::arch::wgmma::wait<0>();
        fence_o(o);
      }
    }
  }
  quad_sum(l);
  if constexpr (kConsumers == 2) {  // the second consumer's (m, l, O) into the first's, through the fp16 tiles
    float* o_area = reinterpret_cast<float*>(smem + S::kFp16);
    float* ml_area = o_area + 64 * kD;
    vxqa::arch::named_barrier_sync(kConsumersMerge, 256);  // both done with every tile
    if (consumer == 1) {
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int i = 0; i < 32; ++i) o_area[(n * 32 + i) * 128 + wg_t] = o[n][i];
      *reinterpret_cast<float4*>(ml_area + 4 * wg_t) = make_float4(m[0], m[1], l[0], l[1]);
    }
    vxqa::arch::named_barrier_sync(kConsumersMerge, 256);
    if (consumer == 1) return;
    const float4 other = *reinterpret_cast<const float4*>(ml_area + 4 * wg_t);
    const float other_m[2] = {other.x, other.y}, other_l[2] = {other.z, other.w};
    float w_self[2], w_other[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mx = fmaxf(m[r], other_m[r]);
      w_self[r] = m[r] == -INFINITY ? 0.f : vxqa::arch::exp2_ftz(m[r] - mx);
      w_other[r] = other_m[r] == -INFINITY ? 0.f : vxqa::arch::exp2_ftz(other_m[r] - mx);
      l[r] = l[r] * w_self[r] + other_l[r] * w_other[r];
      m[r] = mx;
    }
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int r = (i >> 1) & 1;
        o[n][i] = o[n][i] * w_self[r] + o_area[(n * 32 + i) * 128 + wg_t] * w_other[r];
      }
  }
  write_rows(a, int64_t(seq) * a.chunks + chunk, 0, o, m, l);
#endif
}

// Tokens on M, rows on N (tokens_kernel<W, N, Stages, EarlyV>): S^T = K·Q^T and O^T += V^T·P^T
// with wgmma m64nNk16, A from registers. A warpgroup's 64-token tile; its rows (G · q_len, up
// to N) ride the MMA's N. K and V are decoded from the codes in shared memory straight into
// A registers, so there are no fp16 tiles and the MMAs do no work for padded rows; Q^T and
// P^T are the B operands in shared memory. W warpgroups take N rows each over the same
// stages (each decodes the tile for itself). Since the sum over D does not care about its
// order, a thread's A registers of K hold 16 consecutive codes of a token (one 16-byte
// load), and Q^T holds the same dims at the same k; O^T's rows (dims) are likewise a
// thread's 8 consecutive codes of V. Softmax over the tile's tokens (M, spread over the 4
// warps): the running max is shared by the warpgroup and moves only when a score exceeds it
// by more than 2^8 (the P^T tile is fp16): a vote on the barrier that publishes P^T, and a
// second pass in the rare tiles where it does (always the first).
template <int W, int kN, int kStages>
struct TokShape {
  static constexpr int kTile = 64;
  using QtLayout = wg::KMajorLayout<kN, kD>;     // (row, k): Q's dims in the decode's order
  using PtLayout = wg::MnMajorLayout<kN, kTile>;  // (row, token)
  static constexpr int kStageBytes = 2 * kTile * kD;  // K then V codes, row-major, swizzled
  static constexpr int kQt = kStages * kStageBytes;
  static constexpr int kPt = kQt + W * QtLayout::kBytes;
  static constexpr int kRed = kPt + 2 * W * PtLayout::kBytes;  // [W][4 warps][kN] floats
  static constexpr int kBars = kRed + W * 4 * kN * 4;           // [full | empty][kStages] mbarriers
  static constexpr int kBytes = kBars + 2 * kStages * 8;
  static constexpr int kCtasPerSm = 2 * (kBytes + 1024) <= 228 * 1024 ? 2 : 1;
};

// Where a thread's A registers come from: mma/wgmma_tokens_layout.cuh.
using TokensLayout = wg::TokensOnMLayout<kD>;

template <int kCount>
__device__ __forceinline__ void keep_live(uint32_t (&a)[kCount][4]) {  // until the wgmma that reads them is waited for
#pragma unroll
  for (int i = 0; i < kCount; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) asm volatile("" ::"r"(a[i][r]) : "memory");
}

// kProducer: a warp of its own copies the tiles and hands them over on mbarriers, so that
// the computing threads, which run fence.proxy.async before every wgmma that reads P^T, have
// no copy in flight: the fence (MEMBAR.ALL.CTA in SASS) waits for the thread's outstanding
// memory operations, cp.async included.
template <int W, int kN, int kStages, bool kEarlyV, bool kProducer>
__global__ void __launch_bounds__(128 * W + (kProducer ? 32 : 0), kProducer ? 1 : TokShape<W, kN, kStages>::kCtasPerSm)
    tokens_kernel(Args a) {
#if VXQA_HAS_WGMMA
  extern __shared__ __align__(1024) uint8_t smem[];
  using S = TokShape<W, kN, kStages>;
  constexpr int kTile = S::kTile, kThreads = 128 * W, kSlots = kN / 4;
  constexpr float kTau = 8.f;  // the most P^T's values may exceed 1 (2^8: fp16 holds it exactly)
  const int t = threadIdx.x, group = t >> 7, wg_t = t & 127, warp = wg_t >> 5, g = (t & 31) >> 2, c = t & 3;
  const int seq = blockIdx.y, chunk = blockIdx.x;
  const int length = a.lengths[seq];
  const int begin = chunk * a.chunk_tokens, end = min(length, begin + a.chunk_tokens);
  const int tiles = end > begin ? (end - begin + kTile - 1) / kTile : 0;
  const int32_t* table = a.block_table + int64_t(seq) * a.max_pages;
  const int row0 = group * kN;
  uint8_t* qt = smem + S::kQt + group * S::QtLayout::kBytes;
  uint8_t* pt_buffers = smem + S::kPt + group * 2 * S::PtLayout::kBytes;  // two: a tile's and the next's
  float* red = reinterpret_cast<float*>(smem + S::kRed) + group * 4 * kN;

  // Q^T of this warpgroup's rows, dims in the decode's order; rows past a.rows zero. (Not
  // the producer warp: its group is past the warpgroups' buffers.)
  for (int i = wg_t; t < kThreads && i < kN * kD; i += 128) {
    const int n = i / kD, k = i % kD, row = row0 + n;
    const uint16_t x = row < a.rows ? a.q[(int64_t(seq) * a.rows + row) * kD + TokensLayout::qk_dim(k)] : uint16_t(0);
    *reinterpret_cast<uint16_t*>(qt + S::QtLayout::offset(n, k)) = x;
  }
  auto stage = [&](int j) { return smem + (j % kStages) * S::kStageBytes; };
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S::kBars);
  uint64_t* empty = full + kStages;
  constexpr int kCopiers = kProducer ? 32 : kThreads;
  constexpr int kPerRow = kCopiers >= kTile ? kCopiers / kTile : 1, kChunks = 16 / kPerRow;
  const int copy_row = kProducer ? (t & 31) : t / kPerRow, part = kProducer ? 0 : t % kPerRow;
  // The block-table id of the thread's token of tile j, loaded a tile before its copies.
  auto page_of = [&](int j) -> int32_t {
    const int token = begin + j * kTile + copy_row;
    return token < end ? table[token / kPage] : 0;
  };
  // Tile j's codes of the thread's token copy_row + 32 h (h < kRowsPerCopier).
  auto copy_row_of = [&](int j, int h, int32_t page) {
    const int row = copy_row + 32 * h, token = begin + j * kTile + row;
    const bool live = token < end;
    const int64_t offset = (int64_t(page) * kPage + token % kPage) * kD;
    uint8_t* st = stage(j);
#pragma unroll
    for (int u = 0; u < kChunks; ++u) {
      const int ch = part * kChunks + u;
      vxqa::arch::cp_async_16_or_zero(st + row * kD + 16 * TokensLayout::k_slot(row, ch), a.k + offset + 16 * ch,
                                      live);
      vxqa::arch::cp_async_16_or_zero(st + kTile * kD + row * kD + 16 * TokensLayout::v_slot(row, ch),
                                      a.v + offset + 16 * ch, live);
    }
  };
  auto issue = [&](int j, int32_t page) {  // tile j's codes; thread t copies chunks of one token
    if (j < tiles) copy_row_of(j, 0, page);
    vxqa::arch::cp_async_commit();
  };
  if constexpr (kProducer) {
    if (t == 0)
      for (int s = 0; s < kStages; ++s) vxqa::arch::mbarrier::init(full + s, 32), vxqa::arch::mbarrier::init(empty + s, kThreads);
    __syncthreads();
    if (t >= kThreads) {  // the producer warp: tokens lane and lane + 32 of every tile
      auto pages_of = [&](int j, int32_t (&pg)[2]) {
        for (int h = 0; h < 2; ++h) {
          const int token = begin + j * kTile + copy_row + 32 * h;
          pg[h] = token < end ? table[token / kPage] : 0;
        }
      };
      int32_t pg[2], next[2];
      pages_of(0, next);
      for (int j = 0; j < tiles; ++j) {
        pg[0] = next[0], pg[1] = next[1];
        pages_of(j + 1, next);
        if (j >= kStages) vxqa::arch::mbarrier::wait_parity(empty + j % kStages, uint32_t((j / kStages - 1) & 1));
        copy_row_of(j, 0, pg[0]);
        copy_row_of(j, 1, pg[1]);
        vxqa::arch::mbarrier::arrive_when_copies_land(full + j % kStages);
      }
      vxqa::arch::cp_async_wait<0>();
      return;
    }
  }

  float o[4][kN / 2];
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) o[mt][i] = 0.f;
  float mrun[kSlots], lpart[kSlots];  // rows 8 (slot / 2) + 2c + slot % 2 of the warpgroup
#pragma unroll
  for (int x = 0; x < kSlots; ++x) mrun[x] = -INFINITY, lpart[x] = 0.f;
  const uint32_t qt_base = static_cast<uint32_t>(__cvta_generic_to_shared(qt));

  int32_t next_page = 0;
  if constexpr (kProducer) {
    vxqa::arch::wgmma::fence_shared_for_async();  // Q^T
    vxqa::arch::named_barrier_sync(1 + group, 128);
  } else {
#pragma unroll
    for (int j = 0; j < kStages - 1; ++j) issue(j, page_of(j));
    next_page = page_of(kStages - 1);
  }
  for (int j = 0; j < tiles; ++j) {
    if constexpr (kProducer) {
      vxqa::arch::mbarrier::wait_parity(full + j % kStages, uint32_t((j / kStages) & 1));
    } else {
      vxqa::arch::cp_async_wait<kStages - 2>();
      vxqa::arch::wgmma::fence_shared_for_async();  // Q^T (first tile)
      __syncthreads();  // tile j landed; every warpgroup done with tile j - 1 (its stage, P^T)
      issue(j + kStages - 1, next_page);
      next_page = page_of(j + kStages);
    }
    // With the producer, P^T alternates between two buffers: tile j - 1's P·V, waited for by
    // each warp, and the vote barrier of tile j order every read of the other one before
    // tile j + 1 writes it.
    uint8_t* pt = pt_buffers + (kProducer ? (j & 1) * S::PtLayout::kBytes : 0);
    const uint32_t pt_base = static_cast<uint32_t>(__cvta_generic_to_shared(pt));
    const uint8_t* kst = stage(j);
    const uint8_t* vst = kst + kTile * kD;

    // K: tokens 16 warp + g and + 8, 16 codes a load
    uint32_t ka[16][4];
    {
      const int r0 = 16 * warp + g, r1 = r0 + 8;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int chunk = TokensLayout::k_chunk(i, c);
        const uint4 x0 = *reinterpret_cast<const uint4*>(kst + r0 * kD + 16 * TokensLayout::k_slot(r0, chunk));
        const uint4 x1 = *reinterpret_cast<const uint4*>(kst + r1 * kD + 16 * TokensLayout::k_slot(r1, chunk));
        const uint32_t w0[4] = {x0.x, x0.y, x0.z, x0.w}, w1[4] = {x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int sp = 0; sp < 4; ++sp) {
          const uint2 h0 = vxqa::e5m2x4_to_half2x2_bits(w0[sp]), h1 = vxqa::e5m2x4_to_half2x2_bits(w1[sp]);
          ka[4 * i + sp][0] = h0.x;
          ka[4 * i + sp][1] = h1.x;
          ka[4 * i + sp][2] = h0.y;
          ka[4 * i + sp][3] = h1.y;
        }
      }
    }
    float s[kN / 2];
    vxqa::arch::wgmma::fence_operands();
#pragma unroll
    for (int step = 0; step < 16; ++step)
      vxqa::arch::wgmma::MmaRs<kN, false>::run(s, ka[step],
                            wg::descriptor(qt_base + S::QtLayout::step_offset(0, step), S::QtLayout::kLeadingBytes,
                                           S::QtLayout::kStrideBytes),
                            step > 0);
    vxqa::arch::wgmma::commit();

    // V: dims 64 warp + 8g .. + 7 of tokens 16 ks + 2c, + 1, + 8, + 9, as A registers of
    // O^T's M tile mt (dims 2 mt, 2 mt + 1 of the eight: rows g and g + 8)
    uint32_t va[4][4][4];  // [ks][mt][register]
    auto decode_v = [&]() {
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // tokens 2c, 2c + 1 (registers 0, 1), then + 8 (2, 3)
          const int t0 = 16 * ks + 2 * c + 8 * half, t1 = t0 + 1;
          const int ch = TokensLayout::v_byte(warp, g) / 16, byte = TokensLayout::v_byte(warp, g) % 16;
          const uint2 x0 = *reinterpret_cast<const uint2*>(vst + t0 * kD + 16 * TokensLayout::v_slot(t0, ch) + byte);
          const uint2 x1 = *reinterpret_cast<const uint2*>(vst + t1 * kD + 16 * TokensLayout::v_slot(t1, ch) + byte);
          const uint32_t lo[2] = {x0.x, x0.y}, hi[2] = {x1.x, x1.y};
#pragma unroll
          for (int wd = 0; wd < 2; ++wd) {
            uint32_t dims01, dims23;  // codes 4 wd .. 4 wd + 3 of t0 and t1, paired by dim
            TokensLayout::interleave_tokens(lo[wd], hi[wd], dims01, dims23);
            const uint2 h01 = vxqa::e5m2x4_to_half2x2_bits(dims01), h23 = vxqa::e5m2x4_to_half2x2_bits(dims23);
            va[ks][2 * wd][2 * half] = h01.x;  // M tile 2 wd: rows g (dim + 0) and g + 8 (dim + 1)
            va[ks][2 * wd][2 * half + 1] = h01.y;
            va[ks][2 * wd + 1][2 * half] = h23.x;
            va[ks][2 * wd + 1][2 * half + 1] = h23.y;
          }
        }
    };
    if constexpr (kEarlyV) decode_v();
    if constexpr (kProducer && kEarlyV) vxqa::arch::mbarrier::arrive(empty + j % kStages);  // stage j read
    vxqa::arch::wgmma::wait<0>();
    keep_live(ka);
    vxqa::arch::wgmma::fence_registers(s);

    // Softmax over the tile's tokens; P^T published with the vote
    const int tile_end = end - (begin + j * kTile);
    float p[kN / 2];
    bool exceed = false;
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      const int slot = 2 * (i >> 2) + (i & 1);
      s[i] = wg::d_row(wg_t, i) < tile_end ? s[i] * a.scale_log2 : -INFINITY;
      exceed |= s[i] > mrun[slot] + kTau;
      p[i] = vxqa::arch::exp2_ftz(s[i] - mrun[slot]);
    }
    auto publish = [&]() {
#pragma unroll
      for (int i = 0; i < kN / 2; i += 2)
        *reinterpret_cast<uint32_t*>(pt + S::PtLayout::offset(wg::d_col(wg_t, i), wg::d_row(wg_t, i))) =
            pack_half2(p[i], p[i + 1]);
      vxqa::arch::wgmma::fence_shared_for_async();
    };
    publish();
    if (vxqa::arch::named_barrier_sync_any(1 + group, 128, exceed)) {  // the rare tile: the max moves
      float tm[kSlots];
#pragma unroll
      for (int x = 0; x < kSlots; ++x) tm[x] = -INFINITY;
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) tm[2 * (i >> 2) + (i & 1)] = fmaxf(tm[2 * (i >> 2) + (i & 1)], s[i]);
#pragma unroll
      for (int x = 0; x < kSlots; ++x) {
        tm[x] = fmaxf(tm[x], __shfl_xor_sync(0xffffffffu, tm[x], 4));
        tm[x] = fmaxf(tm[x], __shfl_xor_sync(0xffffffffu, tm[x], 8));
        tm[x] = fmaxf(tm[x], __shfl_xor_sync(0xffffffffu, tm[x], 16));
        if (g == 0) red[warp * kN + 8 * (x >> 1) + 2 * c + (x & 1)] = tm[x];
      }
      vxqa::arch::named_barrier_sync(1 + group, 128);
#pragma unroll
      for (int x = 0; x < kSlots; ++x) {
        const int n = 8 * (x >> 1) + 2 * c + (x & 1);
        const float mx = fmaxf(fmaxf(mrun[x], fmaxf(red[n], red[kN + n])), fmaxf(red[2 * kN + n], red[3 * kN + n]));
        const float alpha = vxqa::arch::exp2_ftz(mrun[x] - mx);
        mrun[x] = mx;
        lpart[x] *= alpha;
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
          o[mt][4 * (x >> 1) + (x & 1)] *= alpha;
          o[mt][4 * (x >> 1) + (x & 1) + 2] *= alpha;
        }
      }
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) p[i] = vxqa::arch::exp2_ftz(s[i] - mrun[2 * (i >> 2) + (i & 1)]);
      publish();
      vxqa::arch::named_barrier_sync(1 + group, 128);  // P^T rewritten; red read by all
    }
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) lpart[2 * (i >> 2) + (i & 1)] += p[i];

    if constexpr (!kEarlyV) decode_v();
    if constexpr (kProducer && !kEarlyV) vxqa::arch::mbarrier::arrive(empty + j % kStages);
    vxqa::arch::wgmma::fence_operands();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const uint64_t desc = wg::descriptor(pt_base + S::PtLayout::step_offset(0, ks), S::PtLayout::kLeadingBytes,
                                           S::PtLayout::kStrideBytes);
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) vxqa::arch::wgmma::MmaRs<kN, true>::run(o[mt], va[ks][mt], desc, true);
    }
    vxqa::arch::wgmma::commit();
    vxqa::arch::wgmma::wait<0>();
    keep_live(va[0]);
    keep_live(va[1]);
    keep_live(va[2]);
    keep_live(va[3]);
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) vxqa::arch::wgmma::fence_registers(o[mt]);
  }
  vxqa::arch::cp_async_wait<0>();

  // l: the thread's sums over its tokens, summed over g and the warps
  vxqa::arch::named_barrier_sync(1 + group, 128);  // red free
#pragma unroll
  for (int x = 0; x < kSlots; ++x) {
    lpart[x] += __shfl_xor_sync(0xffffffffu, lpart[x], 4);
    lpart[x] += __shfl_xor_sync(0xffffffffu, lpart[x], 8);
    lpart[x] += __shfl_xor_sync(0xffffffffu, lpart[x], 16);
    if (g == 0) red[warp * kN + 8 * (x >> 1) + 2 * c + (x & 1)] = lpart[x];
  }
  vxqa::arch::named_barrier_sync(1 + group, 128);
  const int64_t slot_index = int64_t(seq) * a.chunks + chunk;
#pragma unroll
  for (int x = 0; x < kSlots; ++x) {
    const int n = 8 * (x >> 1) + 2 * c + (x & 1), row = row0 + n;
    if (row >= a.rows) continue;
    const float l = red[n] + red[kN + n] + red[2 * kN + n] + red[3 * kN + n];
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int i0 = 4 * (x >> 1) + (x & 1);  // o[mt][i0] is dim 2 mt, o[mt][i0 + 2] dim 2 mt + 1 of the eight
    float* dst = a.o + (slot_index * a.rows + row) * kD + TokensLayout::v_byte(warp, g);
    *reinterpret_cast<float4*>(dst) = make_float4(o[0][i0] * inv, o[0][i0 + 2] * inv, o[1][i0] * inv, o[1][i0 + 2] * inv);
    *reinterpret_cast<float4*>(dst + 4) =
        make_float4(o[2][i0] * inv, o[2][i0 + 2] * inv, o[3][i0] * inv, o[3][i0 + 2] * inv);
    if (warp == 0 && g == 0) *reinterpret_cast<float2*>(a.ml + (slot_index * a.rows + row) * 2) = make_float2(mrun[x], l);
  }
#endif
}


bool g_swap_v = false;  // V's leading and stride offsets exchanged


Args args_of(const Problem& p, const Device& d, int chunk_tokens, uint32_t v_lead, uint32_t v_stride) {
  return Args{d.k, d.v, d.table, p.pages_per_seq, d.lengths, d.q, p.rows, chunk_tokens, chunks_of(p, chunk_tokens),
              1.f / 16.f * 1.4426950408889634f, v_lead, v_stride, d.o, d.ml};
}

// kSpecialized: specialized_kernel (its W 1, tiles of 32), else rows_kernel<W, kTile, kLean>.
template <int W, int kTile, bool kLean, bool kSpecialized = false, bool kPipelined = false, int kConsumers = 1>
float run(const Problem& p, const Device& d, int chunk_tokens, int reps, cudaStream_t stream) {
  using V = typename Shape<W, kTile>::VLayout;
  static_assert(!kSpecialized || (W == 1 && kTile == SpecShape<kConsumers>::kTile),
                "run: the specialized kernel is W 1, tile 32");
  const Args a = args_of(p, d, chunk_tokens, uint32_t(g_swap_v ? V::kStrideBytes : V::kLeadingBytes),
                         uint32_t(g_swap_v ? V::kLeadingBytes : V::kStrideBytes));
  void (*kernel)(Args) = kSpecialized ? specialized_kernel<kPipelined, kConsumers> : rows_kernel<W, kTile, kLean>;
  const int smem = kSpecialized ? SpecShape<kConsumers>::kBytes : Shape<W, kTile>::kBytes;
  const int threads = kSpecialized ? 128 * (1 + kConsumers) : 128 * W;
  return time_kernel(kernel, a, dim3(a.chunks, p.batch), threads, smem, reps, stream);
}

// tokens_kernel<W, N, Stages, EarlyV>: W · N rows at most.
template <int W, int kN, int kStages, bool kEarlyV, bool kProducer = true>
float run_tokens(const Problem& p, const Device& d, int chunk_tokens, int reps, cudaStream_t stream) {
  const Args a = args_of(p, d, chunk_tokens, 0, 0);
  return time_kernel(tokens_kernel<W, kN, kStages, kEarlyV, kProducer>, a, dim3(a.chunks, p.batch),
                     128 * W + (kProducer ? 32 : 0), TokShape<W, kN, kStages>::kBytes, reps, stream);
}

// chunk) runs the kernel under test once.

template <int W, int kTile, bool kLean, bool kSpecialized = false, bool kPipelined = false, int kConsumers = 1>
bool check(int rows) {
  char name[96];
  std::snprintf(name, sizeof name, "W %d tile %d%s", W, kTile,
                kConsumers == 2 ? " specialized, two consumers" : kPipelined ? " specialized, pipelined" : kSpecialized ? " specialized" : kLean ? " lean" : "");
  return check_with(name, rows, [](const Problem& p, const Device& d, int chunk) {
    run<W, kTile, kLean, kSpecialized, kPipelined, kConsumers>(p, d, chunk, 0, 0);
  });
}

template <int W, int kN, int kStages, bool kEarlyV, bool kProducer = true>
bool check_tokens(int rows) {
  char name[112];
  std::snprintf(name, sizeof name, "tokens on M, W %d N %d, %d stages%s%s", W, kN, kStages, kEarlyV ? ", V early" : "",
                kProducer ? ", producer warp" : ", every thread copies");
  return check_with(name, rows, [](const Problem& p, const Device& d, int chunk) {
    run_tokens<W, kN, kStages, kEarlyV, kProducer>(p, d, chunk, 0, 0);
  });
}

}  // namespace

int main(int argc, char** argv) {
  const bool only_check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
  const bool only_tokens = argc > 1 && std::strcmp(argv[1], "--tokens") == 0;
  if (argc == 3 && std::strcmp(argv[1], "--only-tokens") == 0) {  // --only-tokens CHUNK: 24 rows, for ncu
    const int chunk = std::atoi(argv[2]);
    Problem p = make(vxqa_bench::lengths(vxqa_bench::kShapes[1]), 24, 9);
    Device d = to_device(p, chunks_of(p, chunk));
    for (int r = 0; r < 3; ++r) run_tokens<1, 24, 3, true>(p, d, chunk, 0, 0);
    release(d);
    return 0;
  }
  if (argc == 5 && std::strcmp(argv[1], "--only") == 0) {  // --only ROWS TILE CHUNK: three launches, for ncu
    const int rows = std::atoi(argv[2]), tile = std::atoi(argv[3]), chunk = std::atoi(argv[4]);
    Problem p = make(vxqa_bench::lengths(vxqa_bench::kShapes[1]), rows, 9);
    Device d = to_device(p, chunks_of(p, chunk));
    for (int r = 0; r < 3; ++r) {
      if (rows <= 64) {
        tile == 64 ? run<1, 64, true>(p, d, chunk, 0, 0) : run<1, 32, true>(p, d, chunk, 0, 0);
      } else {
        tile == 64 ? run<2, 64, true>(p, d, chunk, 0, 0) : run<2, 32, true>(p, d, chunk, 0, 0);
      }
    }
    release(d);
    return 0;
  }
  bool ok = check<1, 64, false>(24);
  if (!ok) {  // which reading of V's two descriptor offsets the hardware has
    g_swap_v = true;
    std::printf("V's descriptor offsets exchanged:\n");
    ok = check<1, 64, false>(24);
  }
  ok = check<1, 64, false>(64) && ok;
  ok = check<2, 64, false>(128) && ok;
  ok = check<1, 64, true>(24) && ok;
  ok = check<2, 64, true>(96) && ok;
  ok = check<1, 32, false>(24) && ok;
  ok = check<1, 32, true>(64) && ok;
  ok = check<2, 32, false>(96) && ok;
  ok = check<2, 32, true>(128) && ok;
  ok = check<1, 32, true, true>(24) && ok;
  ok = check<1, 32, true, true>(64) && ok;
  ok = check<1, 32, true, true, true>(24) && ok;
  ok = check<1, 32, true, true, true>(64) && ok;
  ok = check<1, 32, true, true, true, 2>(24) && ok;
  ok = check<1, 32, true, true, true, 2>(64) && ok;
  ok = check<1, 32, true, true, false, 2>(24) && ok;
  if (!ok) return 1;
  // tokens_kernel: its timings only if it passes
  bool tok = check_tokens<1, 24, 3, false>(24);
  tok = check_tokens<1, 8, 3, true>(6) && tok;
  tok = check_tokens<1, 24, 3, true, false>(24) && tok;
  tok = check_tokens<1, 24, 3, true>(20) && tok;  // padded rows
  tok = check_tokens<1, 24, 2, true>(24) && tok;
  tok = check_tokens<1, 32, 3, true>(32) && tok;
  tok = check_tokens<1, 48, 2, false>(48) && tok;
  tok = check_tokens<2, 32, 3, false>(64) && tok;
  tok = check_tokens<2, 48, 3, false>(96) && tok;
  if (only_check) return tok ? 0 : 1;
  cudaStream_t stream;
  DEMO_CHECK(cudaStreamCreate(&stream));
  SeedRuns seed = seed_runs();
  Problem& p = seed.p;
  Device& d = seed.d;
  const double mbytes = seed.mbytes;
  auto line = [&](int rows, int w, int tile, int chunk, float us, float us_lean) {
    std::printf("rows %3d, W %d, tile %d, chunk %4d: %7.1f us (%5.0f GB/s); lean softmax: %7.1f us (%5.0f GB/s)\n",
                rows, w, tile, chunk, us, mbytes * 1e3 / us, us_lean, mbytes * 1e3 / us_lean);
  };
  auto tokens_line = [&](const char* what, int chunk, float us) {  // p.rows rows
    std::printf("rows %3d, tokens on M, %s, chunk %4d: %7.1f us (%5.0f GB/s)\n", p.rows, what, chunk, us,
                mbytes * 1e3 / us);
  };
  for (int chunk : {1216, 2368}) {
    if (!tok) break;
    p.rows = 6;  // q_len 1 at G 6: against the library's plain kernel on the same card
    tokens_line("W 1 N 8, 3 stages, V early", chunk, run_tokens<1, 8, 3, true>(p, d, chunk, 30, stream));
    tokens_line("W 1 N 8, 3 stages, V early, every thread copies", chunk,
                run_tokens<1, 8, 3, true, false>(p, d, chunk, 30, stream));
    p.rows = 16;
    tokens_line("W 1 N 16, 3 stages, V early", chunk, run_tokens<1, 16, 3, true>(p, d, chunk, 30, stream));
    p.rows = 24;
    tokens_line("W 1 N 24, 3 stages", chunk, run_tokens<1, 24, 3, false>(p, d, chunk, 30, stream));
    tokens_line("W 1 N 24, 3 stages, V early", chunk, run_tokens<1, 24, 3, true>(p, d, chunk, 30, stream));
    tokens_line("W 1 N 24, 2 stages, V early", chunk, run_tokens<1, 24, 2, true>(p, d, chunk, 30, stream));
    tokens_line("W 1 N 24, 3 stages, V early, every thread copies", chunk,
                run_tokens<1, 24, 3, true, false>(p, d, chunk, 30, stream));
    p.rows = 32;
    tokens_line("W 1 N 32, 3 stages, V early", chunk, run_tokens<1, 32, 3, true>(p, d, chunk, 30, stream));
    p.rows = 48;
    tokens_line("W 1 N 48, 2 stages", chunk, run_tokens<1, 48, 2, false>(p, d, chunk, 30, stream));
    p.rows = 64;
    tokens_line("W 2 N 32, 3 stages", chunk, run_tokens<2, 32, 3, false>(p, d, chunk, 30, stream));
    tokens_line("W 2 N 32, 3 stages, every thread copies", chunk, run_tokens<2, 32, 3, false, false>(p, d, chunk, 30, stream));
    p.rows = 96;
    tokens_line("W 2 N 48, 3 stages", chunk, run_tokens<2, 48, 3, false>(p, d, chunk, 30, stream));
    tokens_line("W 2 N 48, 3 stages, every thread copies", chunk, run_tokens<2, 48, 3, false, false>(p, d, chunk, 30, stream));
  }
  if (only_tokens) {
    release(d);
    return 0;
  }
  for (int rows : {24, 64, 96, 128}) {
    p.rows = rows;
    for (int chunk : {1216, 2368}) {  // 16 and 8 chunks a sequence
      if (rows <= 64) {
        line(rows, 1, 64, chunk, run<1, 64, false>(p, d, chunk, 30, stream), run<1, 64, true>(p, d, chunk, 30, stream));
        line(rows, 1, 32, chunk, run<1, 32, false>(p, d, chunk, 30, stream), run<1, 32, true>(p, d, chunk, 30, stream));
        const float us = run<1, 32, true, true>(p, d, chunk, 30, stream);
        const float us_pipelined = run<1, 32, true, true, true>(p, d, chunk, 30, stream);
        std::printf("rows %3d, specialized (a converting warpgroup, a computing one), tile 32, chunk %4d: %7.1f us (%5.0f "
                    "GB/s); P.V(j) under QK(j + 1): %7.1f us (%5.0f GB/s)\n",
                    rows, chunk, us, mbytes * 1e3 / us, us_pipelined, mbytes * 1e3 / us_pipelined);
        const float us_two = run<1, 32, true, true, false, 2>(p, d, chunk, 30, stream);
        const float us_two_pipelined = run<1, 32, true, true, true, 2>(p, d, chunk, 30, stream);
        std::printf("rows %3d, specialized, two computing warpgroups over alternate tiles, chunk %4d: %7.1f us (%5.0f "
                    "GB/s); P.V(j) under the next QK: %7.1f us (%5.0f GB/s)\n",
                    rows, chunk, us_two, mbytes * 1e3 / us_two, us_two_pipelined, mbytes * 1e3 / us_two_pipelined);
      } else {
        line(rows, 2, 64, chunk, run<2, 64, false>(p, d, chunk, 30, stream), run<2, 64, true>(p, d, chunk, 30, stream));
        line(rows, 2, 32, chunk, run<2, 32, false>(p, d, chunk, 30, stream), run<2, 32, true>(p, d, chunk, 30, stream));
      }
    }
  }
  release(d);
  return 0;
}
