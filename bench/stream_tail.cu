// stream_tail: would handing out fixed-position units of a step's chunks from a counter take
// the slow SMs' tail apart (issue 22: "no SM waits on the slowest")? A measurement before the
// decode kernel changes: it streams the seed shape's K and V bytes (pages of 16, D 256, E5M2:
// the 16 ragged ~17.8K lengths, 146.6 MB) with no compute, as the decode kernel's copies do,
// one block-table id a 16-token tile, in two ways:
//   static   one CTA a (sequence, chunk) of the plan's chunk tokens, as decode() launches it;
//   dynamic  two CTAs an SM for the whole step, each taking the next unit (a fixed token
//            range of a sequence, U tokens) from a global counter until none is left;
//   flowing  the same, with the copies running on across units and each unit claimed one
//            unit ahead, or (late claim) when the current unit's last batch is taken.
// The units' positions are fixed, so what a unit computes would not depend on which CTA took
// it: the partials stay bitwise the same.
// Then, on the static chunks, what merging a step's partials costs (issue 22's one kernel a
// step): each CTA writes a partial as the decode kernel does (6 rows x 256 fp32, and m, l a
// row), merged three ways:
//   combine  a second kernel, one CTA a (sequence, row), a thread a dim (as the library's);
//   last     the sequence's last CTA to take a ticket merges every chunk of it;
//   slices   every CTA of a sequence takes a ticket, waits until the sequence's tickets are
//            all taken (the grid is one wave: every CTA is resident), then merges its slice
//            of the rows' dims, so the merge is spread over the sequence's CTAs;
//   cluster  (sm_90) a sequence's chunks are one thread-block cluster: each CTA keeps its
//            partial in its own shared memory, and after the cluster's barrier merges its
//            slice of the rows reading every CTA's partial through distributed shared
//            memory. No partial goes to global memory, no ticket, no fence;
//   groups of C  (sm_90) clusters of C chunks, for sequences of more chunks than clusters
//            that fit: each cluster merges its chunks as `cluster` does into a group partial
//            in global memory, and the last group of each slice merges the groups' partials.
// "combine, PDL" is the second kernel launched as a programmatic dependent (the library's
// way): its CTAs wait on the SMs while the first kernel streams.
// All but `groups of C` fold the chunks in index order, so their outputs must agree bit for
// bit; the groups fold in two levels, and their row prints its largest difference instead.
// A unit's sequence is found by a scan of the units' starts; kSharedIndex (the default) scans
// a copy in shared memory each CTA loads once, where the first version scanned global memory,
// one dependent load a sequence (up to 16 round trips before a unit's first copy): "dynamic,
// global scan" keeps that one as the control. Prints kernel µs (median of 30 launches, CUDA
// events; the counter is zeroed before each, outside the events) and, from each CTA's
// globaltimer stamp at its end, the gap from the median CTA's end to the last one's.
// Every kernel's dynamic shared memory is 128-byte aligned: past the static __shared__
// variables some kernels have, a base 16 bytes off a 32-byte boundary split every global
// sector between two shared spans, and L2 served each sector twice (ncu: twice the sectors,
// a 50 % hit rate; the first versions of the dynamic and flowing rows ran that way).
//
//   vxqa_stream_tail                         the merges, then every schedule's rows
//   vxqa_stream_tail --merges                the merges alone, more chunk counts
//   vxqa_stream_tail --claims                the dynamic kernel's ablations (Claim) and the
//                                            flowing rows, twice
//   vxqa_stream_tail --only KIND UNIT_TOKENS one row (static, dynamic, block-only or
//                                            flowing-late), for a profiler
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <cooperative_groups.h>

#include <vxqa/arch/cp_async.cuh>
#include <vxqa/arch/grid_dependency.cuh>

#include "../examples/gpu_timing.cuh"
#include "bench_shapes.cuh"
#include "globaltimer.cuh"

namespace {

constexpr int kD = 256, kPage = 16, kThreads = 128;
constexpr int kTileBytes = kPage * kD;  // a page of K (or of V)
constexpr int kSmemBytes = 100 * 1024;  // two batches (64 KB), and two CTAs an SM, as the decode kernel's stages allow

struct Args {
  const uint4* k;
  const uint4* v;
  const int32_t* table;  // [batch][max_pages]
  int max_pages;
  const int32_t* lengths;
  const int32_t* unit_begin;  // [batch + 1]: the first unit of each sequence
  int unit_tokens;
  int* counter;              // dynamic: the next unit
  unsigned long long* ends;  // [CTAs]: globaltimer at the CTA's end
  uint32_t* sink;            // [CTAs]: the XOR of every word read, so that no load is dropped
  // The merge (static chunks only): partials [batch][chunks][kRows][kD] and [..][kRows][2]
  // (m, l), a ticket and a done count a sequence (zero between steps), the merged rows.
  float* partial_o;
  float* partial_ml;
  int* tickets;
  int* done;
  float* out;  // [batch][kRows][kD]
  int chunks;  // gridDim.x of the static launch
  // Merge::kClusterGroups: each group's merged rows (unnormalised) [batch][groups][kRows][kD],
  // its (M, L) a row as each rank saw it [batch][groups][kMaxCluster][kRows], and a ticket a
  // (sequence, rank) [batch][kMaxCluster] (zero between steps).
  float* group_o;
  float* group_ml;
  int* slice_tickets;
};

constexpr int kRows = 6;  // the seed shape's group


// Tokens [begin, end) of sequence `seq`: batches of 4 pages of K and V copied
// into shared memory with cp.async, as the SM80 body copies (one block-table id a page), the
// next batch in flight while a thread reads back its part of the last.
__device__ uint32_t stream_unit(const Args& a, int seq, int begin, int end, uint4* smem) {
#if VXQA_HAS_CP_ASYNC
  constexpr int kPerThread = kTileBytes / 16 / kThreads;  // 16-byte copies a thread a page, of K and of V each
  constexpr int kTilesInFlight = 4;
  const int32_t* table = a.table + int64_t(seq) * a.max_pages;
  constexpr int kBatch = kTilesInFlight * 2 * kPerThread * kThreads;  // uint4 a batch
  const int first = begin / kPage, tiles = (end + kPage - 1) / kPage - first;
  const int batches = (tiles + kTilesInFlight - 1) / kTilesInFlight;
  auto issue = [&](int b) {
    if (b < batches) {
#pragma unroll
      for (int u = 0; u < kTilesInFlight; ++u) {
        const int tile = b * kTilesInFlight + u;
        const bool live = tile < tiles;
        const int64_t page = live ? table[first + tile] : 0;
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          const int64_t at = page * (kTileBytes / 16) + threadIdx.x + i * kThreads;
          uint4* dst = smem + (b & 1) * kBatch + ((u * 2) * kPerThread + i) * kThreads + threadIdx.x;
          vxqa::arch::cp_async_16_or_zero(dst, a.k + at, live);
          vxqa::arch::cp_async_16_or_zero(dst + kPerThread * kThreads, a.v + at, live);
        }
      }
    }
    vxqa::arch::cp_async_commit();
  };
  uint32_t x = 0;
  issue(0);
  for (int b = 0; b < batches; ++b) {
    issue(b + 1);
    vxqa::arch::cp_async_wait<1>();  // batch b, this thread's copies
#pragma unroll
    for (int i = 0; i < kTilesInFlight * 2 * kPerThread; ++i) {
      const uint4 r = smem[(b & 1) * kBatch + i * kThreads + threadIdx.x];
      x ^= r.x ^ r.y ^ r.z ^ r.w;
    }
  }
  vxqa::arch::cp_async_wait<0>();
  return x;
#else
  return 0u;
#endif
}

