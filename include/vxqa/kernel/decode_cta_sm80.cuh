// vxqa/kernel/decode_cta_sm80.cuh — the decode CTA body on the SM80+ pieces: mma.m16n8k16
// with tokens on M and the group's heads on N, a cp.async pipeline into warp-private stages,
// and the softmax in the accumulator registers.
//
// Same CTA shape and contract as the SM70 body (kernel/decode_cta_sm70.cuh): one CTA = one
// (split chunk, KV head x M tile of 8 heads, sequence); its warps take the chunk's 16-token
// tiles in turn, each through its own Stages-deep ring of shared-memory stages (so the main
// loop has no CTA-wide barrier, only __syncwarp), and the warps merge (m, l, O) once at the
// end. Q stays in registers for the whole loop.
//
// Multi-token queries (kMultiToken): a CTA has 8 · row_warps rows, (token, head) pairs
// (row_tiling). The warps form streams of row_warps warps, each warp of a stream holding
// one 8-row tile; a stream's warps take its 16-token tiles in turn, each loading tile j into
// its own ring when j % row_warps is its row tile, and all of them consume every tile of the
// stream, after a barrier of the stream's warps (arch::named_barrier_sync) a tile. So the KV
// is read once for all the CTA's rows, and the streams merge per row tile at the end.
//
// Head dim 512 streams as 256 does, a warp a tile with all of O (128 accumulators a lane):
// Q's fragments then come from one shared copy (Sm80QkConsumer::kQShared) so nothing spills.
#pragma once
#include <cuda_fp16.h>
#include <vxqa/arch/cp_async.cuh>
#include <vxqa/arch/grid_dependency.cuh>
#include <vxqa/arch/named_barrier.cuh>
#include <vxqa/common.cuh>
#include <vxqa/kernel/decode_args.cuh>
#include <vxqa/kernel/decode_cta_common.cuh>
#include <vxqa/mma/fragments_m16n8k16.cuh>
#include <vxqa/mma/sm80_pv_consumer.cuh>
#include <vxqa/mma/sm80_qk_consumer.cuh>
#include <vxqa/paged/paged_kv.cuh>
#include <vxqa/pipeline/cp_async_tile_load.cuh>
#include <vxqa/softmax/online_softmax.cuh>
#include <vxqa/softmax/register_softmax.cuh>

namespace vxqa {

#if VXQA_IS_CUDA_COMPILER && VXQA_HAS_CP_ASYNC && VXQA_HAS_MMA_M16N8K16 && VXQA_HAS_MOVMATRIX
template <class Config>
struct DecodeCtaSm80 {
  using Geometry = typename Config::Sm80Geometry;
  using Qk = mma::Sm80QkConsumer<Geometry>;
  using Pv = mma::Sm80PvConsumer<Geometry>;
  using Load = pipeline::CpAsyncTileLoad<Geometry, typename Qk::Layout, typename Pv::Layout>;
  using Sequence = PagedKvSequence<Config::kPageSize, Config::kElemBytes>;
  using Tiles = WarpTiles<Geometry::kTokens, Config::kWarps>;
  static constexpr int kD = Config::kHeadDim;
  static constexpr int kStages = Config::kSm80Stages;
  static constexpr int kMTiles = Pv::kMTiles;
  using Row = HeadRow<kD, Config::kQo>;
  using Variant = typename Config::Variant;
  static constexpr bool kMulti = Config::kMultiToken;

  static constexpr bool kShared = kMulti;  // a stream's warps share its tiles
  static_assert(!(kMulti && Qk::kQShared), "DecodeCtaSm80: multi-token queries stop at head dim 256");

