// vxqa/kernel/decode_cta_common.cuh — what every decode CTA body shares, whatever its MMA
// atom: which work the CTA has (its chunk of one sequence, one KV head, one M tile of
// heads), how its warps take that chunk's tiles in turn, and how a merged (m, l, O) of a
// head is written — the output semantics live here once:
//   - no token (length 0): O = 0, LSE = -inf;
//   - an invalid length or a bad block-table id: NaN (and an error bit, set by the caller);
//   - l = 0 with live tokens (every live score -inf): 0 / 0 = NaN, as the reference;
//   - NaN anywhere in m, l or O stays NaN.
// With several chunks a CTA writes its chunk's partial; a chunk with l = 0 (every live score
// -inf) writes LSE -inf and its unnormalised O, which is 0 · V summed: 0, or NaN where a V
// under a zero probability is NaN or inf. The combine weighs it 0, and 0 · NaN keeps that
// NaN, as the float64 reference and a one-chunk plan have it.
#pragma once
#include <vxqa/common.cuh>
#include <vxqa/kernel/attention_variant.cuh>
#include <vxqa/kernel/decode_args.cuh>
#include <vxqa/numeric/act_type.cuh>

namespace vxqa {

#if VXQA_IS_CUDA_COMPILER
// The CTA's share of the step: blockIdx = (chunk, KV head x M tile, sequence). Its rows are
// query heads q_head0 .. q_head0 + heads - 1 (one query token a sequence), or with several
// (kMultiToken) the KV head's (token, head) rows row0 .. row0 + heads - 1 (row_tiling).
struct CtaWork {
  int chunk, seq_index, kv_head, m_tile;
  int heads;    // rows of this CTA (<= a.rows_per_cta)
  int q_head0;  // first query head of the M tile (one query token)
  int row0;     // first row among the KV head's G · n (several)
  SeqQueries queries;  // the sequence's query tokens
  int len;
  int begin, end;  // this chunk's tokens [begin, end); end <= begin when it has none
  int first;       // the first key the first query token sees (a window's; 0 without one):
                   // begin may be below it by less than kWindowChunkAlign in the first chunk
  VXQA_DEVICE bool live() const { return end > begin; }
};

// One row of a CTA: query head q_head of one query token, the keys [first, end) it sees.
struct QueryRow {
  int out_row;   // its row of q, out and lse
  int slot_row;  // its row of the partials: sequence · max_q_len + token
  int q_head;
  int first, end;
};

// Row `r` (0-based in the CTA) of `w`; a row past w.heads is a padded one, never written.
template <bool kMultiToken, class Variant>
VXQA_DEVICE QueryRow query_row(const DecodeKernelArgs& a, const CtaWork& w, int r) {
  if constexpr (kMultiToken) {
    const int row = w.row0 + r, token = row / a.group_size;
    const int end = w.len - w.queries.count + token + 1;
    return QueryRow{w.queries.first + token, w.seq_index * a.max_q_len + token,
                    w.kv_head * a.group_size + row % a.group_size, Variant::first_key(a, end), end};
  } else {
    return QueryRow{w.seq_index, w.seq_index, w.q_head0 + r, w.first, w.len};
  }
}

// The keys a lane's two accumulator rows (kMultiToken) see within the chunk, in one
// register: row c sees [w.first + first delta, w.end - end delta). The deltas are 0..15: the
// tokens' limits lie within max_q_len - 1 of one another. A padded row (past w.heads, never
// written) gets deltas 0: every key the CTA reads.
//
// A tile's P·V takes each of its keys for all of a warp's rows at once, and a row that does
// not see a key gives it p = 0; 0 · NaN and 0 · inf are NaN. So a tile holding a key that
// one of the rows does not see (misses_keys_in), with a NaN or infinite V there, must keep
// that V from the rows that do not see it (the PV consumers' run_rows_apart).
struct LaneRowLimits {
  uint32_t packed;  // end deltas in bytes 0 and 1, first deltas in bytes 2 and 3
  VXQA_DEVICE int end(const CtaWork& w, int c) const { return w.end - int((packed >> (8 * c)) & 0xffu); }
  VXQA_DEVICE int first(const CtaWork& w, int c) const { return w.first + int((packed >> (16 + 8 * c)) & 0xffu); }
  // Whether tile [start, start + tokens), up to the chunk's end, holds a key one of the
  // lane's rows does not see.
  VXQA_DEVICE bool misses_keys_in(const CtaWork& w, int start, int tokens) const {
    const int last = min(start + tokens, w.end);
    return start < first(w, 0) || start < first(w, 1) || last > end(w, 0) || last > end(w, 1);
  }
};
template <class Variant>
VXQA_DEVICE LaneRowLimits lane_row_limits(const DecodeKernelArgs& a, const CtaWork& w, int row0, int row1) {
  uint32_t packed = 0u;
  const int rows[2] = {row0, row1};
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    if (rows[c] >= w.heads) continue;
    const QueryRow row = query_row<true, Variant>(a, w, rows[c]);
    const int end_delta = w.end - min(w.end, row.end), first_delta = row.first - w.first;
    packed |= uint32_t(min(max(end_delta, 0), 255)) << (8 * c);
    packed |= uint32_t(min(max(first_delta, 0), 255)) << (16 + 8 * c);
  }
  return LaneRowLimits{packed};
}