// Where unit u lies: its sequence and token range. kShared: the units' starts and the
// lengths copied into shared memory once a CTA (load() by every thread, then a barrier), so
// that a lookup is a scan of shared memory; else a scan of global memory, a dependent load a
// sequence.
constexpr int kMaxBatch = 64;
template <bool kShared>
struct UnitIndex {
  int unit_begin[kShared ? kMaxBatch + 1 : 1];
  int lengths[kShared ? kMaxBatch : 1];
  __device__ void load(const Args& a, int batch) {
    if constexpr (kShared) {
      for (int i = threadIdx.x; i <= batch; i += blockDim.x) {
        unit_begin[i] = a.unit_begin[i];
        if (i < batch) lengths[i] = a.lengths[i];
      }
      __syncthreads();
    }
  }
  __device__ int units(const Args& a, int batch) const { return kShared ? unit_begin[batch] : a.unit_begin[batch]; }
  __device__ void locate(const Args& a, int u, int& seq, int& begin, int& end) const {
    const int* starts = kShared ? unit_begin : a.unit_begin;
    seq = 0;
    while (starts[seq + 1] <= u) ++seq;
    begin = (u - starts[seq]) * a.unit_tokens;
    end = min(kShared ? lengths[seq] : a.lengths[seq], begin + a.unit_tokens);
  }
};

// Flowing: the same units, but the CTA's copies run on across them. Batches of up to 4 pages
// of one unit; the next batch is in flight while the last is read, whichever unit it is
// from, and a unit is claimed one unit ahead (thread 0 reads the counter's answer a unit
// after asking), so neither the counter's round trip nor a pipeline's ramp sits between
// units.
struct Batch {
  int seq, page, count;  // pages [page, page + count) of sequence seq; count 0: none left
};

// kLateClaim: the next unit is claimed when the current unit's last batch is taken, one batch
// ahead instead of a unit ahead, so that a CTA holds at most a batch's worth of work nobody
// else can take (claiming a unit ahead hoards it: at 1,216 tokens half the CTAs got none).
template <bool kLateClaim>
__device__ uint32_t stream_flowing(const Args& a, int batch, uint4* smem, int& claimed, const UnitIndex<true>& index) {
#if VXQA_HAS_CP_ASYNC
  constexpr int kPerThread = kTileBytes / 16 / kThreads;
  constexpr int kPages = 4;
  constexpr int kBatch = kPages * 2 * kPerThread * kThreads;  // uint4 a batch
  const int total = index.units(a, batch);
  int pending = 0;  // thread 0: the counter's answer to the claim made a unit ago
  if (threadIdx.x == 0) pending = atomicAdd(a.counter, 1);
  int seq = 0, page = 0, end_page = 0;
  bool done = false;
  auto take = [&]() -> Batch {
    if (!done && page == end_page) {  // the unit is issued: the next one, and claim another
      if (threadIdx.x == 0) {
        claimed = pending;
        if (!kLateClaim) pending = atomicAdd(a.counter, 1);
      }
      __syncthreads();
      const int u = claimed;
      __syncthreads();
      if (u >= total) {
        done = true;
      } else {
        int begin = 0, end = 0;
        index.locate(a, u, seq, begin, end);
        page = begin / kPage;
        end_page = (end + kPage - 1) / kPage;
      }
    }
    if (done) return Batch{0, 0, 0};
    const Batch b{seq, page, min(kPages, end_page - page)};
    page += b.count;
    if (kLateClaim && page == end_page && threadIdx.x == 0) pending = atomicAdd(a.counter, 1);
    return b;
  };
  auto issue = [&](int slot, const Batch& b) {
    const int32_t* table = a.table + int64_t(b.seq) * a.max_pages;
#pragma unroll
    for (int u = 0; u < kPages; ++u) {
      if (u < b.count) {
        const int64_t pg = table[b.page + u];
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          const int64_t at = pg * (kTileBytes / 16) + threadIdx.x + i * kThreads;
          uint4* dst = smem + slot * kBatch + ((u * 2) * kPerThread + i) * kThreads + threadIdx.x;
          vxqa::arch::cp_async_16_or_zero(dst, a.k + at, true);
          vxqa::arch::cp_async_16_or_zero(dst + kPerThread * kThreads, a.v + at, true);
        }
      }
    }
    vxqa::arch::cp_async_commit();
  };
  uint32_t x = 0;
  Batch cur = take();
  issue(0, cur);
  for (int b = 0; cur.count > 0; ++b) {
    const Batch next = take();
    issue((b + 1) & 1, next);
    vxqa::arch::cp_async_wait<1>();  // batch b, this thread's copies
    for (int i = 0; i < cur.count * 2 * kPerThread; ++i) {
      const uint4 r = smem[(b & 1) * kBatch + i * kThreads + threadIdx.x];
      x ^= r.x ^ r.y ^ r.z ^ r.w;
    }
    cur = next;
  }
  vxqa::arch::cp_async_wait<0>();
  return x;
