// vxqa/vxqa.cuh — the umbrella header: every public piece of vxqa. The float64 reference
// and the random problems of the tests are not part of it: they are vxqa::testing
// (testing/include/vxqa/testing/).
#pragma once
#include <vxqa/common.cuh>
#include <vxqa/numeric/e5m2.cuh>
#include <vxqa/numeric/fast_divmod.cuh>
#include <vxqa/paged/paged_kv.cuh>
#include <vxqa/mma/fragments.cuh>
#include <vxqa/pipeline/smem_layout.cuh>
#include <vxqa/kernel/config.cuh>
#include <vxqa/kernel/split_plan.cuh>
#if !defined(__CUDACC_RTC__)
#include <vxqa/api/append_kv.cuh>
#include <vxqa/api/decode.cuh>
#include <vxqa/api/decoder.cuh>
#endif