// The keys [first, end) every row of the warp's lanes sees.
struct KeysAllRowsSee {
  int first, end;
  // Whether tile [start, start + tokens), up to the chunk's end, holds a key outside them.
  VXQA_DEVICE bool apart_in(const CtaWork& w, int start, int tokens) const {
    return start < first || min(start + tokens, w.end) > end;
  }
};
VXQA_DEVICE KeysAllRowsSee keys_all_rows_see(const CtaWork& w, const LaneRowLimits& rows) {
  int first_delta = int(max((rows.packed >> 16) & 0xffu, rows.packed >> 24));
  int end_delta = int(max(rows.packed & 0xffu, (rows.packed >> 8) & 0xffu));
#pragma unroll
  for (int lanes = 16; lanes > 0; lanes >>= 1) {
    first_delta = max(first_delta, __shfl_xor_sync(0xffffffffu, first_delta, lanes));
    end_delta = max(end_delta, __shfl_xor_sync(0xffffffffu, end_delta, lanes));
  }
  return KeysAllRowsSee{w.first + first_delta, w.end - end_delta};
}

// Fills `w`; false when the CTA has nothing to do. A bad length: with one chunk flagged here
// and its outputs written as NaN; with several, the combine does both.
template <class Config>
VXQA_DEVICE bool find_cta_work(const DecodeKernelArgs& a, CtaWork& w);

// Element `index` of the output, rounded from fp32 to its type.
template <ActType kOut>
VXQA_DEVICE void store_out(const DecodeKernelArgs& a, int64_t index, float value) {
  static_cast<uint16_t*>(a.out)[index] = detail::float_to_act<kOut>(value);
}

// The tiles of stream `warp` of `streams` (default: one a warp) inside [begin, end): tile j
// starts at begin + (warp + j * streams) * T.
template <int kTileTokens, int kWarps>
struct WarpTiles {
  int begin, end, warp, streams, count;
  VXQA_DEVICE WarpTiles(int b, int e, int w, int n = kWarps) : begin(b), end(e), warp(w), streams(n), count(0) {
    const int cta_tiles = end > begin ? (end - begin + kTileTokens - 1) / kTileTokens : 0;
    count = cta_tiles > warp ? (cta_tiles - warp + streams - 1) / streams : 0;
  }
  VXQA_DEVICE int start(int j) const { return begin + (warp + j * streams) * kTileTokens; }
  VXQA_DEVICE int valid_rows(int j) const {
    if (j >= count) return 0;
    const int n = end - start(j);
    return n < kTileTokens ? n : kTileTokens;
  }
  // Byte offset of this lane's token row of tile j (lanes < kTileTokens; 0 where there is
  // none: the block table past a sequence's last page is never read). With kCheck, a page
  // id outside [0, num_pages) sets `bad_page` and gives an offset inside the pool.
  template <bool kCheck, class Sequence>
  VXQA_DEVICE int64_t lane_row_offset(const Sequence& seq, int j, int num_pages, bool& bad_page) const {
    const int lane = threadIdx.x & 31;
    if (lane >= valid_rows(j)) return 0;
    const uint32_t token = uint32_t(start(j) + lane);
    if constexpr (kCheck) {
      return seq.checked_row_offset(token, num_pages, bad_page);
    } else {
      return seq.row_offset(token);
    }
  }
};