#else
  return 0u;
#endif
}

__device__ void finish(const Args& a, int cta, uint32_t x, bool worked) {
  __syncthreads();
  if (threadIdx.x == 0 && worked) a.ends[cta] = vxqa_bench::globaltimer_ns();
  if (x == 0x9e3779b9u) a.sink[cta] = x;  // never true on the drawn codes, but the compiler cannot know
}

// grid (chunks, batch): chunk blockIdx.x of sequence blockIdx.y, unit_tokens a chunk.
__global__ void __launch_bounds__(kThreads) static_kernel(Args a) {
  extern __shared__ __align__(128) uint4 smem[];
  const int seq = blockIdx.y, begin = blockIdx.x * a.unit_tokens;
  const int end = min(a.lengths[seq], begin + a.unit_tokens);
  const uint32_t x = begin < end ? stream_unit(a, seq, begin, end, smem) : 0u;
  finish(a, blockIdx.y * gridDim.x + blockIdx.x, x, begin < end);
}

enum class Merge { kNone, kCombine, kCombinePdl, kLast, kSlices, kCluster, kClusterGroups };

// A CTA's partial: made-up rows that depend on every word read (x), and a made-up (m, l).
__device__ float partial_value(uint32_t x, int i) { return float((x >> (i & 15)) & 0xFFu) * (1.f / 256.f) + float(i & 7); }
__device__ float2 partial_ml(int chunk, int row) { return make_float2(float((chunk + row) % 5), 1.f + float(chunk)); }

__device__ void write_partial(const Args& a, int seq, int chunk, uint32_t x) {
  const int64_t slot = int64_t(seq) * a.chunks + chunk;
  for (int i = threadIdx.x; i < kRows * kD; i += blockDim.x) a.partial_o[slot * kRows * kD + i] = partial_value(x, i);
  if (threadIdx.x < kRows) reinterpret_cast<float2*>(a.partial_ml)[slot * kRows + threadIdx.x] = partial_ml(chunk, threadIdx.x);
}

// Outputs [first, end) of sequence seq's kRows x kD, each the chunks' rows in index order
// weighted by 2^(m - max) over the weighted sum of l. As the library's combine: each row's
// weights worked out once into shared memory, then a thread's loads of its outputs all
// independent. ml(c, r) and o(c, i) read chunk c's (m, l) of row r and its output i. Every
// thread of the CTA calls it.
constexpr int kMaxChunks = 32;
template <class Ml, class O>
__device__ void merge_outputs(const Args& a, int seq, int n, int first, int end, Ml ml, O o) {
  __shared__ float weight[kRows][kMaxChunks], sum_l[kRows][kMaxChunks];
  const int row0 = first / kD, rows = (end - 1) / kD - row0 + 1;
  for (int i = threadIdx.x; i < rows * n; i += blockDim.x) {  // the (m, l) of the rows touched
    const int r = row0 + i / n, c = i % n;
    const float2 v = ml(c, r);
    weight[r][c] = v.x;
    sum_l[r][c] = v.y;
  }
  __syncthreads();
  if (threadIdx.x < rows) {  // a thread a row: m's max, then the weights over their sum
    const int r = row0 + threadIdx.x;
    float mx = -INFINITY, sum = 0.f;
    for (int c = 0; c < n; ++c) mx = fmaxf(mx, weight[r][c]);
    for (int c = 0; c < n; ++c) {
      weight[r][c] = exp2f(weight[r][c] - mx);
      sum += sum_l[r][c] * weight[r][c];
    }
    for (int c = 0; c < n; ++c) weight[r][c] /= sum;
  }
  __syncthreads();
  for (int i = first + int(threadIdx.x); i < end; i += blockDim.x) {
    const int row = i / kD;
    float acc = 0.f;
#pragma unroll 4
    for (int c = 0; c < n; ++c) acc += o(c, i) * weight[row][c];
    a.out[int64_t(seq) * kRows * kD + i] = acc;
  }
}

// The partials in global memory (reads bypass L1: other SMs wrote them).
__device__ void merge_outputs(const Args& a, int seq, int n, int first, int end) {
  const int64_t base = int64_t(seq) * a.chunks;
  merge_outputs(
      a, seq, n, first, end,
      [&](int c, int r) { return __ldcg(reinterpret_cast<const float2*>(a.partial_ml) + (base + c) * kRows + r); },
      [&](int c, int i) { return __ldcg(a.partial_o + (base + c) * kRows * kD + i); });
}

__device__ int chunks_of_sequence(const Args& a, int seq) { return (a.lengths[seq] + a.unit_tokens - 1) / a.unit_tokens; }

// grid (chunks, batch): static_kernel's copies, then the partial and its merge.
template <Merge kMerge>
__global__ void __launch_bounds__(kThreads) static_merge_kernel(Args a) {
  extern __shared__ __align__(128) uint4 smem[];
  __shared__ int ticket;
  if constexpr (kMerge == Merge::kCombinePdl) vxqa::arch::launch_dependents();
  const int seq = blockIdx.y, chunk = blockIdx.x, begin = chunk * a.unit_tokens;
  const int end = min(a.lengths[seq], begin + a.unit_tokens);
  if (begin >= end) return;
  const uint32_t x = stream_unit(a, seq, begin, end, smem);
  write_partial(a, seq, chunk, x);
  if constexpr (kMerge == Merge::kLast || kMerge == Merge::kSlices) {
    __syncthreads();  // every thread's partial stores, before thread 0's fence and ticket
    const int n = chunks_of_sequence(a, seq);
    if (threadIdx.x == 0) {
      __threadfence();
      ticket = atomicAdd(a.tickets + seq, 1);
      if constexpr (kMerge == Merge::kSlices) {  // wait for every chunk's ticket
        while (atomicAdd(a.tickets + seq, 0) < n) __nanosleep(64);
        __threadfence();
      } else if (ticket == n - 1) {
        a.tickets[seq] = 0;  // the step's last user of the ticket: ready for the next step
        __threadfence();
      }
    }
    __syncthreads();
    if constexpr (kMerge == Merge::kLast) {
      if (ticket == n - 1) merge_outputs(a, seq, n, 0, kRows * kD);
    } else {
      const int slice = (kRows * kD + n - 1) / n;
      merge_outputs(a, seq, n, chunk * slice, min(kRows * kD, (chunk + 1) * slice));
      __syncthreads();
      if (threadIdx.x == 0 && atomicAdd(a.done + seq, 1) == n - 1) {  // everyone is past the wait
        a.tickets[seq] = 0;
        a.done[seq] = 0;
      }
    }
  }
}

