// launch.h — the seam between the torch-side translation units (g++, torch headers) and
// the ones that compile vxqa's kernels (nvcc, no torch headers, one per Config family so
// the build parallelises). Only host-usable vxqa headers here.
#pragma once
#include <cuda_runtime_api.h>
#include <cstddef>
#include <string>
#include <vxqa/api/append_kv_params.cuh>
#include <vxqa/api/params.cuh>
#include <vxqa/kernel/config.cuh>

namespace vxqa_torch {

// What vxqa::Decoder::choose picked within the family of shape.head_dim and
// shape.cache_type: a Config (an index into that family's list) and its plan.
struct Choice {
  int index = -1;
  vxqa::DecodePlan plan{};
};

// The most query tokens a sequence that the torch ops take (DecodePlan(max_q_len=...), the
// ops' max_q_len): the opt::MaxQueryLen of vxqa::DefaultDecoderConfigs' multi-token Configs,
// which decode_family.cuh checks each family has, for each q type its cache takes.
inline constexpr int kMaxQueryLen = 16;

// vxqa::DecoderShape's fields (decoder.cuh holds kernels, so it stays out of the g++ side).
struct Shape {
  int head_dim = 0;
  vxqa::KvType cache_type = vxqa::KvType::kUnset;
  vxqa::ActType qo_type = vxqa::ActType::kFp16;
  int page_size = 0, num_kv_heads = 0, group_size = 0, max_batch = 0, max_context = 0;
  // The attention variant the steps may use (vxqa::VariantFlag bits: 1 sliding window, 2
  // logit soft-cap, 4 sinks; 0 plain: a Config without a variant) and, with the window, the
  // largest window a step gives (> 0: the plan's chunks cover max_window + 15 keys; 0: any).
  unsigned variant = 0;
  int max_window = 0;
  // The most query tokens a sequence has in a step (1: one, q without q_indptr; > 1: a
  // multi-token Config, opt::MaxQueryLen >= it, and a workspace for max_batch * max_q_len rows).
  int max_q_len = 1;
};

// vxqa::Decoder::choose over the Configs of vxqa::DefaultDecoderConfigs with the shape's head
// dim and cache type (asks the current device: SMs, occupancy). Allocates nothing.
vxqa::Status choose_decode(const Shape& shape, Choice* choice);

// One decode step of a choice made by choose_decode for (head_dim, cache_type), with the
// caller's workspace: vxqa::Decoder::decode_with, which validates `params` against the
// chosen Config and the plan, then launches. No device query, no allocation, no sync.
vxqa::Status decode_with(int head_dim, vxqa::KvType cache_type, const Choice& choice,
                         const vxqa::DecodeParams& params, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream);

// The chosen Config's name, e.g. "D128 e5m2 fp16 W4 page16" or "D128 bf16 bf16 W4 page*" (empty
// for a bad choice).
std::string config_name(int head_dim, vxqa::KvType cache_type, const Choice& choice);

// The per-family pieces of the three above (decode_family.cuh; each family is instantiated
// in its own decode_d*_*.cu).
template <int HeadDim, vxqa::KvType Kv>
struct DecodeFamily {
  static vxqa::Status choose(const Shape& shape, Choice* choice);
  static vxqa::Status decode_with(const Choice& choice, const vxqa::DecodeParams& params, void* workspace,
                                  size_t workspace_bytes, cudaStream_t stream);
  static std::string config_name(const Choice& choice);
};

// vxqa::append_kv (append_kv_launch.cu).
vxqa::Status run_append_kv(const vxqa::AppendKvParams& params, cudaStream_t stream);

}  // namespace vxqa_torch
