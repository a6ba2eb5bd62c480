// decode_family.cuh — DecodeFamily<HeadDim, Kv>: vxqa::Decoder over the Configs of
// DefaultDecoderConfigs with that head dim and cache type (every q/out type the cache takes). The Decoder
// filters by head dim, cache and q/out type before it looks at the page size, so choosing
// within the family chooses as the whole list would. The plan comes from the caller's
// shape and the workspace from the caller (torch), so nothing here allocates, and the
// per-step decode_with is legal inside a CUDA-graph capture.
#pragma once
#include <type_traits>
#include <vxqa/api/decoder.cuh>
#include "launch.h"

namespace vxqa_torch {

template <class Config, class List>
struct Prepend;
template <class Config, class... Configs>
struct Prepend<Config, vxqa::ConfigList<Configs...>> {
  using type = vxqa::ConfigList<Config, Configs...>;
};

// The Configs of List with head dim D and cache type Kv, in List's order: the plain ones,
// the one with every variant flag (opt::Variant<kAllVariantFlags>), which Decoder::choose
// takes when the shape asks for a variant, and the multi-token one (every flag and
// opt::MaxQueryLen<16>), which it takes for max_q_len > 1 or more than 8 rows a KV head.
template <class List, int D, vxqa::KvType Kv>
struct Family {
  using type = vxqa::ConfigList<>;
};
template <class First, class... Rest, int D, vxqa::KvType Kv>
struct Family<vxqa::ConfigList<First, Rest...>, D, Kv> {
  using rest = typename Family<vxqa::ConfigList<Rest...>, D, Kv>::type;
  using type = std::conditional_t<First::kHeadDim == D && First::kKv == Kv, typename Prepend<First, rest>::type, rest>;
};

template <int HeadDim, vxqa::KvType Kv>
using FamilyList = typename Family<vxqa::DefaultDecoderConfigs, HeadDim, Kv>::type;
template <int HeadDim, vxqa::KvType Kv>
using FamilyDecoder = vxqa::Decoder<FamilyList<HeadDim, Kv>>;

// How many Configs of List take q/out type Qo with every variant flag: the ones a plan with
// a variant (vxqa_torch.DecodePlan(sliding_window=..., logit_softcap=True, sinks=True))
// runs on.
template <class List, vxqa::ActType Qo>
struct VariantConfigCount;
template <class... Configs, vxqa::ActType Qo>
struct VariantConfigCount<vxqa::ConfigList<Configs...>, Qo> {
  static constexpr int value =
      (0 + ... + int(Configs::kQo == Qo && Configs::Variant::kVariantFlags == vxqa::kAllVariantFlags));
};

// How many Configs of List take q/out type Qo and up to kMaxQueryLen query tokens a sequence:
// the ones a multi-token plan (vxqa_torch.DecodePlan(max_q_len=N), q_indptr) runs on.
template <class List, vxqa::ActType Qo>
struct MultiTokenConfigCount;
template <class... Configs, vxqa::ActType Qo>
struct MultiTokenConfigCount<vxqa::ConfigList<Configs...>, Qo> {
  static constexpr int value = (0 + ... + int(Configs::kQo == Qo && Configs::kMaxQueryLen >= kMaxQueryLen));
};

// Whether a cache of type Kv takes fp16 q: every one but bf16, whose MMA takes bf16 q as it is
// (bf16 q is taken by every cache).
template <vxqa::KvType Kv>
inline constexpr bool kTakesFp16Q = Kv != vxqa::KvType::kBf16;

template <int HeadDim, vxqa::KvType Kv>
typename FamilyDecoder<HeadDim, Kv>::Choice to_decoder_choice(const Choice& c) {
  typename FamilyDecoder<HeadDim, Kv>::Choice choice;
  choice.index = c.index;
  choice.plan = c.plan;
  return choice;
}

template <int HeadDim, vxqa::KvType Kv>
vxqa::Status DecodeFamily<HeadDim, Kv>::choose(const Shape& s, Choice* choice) {
  static_assert((!kTakesFp16Q<Kv> || VariantConfigCount<FamilyList<HeadDim, Kv>, vxqa::ActType::kFp16>::value >= 1) &&
                    VariantConfigCount<FamilyList<HeadDim, Kv>, vxqa::ActType::kBf16>::value >= 1,
                "the family has no Config with every variant flag for each q type its cache takes (fp16 and "
                "bf16; bf16 only for a bf16 cache): the torch ops' sliding_window, logit_softcap and sinks need "
                "one (vxqa::DefaultDecoderConfigs)");
  static_assert(HeadDim > 256 ||  // multi-token queries stop at 256 (decode_op.cpp refuses q_indptr past it)
                    ((!kTakesFp16Q<Kv> ||
                      MultiTokenConfigCount<FamilyList<HeadDim, Kv>, vxqa::ActType::kFp16>::value >= 1) &&
                     MultiTokenConfigCount<FamilyList<HeadDim, Kv>, vxqa::ActType::kBf16>::value >= 1),
                "the family has no Config taking kMaxQueryLen query tokens a sequence for each q type its cache "
                "takes (fp16 and bf16; bf16 only for a bf16 cache): the torch ops' q_indptr and max_q_len need one "
                "(vxqa::DefaultDecoderConfigs' opt::MaxQueryLen)");
  vxqa::DecoderShape shape;
  shape.head_dim = s.head_dim;
  shape.cache_type = s.cache_type;
  shape.qo_type = s.qo_type;
  shape.page_size = s.page_size;
  shape.num_kv_heads = s.num_kv_heads;
  shape.group_size = s.group_size;
  shape.max_batch = s.max_batch;
  shape.max_context = s.max_context;
  shape.variant = s.variant;
  shape.max_window = s.max_window;
  shape.max_q_len = s.max_q_len;
  typename FamilyDecoder<HeadDim, Kv>::Choice chosen;
  const vxqa::Status status = FamilyDecoder<HeadDim, Kv>::choose(shape, &chosen);
  if (status.ok()) *choice = Choice{chosen.index, chosen.plan};
  return status;
}

template <int HeadDim, vxqa::KvType Kv>
vxqa::Status DecodeFamily<HeadDim, Kv>::decode_with(const Choice& choice, const vxqa::DecodeParams& params,
                                                    void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  return FamilyDecoder<HeadDim, Kv>::decode_with(to_decoder_choice<HeadDim, Kv>(choice), params, workspace,
                                                 workspace_bytes, stream);
}

template <int HeadDim, vxqa::KvType Kv>
std::string DecodeFamily<HeadDim, Kv>::config_name(const Choice& choice) {
  return FamilyDecoder<HeadDim, Kv>::config_name(to_decoder_choice<HeadDim, Kv>(choice));
}

}  // namespace vxqa_torch

// The explicit instantiation each decode_d*_*.cu makes.
#define VXQA_TORCH_DECODE_FAMILY(D, KV) template struct vxqa_torch::DecodeFamily<D, vxqa::KvType::KV>