// grid (batch, kRows), a thread a dim: the second kernel of Merge::kCombine (and, launched as
// a programmatic dependent, of kCombinePdl: it waits here for the first kernel's partials).
__global__ void __launch_bounds__(kD) combine_kernel(Args a) {
  vxqa::arch::grid_dependency_wait();
  const int seq = blockIdx.x, row = blockIdx.y;
  merge_outputs(a, seq, chunks_of_sequence(a, seq), row * kD, (row + 1) * kD);
}

// The cluster merges' first half: the CTA's chunk streamed, then its partial written into its
// own shared memory where the stages were (rows, then a row's (m, l)), for the cluster's CTAs
// to read. A CTA past the sequence's end streams and writes nothing.
struct SharedPartial {
  float* o;
  float2* ml;
};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // the cluster kernels' code only
__device__ SharedPartial stream_to_shared_partial(const Args& a, int seq, int chunk, uint4* smem) {
  const int begin = chunk * a.unit_tokens, end = min(a.lengths[seq], begin + a.unit_tokens);
  const uint32_t x = begin < end ? stream_unit(a, seq, begin, end, smem) : 0u;
  __syncthreads();  // every thread's reads of the stages, before the partial overwrites them
  float* o = reinterpret_cast<float*>(smem);
  const SharedPartial part{o, reinterpret_cast<float2*>(o + kRows * kD)};
  if (begin < end) {
    for (int i = threadIdx.x; i < kRows * kD; i += blockDim.x) part.o[i] = partial_value(x, i);
    if (threadIdx.x < kRows) part.ml[threadIdx.x] = partial_ml(chunk, threadIdx.x);
  }
  return part;
}
#endif

// grid (chunks, batch), a cluster a sequence (its chunks CTAs, rank = chunk): Merge::kCluster.
// Each CTA's partial goes into its own shared memory, where its copies were; after the
// cluster's barrier (release / acquire: the partials are visible), CTA c merges slice c of
// the rows, reading every CTA's partial through distributed shared memory; a second barrier
// keeps every CTA's shared memory alive until its readers are done. A CTA past the
// sequence's end streams nothing but still takes both barriers.
__global__ void __launch_bounds__(kThreads) cluster_merge_kernel(Args a) {
  extern __shared__ __align__(128) uint4 smem[];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int seq = blockIdx.y, chunk = blockIdx.x, n = chunks_of_sequence(a, seq);
  const SharedPartial part = stream_to_shared_partial(a, seq, chunk, smem);
  cluster.sync();
  if (chunk < n) {
    const int slice = (kRows * kD + n - 1) / n;
    const int first = chunk * slice, last = min(kRows * kD, (chunk + 1) * slice);
    if (first < last)
      merge_outputs(
          a, seq, n, first, last, [&](int c, int r) { return cluster.map_shared_rank(part.ml, c)[r]; },
          [&](int c, int i) { return cluster.map_shared_rank(part.o, c)[i]; });
  }
  cluster.sync();
#endif
}