  // Where a warp stands: its 8-row tile, its stream of tiles and the streams' count, and the
  // stream's warps (sharers) with its place among them (one query token: every warp a stream
  // of its own over the same 8 rows).
  struct WarpRole {
    int row_warps, row_tile, stream, streams, sharers, sharer;
  };
  VXQA_DEVICE static WarpRole warp_role(const DecodeKernelArgs& a) {
    const int warp = threadIdx.x >> 5;
    if constexpr (kMulti) {
      const int row_warps = a.row_warps;
      return WarpRole{row_warps, warp % row_warps, warp / row_warps, Config::kWarps / row_warps, row_warps,
                      warp % row_warps};
    } else {
      return WarpRole{1, 0, warp, Config::kWarps, 1, 0};
    }
  }

  // Per warp: kStages x [K tile | V tile]; after the loop, its merge area: O in fragment
  // order ([m-tile][lane][element]: one 16-byte store or load a fragment, conflict-free),
  // then m and l of 8 heads.
  static constexpr int kVTileOffset = Qk::Layout::kBytes;
  static constexpr int kMergeOBytes = kMTiles * 4 * 32 * 4;
  static_assert(kMergeOBytes + 16 * 4 <= Config::kSm80WarpBytes,
                "DecodeCtaSm80: a warp's merge area must fit in its stages");

