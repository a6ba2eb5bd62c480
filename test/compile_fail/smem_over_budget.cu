// Must NOT compile: a DecodeConfig over the 96 KB of shared memory an SM70 CTA can have is
// rejected by config.cuh's static_assert, whose message the ctest
// compile_fail.smem_over_budget looks for ("shared memory over the 96 KB").
//
// DecodeConfig<256, kFp16, opt::Warps<8>>: Q tile 8 x (512 + 16) = 4224 B, plus 8 warps x
// (16384 tile + 1152 S + 640 P + 64 alpha) = 8 x 18240 B: 150144 B > 98304 B.
// (test/cpu/config.cpp checks that arithmetic; control.cu compiles the largest that fits.)
#include <vxqa/kernel/config.cuh>

using OverBudget = vxqa::DecodeConfig<256, vxqa::KvType::kFp16, vxqa::opt::Warps<8>>;

// Odr-uses a derived constant, so the class (and its static_asserts) is instantiated.
const int* over_budget_smem_bytes() { return &OverBudget::kSmemBytes; }
