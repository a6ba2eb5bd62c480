// decode_family.cuh — decode_family<HeadDim, Kv>: vxqa::Decoder's choice among the Configs
// of DefaultDecoderConfigs with that head dim and cache type (both q/out types). The Decoder
// filters by head dim, cache and q/out type before it looks at the page size, so choosing within the family chooses as the whole list
// would. The plan comes from the step's shapes and the workspace from the caller (torch's
// caching allocator), so nothing here is illegal inside a CUDA-graph capture.
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

// The Configs of List with head dim D and cache type Kv, in List's order.
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
vxqa::Status decode_family(const vxqa::DecodeParams& params, int max_context, const WorkspaceFn& workspace,
                           cudaStream_t stream) {
  using Decoder = vxqa::Decoder<typename Family<vxqa::DefaultDecoderConfigs, HeadDim, Kv>::type>;
  vxqa::DecoderShape shape;
  shape.head_dim = HeadDim;
  shape.cache_type = Kv;
  shape.page_size = params.page_size;
  shape.num_kv_heads = params.num_kv_heads;
  shape.group_size = params.group_size;
  shape.max_batch = params.batch;
  shape.max_context = max_context;
  shape.qo_type = params.qo_type;
  typename Decoder::Choice choice;
  const vxqa::Status chosen = Decoder::choose(shape, &choice);
  if (!chosen.ok()) return chosen;
  void* ws = workspace(choice.plan.workspace_bytes);
  return Decoder::decode_with(choice, params, ws, choice.plan.workspace_bytes, stream);
}

}  // namespace vxqa_torch

// The explicit instantiation each decode_d*_*.cu makes.
#define VXQA_TORCH_DECODE_FAMILY(D, KV)                                                                    \
  template vxqa::Status vxqa_torch::decode_family<D, vxqa::KvType::KV>(                                   \
      const vxqa::DecodeParams&, int, const vxqa_torch::WorkspaceFn&, cudaStream_t)
