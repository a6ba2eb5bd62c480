// vxqa/api/append_kv.cuh — write this step's new K and V into the paged cache that decode
// reads, with the contract serving engines already use (vLLM's reshape_and_cache_flash):
//
//   AppendKvParams p;          // key/value [num_tokens, Hkv, D], slot_mapping, the cache
//   append_kv(p, stream);      // then decode<Config>(...) reads the new rows
//
// slot_mapping[t] = page * page_size + offset places token t; -1 skips it. A slot outside
// [-1, num_pages * page_size) is never written: it sets kAppendErrorBadSlot in `errors`
// (when given) and the token is skipped. The cache is logical [num_pages, page_size, Hkv, D]
// with any strides (elements), K and V sharing them, exactly as DecodeParams describes it.
// Stored = x / scale, rounded to nearest even in the cache's type: E5M2 saturates to
// ±57344, E4M3 to ±448 with every NaN -> 0x7F (both cuda_fp8.h's __NV_SATFINITE, bit for
// bit), fp16 as __float2half_rn, bf16 overflows to ±inf like fp16 (a bf16 cache is read by
// the SM80 body only). With scale 1 an fp16 input into an fp16 cache, or a bf16 input into
// a bf16 cache, keeps every value bit for bit, -0 and subnormals included; a NaN stays a
// NaN but not its bits: the fp32 division gives the GPU's canonical NaN, stored as 0x7FFF
// in either type. Input strides are >= 0; cache strides may be negative, as in
// DecodeParams. Never synchronises; graph-capturable.
#pragma once
#include <cuda_runtime.h>
#include <algorithm>
#include <vxqa/api/append_kv_params.cuh>
#include <vxqa/kernel/append_kv_kernel.cuh>

namespace vxqa {

namespace detail {

// The writer for one input type and a cache type that validate_append_kv accepted.
template <ActType kAct>
const void* append_kv_kernel_for(KvType cache) {
  switch (cache) {
    case KvType::kE5M2: return reinterpret_cast<const void*>(&append_kv_kernel<kAct, KvType::kE5M2>);
    case KvType::kE4M3: return reinterpret_cast<const void*>(&append_kv_kernel<kAct, KvType::kE4M3>);
    case KvType::kFp16: return reinterpret_cast<const void*>(&append_kv_kernel<kAct, KvType::kFp16>);
    case KvType::kBf16: return reinterpret_cast<const void*>(&append_kv_kernel<kAct, KvType::kBf16>);
    case KvType::kUnset: break;  // refused by validate_append_kv
  }
  return nullptr;
}

}  // namespace detail

inline Status append_kv(const AppendKvParams& p, cudaStream_t stream) {
  const Status status = validate_append_kv(p);
  if (!status.ok() || p.num_tokens == 0) return status;
  const AppendKvArgs a{p.key,         p.value,         p.key_token_stride, p.key_head_stride, p.value_token_stride,
                       p.value_head_stride, p.slot_mapping, p.num_tokens,    p.num_kv_heads,    p.head_dim,
                       static_cast<uint8_t*>(p.k_cache), static_cast<uint8_t*>(p.v_cache), p.page_stride,
                       p.token_stride,  p.head_stride,   p.page_size,       int64_t(p.num_pages) * p.page_size,
                       p.k_scale,       p.v_scale,       p.k_scale_ptr,     p.v_scale_ptr,     p.errors};
  const int64_t pieces = int64_t(p.num_tokens) * p.num_kv_heads * (p.head_dim / 8);
  const int blocks = int(std::min<int64_t>((pieces + kAppendThreads - 1) / kAppendThreads, 4 * 65535));
  void* args[] = {const_cast<AppendKvArgs*>(&a)};
  const void* kernel = p.input_type == ActType::kBf16 ? detail::append_kv_kernel_for<ActType::kBf16>(p.cache_type)
                                                      : detail::append_kv_kernel_for<ActType::kFp16>(p.cache_type);
  const cudaError_t err = cudaLaunchKernel(kernel, dim3(blocks), dim3(kAppendThreads), args, 0, stream);
  if (err != cudaSuccess) return Status::cuda("append_kv_kernel launch", cudaGetErrorString(err));
  return Status();
}

}  // namespace vxqa
