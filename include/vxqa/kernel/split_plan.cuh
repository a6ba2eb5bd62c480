// vxqa/kernel/split_plan.cuh — how a decode step is cut into CTAs, decided once at setup
// from capacity (max batch, max context), never from this step's lengths: the same grid
// serves every step, so one launch can be captured in a CUDA graph and replayed while the
// sequences grow. CTAs whose chunk lies past their sequence's end exit at once.
#pragma once
#include <vxqa/common.cuh>

namespace vxqa {

struct DecodePlan {
  int max_batch = 0;
  int max_context = 0;
  int num_kv_heads = 0;
  int group_size = 0;
  int chunk_tokens = 0;  // split-KV chunk; a multiple of the Config's kChunkMultiple
  int num_chunks = 0;    // ceil(plan_span / chunk_tokens); 1 = no combine step
  size_t workspace_bytes = 0;
  // > 0: every step's sliding window is 1..max_window tokens, and the chunks cover only
  // the keys a window can reach (plan_span); 0: any window, chunks over max_context.
  int max_window = 0;
  // The most query tokens a sequence may have in a step (1: decode; up to the Config's
  // opt::MaxQueryLen): the workspace holds partials for max_batch * max_q_len rows.
  int max_q_len = 1;
};

// A window's chunks start at the multiple of this many tokens at or below its first key,
// so that the SM80 body's 16-token tiles stay aligned to pages of a multiple of 16.
inline constexpr int kWindowChunkAlign = 16;

// The keys a step may read of one sequence, which the plan's chunks cover: max_context, or
// with a window of at most max_window keys, those and up to kWindowChunkAlign - 1 before
// them (a window's chunks start 16-aligned: kernel/attention_variant.cuh), and with up to
// max_q_len query tokens the max_q_len - 1 keys by which the first token's window starts
// earlier than the last's.
VXQA_HD int plan_span(int max_context, int max_window, int max_q_len = 1) {
  const int64_t window_span = int64_t(max_window) + (max_q_len - 1) + kWindowChunkAlign - 1;
  return max_window > 0 && window_span < max_context ? int(window_span) : max_context;
}

// Workspace: [error word, padded to 256 B][partial LSE][CTA error words][partial O], each
// area padded to 256 B. With several chunks there is one slot a (row, query head, chunk),
// a row being (sequence, query token): max_batch · max_q_len of them. A slot holds its partial LSE, the ErrorBit bits of the CTA that computed it (the combine ORs
// them into the error word, so that the step needs no memset before it) and its partial O.
// One chunk: only the error word.
struct WorkspaceLayout {
  size_t partial_lse, chunk_errors, partial_o, bytes;  // byte offsets, and the total
};
VXQA_HD WorkspaceLayout workspace_layout(int max_rows, int q_heads, int num_chunks, int head_dim) {
  const size_t slots = num_chunks > 1 ? size_t(max_rows) * q_heads * num_chunks : 0;
  const size_t words = (slots * 4 + 255) / 256 * 256;  // one 4-byte word a slot, padded
  WorkspaceLayout w;
  w.partial_lse = 256;
  w.chunk_errors = w.partial_lse + words;
  w.partial_o = w.chunk_errors + words;
  w.bytes = w.partial_o + slots * head_dim * 4;
  return w;
}
VXQA_HD size_t plan_workspace_bytes(int max_rows, int q_heads, int num_chunks, int head_dim) {
  return workspace_layout(max_rows, q_heads, num_chunks, head_dim).bytes;
}

// The combine's slice width for a plan (kernel/combine_kernel.cuh): 64 dims (4 chunk
// streams a CTA) up to kCombineNarrowAbove chunks; past it 16 dims, 16 streams and 4x the
// CTAs, so that a long sequence's chunks are read by more threads at once (each stream's
// loads wait on one another in groups of 4). Measured in docs/performance.md: 16-dim slices
// win at 256 chunks, tie at 67, lose at 17 and fewer.
inline constexpr int kCombineNarrowAbove = 32;
VXQA_HD constexpr int combine_slice_dims(int num_chunks) { return num_chunks > kCombineNarrowAbove ? 16 : 64; }

// The kernels compute a chunk's end as begin + chunk_tokens in int, with begin below
// max_context: that must not wrap.
VXQA_HD bool chunk_end_fits(int max_context, int chunk_tokens) {
  return int64_t(max_context) + chunk_tokens <= int64_t(0x7fffffff);
}

// The chunk: the largest multiple of cta_tokens, at most 64 of them, that still gives at
// least `target_ctas` CTAs at full capacity (or the smallest multiple when none does).
// `min_multiple` (>= 1) keeps chunks at least that many CTA rounds long.
VXQA_HD int choose_chunk_tokens(int max_batch, int max_context, int head_tiles, int cta_tokens,
                                int target_ctas, int min_multiple = 1) {
  int best = min_multiple * cta_tokens;
  for (int multiple = min_multiple; multiple <= 64; ++multiple) {
    const int chunk = multiple * cta_tokens;
    const long long chunks = (static_cast<long long>(max_context) + chunk - 1) / chunk;
    if (chunks * max_batch * head_tiles >= target_ctas) best = chunk;
    if (chunk >= max_context) break;
  }
  return best;
}

// The chunk for a grid of `slots` resident CTAs (the SM80 path's plan): with every sequence
// taken as max_context long, a step lasts ceil(CTAs / slots) waves of one chunk each plus
// a CTA's own ramp and tail (about one CTA round of tokens), so the chunk that minimises
// waves x (chunk + cta_tokens), the larger on ties (fewer partials to combine): a multiple
// of cta_tokens, at least min_multiple and at most 64 of them. Unlike choose_chunk_tokens
// it does not overshoot a wave: TP1 (B16 x 16K, 64 CTAs a chunk, 264 slots) gets 4096-token
// chunks, 256 CTAs, where that rule gives 3968, 320 CTAs (docs/performance.md).
// Counts are doubles: exact below 2^53, and no overflow for any int inputs (slots < 1 counts
// as 1).
VXQA_HD int choose_wave_chunk_tokens(int max_batch, int max_context, int head_tiles, int cta_tokens, int slots,
                                     int min_multiple = 1) {
  int best = min_multiple * cta_tokens;
  double best_cost = -1;
  for (int multiple = min_multiple; multiple <= 64; ++multiple) {
    const int chunk = multiple * cta_tokens;
    const double chunks = double((static_cast<long long>(max_context) + chunk - 1) / chunk);
    const double waves = ceil(chunks * max_batch * head_tiles / (slots < 1 ? 1 : slots));
    const double cost = waves * (double(chunk) + cta_tokens);
    if (best_cost < 0 || cost <= best_cost) {
      best = chunk;
      best_cost = cost;
    }
    if (chunk >= max_context) break;
  }
  return best;
}

// The SM80 plan's chunk (make_decode_plan without sm_count): whole waves of
// `resident_per_sm` CTAs an SM in multiples of `cta_tokens` (the SM80 body's round), at
// least `min_rounds` of them; but where that is only the floor of min_rounds rounds (a
// small capacity), whole waves of one CTA an SM instead, whose chunks are then longer.
// Measured (docs/performance.md, "Short chunks"): B1 x 32K 12.5 us in 128 chunks of 256
// tokens against 15.9 in 256 of 128, B16 x 2K 13.0 against 13.7; B16 x 1K keeps 128 (9.3
// against 9.6 with 256).
VXQA_HD int choose_sm80_chunk_tokens(int max_batch, int max_context, int head_tiles, int cta_tokens, int sms,
                                     int resident_per_sm, int min_rounds) {
  const int shared = choose_wave_chunk_tokens(max_batch, max_context, head_tiles, cta_tokens,
                                              sms * resident_per_sm, min_rounds);
  if (resident_per_sm <= 1 || shared > min_rounds * cta_tokens) return shared;
  return choose_wave_chunk_tokens(max_batch, max_context, head_tiles, cta_tokens, sms, min_rounds);
}

}  // namespace vxqa
