// launch.h — the seam between the torch-side translation units (g++, torch headers) and
// the ones that compile vxqa's kernels (nvcc, no torch headers, one per Config family so
// the build parallelises). Only host-usable vxqa headers here.
#pragma once
#include <cuda_runtime_api.h>
#include <cstddef>
#include <functional>
#include <vxqa/api/append_kv_params.cuh>
#include <vxqa/api/params.cuh>
#include <vxqa/kernel/config.cuh>

namespace vxqa_torch {

// Returns a device buffer of at least `bytes`, 256-byte aligned, valid until the launch
// has been enqueued (the caller keeps it alive on the launch's stream).
using WorkspaceFn = std::function<void*(size_t bytes)>;

// One decode step with the Config of vxqa::DefaultDecoderConfigs that vxqa::Decoder would
// choose for `params` (batch = the plan's max_batch) and `max_context`; the workspace comes
// from `workspace`. Never synchronises.
vxqa::Status run_decode(const vxqa::DecodeParams& params, vxqa::KvType cache_type, int max_context,
                        const WorkspaceFn& workspace, cudaStream_t stream);

// The same for the Configs of one head dim and cache type (decode_family.cuh; each is
// instantiated in its own decode_d*_*.cu).
template <int HeadDim, vxqa::KvType Kv>
vxqa::Status decode_family(const vxqa::DecodeParams& params, int max_context, const WorkspaceFn& workspace,
                           cudaStream_t stream);

// vxqa::append_kv (append_kv_launch.cu).
vxqa::Status run_append_kv(const vxqa::AppendKvParams& params, cudaStream_t stream);

}  // namespace vxqa_torch
