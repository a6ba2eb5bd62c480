// vxqa/kernel/decode_cta_sm70.cuh — the decode CTA body on the SM70 pieces: mma.m8n8k4
// with the group's heads on M, register-staged loads (no cp.async), a shared-memory
// publisher, and the online softmax through shared memory.
//
// One CTA = one (split chunk, KV head x M tile, sequence). Its warps take the chunk's
// 32-token tiles in turn; each warp streams K and V pieces global -> registers -> its own
// shared-memory tile (so the main loop has no CTA-wide barrier), runs QK, the online
// softmax and PV on mma.m8n8k4, and the warps merge (m, l, O) once at the end. At head dim
// 512 two warps (a team) share each tile: each loads half its rows, both run QK and the
// softmax on the whole tile, and each runs PV over its own 256 dims of O (Config::kParts). With one
// chunk the CTA writes O (and LSE) itself; otherwise it writes the chunk's partial and
// combine_kernel merges the chunks.
//
// Multi-token queries (kMultiToken): the CTA's 8 rows are (token, head) pairs (row_tiling:
// a KV head's G · n rows take ceil(G · n / 8) CTAs here, each reading the KV), each row
// masked at its own causal limit.
//
// What a CTA writes for a head (zeros, NaN, partials): kernel/decode_cta_common.cuh.
#pragma once
#include <cuda_fp16.h>
#include <vxqa/arch/grid_dependency.cuh>
#include <vxqa/common.cuh>
#include <vxqa/kernel/decode_args.cuh>
#include <vxqa/kernel/decode_cta_common.cuh>
#include <vxqa/mma/fragments.cuh>
#include <vxqa/mma/pv_consumer.cuh>
#include <vxqa/mma/qk_consumer.cuh>
#include <vxqa/paged/paged_kv.cuh>
#include <vxqa/pipeline/register_staged_load.cuh>
#include <vxqa/pipeline/smem_layout.cuh>
#include <vxqa/pipeline/smem_publisher.cuh>
#include <vxqa/softmax/online_softmax.cuh>

namespace vxqa {

#if VXQA_IS_CUDA_COMPILER
template <class Config>
struct DecodeCtaSm70 {
  using Geometry = typename Config::Geometry;
  using LoadGeometry = typename Config::LoadGeometry;
  using Piece = pipeline::RegisterPiece<LoadGeometry, Config::kPieceTokens>;
  using Publisher = pipeline::SmemPublisher<Geometry, LoadGeometry>;
  using Qk = mma::QkConsumer<Geometry>;
  using Pv = mma::PvConsumer<Geometry>;
  using QLayout = pipeline::QTileLayout<Config::kHeadDim>;
  using MergeLayout = pipeline::MergeTileLayout<Geometry::kPartDims>;
  using Sequence = PagedKvSequence<Config::kPageSize, Config::kElemBytes>;
  static constexpr int kD = Config::kHeadDim;
  static constexpr int kTileTokens = Geometry::kTokens;
  static constexpr int kPieces = Config::kPiecesPerTile;  // per K (and per V) tile
  static constexpr int kStages = Config::kStages;

  static constexpr int kParts = Config::kParts;  // warps a team (sharing a tile)
  static constexpr int kPartDims = Geometry::kPartDims;
  using Tiles = WarpTiles<kTileTokens, Config::kTeams>;
  using Variant = typename Config::Variant;
  static constexpr bool kMulti = Config::kMultiToken;

