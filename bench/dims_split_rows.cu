// dims_split_rows: a multi-token CTA body on mma.m16n8k16 where a stream's warps split the
// head dims instead of the rows (docs/performance.md, "Handed-out units with a shared index,
// head dims split between warps, …": no faster than the library's 6-warp multi-token
// Config at q_len 4, so not built into it). A measurement, on the harness of
// rows_prototype.cuh (plain attention, E5M2 pages of 16, D 256, every key visible to every
// row, split-KV partials written, no combine).
//
// dims_kernel<W, NT, S, Stages, Lazy>: a CTA of S streams of W warps, one (sequence, chunk). Stream
// s takes the chunk's 16-token tiles s, s + S, ...; warp w of a stream owns head dims
// [w · 256 / W, (w + 1) · 256 / W) of K, V and O, for all 8 · NT rows:
//   copies     its slice of each tile's K and V rows, cp.async into its own ring of Stages
//              (no shared tile, no copier: nothing to wait for but its own copies);
//   QK         its slice's partial Sᵀ (tokens on M, rows on NT N tiles): each K A-fragment
//              decoded once, fed to NT MMAs;
//   exchange   the partials through shared memory (two buffers, one barrier of the stream a
//              tile), summed in warp order, so every warp holds the same Sᵀ;
//   softmax    on all rows, in every warp (the same values: the same m, l, P);
//   PV         Oᵀ of its slice for all rows, each V A-fragment decoded once, NT MMAs.
// So each KV byte is decoded once whatever the rows, and a tile's dependent chain is one
// slice long. The streams merge at the end through shared memory. Lazy: O's rescale skipped
// where no row's max moved (a warp vote a tile).
//
//   vxqa_dims_split_rows [--check]
// Prints one line a configuration: µs (median of 30 launches, CUDA events), GB/s of K and V.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>

#include <vxqa/arch/cp_async.cuh>
#include <vxqa/arch/mma_m16n8k16.cuh>
#include <vxqa/arch/named_barrier.cuh>
#include <vxqa/mma/fragments_m16n8k16.cuh>
#include <vxqa/mma/sm80_pv_consumer.cuh>
#include <vxqa/mma/sm80_qk_consumer.cuh>
#include <vxqa/softmax/register_softmax.cuh>

#include "rows_prototype.cuh"

