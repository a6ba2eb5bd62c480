// vxqa/kernel/decode_cta_sm80.cuh — the decode CTA body on the SM80+ pieces: mma.m16n8k16
// with tokens on M and the group's heads on N, a cp.async pipeline into warp-private stages,
// and the softmax in the accumulator registers.
//
// Same CTA shape and contract as the SM70 body (kernel/decode_kernel.cuh): one CTA = one
// (split chunk, KV head x M tile of 8 heads, sequence); its warps take the chunk's 16-token
// tiles in turn, each through its own Stages-deep ring of shared-memory stages (so the main
// loop has no CTA-wide barrier, only __syncwarp), and the warps merge (m, l, O) once at the
// end. Q stays in registers for the whole loop.
#pragma once
#include <cuda_fp16.h>
#include <vxqa/arch/cp_async.cuh>
#include <vxqa/arch/grid_dependency.cuh>
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

  // Per warp: kStages x [K tile | V tile]; after the loop, its merge area: O in fragment
  // order ([m-tile][lane][element]: one 16-byte store or load a fragment, conflict-free),
  // then m and l of 8 heads.
  static constexpr int kVTileOffset = Qk::Layout::kBytes;
  static constexpr int kMergeOBytes = kMTiles * 4 * 32 * 4;
  static_assert(kMergeOBytes + 16 * 4 <= Config::kSm80WarpBytes,
                "DecodeCtaSm80: a warp's merge area must fit in its stages");

  VXQA_DEVICE static void run(const DecodeKernelArgs& a, uint8_t* smem) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const PagedKvView<Config::kPageSize, Config::kElemBytes> view(a.kv, cta_page_size<Config::kPageSize>(a));
    // Tiles start at multiples of 16 tokens, so with pages of a multiple of 16 each tile
    // lies in one page: one block-table id a tile, and strided copies.
    const bool one_page = Config::kPageSize != 0 ? Config::kPageSize % Geometry::kTokens == 0
                                                 : a.page_size % Geometry::kTokens == 0;
    int32_t first_ids[kStages] = {};
    if (one_page && int(blockIdx.z) < a.batch)
      load_first_page_ids(a, view.sequence(blockIdx.z, blockIdx.y / a.m_tiles), warp, first_ids);

    CtaWork work;
    if (!find_cta_work<Config::kHeadsPerCta, kD, Config::kThreads, Config::kQo>(a, work)) return;
    VXQA_TIMELINE_PROBE(a, kProbeDecodeWork);
    uint8_t* warp_area = smem + warp * Config::kSm80WarpBytes;

    // The lane's B-fragment head is lane / 4; padded heads get Q = 0 and are not written.
    const int head = mma::m16n8k16::group(lane);
    const uint16_t* q_row = head < work.heads ? static_cast<const uint16_t*>(a.q) + work.seq_index * a.q_batch_stride +
                                                    (work.q_head0 + head) * a.q_head_stride
                                              : nullptr;
    const typename Qk::QFragments qf = Qk::template load_q<Config::kQo>(q_row);

    const Tiles tiles(work.begin, work.end, warp);
    const Sequence seq = view.sequence(work.seq_index, work.kv_head);

    softmax::HeadPairState st = softmax::empty_head_pair();
    float o[kMTiles][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[m][e] = 0.f;
    bool bad_page = false;
    if (tiles.count > 0) {
      if constexpr (Config::kPageSize != 0) {
        stream<Config::kPageSize % Geometry::kTokens == 0>(a, work, tiles, seq, first_ids, qf, warp_area, st, o,
                                                           bad_page);
      } else if (one_page) {
        stream<true>(a, work, tiles, seq, first_ids, qf, warp_area, st, o, bad_page);
      } else {
        stream<false>(a, work, tiles, seq, first_ids, qf, warp_area, st, o, bad_page);
      }
    }
    arch::launch_dependents();  // the combine may start launching: it waits for our partials
    arch::cp_async_wait<0>();  // nothing in flight into the stages the merge reuses

    const bool cta_bad_page = __syncthreads_or(bad_page);
    VXQA_TIMELINE_PROBE(a, kProbeDecodeStreamed);
    // With several chunks the chunk's error words carry it too (store_head_result), so
    // this OR may land before or after the kernel zeroes the word.
    if (cta_bad_page && threadIdx.x == 0) atomicOr(a.errors, uint32_t(kDecodeErrorBadPage));
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
    merge_and_write(a, smem, work, cta_bad_page);
    VXQA_TIMELINE_PROBE(a, kProbeDecodeWritten);
  }

  // The warp's tiles through its ring of stages: tile j + S - 1 is copied while tile j is
  // consumed. kOnePage: each tile lies in one page (its row 0 offset is the same on every
  // lane); else lane r < 16 holds the offset of row r.
  // kOnePage: first_ids are the page ids of tiles 0 .. kStages - 1 (load_first_page_ids).
  template <bool kOnePage>
  VXQA_DEVICE static void stream(const DecodeKernelArgs& a, const CtaWork& work, const Tiles& tiles, const Sequence& seq,
                                 const int32_t (&first_ids)[kStages], const typename Qk::QFragments& qf,
                                 uint8_t* warp_area, softmax::HeadPairState& st, float (&o)[kMTiles][4],
                                 bool& bad_page) {
    const int lane = threadIdx.x & 31;
    const uint8_t* k_base = static_cast<const uint8_t*>(a.kv.k);
    const uint8_t* v_base = static_cast<const uint8_t*>(a.kv.v);
    // kOnePage: tile j's row 0, with its page id loaded by the caller.
    auto one_page_offset = [&](int j, int32_t id) -> int64_t {
      if (j >= tiles.count) return 0;
      if constexpr (Config::kChecksPageIds) {
        return seq.checked_row_offset(uint32_t(tiles.start(j)), id, a.num_pages, bad_page);
      } else {
        return seq.row_offset(uint32_t(tiles.start(j)), id);
      }
    };
    auto offset_of = [&](int j) -> int64_t {
      if constexpr (kOnePage) {
        return j < tiles.count ? one_page_offset(j, seq.page_id(uint32_t(tiles.start(j)))) : 0;
      } else {
        return tiles.template lane_row_offset<Config::kChecksPageIds>(seq, j, a.num_pages, bad_page);
      }
    };
    const float qk_scale = qk_scale_log2_of(a);
    auto stage = [&](int slot) { return warp_area + slot * Config::kSm80StageBytes; };
    auto next = [](int slot) { return slot + 1 == kStages ? 0 : slot + 1; };
    auto issue = [&](int j, int64_t offset, int slot) {  // one commit group per tile, empty past the end
      if (j < tiles.count) {
        uint8_t* k_tile = stage(slot);
        if constexpr (kOnePage) {
          Load::issue_one_page(k_base + offset, v_base + offset, seq.token_bytes(), tiles.valid_rows(j), k_tile,
                               k_tile + kVTileOffset);
        } else {
          Load::issue(k_base, v_base, offset, tiles.valid_rows(j), k_tile, k_tile + kVTileOffset);
        }
      }
      arch::cp_async_commit();
    };

#pragma unroll
    for (int j = 0; j < kStages - 1; ++j) issue(j, kOnePage ? one_page_offset(j, first_ids[j]) : offset_of(j), j);
    // The block-table lookup of a tile is done one iteration before its copies are issued.
    int64_t offset_ahead = kOnePage ? one_page_offset(kStages - 1, first_ids[kStages - 1]) : offset_of(kStages - 1);
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
        s[e] = row0 + (e >> 1) * 8 < work.end ? s[e] * qk_scale : negative_infinity();
      uint32_t p[2];
      float alpha[2];
      softmax::register_softmax_step(st, s, p, alpha);
      // Most tiles leave every max where it was: skip the rescale of O then.
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
        for (int m = 0; m < kMTiles; ++m)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[m][e] *= alpha[e & 1];
      }
      Pv::run(stage(use) + kVTileOffset, p, o);
      use = next(use);
      fill = next(fill);
    }
  }

  // The page ids of the warp's first kStages tiles (one-page path), loaded before the
  // sequence length is known, so that the two round trips overlap instead of following one
  // another on every CTA's way to its first copies. Only tokens below max_context are
  // looked up, whose pages the table row holds (validate: max_pages_per_seq pages cover
  // max_context); the ids of tiles at or past the length are loaded, never used.
  VXQA_DEVICE static void load_first_page_ids(const DecodeKernelArgs& a, const Sequence& seq, int warp,
                                              int32_t (&ids)[kStages]) {
    const int begin = int(blockIdx.x) * a.chunk_tokens;  // the chunk's first token (find_cta_work)
#pragma unroll
    for (int j = 0; j < kStages; ++j) {
      const int in_chunk = (warp + j * Config::kWarps) * Geometry::kTokens;  // Tiles::start(j) - begin
      if (in_chunk < a.chunk_tokens && begin + in_chunk < a.max_context) ids[j] = seq.page_id(uint32_t(begin + in_chunk));
    }
  }

  // Merges every warp's O fragments by their (m, l), in warp order. A thread takes whole
  // fragments (an m-tile of one lane: heads 2t, 2t + 1, t = lane % 4, two dims each) of
  // one lane, so its two heads' max, weights and sum are worked out once, and the fragments'
  // loads are independent of one another. The merged heads are staged in shared memory as
  // rows, so that the stores to global memory are contiguous: stored from the fragments,
  // each warp store touched 32 sectors (docs/performance.md: the CTA's tail was 4.4 us).
  VXQA_DEVICE static void merge_and_write(const DecodeKernelArgs& a, uint8_t* smem, const CtaWork& work,
                                          bool bad_page) {
    constexpr int kFragments = kMTiles * 32;
    constexpr int kWarps = Config::kWarps;
    static_assert(Config::kThreads % 32 == 0, "DecodeCtaSm80: a thread's fragments must all be of one lane");
    float* rows = merged_rows(smem);
    const int lane = threadIdx.x & 31;
    const int head0 = Pv::head_of(lane, 0);  // element e holds head head0 + (e & 1)
    if (head0 < work.heads) {
      float mx[2] = {negative_infinity(), negative_infinity()};
      float2 warp_m[kWarps], warp_l[kWarps];
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        warp_m[w] = *reinterpret_cast<const float2*>(warp_ml(smem, w) + head0);
        warp_l[w] = *reinterpret_cast<const float2*>(warp_ml(smem, w) + 8 + head0);
        mx[0] = softmax::max_keep_nan(mx[0], warp_m[w].x);
        mx[1] = softmax::max_keep_nan(mx[1], warp_m[w].y);
      }
      float weight[kWarps][2], l[2] = {0.f, 0.f};
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        weight[w][0] = softmax::rescale_factor(warp_m[w].x, mx[0]);
        weight[w][1] = softmax::rescale_factor(warp_m[w].y, mx[1]);
        l[0] += warp_l[w].x * weight[w][0];
        l[1] += warp_l[w].y * weight[w][1];
      }