// The page size the paged view gets: the Config's constant, or the divisor the host prepared.
template <int kPageSize>
VXQA_DEVICE PageSize<kPageSize> cta_page_size(const DecodeKernelArgs& a) {
  if constexpr (kPageSize == 0) {
    return a.page_divmod;
  } else {
    return PageSize<kPageSize>();
  }
}

// The chunk's slot of a row in the partials (several chunks).
VXQA_DEVICE int64_t partial_slot(const DecodeKernelArgs& a, const CtaWork& w, const QueryRow& row) {
  return (int64_t(row.slot_row) * (a.num_kv_heads * a.group_size) + row.q_head) * a.num_chunks + w.chunk;
}

// The head's LSE (one chunk, when asked for), or the chunk's partial LSE and error word,
// from its merged base-2 m and l (the sum of P). `sink_folded`: one chunk's (m, l) hold a
// sink (AttentionVariant::fold_sink), which is the LSE even without a token; a sink of -inf
// (a head without one) leaves l = 0 there, and the LSE -inf as without sinks.
VXQA_DEVICE void store_head_stats(const DecodeKernelArgs& a, const CtaWork& w, const QueryRow& row, float m,
                                  float l, bool bad_page, bool sink_folded = false) {
  const float nan = quiet_nan();
  if (a.num_chunks == 1) {
    if (a.lse) {
      const float lse = bad_page ? nan : !w.live() && (!sink_folded || l == 0.f) ? negative_infinity()
                                       : l > 0.f ? (m + log2f(l)) * 0.69314718055994531f : nan;
      a.lse[int64_t(row.out_row) * (a.num_kv_heads * a.group_size) + row.q_head] = lse;
    }
  } else {
    const int64_t slot = partial_slot(a, w, row);
    a.partial_lse[slot] = bad_page ? nan : l == 0.f ? negative_infinity() : m + log2f(l);
    // Written whatever its value (the workspace may hold garbage): the combine ORs it in.
    a.chunk_errors[slot] = bad_page ? uint32_t(kDecodeErrorBadPage) : 0u;
  }
}

// Where a merged head's elements go, worked out once a head by a merge that writes many of
// them (the SM80 CTA's): an element then costs a multiply, a select and a store, with no
// division and no address arithmetic. `scale` = 1 / l (times the V scale with one chunk),
// 1 for a chunk's partial whose l is 0, NaN for a bad page; `zero`: the element is 0
// whatever o is (one chunk, no token). The values are store_head_result's, but o * (1 / l)
// may differ from o / l in the last bit.
template <int kHeadDim, ActType kOut>
struct HeadRow {
  float* partial;   // several chunks: the chunk's partial O row of the head
  uint16_t* out;    // one chunk: the head's output row
  bool out_pairs;   // the output row is 4-byte aligned: two elements a store
  float scale;
  bool zero;

  VXQA_DEVICE HeadRow(const DecodeKernelArgs& a, const CtaWork& w, const QueryRow& row, float l, float inv_l,
                      bool bad_page)
      : partial(a.partial_o + partial_slot(a, w, row) * kHeadDim),  // used with several chunks only
        out(static_cast<uint16_t*>(a.out) + row.out_row * a.out_batch_stride + row.q_head * a.out_head_stride),
        out_pairs((reinterpret_cast<uintptr_t>(out) & 3) == 0),
        // l = 0 with live tokens: one chunk, o · inf = NaN (0 / 0); a chunk's partial keeps o.
        scale(bad_page ? quiet_nan() : a.num_chunks > 1 && l == 0.f ? 1.f : inv_l),
        zero(!bad_page && a.num_chunks == 1 && !w.live()) {}

  // Elements `dim` (even) and dim + 1 from their unnormalised o; kSplit: a.num_chunks > 1.
  template <bool kSplit>
  VXQA_DEVICE void store_pair(int dim, float o0, float o1) const {
    const float v0 = zero ? 0.f : o0 * scale, v1 = zero ? 0.f : o1 * scale;
    if constexpr (kSplit) {
      *reinterpret_cast<float2*>(partial + dim) = make_float2(v0, v1);
    } else if (out_pairs) {
      *reinterpret_cast<uint32_t*>(out + dim) =
          uint32_t(detail::float_to_act<kOut>(v0)) | uint32_t(detail::float_to_act<kOut>(v1)) << 16;
    } else {
      out[dim] = detail::float_to_act<kOut>(v0);
      out[dim + 1] = detail::float_to_act<kOut>(v1);
    }
  }
};

