// vxqa/kernel/attention_variant.cuh — what a Config's variant changes in the score path: a
// mask (the sliding window), a score modifier (the logit soft-cap), and one more term of
// the softmax denominator (attention sinks). Both CTA bodies and the combine call it at the
// same points:
//   - find_cta_work: which tokens a sequence's chunks cover (chunk_base, first_key);
//   - the score of each (head, token): score();
//   - where a head's (m, l) becomes O and LSE, once per head (fold_sink): the one-chunk
//     write of both bodies, or the combine.
// A flag compiled in may still be off at run time (window 0, soft-cap 0, no sinks), so that
// one Config serves every layer of a model; the plain variant (no flag) compiles to the
// score path of a Config without a variant, instruction for instruction (sass.phases'
// baseline checks this).
#pragma once
#include <vxqa/arch/fast_float.cuh>
#include <vxqa/common.cuh>
#include <vxqa/kernel/decode_args.cuh>
#include <vxqa/kernel/split_plan.cuh>

namespace vxqa {

// The flags of opt::Variant, or-ed: opt::Variant<kSlidingWindow | kAttentionSinks>.
enum VariantFlag : unsigned {
  kSlidingWindow = 1u,   // DecodeParams::sliding_window
  kLogitSoftCap = 2u,    // DecodeParams::logit_softcap
  kAttentionSinks = 4u,  // DecodeParams::sinks
};
inline constexpr unsigned kAllVariantFlags = kSlidingWindow | kLogitSoftCap | kAttentionSinks;

template <unsigned kFlags>
struct AttentionVariant {
  static_assert((kFlags & ~kAllVariantFlags) == 0u,
                "AttentionVariant: flags are kSlidingWindow, kLogitSoftCap and kAttentionSinks");
  static constexpr unsigned kVariantFlags = kFlags;
  static constexpr bool kWindow = (kFlags & kSlidingWindow) != 0u;
  static constexpr bool kSoftCap = (kFlags & kLogitSoftCap) != 0u;
  static constexpr bool kSinks = (kFlags & kAttentionSinks) != 0u;

  // The first key the first of the `queries` last tokens of a sequence of `len` tokens sees
  // (that token sees keys up to len - queries), and where its chunks start (chunk c covers
  // [chunk_base + c · chunk_tokens, ...)): 0 without a window.
  VXQA_HD static int first_key(const DecodeKernelArgs& a, int len, int queries = 1) {
    if constexpr (kWindow) {
      const int end = len - queries + 1;
      return a.window > 0 && end > a.window ? end - a.window : 0;
    } else {
      return 0;
    }
  }
  VXQA_HD static int chunk_base(const DecodeKernelArgs& a, int len, int queries = 1) {
    return first_key(a, len, queries) / kWindowChunkAlign * kWindowChunkAlign;
  }

#if VXQA_IS_CUDA_COMPILER
  // What a CTA works out once for its scores: the factor from a raw q·k to a base-2 logit
  // (soft-cap on: to s / cap) and the first key its query sees. The cap itself is read from
  // the params where a score uses it, a constant-bank operand rather than a register held
  // through the main loop (held, it made ptxas 11.8 spill in the 6-warp multi-token Config).
  struct Scores {
    float scale;
    int first;
  };
  VXQA_DEVICE static Scores prepare(const DecodeKernelArgs& a, float qk_scale_log2, int first) {
    Scores v{qk_scale_log2, first};
    if constexpr (kSoftCap) {
      if (a.softcap_log2 > 0.f) v.scale = qk_scale_log2 / a.softcap_log2;
    }
    return v;
  }

  // The base-2 logit of raw product `s` of key `token`, or -inf where it is masked:
  // `live` (the body's test: the token is before the sequence's end) and the window.
  // Soft-cap: cap · log2(e) is a.softcap_log2, 0 when it is off at run time.
  VXQA_DEVICE static float score(const DecodeKernelArgs& a, const Scores& v, float s, bool live, int token) {
    if constexpr (kWindow) live = live && token >= v.first;
    float x = s * v.scale;
    if constexpr (kSoftCap) {
      if (a.softcap_log2 > 0.f) x = a.softcap_log2 * tanh_within_2e21(x);
    }
    return live ? x : negative_infinity();
  }

  // tanh |x| = 1 − 2 / (e^(2|x|) + 1), from ex2 and a fast division: within about 2^-21 of
  // tanh x absolutely (testing/error_model.h counts cap · 2^-20 a score). NaN stays NaN;
  // ±inf gives ±1. The exponent is >= 0, so ex2.approx.ftz is exp2f without its subnormal
  // rescale (four instructions a score fewer, the same result).
  VXQA_DEVICE static float tanh_within_2e21(float x) {
    const float e = arch::exp2_ftz(2.8853900817779268f * fabsf(x));  // e^(2|x|)
    return copysignf(1.f - __fdividef(2.f, e + 1.f), x);
  }

  // Query head `q_head`'s sink as a base-2 logit; -inf without one.
  VXQA_DEVICE static float sink_log2(const DecodeKernelArgs& a, int q_head) {
    if constexpr (kSinks) {
      if (a.sinks) return a.sinks[q_head] * 1.4426950408889634f;
    }
    return negative_infinity();
  }

  // Adds a sink of base-2 logit `sink` to a head's merged base-2 (m, l): m becomes the max
  // of both, l the sum in that frame, and the result is the factor the head's O (in the
  // old frame) takes. A sink of -inf adds nothing (l = 0 stays 0: every score -inf is still
  // 0 / 0); NaN makes everything NaN.
  VXQA_DEVICE static float fold_sink(float sink, float& m, float& l) {
    const float m_new = (m > sink || m != m) ? m : sink;
    const float factor = m_new == negative_infinity() ? 1.f : exp2f(m - m_new);
    const float sink_weight = sink == negative_infinity() ? 0.f : exp2f(sink - m_new);
    l = l * factor + sink_weight;
    m = m_new;
    return factor;
  }
#endif
};

using PlainAttention = AttentionVariant<0u>;

}  // namespace vxqa