namespace {

using namespace vxqa_rows;
namespace m16 = vxqa::mma::m16n8k16;

template <int W, int NT, int S, int kStages>
struct DimsShape {
  static_assert(W == 2 || W == 4, "DimsShape: 2 or 4 warps split D 256");
  using Slice = vxqa::mma::Sm80TileGeometry<kD / W, vxqa::KvType::kE5M2>;  // a warp's dims as a D/W tile
  using Qk = vxqa::mma::Sm80QkConsumer<Slice>;
  using Pv = vxqa::mma::Sm80PvConsumer<Slice>;
  static constexpr int kKBytes = Qk::Layout::kBytes, kVBytes = Pv::Layout::kBytes;
  static constexpr int kStageBytes = kKBytes + kVBytes;
  static constexpr int kRingBytes = kStages * kStageBytes;             // a warp's
  static constexpr int kExchangeBytes = 2 * W * NT * 32 * 16;          // a stream's two buffers
  static constexpr int kMergeBytes = S * W * (NT * Pv::kMTiles * 32 * 16 + NT * 32 * 16);  // O, then (m, l)
  static constexpr int kLoopBytes = S * W * kRingBytes + S * kExchangeBytes;
  static constexpr int kBytes = kLoopBytes > kMergeBytes ? kLoopBytes : kMergeBytes;
  static constexpr int kThreads = 32 * W * S;
};

template <int W, int NT, int S, int kStages, bool kLazy>
__global__ void __launch_bounds__(32 * W * S) dims_kernel(Args a) {
#if VXQA_HAS_MMA_M16N8K16 && VXQA_HAS_MOVMATRIX
  using Shape = DimsShape<W, NT, S, kStages>;
  using Qk = typename Shape::Qk;
  using Pv = typename Shape::Pv;
  using Slice = typename Shape::Slice;
  constexpr int kM = Pv::kMTiles;
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int stream = warp / W, w = warp % W;
  const int seq = blockIdx.y, chunk = blockIdx.x;
  const int len = a.lengths[seq];
  const int begin = chunk * a.chunk_tokens, end = min(len, begin + a.chunk_tokens);
  const int32_t* table = a.block_table + int64_t(seq) * a.max_pages;
  uint8_t* ring = smem + warp * Shape::kRingBytes;
  float4* exchange = reinterpret_cast<float4*>(smem + S * W * Shape::kRingBytes + stream * Shape::kExchangeBytes);

  typename Qk::QFragments qf[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int row = nt * 8 + m16::group(lane);
    const uint16_t* q_row = row < a.rows ? a.q + (int64_t(seq) * a.rows + row) * kD + w * Slice::kHeadDimV : nullptr;
    qf[nt] = Qk::template load_q<vxqa::ActType::kFp16>(q_row);
  }
  vxqa::softmax::HeadPairState st[NT];
  float o[NT][kM][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    st[nt] = vxqa::softmax::empty_head_pair();
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[nt][m][e] = 0.f;
  }

  const int tiles = begin < end ? (end - begin + 15) / 16 : 0;
  const int count = tiles > stream ? (tiles - stream + S - 1) / S : 0;  // this stream's tiles
  auto start_of = [&](int k) { return begin + 16 * (stream + k * S); };
  auto issue = [&](int k) {  // the stream's k-th tile, this warp's slice; one commit group
    if (k < count) {
      const int token0 = start_of(k);
      const int64_t page = table[token0 / kPage];
      uint8_t* stage = ring + (k % kStages) * Shape::kStageBytes;
      constexpr int kChunks = Slice::kChunksPerRow;  // 16-byte chunks of a slice row
#pragma unroll
      for (int i = lane; i < 16 * kChunks; i += 32) {
        const int row = i / kChunks, c = i % kChunks;
        const bool live = token0 + row < end;
        const int64_t src = (page * kPage + row) * kD + w * Slice::kRowBytes + 16 * c;
        vxqa::arch::cp_async_16_or_zero(stage + Qk::Layout::chunk_offset(row, c), a.k + src, live);
        vxqa::arch::cp_async_16_or_zero(stage + Shape::kKBytes + Pv::Layout::offset(row, 16 * c), a.v + src, live);
      }
    }
    vxqa::arch::cp_async_commit();
  };

#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) issue(k);
  const int row = m16::group(lane), t = m16::thread_in_group(lane);
  for (int k = 0; k < count; ++k) {
    __syncwarp();  // every lane is done with the stage tile k + Stages - 1 refills
    issue(k + kStages - 1);
    vxqa::arch::cp_async_wait<kStages - 1>();
    __syncwarp();
    const uint8_t* k_tile = ring + (k % kStages) * Shape::kStageBytes;

    // The slice's partial Sᵀ, each decoded K fragment feeding NT MMAs.
    float part[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) part[nt][e] = 0.f;
#pragma unroll
    for (int g = 0; g < Qk::kChunkReads; ++g) {
      const uint4 lo = *reinterpret_cast<const uint4*>(k_tile + Qk::Layout::chunk_offset(row, t + 4 * g));
      const uint4 hi = *reinterpret_cast<const uint4*>(k_tile + Qk::Layout::chunk_offset(row + 8, t + 4 * g));
      const uint32_t wl[4] = {lo.x, lo.y, lo.z, lo.w}, wh[4] = {hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int i = 0; i < Qk::kStepsPerChunk; ++i) {
        const uint2 l = Qk::Decode::four(wl[i]), h = Qk::Decode::four(wh[i]);
        const uint32_t af[4] = {l.x, h.x, l.y, h.y};
        const int step = g * Qk::kStepsPerChunk + i;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint32_t b[2] = {qf[nt].q[step][0], qf[nt].q[step][1]};
          vxqa::arch::mma_m16n8k16_row_col(part[nt], af, b, part[nt]);
        }
      }
    }
    // The stream's partials summed in warp order: every warp of the stream the same Sᵀ.
    float4* buffer = exchange + (k & 1) * W * NT * 32;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      buffer[(w * NT + nt) * 32 + lane] = make_float4(part[nt][0], part[nt][1], part[nt][2], part[nt][3]);
    vxqa::arch::named_barrier_sync(1 + stream, 32 * W);
    float s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float4 sum = buffer[nt * 32 + lane];
#pragma unroll
      for (int u = 1; u < W; ++u) {
        const float4 x = buffer[(u * NT + nt) * 32 + lane];
        sum.x += x.x, sum.y += x.y, sum.z += x.z, sum.w += x.w;
      }
      const int token = start_of(k) + row;
      const bool top = token < end, bottom = token + 8 < end;
      const float ninf = -INFINITY;
      s[nt][0] = top ? sum.x * a.scale_log2 : ninf;
      s[nt][1] = top ? sum.y * a.scale_log2 : ninf;
      s[nt][2] = bottom ? sum.z * a.scale_log2 : ninf;
      s[nt][3] = bottom ? sum.w * a.scale_log2 : ninf;
    }
    uint32_t p[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float alpha[2];
      vxqa::softmax::register_softmax_step(st[nt], s[nt], p[nt], alpha);
      if (kLazy && __all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) continue;  // no max moved
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[nt][m][e] *= alpha[e & 1];
    }
    // The slice's Oᵀ, each decoded V fragment feeding NT MMAs.
    const uint8_t* v_tile = k_tile + Shape::kKBytes;
#pragma unroll
    for (int v = 0; v < Pv::kReads; ++v) {
      uint32_t words[4][Pv::kWordsPerRead];
      Pv::load_words(v_tile, v, words);
#pragma unroll
      for (int i = 0; i < Pv::kWordsPerRead; ++i) {
        uint32_t af[Pv::kMTilesPerWord][4];
        Pv::a_fragments(words, i, af);
#pragma unroll
        for (int h = 0; h < Pv::kMTilesPerWord; ++h)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            Pv::mma(o[nt][Pv::kMTilesPerWord * (v * Pv::kWordsPerRead + i) + h], af[h], p[nt]);
      }
    }
  }
  vxqa::arch::cp_async_wait<0>();
  __syncthreads();  // the rings and buffers become the merge area

  // The streams' (m, l) and O through shared memory; the warps of stream 0 write the
  // merged rows of their slice.
  float* merge_o = reinterpret_cast<float*>(smem);
  float* merge_ml = merge_o + S * W * NT * kM * 32 * 4;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const float l0 = vxqa::softmax::head_sum(st[nt].l[0]), l1 = vxqa::softmax::head_sum(st[nt].l[1]);
    *reinterpret_cast<float4*>(merge_ml + ((warp * NT + nt) * 32 + lane) * 4) =
        make_float4(st[nt].m[0], st[nt].m[1], l0, l1);