  VXQA_DEVICE static void run(const DecodeKernelArgs& a, uint8_t* smem) {
    CtaWork work;
    if (!find_cta_work<Config>(a, work)) return;
    VXQA_TIMELINE_PROBE(a, kProbeDecodeWork);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint8_t* warp_area = smem + warp * Config::kSm80WarpBytes;
    const WarpRole role = warp_role(a);

    // The lane's B-fragment row is lane / 4 of its row tile; padded rows get Q = 0 and are
    // not written.
    const int head = role.row_tile * 8 + mma::m16n8k16::group(lane);
    const QueryRow q_of = query_row<kMulti, Variant>(a, work, head);
    const uint16_t* q_row = head < work.heads ? static_cast<const uint16_t*>(a.q) + q_of.out_row * a.q_batch_stride +
                                                    q_of.q_head * a.q_head_stride
                                              : nullptr;
    const typename Qk::QSource qf = q_source(q_row, smem);
    LaneRowLimits rows{0u};
    if constexpr (kMulti) {  // the lane's accumulator columns: rows 2t, 2t + 1 of its tile
      const int row0 = role.row_tile * 8 + 2 * mma::m16n8k16::thread_in_group(lane);
      rows = lane_row_limits<Variant>(a, work, row0, row0 + 1);
    }

    // Tiles of pages of a multiple of 16 tokens start 16-aligned (work.begin is: the window's
    // chunks start at a multiple of 16), each in one page; the keys below the window's first
    // are zero-filled, never read, and masked. Other pages: every lane loads its own row, and
    // the tiles start at the window's first key.
    const bool one_page = Config::kPageSize != 0 ? Config::kPageSize % Geometry::kTokens == 0
                                                 : a.page_size % Geometry::kTokens == 0;
    const Tiles tiles(Variant::kWindow && !one_page ? max(work.begin, work.first) : work.begin, work.end, role.stream,
                      role.streams);
    const PagedKvView<Config::kPageSize, Config::kElemBytes> view(a.kv, cta_page_size<Config::kPageSize>(a));
    const Sequence seq = view.sequence(work.seq_index, work.kv_head);

    softmax::HeadPairState st = softmax::empty_head_pair();
    float o[kMTiles][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[m][e] = 0.f;
    bool bad_page = false;
    bool zeroed = false;  // multi-token: a NaN or inf V this lane zeroed (zero_non_finite_outside)
    if (tiles.count > 0) {
      // Tiles start at multiples of 16 tokens, so with pages of a multiple of 16 each tile
      // lies in one page: one block-table id a tile, and strided copies.
      if constexpr (kShared) {
        uint8_t* stream_area = smem + role.stream * role.sharers * Config::kSm80WarpBytes;
        if constexpr (Config::kPageSize != 0) {
          shared_stream<Config::kPageSize % Geometry::kTokens == 0>(a, work, role, rows, tiles, seq, qf, stream_area,
                                                                    st, o, bad_page, zeroed);
        } else if (a.page_size % Geometry::kTokens == 0) {
          shared_stream<true>(a, work, role, rows, tiles, seq, qf, stream_area, st, o, bad_page, zeroed);
        } else {
          shared_stream<false>(a, work, role, rows, tiles, seq, qf, stream_area, st, o, bad_page, zeroed);
        }
      } else if constexpr (Config::kPageSize != 0) {
        stream<Config::kPageSize % Geometry::kTokens == 0>(a, work, tiles, seq, qf, warp_area, st, o, bad_page);
      } else if (a.page_size % Geometry::kTokens == 0) {
        stream<true>(a, work, tiles, seq, qf, warp_area, st, o, bad_page);
      } else {
        stream<false>(a, work, tiles, seq, qf, warp_area, st, o, bad_page);
      }
    }
    arch::launch_dependents();  // the combine may start launching: it waits for our partials
    arch::cp_async_wait<0>();  // nothing in flight into the stages the merge reuses

    const bool cta_bad_page = __syncthreads_or(bad_page);
    VXQA_TIMELINE_PROBE(a, kProbeDecodeStreamed);
    // With several chunks the chunk's error words carry it too (store_head_stats), so
    // this OR may land before or after the kernel zeroes the word.
    if (cta_bad_page && threadIdx.x == 0) atomicOr(a.errors, uint32_t(kDecodeErrorBadPage));
    if constexpr (kMulti) {
      if (__syncthreads_or(zeroed)) {
        // Read again, as for the merge below (one read for both, held across the gather,
        // made ptxas 11.8 spill 8 bytes in the 6-warp D 256 Config on sm_90).
        CtaWork again;
        find_cta_work<Config>(a, again);
        add_back_non_finite(a, again, rows, tiles, seq, o);
      }
    }
    float* merge_o = reinterpret_cast<float*>(warp_area);
    float* merge_ml = reinterpret_cast<float*>(warp_area + kMergeOBytes);
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
      *reinterpret_cast<float4*>(merge_o + (m * 32 + lane) * 4) = make_float4(o[m][0], o[m][1], o[m][2], o[m][3]);
    const float l0 = softmax::head_sum(st.l[0]), l1 = softmax::head_sum(st.l[1]);
    if (mma::m16n8k16::group(lane) == 0) {  // lanes 0..3 hold heads 2t, 2t + 1
      const int t = mma::m16n8k16::thread_in_group(lane);
      *reinterpret_cast<float2*>(merge_ml + 2 * t) = make_float2(st.m[0], st.m[1]);
      *reinterpret_cast<float2*>(merge_ml + 8 + 2 * t) = make_float2(l0, l1);
    }
    __syncthreads();
    VXQA_TIMELINE_PROBE(a, kProbeDecodeGathered);
    if constexpr (kMulti || Variant::kWindow) {
      // The rows' fields (the query tokens, the length; a window's chunk bounds) are read
      // again rather than held in registers through the loop: at D 256 that made ptxas 11.8
      // spill.
      CtaWork again;
      find_cta_work<Config>(a, again);
      merge_and_write(a, smem, again, cta_bad_page);
    } else {
      merge_and_write(a, smem, work, cta_bad_page);
    }
    VXQA_TIMELINE_PROBE(a, kProbeDecodeWritten);
  }

  // Q's B fragments: in registers, or (head dim 512) in the CTA's shared copy, which warp 0
  // writes (every warp of a one-token CTA has the same 8 rows).
  VXQA_DEVICE static typename Qk::QSource q_source(const uint16_t* q_row, uint8_t* smem) {
    if constexpr (Qk::kQShared) {
      uint8_t* q_area = smem + Config::kSm80QOffset;
      if (threadIdx.x < 32) Qk::store_shared(q_area, Qk::template load_q<Config::kQo>(q_row));
      __syncthreads();
      return typename Qk::QShared{q_area};
    } else {
      return Qk::template load_q<Config::kQo>(q_row);
    }
  }

  // The warp's tiles through its ring of stages: tile j + S - 1 is copied while tile j is
  // consumed. kOnePage: each tile lies in one page (its row 0 offset is the same on every
  // lane); else lane r < 16 holds the offset of row r.
  template <bool kOnePage>
  VXQA_DEVICE static void stream(const DecodeKernelArgs& a, const CtaWork& work, const Tiles& tiles, const Sequence& seq,
                                 const typename Qk::QSource& qf, uint8_t* warp_area, softmax::HeadPairState& st,
                                 float (&o)[kMTiles][4], bool& bad_page) {
    const int lane = threadIdx.x & 31;
    const uint8_t* k_base = static_cast<const uint8_t*>(a.kv.k);
    const uint8_t* v_base = static_cast<const uint8_t*>(a.kv.v);
    auto offset_of = [&](int j) -> int64_t {
      if constexpr (kOnePage) {
        if (j >= tiles.count) return 0;
        const uint32_t token = uint32_t(tiles.start(j));
        if constexpr (Config::kChecksPageIds) {
          return seq.checked_row_offset(token, a.num_pages, bad_page);
        } else {
          return seq.row_offset(token);
        }
      } else {
        return tiles.template lane_row_offset<Config::kChecksPageIds>(seq, j, a.num_pages, bad_page);
      }
    };
    const typename Variant::Scores scores = Variant::prepare(a, cta_qk_scale_log2<Config>(a), work.first);
    auto stage = [&](int slot) { return warp_area + slot * Config::kSm80StageBytes; };
    auto next = [](int slot) { return slot + 1 == kStages ? 0 : slot + 1; };
    auto issue = [&](int j, int64_t offset, int slot) {  // one commit group per tile, empty past the end
      if (j < tiles.count) {
        uint8_t* k_tile = stage(slot);
        if constexpr (kOnePage && Variant::kWindow) {  // rows below the window's first key: zeros
          Load::template issue_one_page<true>(k_base + offset, v_base + offset, seq.token_bytes(), tiles.valid_rows(j),
                                              k_tile, k_tile + kVTileOffset, work.first - tiles.start(j));
        } else if constexpr (kOnePage) {
          Load::issue_one_page(k_base + offset, v_base + offset, seq.token_bytes(), tiles.valid_rows(j), k_tile,
                               k_tile + kVTileOffset);
        } else {
          Load::issue(k_base, v_base, offset, tiles.valid_rows(j), k_tile, k_tile + kVTileOffset);
        }
      }
      arch::cp_async_commit();
    };

#pragma unroll
    for (int j = 0; j < kStages - 1; ++j) issue(j, offset_of(j), j);
    // The block-table lookup of a tile is done one iteration before its copies are issued.
    int64_t offset_ahead = offset_of(kStages - 1);
    int use = 0, fill = kStages - 1;  // stages of tile j and of tile j + S - 1
    for (int j = 0; j < tiles.count; ++j) {
      __syncwarp();  // every lane is done with stage (j - 1): refill it with tile j + S - 1
      issue(j + kStages - 1, offset_ahead, fill);
      offset_ahead = offset_of(j + kStages);
      arch::cp_async_wait<kStages - 1>();  // tile j has landed (this lane's copies)
      __syncwarp();                        // ... and every lane's
      if (j == 0) VXQA_TIMELINE_PROBE(a, kProbeDecodeFirstTile);

      float s[4];
      Qk::run(stage(use), qf, s);
      const int row0 = tiles.start(j) + mma::m16n8k16::group(lane);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[e] = Variant::score(a, scores, s[e], row0 + (e >> 1) * 8 < work.end, row0 + (e >> 1) * 8);
      uint32_t p[2];
      softmax_and_rescale(s, st, o, p);
      Pv::run(stage(use) + kVTileOffset, p, o);
      use = next(use);
      fill = next(fill);
    }
  }

  // kShared: the stream's tiles, shared by its R warps (R = sharers: kMulti's row warps).
  // Warp u of the stream copies tiles j = u, u + R, ... through its own
  // ring of kStages stages, tile j + (kStages - 1) R while tile j is consumed; every warp
  // consumes every tile after the stream's barrier. A stage is refilled R tiles after it was
  // consumed, so that barrier also tells its copier that every warp is done with it.
  template <bool kOnePage>
  VXQA_DEVICE static void shared_stream(const DecodeKernelArgs& a, const CtaWork& work, const WarpRole& role,
                                        const LaneRowLimits& rows, const Tiles& tiles, const Sequence& seq,
                                        const typename Qk::QSource& qf, uint8_t* stream_area,
                                        softmax::HeadPairState& st, float (&o)[kMTiles][4], bool& bad_page,
                                        bool& zeroed) {
    const int lane = threadIdx.x & 31;
    const int copier = role.sharer, row_warps = role.sharers;
    const uint8_t* k_base = static_cast<const uint8_t*>(a.kv.k);
    const uint8_t* v_base = static_cast<const uint8_t*>(a.kv.v);
    auto stage = [&](int u, int k) {  // stage of the k-th tile warp u copies
      return stream_area + u * Config::kSm80WarpBytes + (k % kStages) * Config::kSm80StageBytes;
    };
    auto issue = [&](int j, int k) {  // tile j, the k-th this warp copies; one commit group, empty past the end
      if (j < tiles.count) {
        uint8_t* k_tile = stage(copier, k);
        if constexpr (kOnePage) {
          const uint32_t token = uint32_t(tiles.start(j));
          const int64_t offset = Config::kChecksPageIds ? seq.checked_row_offset(token, a.num_pages, bad_page)
                                                        : seq.row_offset(token);
          if constexpr (Variant::kWindow) {  // rows below the first token's first key: zeros
            Load::template issue_one_page<true>(k_base + offset, v_base + offset, seq.token_bytes(),
                                                tiles.valid_rows(j), k_tile, k_tile + kVTileOffset,
                                                work.first - tiles.start(j));
          } else {
            Load::issue_one_page(k_base + offset, v_base + offset, seq.token_bytes(), tiles.valid_rows(j), k_tile,
                                 k_tile + kVTileOffset);
          }
        } else {
          const int64_t offset =
              tiles.template lane_row_offset<Config::kChecksPageIds>(seq, j, a.num_pages, bad_page);
          Load::issue(k_base, v_base, offset, tiles.valid_rows(j), k_tile, k_tile + kVTileOffset);
        }
      }
      arch::cp_async_commit();
    };
    const typename Variant::Scores base = Variant::prepare(a, cta_qk_scale_log2<Config>(a), work.first);
    // Multi-token: the keys every row of the CTA (of the stream's warps) sees.
    const KeysAllRowsSee all_see = kMulti ? cta_keys_all_rows_see(a, work) : KeysAllRowsSee{};

#pragma unroll
    for (int k = 0; k < kStages - 1; ++k) issue(k * row_warps + copier, k);
    // Tile j is the k-th that warp u copies: j = k · R + u, counted rather than divided.
    int u = 0, k = 0;
    // Tile j up to its P·V: copies, QK, the masked scores, the softmax (P into p), O rescaled.
    auto up_to_pv = [&](int j, uint32_t(&p)[2]) {
      if (u == copier) {
        __syncwarp();  // every lane is done with the stage it refills (the stream's barriers
                       // since tile j - R ordered the other warps)
        issue(j + (kStages - 1) * row_warps, k + kStages - 1);
        arch::cp_async_wait<kStages - 1>();  // tile j has landed (this lane's copies)
        if constexpr (kMulti) {  // keys some rows do not see: a NaN or inf V there would reach them as 0 · NaN
          const int start = tiles.start(j);
          if (all_see.apart_in(work, start, Geometry::kTokens)) {
            __syncwarp();  // every lane's copies of tile j
            zeroed |= Pv::zero_non_finite_outside(stage(u, k) + kVTileOffset, all_see.first - start,
                                                  all_see.end - start);
          }
        }
      }
      arch::named_barrier_sync(1 + role.stream, 32 * row_warps);  // ... and every copy, for every warp
      if (j == 0) VXQA_TIMELINE_PROBE(a, kProbeDecodeFirstTile);

      const uint8_t* tile = stage(u, k);
      if (++u == row_warps) {
        u = 0;
        ++k;
      }
      float s[4];
      Qk::run(tile, qf, s);
      const int row0 = tiles.start(j) + mma::m16n8k16::group(lane);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int token = row0 + (e >> 1) * 8;
        typename Variant::Scores row_scores = base;  // the row's limits, unpacked where used
        if constexpr (kMulti) {
          if constexpr (Variant::kWindow) row_scores.first = rows.first(work, e & 1);
          s[e] = Variant::score(a, row_scores, s[e], token < rows.end(work, e & 1), token);
        } else {
          s[e] = Variant::score(a, row_scores, s[e], token < work.end, token);
        }
      }
      softmax_and_rescale(s, st, o, p);
      return tile + kVTileOffset;
    };
    for (int j = 0; j < tiles.count; ++j) {
      uint32_t p[2];
      const uint8_t* v_tile = up_to_pv(j, p);
      Pv::run(v_tile, p, o);
    }
  }