#pragma unroll 1
      for (int j = 0; j < (kFragments + Config::kThreads - 1) / Config::kThreads; ++j) {
        const int fragment = threadIdx.x + j * Config::kThreads, m = fragment / 32;
        if (fragment >= kFragments) break;
        float4 part[kWarps];
#pragma unroll
        for (int w = 0; w < kWarps; ++w) part[w] = *reinterpret_cast<const float4*>(warp_o(smem, w) + fragment * 4);
        float o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          o[0] += part[w].x * weight[w][0];
          o[1] += part[w].y * weight[w][1];
          o[2] += part[w].z * weight[w][0];
          o[3] += part[w].w * weight[w][1];
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // elements h and h + 2: dims d and d + 1 of head head0 + h
          if (head0 + h >= work.heads) continue;
          const int dim = Pv::dim_of(lane, m, h);
          *reinterpret_cast<float2*>(rows + (head0 + h) * kRowPitch + dim) =
              make_float2(head_value(a, work, l[h], o[h], bad_page), head_value(a, work, l[h], o[h + 2], bad_page));
          if (dim == 0) store_head_stats(a, work, work.q_head0 + head0 + h, mx[h], l[h], bad_page);
        }
      }
    }
    __syncthreads();
    // Two dims a thread, consecutive threads on consecutive dims of a head.
    for (int i = threadIdx.x; i < work.heads * kD / 2; i += Config::kThreads) {
      const int head = i / (kD / 2), dim = i % (kD / 2) * 2;
      const float2 value = *reinterpret_cast<const float2*>(rows + head * kRowPitch + dim);
      if (a.num_chunks == 1) {
        store_head_value<kD, Config::kQo>(a, work, work.q_head0 + head, dim, value.x);
        store_head_value<kD, Config::kQo>(a, work, work.q_head0 + head, dim + 1, value.y);
      } else {
        *reinterpret_cast<float2*>(a.partial_o + partial_slot(a, work, work.q_head0 + head) * kD + dim) = value;
      }
    }
  }

  // The merged heads' rows (fp32, kRowPitch apart: the fragments' 8-byte stores meet two
  // ways at most in a bank), in warp 0's stages after its merge area.
  static constexpr int kRowPitch = kD + 2;
  static constexpr int kRowsOffset = kMergeOBytes + 16 * 4;
  static_assert(kRowsOffset + 8 * kRowPitch * 4 <= Config::kSm80WarpBytes,
                "DecodeCtaSm80: the merged rows must fit in warp 0's stages");
  VXQA_DEVICE static float* merged_rows(uint8_t* smem) { return reinterpret_cast<float*>(smem + kRowsOffset); }

  VXQA_DEVICE static const float* warp_o(const uint8_t* smem, int w) {
    return reinterpret_cast<const float*>(smem + w * Config::kSm80WarpBytes);
  }
  VXQA_DEVICE static const float* warp_ml(const uint8_t* smem, int w) {
    return reinterpret_cast<const float*>(smem + w * Config::kSm80WarpBytes + kMergeOBytes);
  }
};
#endif

}  // namespace vxqa