#pragma unroll
    for (int m = 0; m < kM; ++m)
      *reinterpret_cast<float4*>(merge_o + (((warp * NT + nt) * kM + m) * 32 + lane) * 4) =
          make_float4(o[nt][m][0], o[nt][m][1], o[nt][m][2], o[nt][m][3]);
  }
  __syncthreads();
  if (stream != 0) return;
  const int64_t slot = int64_t(seq) * a.chunks + chunk;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    float ml[S][4];
    float m_all[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const float4 x = *reinterpret_cast<const float4*>(merge_ml + (((s * W + w) * NT + nt) * 32 + lane) * 4);
      ml[s][0] = x.x, ml[s][1] = x.y, ml[s][2] = x.z, ml[s][3] = x.w;
      m_all[0] = fmaxf(m_all[0], x.x);
      m_all[1] = fmaxf(m_all[1], x.y);
    }
    float scale[S][2], l_all[2] = {0.f, 0.f};
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        scale[s][h] = ml[s][h] == -INFINITY ? 0.f : exp2f(ml[s][h] - m_all[h]);
        l_all[h] += ml[s][2 + h] * scale[s][h];
      }
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const float4 x = *reinterpret_cast<const float4*>(merge_o + ((((s * W + w) * NT + nt) * kM + m) * 32 + lane) * 4);
        acc[0] += x.x * scale[s][0], acc[1] += x.y * scale[s][1], acc[2] += x.z * scale[s][0], acc[3] += x.w * scale[s][1];
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = nt * 8 + Pv::head_of(lane, e), h = e & 1;
        if (r >= a.rows) continue;
        const float inv = l_all[h] > 0.f ? 1.f / l_all[h] : 0.f;
        a.o[(slot * a.rows + r) * kD + w * Slice::kHeadDimV + Pv::dim_of(lane, m, e)] = acc[e] * inv;
      }
    }
    if (m16::group(lane) == 0)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = nt * 8 + 2 * t + h;
        if (w == 0 && r < a.rows)
          *reinterpret_cast<float2*>(a.ml + (slot * a.rows + r) * 2) = make_float2(m_all[h], l_all[h]);
      }
  }
#endif
}