// Element `dim` of query head `q_head` from the CTA's merged (m, l, o) — base-2 m, l = the
// sum of P, o = the unnormalised output — and at dim 0 the head's stats. With one chunk the
// output, with several the chunk's partial O.
template <int kHeadDim, ActType kOut>
VXQA_DEVICE void store_head_result(const DecodeKernelArgs& a, const CtaWork& w, const QueryRow& row, int dim,
                                   float m, float l, float o, bool bad_page, bool sink_folded = false) {
  const float nan = quiet_nan();
  if (a.num_chunks == 1) {
    // l = 0 with live tokens: every live score was -inf, and o / l = 0 / 0 = NaN.
    const float value = bad_page ? nan : w.live() ? o / l * v_scale_of(a) : 0.f;
    store_out<kOut>(a, row.out_row * a.out_batch_stride + row.q_head * a.out_head_stride + dim, value);
  } else {
    a.partial_o[partial_slot(a, w, row) * kHeadDim + dim] = bad_page ? nan : l == 0.f ? o : o / l;
  }
  if (dim == 0) store_head_stats(a, w, row, m, l, bad_page, sink_folded);
}

// The scores' base-2 scale a Config's CTA applies: the launch's, times what its cache's
// decoded K is short of (KvDecode::factor: 2^8 after E4M3's bit-move, else 1, which folds away).
template <class Config>
VXQA_DEVICE float cta_qk_scale_log2(const DecodeKernelArgs& a) {
  return qk_scale_log2_of(a) * Config::KvDecoder::factor();
}

template <class Config>
VXQA_DEVICE bool find_cta_work(const DecodeKernelArgs& a, CtaWork& w) {
  using Variant = typename Config::Variant;
  constexpr bool kMulti = Config::kMultiToken;
  w.chunk = blockIdx.x;
  w.seq_index = blockIdx.z;
  w.kv_head = blockIdx.y / a.m_tiles;
  w.m_tile = blockIdx.y % a.m_tiles;
  if (w.seq_index >= a.batch) return false;
  w.queries = seq_queries<kMulti>(a, w.seq_index);
  if (kMulti) {
    w.row0 = w.m_tile * a.rows_per_cta;
    w.heads = min(a.rows_per_cta, a.group_size * (w.queries.valid ? w.queries.count : 0) - w.row0);
    w.q_head0 = w.kv_head * a.group_size;
  } else {
    const int head0 = w.m_tile * Config::kHeadsPerCta;
    w.row0 = head0;
    w.heads = min(Config::kHeadsPerCta, a.group_size - head0);
    w.q_head0 = w.kv_head * a.group_size + head0;
  }
  const bool single_chunk = a.num_chunks == 1;

  w.len = a.seq_lens[w.seq_index];
  // A bad length, or (q_indptr) fewer keys than query tokens: the tokens are the sequence's last.
  const bool valid =
      length_is_valid(w.len, a) && (!kMulti || (w.queries.valid && (!a.q_indptr || w.queries.count <= w.len)));
  if (!valid) {
    if (single_chunk) {  // with several chunks the combine flags it (and writes the NaNs)
      if (threadIdx.x == 0) atomicOr(a.errors, uint32_t(kDecodeErrorBadLength));
      const int rows = w.queries.valid ? w.heads : 0;  // a bad query count: its rows are not trusted
      for (int i = threadIdx.x; i < rows * Config::kHeadDim; i += Config::kThreads) {
        const QueryRow row = query_row<kMulti, Variant>(a, w, i / Config::kHeadDim);
        store_out<Config::kQo>(a, row.out_row * a.out_batch_stride + row.q_head * a.out_head_stride + i % Config::kHeadDim,
                               quiet_nan());
        if (i % Config::kHeadDim == 0 && a.lse)
          a.lse[int64_t(row.out_row) * (a.num_kv_heads * a.group_size) + row.q_head] = quiet_nan();
      }
    }
    return false;
  }
  if (w.heads <= 0) return false;  // rows past the sequence's query tokens
  const int queries = kMulti ? w.queries.count : 1;
  w.first = Variant::first_key(a, w.len, queries);
  w.begin = Variant::chunk_base(a, w.len, queries) + w.chunk * a.chunk_tokens;
  w.end = min(w.begin + a.chunk_tokens, w.len);
  return single_chunk || w.begin < w.len;  // a chunk past the end: the combine never reads it
}
#endif

}  // namespace vxqa