  // Multi-token: the keys [first, end) every row of the CTA sees (lane l: rows l and l + 32).
  VXQA_DEVICE static KeysAllRowsSee cta_keys_all_rows_see(const DecodeKernelArgs& a, const CtaWork& work) {
    const int lane = threadIdx.x & 31;
    return keys_all_rows_see(work, lane_row_limits<Variant>(a, work, lane, lane + 32));
  }

  // Multi-token, after the loop: where zero_non_finite_outside set a NaN or inf V to 0 in the
  // stream's tiles (read again from the cache here), the O of the rows that see it becomes
  // NaN, and stays NaN through the merges. NaN, not the infinity P·V gives where P > 0: the
  // loop's P of that key is gone, and where it was 0 (a score of -inf, or an underflow) P·V
  // gives 0 · inf = NaN, which an infinity here would hide (the sweep's seeds 24, 321, 868).
  VXQA_DEVICE static void add_back_non_finite(const DecodeKernelArgs& a, const CtaWork& work, const LaneRowLimits& rows,
                                              const Tiles& tiles, const Sequence& seq, float (&o)[kMTiles][4]) {
    const int lane = threadIdx.x & 31;
    const KeysAllRowsSee all_see = cta_keys_all_rows_see(a, work);
    const uint8_t* v_base = static_cast<const uint8_t*>(a.kv.v);
    using Decode = typename Config::KvDecoder;
    for (int j = 0; j < tiles.count; ++j) {
      const int start = tiles.start(j);
      if (!all_see.apart_in(work, start, Geometry::kTokens)) continue;
      for (int key = max(start, work.first); key < min(start + Geometry::kTokens, work.end); ++key) {
        if (key >= all_see.first && key < all_see.end) continue;  // every row sees it: not zeroed
        const bool sees[2] = {key >= rows.first(work, 0) && key < rows.end(work, 0),
                              key >= rows.first(work, 1) && key < rows.end(work, 1)};
        if (!sees[0] && !sees[1]) continue;
        bool bad = false;
        const int64_t offset = Config::kChecksPageIds ? seq.checked_row_offset(uint32_t(key), a.num_pages, bad)
                                                      : seq.row_offset(uint32_t(key));
        if (bad) continue;  // flagged in the loop already
#pragma unroll
        for (int m = 0; m < kMTiles; ++m)
#pragma unroll
          for (int half = 0; half < 2; ++half) {  // elements 2 half + c: row c of the lane, the same dim
            const int dim = Pv::dim_of(lane, m, 2 * half);
            const uint8_t* element = v_base + offset + int64_t(dim) * Config::kElemBytes;
            const uint32_t bits =
                Config::kElemBytes == 1 ? uint32_t(*element) : uint32_t(*reinterpret_cast<const uint16_t*>(element));
            if (!Decode::has_non_finite(bits)) continue;  // one element; the zero bits above it are finite
#pragma unroll
            for (int c = 0; c < 2; ++c)
              if (sees[c]) o[m][2 * half + c] = quiet_nan();
          }
      }
    }
  }

