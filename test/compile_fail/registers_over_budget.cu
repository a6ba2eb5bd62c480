// Must NOT compile: DecodeConfig<256, kE5M2, opt::Sm70Stages<2>> stages two 8 KB pieces (64
// registers a lane each) next to 64 O accumulators: 192 registers, which spills on SM70
// (measured with CUDA 11.8: 16-byte stack frame). config.cuh's static_assert says so, and
// the ctest compile_fail.registers_over_budget looks for its words.
#include <vxqa/kernel/config.cuh>

using OverBudget = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::Sm70Stages<2>>;

// Odr-uses a derived constant, so the class (and its static_asserts) is instantiated.
const int* over_budget_registers() { return &OverBudget::kStagedRegisters; }