// grid (chunks rounded up to kC, batch), clusters of kC chunks (rank = chunk % kC, group =
// chunk / kC): Merge::kClusterGroups, for sequences of more chunks than a cluster may hold
// resident. Each cluster merges its group's partials through distributed shared memory into
// one partial in global memory (rank r: slice r of the rows, unnormalised, and the (M, L) of
// the rows it touches); then each rank takes a ticket of its (sequence, slice), and the last
// group to take one merges that slice of every group's partial, in group order.
constexpr int kMaxCluster = 8;
template <int kC>
__global__ void __launch_bounds__(kThreads) cluster_groups_kernel(Args a) {
  extern __shared__ __align__(128) uint4 smem[];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(kC >= 2 && kC <= kMaxCluster, "cluster_groups_kernel: clusters of 2..kMaxCluster");
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  __shared__ float weight[kRows][kMaxChunks];
  __shared__ int last;
  const int seq = blockIdx.y, chunk = blockIdx.x, rank = chunk % kC, group = chunk / kC;
  const int n = chunks_of_sequence(a, seq), groups = int(gridDim.x) / kC;
  const int live_groups = (n + kC - 1) / kC, count = max(0, min(kC, n - group * kC));
  const SharedPartial part = stream_to_shared_partial(a, seq, chunk, smem);
  cluster.sync();
  constexpr int kSlice = (kRows * kD + kC - 1) / kC;
  const int lo = rank * kSlice, hi = min(kRows * kD, lo + kSlice);
  const int row0 = lo / kD, rows = lo < hi ? (hi - 1) / kD - row0 + 1 : 0;
  const int64_t slot = int64_t(seq) * groups + group;
  float2* group_ml = reinterpret_cast<float2*>(a.group_ml);
  if (count > 0 && lo < hi) {
    if (int(threadIdx.x) < rows) {  // a thread a row: the group's M and L, and each chunk's weight
      const int r = row0 + threadIdx.x;
      float mx = -INFINITY, l = 0.f;
      // Loops over the cluster's ranks run kC times, each step predicated: with `c < count`
      // as the bound, ptxas 13.0 unrolled the loop below by 4 and its remainder read rank
      // c + 2 of a cluster of 2 (memcheck: an out-of-bounds remote shared read).
#pragma unroll
      for (int c = 0; c < kC; ++c)
        if (c < count) mx = fmaxf(mx, cluster.map_shared_rank(part.ml, c)[r].x);
#pragma unroll
      for (int c = 0; c < kC; ++c)
        if (c < count) {
          const float2 ml = cluster.map_shared_rank(part.ml, c)[r];
          weight[r][c] = exp2f(ml.x - mx);
          l += ml.y * weight[r][c];
        }
      group_ml[(slot * kMaxCluster + rank) * kRows + r] = make_float2(mx, l);
    }
    __syncthreads();
    for (int i = lo + int(threadIdx.x); i < hi; i += blockDim.x) {
      float acc = 0.f;
#pragma unroll
      for (int c = 0; c < kC; ++c)
        if (c < count) acc += cluster.map_shared_rank(part.o, c)[i] * weight[i / kD][c];
      a.group_o[slot * kRows * kD + i] = acc;
    }
  }
  cluster.sync();  // every CTA's shared memory stays until its group's readers are done
  if (count == 0 || lo >= hi) return;
  if (threadIdx.x == 0) {  // after the cluster's barrier: every thread's stores, then the fence
    __threadfence();
    const int ticket = atomicAdd(a.slice_tickets + seq * kMaxCluster + rank, 1);
    last = ticket == live_groups - 1;
    if (last) {
      a.slice_tickets[seq * kMaxCluster + rank] = 0;  // the step's last user: ready for the next
      __threadfence();
    }
  }
  __syncthreads();
  if (!last) return;
  if (int(threadIdx.x) < rows) {  // a thread a row: the groups' weights over their sum
    const int r = row0 + threadIdx.x;
    float mx = -INFINITY, sum = 0.f;
    for (int g = 0; g < live_groups; ++g)
      mx = fmaxf(mx, __ldcg(group_ml + ((int64_t(seq) * groups + g) * kMaxCluster + rank) * kRows + r).x);
    for (int g = 0; g < live_groups; ++g) {
      const float2 ml = __ldcg(group_ml + ((int64_t(seq) * groups + g) * kMaxCluster + rank) * kRows + r);
      weight[r][g] = exp2f(ml.x - mx);
      sum += ml.y * weight[r][g];
    }
    for (int g = 0; g < live_groups; ++g) weight[r][g] /= sum;
  }
  __syncthreads();
  for (int i = lo + int(threadIdx.x); i < hi; i += blockDim.x) {
    float acc = 0.f;
    for (int g = 0; g < live_groups; ++g)
      acc += __ldcg(a.group_o + (int64_t(seq) * groups + g) * kRows * kD + i) * weight[i / kD][g];
    a.out[int64_t(seq) * kRows * kD + i] = acc;
  }
#endif
}

// How a CTA of the dynamic kernel finds its units: kCounter, each from the counter (the
// first one too); kBlockFirst, the first one is blockIdx.x and the rest come from the counter,
// which starts at gridDim.x (no atomic before the first copy); kBlockOnly, unit blockIdx.x
// and no other (no atomic at all: the static schedule, through the dynamic kernel's code).
enum class Claim { kCounter, kBlockFirst, kBlockOnly };

// grid (CTAs): each takes units until none is left.
template <bool kSharedIndex, Claim kClaim>
__global__ void __launch_bounds__(kThreads) dynamic_kernel(Args a, int batch) {
  extern __shared__ __align__(128) uint4 smem[];
  __shared__ int unit;
  __shared__ UnitIndex<kSharedIndex> index;
  index.load(a, batch);
  uint32_t x = 0;
  for (int round = 0;; ++round) {
    int u = int(blockIdx.x);
    if (kClaim == Claim::kBlockOnly && round > 0) break;
    if (kClaim == Claim::kCounter || (kClaim == Claim::kBlockFirst && round > 0)) {
      if (threadIdx.x == 0) unit = atomicAdd(a.counter, 1) + (kClaim == Claim::kBlockFirst ? int(gridDim.x) : 0);
      __syncthreads();
      u = unit;
      __syncthreads();
    }
    if (u >= index.units(a, batch)) break;
    int seq = 0, begin = 0, end = 0;
    index.locate(a, u, seq, begin, end);
    x ^= stream_unit(a, seq, begin, end, smem);
  }
  finish(a, blockIdx.x, x, true);
}

// grid (CTAs): each takes units until none is left, its copies flowing across them.
template <bool kLateClaim>
__global__ void __launch_bounds__(kThreads) flowing_kernel(Args a, int batch) {
  extern __shared__ __align__(128) uint4 smem[];
  __shared__ int claimed;
  __shared__ UnitIndex<true> index;
  index.load(a, batch);
  const uint32_t x = stream_flowing<kLateClaim>(a, batch, smem, claimed, index);
  finish(a, blockIdx.x, x, true);
}

