// Must NOT compile: one option given twice (which would win is not for the reader to guess).
// config.cuh's static_assert says so, and the ctest compile_fail.option_twice looks for its
// words.
#include <vxqa/kernel/config.cuh>

using Twice = vxqa::DecodeConfig<128, vxqa::KvType::kE5M2, vxqa::opt::Warps<2>, vxqa::opt::PageSize<16>,
                                 vxqa::opt::Warps<4>>;

// Odr-uses a derived constant, so the class (and its static_asserts) is instantiated.
const int* twice_threads() { return &Twice::kThreads; }