  VXQA_DEVICE static void run(const DecodeKernelArgs& a, uint8_t* smem) {
    CtaWork work;
    if (!find_cta_work<Config>(a, work)) return;
    const int seq_index = work.seq_index, kv_head = work.kv_head;

    uint8_t* q_tile = smem;
    load_q(a, work, q_tile);
    __syncthreads();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int team = warp / kParts, part = warp % kParts;
    uint8_t* team_area = smem + Config::kQBytes + team * Config::kTeamBytes;
    auto* tile_storage = reinterpret_cast<typename Publisher::TempStorage*>(team_area);
    uint8_t* s_tile = team_area + Config::warp_state_offset(part);
    uint8_t* p_tile = s_tile + (Config::kWarpProbOffset - Config::kWarpScoreOffset);
    float* alpha = reinterpret_cast<float*>(s_tile + (Config::kWarpAlphaOffset - Config::kWarpScoreOffset));

    // Its tiles start at any token (every lane loads its own row): at the window's first key.
    const Tiles tiles(Variant::kWindow ? max(work.begin, work.first) : work.begin, work.end, team);

    const PagedKvView<Config::kPageSize, Config::kElemBytes> view(a.kv, cta_page_size<Config::kPageSize>(a));
    const Sequence seq = view.sequence(seq_index, kv_head);

    // kMulti: the keys of the lane's two accumulator rows, c_row(lane, 0) and c_row(lane, 2).
    LaneRowLimits rows{0u};
    if constexpr (kMulti) rows = lane_row_limits<Variant>(a, work, mma::c_row(lane, 0), mma::c_row(lane, 2));

    softmax::RowState row = softmax::empty_row();
    float o[Pv::kNBlocks][8];
#pragma unroll
    for (int n = 0; n < Pv::kNBlocks; ++n)
#pragma unroll
      for (int i = 0; i < 8; ++i) o[n][i] = 0.f;

    bool bad_page = false;
    if (tiles.count > 0) {
      Publisher publisher(*tile_storage, 1 + team);  // barrier 0 is __syncthreads'
      Piece staged[kStages];
      int64_t offset_this = tiles.template lane_row_offset<Config::kChecksPageIds>(seq, 0, a.num_pages, bad_page);
      int64_t offset_next = tiles.template lane_row_offset<Config::kChecksPageIds>(seq, 1, a.num_pages, bad_page);
#pragma unroll
      for (int s = 0; s < kStages; ++s) load_piece(staged[s], a, tiles, s, 0, offset_this);

      auto next_offsets = [&](int j) {  // the row offsets of tiles j + 1 and j + 2
        offset_this = offset_next;
        offset_next = tiles.template lane_row_offset<Config::kChecksPageIds>(seq, j + 2, a.num_pages, bad_page);
      };
      // Tile j up to its P·V: K pieces, then QK and softmax; V pieces, O rescaled. After
      // publishing a stage, the same registers load the piece kStages further down the stream.
      auto up_to_pv = [&](int j) {
#pragma unroll
        for (int k = 0; k < 2 * kPieces; ++k) {
          if (k == 0 || k == kPieces) publisher.wait_readers();
          Piece& piece = staged[k % kStages];
          if (k < kPieces) {
            publisher.store_k(piece, piece_row(k));
          } else {
            publisher.store_v(piece, piece_row(k - kPieces));
          }
          const int ahead = k + kStages;  // stream position of the refill
          if (ahead < 2 * kPieces) {
            load_piece(piece, a, tiles, ahead, j, offset_this);
          } else {
            load_piece(piece, a, tiles, ahead - 2 * kPieces, j + 1, offset_next);
          }
          if (k == kPieces - 1) {
            publisher.publish();
            float s[8];
            Qk::run(q_tile, publisher.tile, s);
            store_scores(a, s, tiles.start(j), work, rows,
                         Variant::prepare(a, cta_qk_scale_log2<Config>(a), work.first), s_tile);
            __syncwarp();
            row = softmax::online_softmax_step(row, s_tile, p_tile, alpha);
            __syncwarp();
          }
        }
        publisher.publish();
        rescale(o, alpha);
      };
      if constexpr (!kMulti) {
        for (int j = 0; j < tiles.count; ++j) {
          up_to_pv(j);
          Pv::run(p_tile, publisher.tile, o, part);
          next_offsets(j);
        }
      } else {
        // A tile holding keys some rows do not see leaves the inner loop before its P·V,
        // which the outer one does (rows_apart_pv), so that the inner loop stays the lean
        // one. The test is each lane's own rows and a vote: no register held for the CTA's
        // (its D 128 8-warp Config could not spare one: ptxas spilled).
        int j = 0;
        while (j < tiles.count) {
          for (; j < tiles.count; ++j) {
            up_to_pv(j);
            if (__any_sync(0xffffffffu, rows.misses_keys_in(work, tiles.start(j), kTileTokens))) break;
            Pv::run(p_tile, publisher.tile, o, part);
            next_offsets(j);
          }
          if (j < tiles.count) {
            rows_apart_pv(work, rows, tiles.start(j), p_tile, publisher.tile, o);
            next_offsets(j);
            ++j;
          }
        }
      }
    }

    arch::launch_dependents();  // the combine may start launching: it waits for our partials
    // Every warp is done with its tile: reuse it for the merge (a team's warps: a part each).
    const bool cta_bad_page = __syncthreads_or(bad_page);
    // With several chunks the chunk's error words carry it too (store_head_stats), so
    // this OR may land before or after the kernel zeroes the word. (Also testing the chunk
    // count here made ptxas 11.8 spill in a D = 128 Config.)
    if (cta_bad_page && threadIdx.x == 0) atomicOr(a.errors, uint32_t(kDecodeErrorBadPage));
    float* merge_o = reinterpret_cast<float*>(team_area) + part * (MergeLayout::kBytes / 4);
    float* merge_ml = reinterpret_cast<float*>(s_tile);
#pragma unroll
    for (int n = 0; n < Pv::kNBlocks; ++n)
#pragma unroll
      for (int i = 0; i < 8; i += 2) {  // elements i, i + 1: adjacent dims of one head row
        const int index = MergeLayout::index(mma::c_row(lane, i), Pv::c_dim(lane, n, i));
        *reinterpret_cast<float2*>(merge_o + index) = make_float2(o[n][i], o[n][i + 1]);
      }
    if (softmax::softmax_part(lane) == 0) {
      merge_ml[softmax::softmax_row(lane)] = row.m;
      merge_ml[8 + softmax::softmax_row(lane)] = row.l;
    }
    __syncthreads();
    if constexpr (kMulti) {
      // The rows' fields (the query tokens, the length) are read again rather than held in
      // registers through the loop: at D 256 that made NVRTC 12.8's ptxas spill on sm_70.
      CtaWork again;
      find_cta_work<Config>(a, again);
      merge_and_write(a, smem, again, cta_bad_page);
    } else {
      merge_and_write(a, smem, work, cta_bad_page);
    }
  }

