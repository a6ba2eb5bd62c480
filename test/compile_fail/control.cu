// Must compile, with the same command as smem_over_budget.cu (ctest compile_fail.control):
// proves that the compile-fail test fails for its static_assert, not for a broken command.
//
// DecodeConfig<256, kFp16, opt::Warps<5>> is the largest fp16 D256 config within 96 KB (95424 B), the
// E5M2 one fits 8 warps (84608 B).
#include <vxqa/kernel/config.cuh>

using LargestFp16 = vxqa::DecodeConfig<256, vxqa::KvType::kFp16, vxqa::opt::Warps<5>>;
using FullE5m2 = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::Warps<8>>;

static_assert(LargestFp16::kSmemBytes == 95424, "D256 fp16, 5 warps");
static_assert(FullE5m2::kSmemBytes == 84608, "D256 E5M2, 8 warps");

const int* largest_fp16_smem_bytes() { return &LargestFp16::kSmemBytes; }
const int* full_e5m2_smem_bytes() { return &FullE5m2::kSmemBytes; }
