// Must NOT compile: a bf16 cache with fp16 q/out (the bf16 MMA takes q in bf16, and no
// rounding of q is done behind the caller's back). config.cuh's static_assert says so, and
// the ctest compile_fail.bf16_cache_fp16_q looks for its words.
#include <vxqa/kernel/config.cuh>

using Fp16QBf16Cache = vxqa::DecodeConfig<128, vxqa::KvType::kBf16>;

// Odr-uses a derived constant, so the class (and its static_asserts) is instantiated.
const int* fp16_q_bf16_threads() { return &Fp16QBf16Cache::kThreads; }