  // Loads stream piece `k` (K pieces 0..P-1, then V pieces P..2P-1) of this warp's tile j.
  VXQA_DEVICE static void load_piece(Piece& piece, const DecodeKernelArgs& a, const Tiles& tiles,
                                     int k, int j, int64_t lane_row_offset) {
    // Row offsets are from the cache bases (the KV head's offset included).
    const uint8_t* base = static_cast<const uint8_t*>(k < kPieces ? a.kv.k : a.kv.v);
    piece.load(base, lane_row_offset, piece_row(k % kPieces), tiles.valid_rows(j));
  }

  // The first tile row of a warp's K (or V) piece k: a team's warps load a half each.
  VXQA_DEVICE static int piece_row(int k) {
    return (threadIdx.x >> 5) % kParts * Config::kTeamRows + k * Config::kPieceTokens;
  }

  VXQA_DEVICE static void load_q(const DecodeKernelArgs& a, const CtaWork& work, uint8_t* q_tile) {
    constexpr int kPiecesPerRow = kD / 8;  // 16-byte pieces of 8 elements
    constexpr ActType kQ = Config::kQo;
    for (int i = threadIdx.x; i < 8 * kPiecesPerRow; i += Config::kThreads) {
      const int head = i / kPiecesPerRow, dim = (i % kPiecesPerRow) * 8;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);  // padded rows: Q = 0, they are not written
      if (head < work.heads) {
        const QueryRow row = query_row<kMulti, Variant>(a, work, head);
        v = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(a.q) + row.out_row * a.q_batch_stride +
                                            row.q_head * a.q_head_stride + dim);
        v = make_uint4(detail::act2_to_half2_bits<kQ>(v.x), detail::act2_to_half2_bits<kQ>(v.y),
                       detail::act2_to_half2_bits<kQ>(v.z), detail::act2_to_half2_bits<kQ>(v.w));
      }
      *reinterpret_cast<uint4*>(q_tile + QLayout::offset(head, dim)) = v;
    }
  }

  // The QK accumulators as base-2 logits, tokens at or past `end` masked (kMulti: past the
  // row's own end, and before its first key), through the variant's score. Elements i and
  // i + 1 (i even) are adjacent tokens of one head row: one 8-byte store.
  VXQA_DEVICE static void store_scores(const DecodeKernelArgs& a, const float (&s)[8], int tile_start,
                                       const CtaWork& work, const LaneRowLimits& rows,
                                       typename Variant::Scores scores, uint8_t* s_tile) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      const int token = Qk::c_token(lane, i);
      int end = work.end;
      if constexpr (kMulti) {
        end = rows.end(work, (i >> 1) & 1);
        if constexpr (Variant::kWindow) scores.first = rows.first(work, (i >> 1) & 1);
      }
      const int live = end - tile_start - token;  // 1: only the first of the pair is live
      const float2 v = make_float2(Variant::score(a, scores, s[i], live > 0, tile_start + token),
                                   Variant::score(a, scores, s[i + 1], live > 1, tile_start + token + 1));
      *reinterpret_cast<float2*>(s_tile + pipeline::ScoreTileLayout::offset(mma::c_row(lane, i), token)) = v;
    }
  }

  // P·V of a tile holding keys some of the CTA's rows do not see: a P·V a row, each with V
  // masked to its own keys, where a V there is NaN or inf (0 · NaN would reach the rows that
  // do not see it); the plain P·V where none is.
  VXQA_DEVICE static void rows_apart_pv(const CtaWork& work, const LaneRowLimits& rows, int start,
                                        const uint8_t* p_tile, const uint8_t* v_tile, float (&o)[Pv::kNBlocks][8]) {
    const KeysAllRowsSee all_see = keys_all_rows_see(work, rows);
    if (!Pv::non_finite_outside(v_tile, all_see.first - start, all_see.end - start)) {
      Pv::run(p_tile, v_tile, o);
      return;
    }
    Pv::run_rows_apart(p_tile, v_tile, o, work.heads, [&](int r) {
      // Row r's limits are lane (r & 1) + (r & 4 ? 16 : 0)'s, its accumulator rows' (r >> 1) & 1.
      const LaneRowLimits row{__shfl_sync(0xffffffffu, rows.packed, (r & 1) | (r & 4) << 2)};
      return make_int2(row.first(work, (r >> 1) & 1) - start, row.end(work, (r >> 1) & 1) - start);
    });
  }

  VXQA_DEVICE static void rescale(float (&o)[Pv::kNBlocks][8], const float* alpha) {
    const int lane = threadIdx.x & 31;
    const float a0 = alpha[mma::c_row(lane, 0)], a1 = alpha[mma::c_row(lane, 2)];
#pragma unroll
    for (int n = 0; n < Pv::kNBlocks; ++n)
#pragma unroll
      for (int i = 0; i < 8; ++i) o[n][i] *= (i & 2) ? a1 : a0;
  }

  // Merges the teams' (m, l, O) and writes O and LSE (one chunk) or the chunk's partial.
  // With one chunk a head's sink joins its (m, l) here; with several, in the combine. A
  // team's warps hold the same (m, l), and O of their own parts of D.
  VXQA_DEVICE static void merge_and_write(const DecodeKernelArgs& a, const uint8_t* smem, const CtaWork& work,
                                          bool bad_page) {
    for (int i = threadIdx.x; i < work.heads * kD; i += Config::kThreads) {
      const int head = i / kD, dim = i % kD;
      const int part = kParts == 1 ? 0 : dim / kPartDims, part_dim = kParts == 1 ? dim : dim % kPartDims;
      float m = negative_infinity();
      for (int t = 0; t < Config::kTeams; ++t) m = softmax::max_keep_nan(m, warp_ml(smem, t, part)[head]);
      float l = 0.f, o = 0.f;
      for (int t = 0; t < Config::kTeams; ++t) {
        const float* ml = warp_ml(smem, t, part);
        const float weight = softmax::rescale_factor(ml[head], m);
        l += ml[8 + head] * weight;
        o += warp_o(smem, t, part)[MergeLayout::index(head, part_dim)] * weight;
      }
      const QueryRow row = query_row<kMulti, Variant>(a, work, head);
      bool sink_folded = false;
      if constexpr (Variant::kSinks) {
        if (a.num_chunks == 1 && a.sinks) {
          o *= Variant::fold_sink(Variant::sink_log2(a, row.q_head), m, l);
          sink_folded = true;
        }
      }
      o *= Config::KvDecoder::factor();  // what the decoded V is short of (1 but for E4M3's bit-move)
      store_head_result<kD, Config::kQo>(a, work, row, dim, m, l, o, bad_page, sink_folded);
    }
  }

  // The merge's O rows and (m, l) of the warp of team t that owns `part`.
  VXQA_DEVICE static const float* warp_o(const uint8_t* smem, int t, int part) {
    return reinterpret_cast<const float*>(smem + Config::kQBytes + t * Config::kTeamBytes) +
           part * (MergeLayout::kBytes / 4);
  }
  VXQA_DEVICE static const float* warp_ml(const uint8_t* smem, int t, int part) {
    return reinterpret_cast<const float*>(smem + Config::kQBytes + t * Config::kTeamBytes +
                                          Config::warp_state_offset(part));
  }
};
#endif

}  // namespace vxqa