  // One tile's masked base-2 scores into the running softmax (P into `p`), and O rescaled
  // (both loops; P·V follows).
  VXQA_DEVICE static void softmax_and_rescale(const float (&s)[4], softmax::HeadPairState& st, float (&o)[kMTiles][4],
                                              uint32_t (&p)[2]) {
    float alpha[2];
    softmax::register_softmax_step<Geometry::kMmaIn>(st, s, p, alpha);
    // Most tiles leave every max where it was: skip the rescale of O then.
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
      for (int m = 0; m < kMTiles; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[m][e] *= alpha[e & 1];
    }
  }

  // Merges every warp's O fragments by their (m, l), in warp order. A thread takes whole
  // fragments (an m-tile of one lane: heads 2t, 2t + 1, t = lane % 4, two dims each) of
  // one lane, so its two heads' max, weights and sum are worked out once, and the fragments'
  // loads are independent of one another: the CTA's tail is a few shared-memory round
  // trips, not one a fragment element (docs/performance.md, "The CTA's tail").
  VXQA_DEVICE static void merge_and_write(const DecodeKernelArgs& a, const uint8_t* smem, const CtaWork& work,
                                          bool bad_page) {
    constexpr int kWarps = Config::kWarps;
    const WarpRole role = warp_role(a);  // worked out again: not a register held through the loop
    static_assert(Config::kThreads % 32 == 0, "DecodeCtaSm80: a thread's fragments must all be of one lane");
    const int lane = threadIdx.x & 31;
    // This warp merges the streams' warps of its row tile: warps s · sharers + row_tile.
    const int head0 = role.row_tile * 8 + Pv::head_of(lane, 0);  // element e holds row head0 + (e & 1)
    if (head0 >= work.heads) return;
    const int merged0 = role.row_tile;
    float mx[2] = {negative_infinity(), negative_infinity()};
    float2 warp_m[kWarps], warp_l[kWarps];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (w >= role.streams) break;
      warp_m[w] = *reinterpret_cast<const float2*>(warp_ml(smem, merged0 + w * role.sharers) + Pv::head_of(lane, 0));
      warp_l[w] = *reinterpret_cast<const float2*>(warp_ml(smem, merged0 + w * role.sharers) + 8 + Pv::head_of(lane, 0));
      mx[0] = softmax::max_keep_nan(mx[0], warp_m[w].x);
      mx[1] = softmax::max_keep_nan(mx[1], warp_m[w].y);
    }
    float weight[kWarps][2], l[2] = {0.f, 0.f};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (w >= role.streams) break;
      weight[w][0] = softmax::rescale_factor(warp_m[w].x, mx[0]);
      weight[w][1] = softmax::rescale_factor(warp_m[w].y, mx[1]);
      l[0] += warp_l[w].x * weight[w][0];
      l[1] += warp_l[w].y * weight[w][1];
    }
    // One division a head, not one an element, and each head's destination worked out once
    // (ncu: the divisions' dependent chains, then the per-element address arithmetic and
    // branches, were most of the CTA's tail).
    // Times what the decoded V is short of (1 but for E4M3's bit-move), with one chunk or several.
    const float out_scale = (a.num_chunks == 1 ? v_scale_of(a) : 1.f) * Config::KvDecoder::factor();
    const bool second = head0 + 1 < work.heads;  // a padded row past the CTA's is not written
    const QueryRow q0 = query_row<kMulti, Variant>(a, work, head0);
    const QueryRow q1 = query_row<kMulti, Variant>(a, work, head0 + (second ? 1 : 0));
    // With one chunk a head's sink joins its (m, l) here (with several, in the combine); the
    // warps' weights stay in the old frame, so the factor goes into the rows' scale.
    float fold[2] = {1.f, 1.f};
    bool sink_folded = false;
    if constexpr (Variant::kSinks) {
      if (a.num_chunks == 1 && a.sinks) {
        fold[0] = Variant::fold_sink(Variant::sink_log2(a, q0.q_head), mx[0], l[0]);
        if (second) fold[1] = Variant::fold_sink(Variant::sink_log2(a, q1.q_head), mx[1], l[1]);
        sink_folded = true;
      }
    }
    const Row row0(a, work, q0, l[0], __fdividef(out_scale * fold[0], l[0]), bad_page);
    const Row row1(a, work, q1, l[1], __fdividef(out_scale * fold[1], l[1]), bad_page);
    if (role.stream == 0 && Pv::dim_of(lane, 0, 0) == 0) {  // the lanes whose first fragment holds dim 0
      store_head_stats(a, work, q0, mx[0], l[0], bad_page, sink_folded);
      if (second) store_head_stats(a, work, q1, mx[1], l[1], bad_page, sink_folded);
    }
    if (a.num_chunks == 1) {
      write_fragments<false>(smem, role, weight, row0, row1, second);
    } else {
      write_fragments<true>(smem, role, weight, row0, row1, second);
    }
  }

  // The thread's fragments (lane `threadIdx.x % 32`, m-tiles stream + j · streams), each the
  // weighted sum of its row tile's warps' and written as two pairs of neighbouring dims, one
  // a head (elements e and e + 2 are dims d and d + 1 of head e: Sm80PvConsumer::dim_of).
  template <bool kSplit>
  VXQA_DEVICE static void write_fragments(const uint8_t* smem, const WarpRole& role,
                                          const float (&weight)[Config::kWarps][2], const Row& row0, const Row& row1,
                                          bool second) {
    const int lane = threadIdx.x & 31;
    // One query token: m-tile (threadIdx.x + j · threads) / 32, as before multi-token
    // queries (warp + j · W written from the warp role made ptxas 11.8 spill 4 bytes in
    // the window Config at D 256 for sm_90).
    const int count = kMulti ? (kMTiles + role.streams - 1) / role.streams
                             : (kMTiles * 32 + Config::kThreads - 1) / Config::kThreads;
#pragma unroll 1
    for (int j = 0; j < count; ++j) {
      const int m = kMulti ? role.stream + j * role.streams : int(threadIdx.x + j * Config::kThreads) / 32;
      if (m >= kMTiles) break;
      const int sharer = kMulti ? role.row_tile : 0;  // the stream's warp that holds it
      float4 part[Config::kWarps];
#pragma unroll
      for (int w = 0; w < Config::kWarps; ++w) {
        if (w >= role.streams) break;
        part[w] = *reinterpret_cast<const float4*>(warp_o(smem, sharer + w * role.sharers) + (m * 32 + lane) * 4);
      }
      float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int w = 0; w < Config::kWarps; ++w) {
        if (w >= role.streams) break;
        o.x += part[w].x * weight[w][0];
        o.y += part[w].y * weight[w][1];
        o.z += part[w].z * weight[w][0];
        o.w += part[w].w * weight[w][1];
      }
      const int dim = Pv::dim_of(lane, m, 0);
      row0.template store_pair<kSplit>(dim, o.x, o.z);
      if (second) row1.template store_pair<kSplit>(dim, o.y, o.w);
    }
  }

  VXQA_DEVICE static const float* warp_o(const uint8_t* smem, int w) {
    return reinterpret_cast<const float*>(smem + w * Config::kSm80WarpBytes);
  }
  VXQA_DEVICE static const float* warp_ml(const uint8_t* smem, int w) {
    return reinterpret_cast<const float*>(smem + w * Config::kSm80WarpBytes + kMergeOBytes);
  }
};
#endif

}  // namespace vxqa
