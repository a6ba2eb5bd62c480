// vxqa's KV writer, compiled by nvcc away from the torch headers.
#include <vxqa/api/append_kv.cuh>
#include "launch.h"

vxqa::Status vxqa_torch::run_append_kv(const vxqa::AppendKvParams& params, cudaStream_t stream) {
  return vxqa::append_kv(params, stream);
}