// The static chunks of unit_tokens, their partials merged each way (Merge), the same run:
// µs a step (median of 30 samples of 10 steps back to back, CUDA events) and whether the outputs
// agree bit for bit with the combine kernel's; the tickets must be back at zero after.
int prop_major(int device) {
  int major = 0;
  DEMO_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

// Merge::kClusterGroups with clusters of kC: µs a step as merge_rows times the others, the
// largest difference from the combine kernel's outputs (`want`: the groups fold in another
// order, so the bits may differ), and whether the tickets are back at zero.
template <int kC>
void group_rows(Args a, int batch, int chunks, size_t outs, const std::vector<float>& want) {
  const int groups = (chunks + kC - 1) / kC;
  DEMO_CHECK(cudaMalloc(&a.group_o, size_t(batch) * groups * kRows * kD * sizeof(float)));
  DEMO_CHECK(cudaMalloc(&a.group_ml, size_t(batch) * groups * kMaxCluster * kRows * sizeof(float2)));
  DEMO_CHECK(cudaMalloc(&a.slice_tickets, size_t(batch) * kMaxCluster * sizeof(int)));
  DEMO_CHECK(cudaMemset(a.slice_tickets, 0, size_t(batch) * kMaxCluster * sizeof(int)));  // once
  cudaLaunchAttribute cluster_dim{};
  cluster_dim.id = cudaLaunchAttributeClusterDimension;
  cluster_dim.val.clusterDim.x = unsigned(kC);
  cluster_dim.val.clusterDim.y = cluster_dim.val.clusterDim.z = 1;
  cudaLaunchConfig_t launch{};
  launch.gridDim = dim3(groups * kC, batch);
  launch.blockDim = dim3(kThreads);
  launch.dynamicSmemBytes = kSmemBytes;
  launch.attrs = &cluster_dim;
  launch.numAttrs = 1;
  DEMO_CHECK(cudaFuncSetAttribute(cluster_groups_kernel<kC>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  int resident = 0;
  DEMO_CHECK(cudaOccupancyMaxActiveClusters(&resident, cluster_groups_kernel<kC>, &launch));
  DEMO_CHECK(cudaMemset(a.out, 0xFF, outs * sizeof(float)));  // NaN: a row not written shows
  const double us = vxqa_demo::median_us([&] { DEMO_CHECK(cudaLaunchKernelEx(&launch, cluster_groups_kernel<kC>, a)); },
                                         0, 30, 10, 2);
  std::vector<float> got(outs);
  DEMO_CHECK(cudaMemcpy(got.data(), a.out, outs * sizeof(float), cudaMemcpyDeviceToHost));
  double worst = 0.0, largest = 0.0;
  for (size_t i = 0; i < outs; ++i) {
    worst = std::isfinite(got[i]) ? std::max(worst, double(std::fabs(got[i] - want[i]))) : INFINITY;
    largest = std::max(largest, double(std::fabs(want[i])));
  }
  std::vector<int> tickets(size_t(batch) * kMaxCluster);
  DEMO_CHECK(cudaMemcpy(tickets.data(), a.slice_tickets, tickets.size() * sizeof(int), cudaMemcpyDeviceToHost));
  const bool reset = std::all_of(tickets.begin(), tickets.end(), [](int t) { return t == 0; });
  std::printf("merge groups of %d  unit %5d tokens, %d groups x %d, %d clusters (%d resident): %7.2f us, "
              "largest difference %.2e of max |out| %.2f%s\n",
              kC, a.unit_tokens, groups, batch, groups * batch, resident, us, worst, largest,
              reset ? "" : ", TICKETS NOT BACK AT ZERO");
  for (void* p : {static_cast<void*>(a.group_o), static_cast<void*>(a.group_ml), static_cast<void*>(a.slice_tickets)})
    DEMO_CHECK(cudaFree(p));
}


void merge_rows(Args a, const std::vector<int32_t>& lengths, int sms, int unit_tokens) {
  const int batch = int(lengths.size());
  int chunks = 0;
  for (int len : lengths) chunks = std::max(chunks, (len + unit_tokens - 1) / unit_tokens);
  if (chunks > kMaxChunks) {
    std::printf("merge: %d chunks a sequence, the merge holds %d\n", chunks, kMaxChunks);
    return;
  }
  a.unit_tokens = unit_tokens;
  a.chunks = chunks;
  const size_t partials = size_t(batch) * chunks * kRows;
  DEMO_CHECK(cudaMalloc(&a.partial_o, partials * kD * sizeof(float)));
  DEMO_CHECK(cudaMalloc(&a.partial_ml, partials * 2 * sizeof(float)));
  DEMO_CHECK(cudaMalloc(&a.tickets, batch * sizeof(int)));
  DEMO_CHECK(cudaMalloc(&a.done, batch * sizeof(int)));
  DEMO_CHECK(cudaMemset(a.tickets, 0, batch * sizeof(int)));  // once: every step leaves them at zero
  DEMO_CHECK(cudaMemset(a.done, 0, batch * sizeof(int)));
  const size_t outs = size_t(batch) * kRows * kD;
  DEMO_CHECK(cudaMalloc(&a.out, outs * sizeof(float)));
  std::vector<float> want;
  bool one_wave = false;
  int resident = 0;
  // The cluster row: a cluster a sequence, chunks CTAs (16 needs the non-portable size).
  cudaLaunchAttribute cluster_dim{};
  cluster_dim.id = cudaLaunchAttributeClusterDimension;
  cluster_dim.val.clusterDim.x = unsigned(chunks);
  cluster_dim.val.clusterDim.y = cluster_dim.val.clusterDim.z = 1;
  cudaLaunchConfig_t cluster_launch{};
  cluster_launch.gridDim = dim3(chunks, batch);
  cluster_launch.blockDim = dim3(kThreads);
  cluster_launch.dynamicSmemBytes = kSmemBytes;
  cluster_launch.attrs = &cluster_dim;
  cluster_launch.numAttrs = 1;
  int active_clusters = 0;
  const bool clusters = prop_major(0) >= 9 && chunks <= 16;
  if (clusters) {
    DEMO_CHECK(cudaFuncSetAttribute(cluster_merge_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    DEMO_CHECK(cudaFuncSetAttribute(cluster_merge_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    DEMO_CHECK(cudaOccupancyMaxActiveClusters(&active_clusters, cluster_merge_kernel, &cluster_launch));
  }
  // The PDL row's second launch: the combine kernel as a programmatic dependent.
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t combine_launch{};
  combine_launch.gridDim = dim3(batch, kRows);
  combine_launch.blockDim = dim3(kD);
  combine_launch.attrs = &pdl;
  combine_launch.numAttrs = 1;
  auto run = [&](const char* what, Merge merge) {
    if (merge == Merge::kSlices && !one_wave) {
      std::printf("merge %-8s skipped: %d CTAs, %d resident\n", what, chunks * batch, resident * sms);
      return;
    }
    if (merge == Merge::kCluster && !clusters) {
      std::printf("merge %-8s skipped: %d chunks a sequence (at most 16, on sm_90)\n", what, chunks);
      return;
    }
    const dim3 grid(chunks, batch);
    auto step = [&] {
      switch (merge) {
        case Merge::kNone: static_merge_kernel<Merge::kNone><<<grid, kThreads, kSmemBytes>>>(a); break;
        case Merge::kCombine:
          static_merge_kernel<Merge::kCombine><<<grid, kThreads, kSmemBytes>>>(a);
          combine_kernel<<<dim3(batch, kRows), kD>>>(a);
          break;
        case Merge::kCombinePdl:
          static_merge_kernel<Merge::kCombinePdl><<<grid, kThreads, kSmemBytes>>>(a);
          DEMO_CHECK(cudaLaunchKernelEx(&combine_launch, combine_kernel, a));
          break;
        case Merge::kLast: static_merge_kernel<Merge::kLast><<<grid, kThreads, kSmemBytes>>>(a); break;
        case Merge::kSlices: static_merge_kernel<Merge::kSlices><<<grid, kThreads, kSmemBytes>>>(a); break;
        case Merge::kCluster: DEMO_CHECK(cudaLaunchKernelEx(&cluster_launch, cluster_merge_kernel, a)); break;
      }
    };
    DEMO_CHECK(cudaMemset(a.out, 0xFF, outs * sizeof(float)));  // NaN: a row not written shows
    const double us = vxqa_demo::median_us(step, 0, 30, 10, 2);  // 10 steps back to back a sample
    std::vector<int> counters(2 * batch);
    DEMO_CHECK(cudaMemcpy(counters.data(), a.tickets, batch * sizeof(int), cudaMemcpyDeviceToHost));
    DEMO_CHECK(cudaMemcpy(counters.data() + batch, a.done, batch * sizeof(int), cudaMemcpyDeviceToHost));
    const bool reset = std::all_of(counters.begin(), counters.end(), [](int c) { return c == 0; });
    std::vector<float> got(outs);
    DEMO_CHECK(cudaMemcpy(got.data(), a.out, outs * sizeof(float), cudaMemcpyDeviceToHost));
    const char* agree = "";
    if (merge == Merge::kCombine) {
      want = got;
      agree = std::all_of(got.begin(), got.end(), [](float v) { return std::isfinite(v); }) ? ", every output finite"
                                                                                             : ", NOT ALL OUTPUTS WRITTEN";
    } else if (merge != Merge::kNone) {
      agree = std::memcmp(got.data(), want.data(), outs * sizeof(float)) == 0 ? ", outputs agree" : ", OUTPUTS DIFFER";
    }
    std::printf("merge %-12s unit %5d tokens, %d x %d CTAs: %7.2f us%s%s\n", what, unit_tokens, chunks, batch, us,
                agree, reset ? "" : ", COUNTERS NOT BACK AT ZERO");
  };
  for (void (*kernel)(Args) : {static_merge_kernel<Merge::kNone>, static_merge_kernel<Merge::kCombine>,
                               static_merge_kernel<Merge::kCombinePdl>, static_merge_kernel<Merge::kLast>,
                               static_merge_kernel<Merge::kSlices>})
    DEMO_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  DEMO_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, static_merge_kernel<Merge::kSlices>, kThreads,
                                                           kSmemBytes));
  one_wave = resident * sms >= chunks * batch;  // the slices' wait needs every CTA resident
  if (clusters) std::printf("merge: clusters of %d CTAs, %d resident at once\n", chunks, active_clusters);
  run("none", Merge::kNone);
  run("combine", Merge::kCombine);
  run("combine, PDL", Merge::kCombinePdl);
  run("last", Merge::kLast);
  run("slices", Merge::kSlices);
  run("cluster", Merge::kCluster);
  run("none", Merge::kNone);
  run("cluster", Merge::kCluster);
  if (prop_major(0) >= 9) {
    group_rows<2>(a, batch, chunks, outs, want);
    group_rows<4>(a, batch, chunks, outs, want);
    group_rows<8>(a, batch, chunks, outs, want);
  }
  for (void* p : {static_cast<void*>(a.partial_o), static_cast<void*>(a.partial_ml), static_cast<void*>(a.tickets),
                  static_cast<void*>(a.done), static_cast<void*>(a.out)})
    DEMO_CHECK(cudaFree(p));
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<int32_t> lengths = vxqa_bench::lengths(vxqa_bench::kShapes[1]);
  const int batch = int(lengths.size());
  if (batch > kMaxBatch) {
    std::fprintf(stderr, "stream_tail: %d sequences, the units' index holds %d\n", batch, kMaxBatch);
    return 1;
  }
  const int max_len = *std::max_element(lengths.begin(), lengths.end());
  const int max_pages = (max_len + kPage - 1) / kPage;
  long long tokens = 0;
  for (int x : lengths) tokens += x;
  const double mbytes = double(tokens) * kD * 2 / 1e6;

  std::vector<int32_t> table(size_t(batch) * max_pages);
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  std::mt19937_64 rng(3);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<uint32_t> codes(table.size() * kTileBytes / 4);
  for (auto& w : codes) w = uint32_t(rng()) | 0x01010101u;  // no zero word: the sink's test stays false
  Args a{};
  a.k = reinterpret_cast<const uint4*>(vxqa_demo::upload(codes));
  a.v = reinterpret_cast<const uint4*>(vxqa_demo::upload(codes));
  a.table = vxqa_demo::upload(table);
  a.max_pages = max_pages;
  a.lengths = vxqa_demo::upload(lengths);
  DEMO_CHECK(cudaMalloc(&a.counter, sizeof(int)));
  int sms = 0;
  DEMO_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int max_ctas = 4096;
  DEMO_CHECK(cudaMalloc(&a.ends, max_ctas * sizeof(unsigned long long)));
  DEMO_CHECK(cudaMalloc(&a.sink, max_ctas * sizeof(uint32_t)));
  cudaDeviceProp prop;
  DEMO_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; the seed shape's lengths, page 16, D 256: %lld tokens, %.1f MB of K and V\n", prop.name, sms,
              tokens, mbytes);

  DEMO_CHECK(cudaFuncSetAttribute(static_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  for (void (*kernel)(Args, int) : {dynamic_kernel<true, Claim::kCounter>, dynamic_kernel<false, Claim::kCounter>,
                                    dynamic_kernel<true, Claim::kBlockFirst>, dynamic_kernel<true, Claim::kBlockOnly>})
    DEMO_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  for (void (*kernel)(Args, int) : {flowing_kernel<false>, flowing_kernel<true>})
    DEMO_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  cudaEvent_t e0, e1;
  DEMO_CHECK(cudaEventCreate(&e0));
  DEMO_CHECK(cudaEventCreate(&e1));
  // Median µs of 30 launches, and the last launch's end stamps: median CTA to last.
  // kBlockFirst and kBlockOnly: the dynamic kernel's ablations (Claim); kBlockOnly over a
  // grid of 2 CTAs an SM (units past it not taken: only at units <= CTAs) or of one CTA a unit.
  enum Kind { kStatic, kDynamic, kDynamicGlobalScan, kFlowing, kBlockFirst, kBlockOnly, kBlockOnlyUnits, kFlowingLate };
  auto measure = [&](const char* what, int unit_tokens, Kind kind) {
    std::vector<int32_t> unit_begin(batch + 1, 0);
    int chunks = 0;
    for (int b = 0; b < batch; ++b) {
      const int units = (lengths[b] + unit_tokens - 1) / unit_tokens;
      unit_begin[b + 1] = unit_begin[b] + units;
      chunks = std::max(chunks, units);
    }
    Args args = a;
    args.unit_tokens = unit_tokens;
    args.unit_begin = vxqa_demo::upload(unit_begin);
    const int ctas = kind == kStatic ? chunks * batch : kind == kBlockOnlyUnits ? unit_begin[batch] : 2 * sms;
    std::vector<double> times;
    for (int r = 0; r < 31; ++r) {
      DEMO_CHECK(cudaMemset(args.counter, 0, sizeof(int)));
      DEMO_CHECK(cudaMemset(args.ends, 0, max_ctas * sizeof(unsigned long long)));
      DEMO_CHECK(cudaEventRecord(e0));
      if (kind == kFlowing) {
        flowing_kernel<false><<<ctas, kThreads, kSmemBytes>>>(args, batch);
      } else if (kind == kFlowingLate) {
        flowing_kernel<true><<<ctas, kThreads, kSmemBytes>>>(args, batch);
      } else if (kind == kDynamic) {
        dynamic_kernel<true, Claim::kCounter><<<ctas, kThreads, kSmemBytes>>>(args, batch);
      } else if (kind == kDynamicGlobalScan) {
        dynamic_kernel<false, Claim::kCounter><<<ctas, kThreads, kSmemBytes>>>(args, batch);
      } else if (kind == kBlockFirst) {
        dynamic_kernel<true, Claim::kBlockFirst><<<ctas, kThreads, kSmemBytes>>>(args, batch);
      } else if (kind == kBlockOnly || kind == kBlockOnlyUnits) {
        dynamic_kernel<true, Claim::kBlockOnly><<<ctas, kThreads, kSmemBytes>>>(args, batch);
      } else {
        static_kernel<<<dim3(chunks, batch), kThreads, kSmemBytes>>>(args);
      }
      DEMO_CHECK(cudaGetLastError());
      DEMO_CHECK(cudaEventRecord(e1));
      DEMO_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      DEMO_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (r > 0) times.push_back(ms * 1000.0);
    }
    const double us = vxqa_demo::median(times);
    std::vector<unsigned long long> ends(ctas);
    DEMO_CHECK(cudaMemcpy(ends.data(), args.ends, ctas * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    std::vector<unsigned long long> live;
    for (size_t i = 0; i < ends.size(); ++i)
      if (ends[i] != 0) live.push_back(ends[i]);
    std::sort(live.begin(), live.end());
    const double tail = live.empty() ? 0.0 : double(live.back() - live[live.size() / 2]) / 1e3;
    const double spread = live.empty() ? 0.0 : double(live.back() - live.front()) / 1e3;
    std::printf("%-20s unit %5d tokens: %5d units, %4d CTAs: %7.2f us (%5.0f GB/s); ends: median to last %5.2f us, "
                "first to last %5.2f us\n",
                what, unit_tokens, unit_begin[batch], ctas, us, mbytes * 1e3 / us,
                tail, spread);
    DEMO_CHECK(cudaFree(const_cast<int32_t*>(args.unit_begin)));
  };
  if (argc == 4 && std::strcmp(argv[1], "--only") == 0) {  // one row, for a profiler: --only KIND UNIT_TOKENS
    const struct { const char* name; Kind kind; } kinds[] = {
        {"static", kStatic}, {"dynamic", kDynamic}, {"block-only", kBlockOnlyUnits}, {"flowing-late", kFlowingLate}};
    for (const auto& k : kinds)
      if (std::strcmp(argv[2], k.name) == 0) {
        measure(k.name, std::atoi(argv[3]), k.kind);
        return 0;
      }
    std::fprintf(stderr, "stream_tail: --only static|dynamic|block-only|flowing-late UNIT_TOKENS\n");
    return 1;
  }
  if (argc > 1 && std::strcmp(argv[1], "--claims") == 0) {  // the dynamic kernel's ablations, twice
    for (int pass = 0; pass < 2; ++pass) {
      for (int unit : {1216, 304, 80}) measure("static", unit, kStatic);
      for (int unit : {1216, 304, 80}) measure("dynamic", unit, kDynamic);
      for (int unit : {1216, 304, 80}) measure("dynamic, block first", unit, kBlockFirst);
      measure("block only, 2/SM", 1216, kBlockOnly);
      for (int unit : {1216, 304, 80}) measure("block only, a unit", unit, kBlockOnlyUnits);
      for (int unit : {1216, 608, 304, 160, 80}) measure("flowing", unit, kFlowing);
      for (int unit : {1216, 608, 304, 160, 80, 48}) measure("flowing, late claim", unit, kFlowingLate);
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--merges") == 0) {  // the merges alone, at 16, 8, 13 and 4 chunks a sequence
    for (int unit : {1216, 2368, 1520, 4864}) merge_rows(a, lengths, sms, unit);
    return 0;
  }
  for (int unit : {1216, 2368, 608}) merge_rows(a, lengths, sms, unit);
  for (int unit : {2368, 1216, 608}) measure("static", unit, kStatic);
  for (int unit : {1216, 304, 80}) measure("dynamic, global scan", unit, kDynamicGlobalScan);
  for (int unit : {1216, 608, 304, 152, 80}) measure("dynamic", unit, kDynamic);
  for (int unit : {1216, 608, 304, 160, 80}) measure("flowing", unit, kFlowing);
  for (int unit : {1216, 608, 304, 160, 80}) measure("flowing, late claim", unit, kFlowingLate);
  return 0;
}
