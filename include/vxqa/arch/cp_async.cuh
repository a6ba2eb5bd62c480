// vxqa/arch/cp_async.cuh — asynchronous 16-byte global -> shared copies (sm_80 and newer),
// cached in L2 only (.cg: the KV cache is streamed once). The SM70 load pipeline never
// includes this header: pipeline/register_staged_load.cuh static_asserts that.
#pragma once
#include <vxqa/common.cuh>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define VXQA_HAS_CP_ASYNC 1

namespace vxqa {
namespace arch {

// Copies 16 bytes, or writes 16 zero bytes without reading `src` when `read` is false.
VXQA_DEVICE void cp_async_16_or_zero(void* smem_dst, const void* src, bool read) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(read ? 16 : 0));
}

// Closes the group of copies issued since the last commit.
VXQA_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most kPending groups of this thread are still in flight.
template <int kPending>
VXQA_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace arch
}  // namespace vxqa

#else
#define VXQA_HAS_CP_ASYNC 0
#endif