template <int W, int NT, int S, int kStages, bool kLazy = true>
float run(const Problem& p, const Device& d, int chunk_tokens, int reps, cudaStream_t stream) {
  using Shape = DimsShape<W, NT, S, kStages>;
  const Args a{d.k, d.v, d.table, p.pages_per_seq, d.lengths, d.q, p.rows, chunk_tokens, chunks_of(p, chunk_tokens),
               1.f / 16.f * 1.4426950408889634f, 0, 0, d.o, d.ml};
  return time_kernel(dims_kernel<W, NT, S, kStages, kLazy>, a, dim3(a.chunks, p.batch), Shape::kThreads, Shape::kBytes, reps,
                     stream);
}

template <int W, int NT, int S, int kStages, bool kLazy = true>
bool check(int rows) {
  char name[112];
  std::snprintf(name, sizeof name, "dims split W %d, %d N tiles, %d streams, %d stages%s", W, NT, S, kStages,
                kLazy ? ", lazy rescale" : "");
  return check_with(name, rows, [](const Problem& p, const Device& d, int chunk) {
    run<W, NT, S, kStages, kLazy>(p, d, chunk, 0, 0);
  });
}

template <int W, int NT, int S, int kStages, bool kLazy = true>
void line(Problem& p, const Device& d, int rows, int chunk, double mbytes, cudaStream_t stream) {
  p.rows = rows;
  const float us = run<W, NT, S, kStages, kLazy>(p, d, chunk, 30, stream);
  int ctas_per_sm = 0;
  DEMO_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas_per_sm, dims_kernel<W, NT, S, kStages, kLazy>,
                                                           DimsShape<W, NT, S, kStages>::kThreads,
                                                           DimsShape<W, NT, S, kStages>::kBytes));
  std::printf("rows %3d, W %d, %d N tiles, %d streams, %d stages%s, chunk %4d (%d CTAs an SM, %d B): %7.1f us (%5.0f GB/s)\n",
              rows, W, NT, S, kStages, kLazy ? ", lazy" : "", chunk, ctas_per_sm, DimsShape<W, NT, S, kStages>::kBytes, us, mbytes * 1e3 / us);
}

}  // namespace

int main(int argc, char** argv) {
  const bool only_check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
  if (!vxqa_demo::has_gpu()) {
    std::printf("no CUDA device: dims_split_rows skipped\n");
    return 0;
  }
  bool ok = check<4, 1, 2, 4>(6);
  ok = check<4, 3, 2, 4, false>(24) && ok;
  ok = check<4, 3, 2, 4>(24) && ok;
  ok = check<4, 3, 1, 4>(20) && ok;  // padded rows, one stream
  ok = check<2, 3, 2, 4>(24) && ok;
  ok = check<4, 8, 1, 4>(64) && ok;
  ok = check<4, 6, 2, 3>(48) && ok;
  if (only_check || !ok) return ok ? 0 : 1;
  cudaStream_t stream;
  DEMO_CHECK(cudaStreamCreate(&stream));
  SeedRuns seed = seed_runs();
  Problem& p = seed.p;
  Device& d = seed.d;
  const double mbytes = seed.mbytes;
  for (int chunk : {1216, 2368}) {
    line<4, 1, 2, 4>(p, d, 6, chunk, mbytes, stream);  // q_len 1 at G 6
    line<4, 1, 1, 4>(p, d, 6, chunk, mbytes, stream);
    line<2, 1, 2, 4>(p, d, 6, chunk, mbytes, stream);
    line<4, 3, 2, 4>(p, d, 24, chunk, mbytes, stream);  // q_len 4 at G 6
    line<4, 3, 2, 4, false>(p, d, 24, chunk, mbytes, stream);
    line<4, 3, 1, 4>(p, d, 24, chunk, mbytes, stream);
    line<4, 3, 2, 6>(p, d, 24, chunk, mbytes, stream);
    line<2, 3, 2, 4>(p, d, 24, chunk, mbytes, stream);
    line<2, 3, 1, 4>(p, d, 24, chunk, mbytes, stream);
    line<2, 3, 1, 4, false>(p, d, 24, chunk, mbytes, stream);
    line<2, 3, 1, 6>(p, d, 24, chunk, mbytes, stream);
    line<4, 6, 2, 3>(p, d, 48, chunk, mbytes, stream);
    line<4, 8, 1, 4>(p, d, 64, chunk, mbytes, stream);  // q_len 16 at G 4, or 64 rows
  }
  release(d);
  return 0;
}
