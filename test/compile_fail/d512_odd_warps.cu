// Must NOT compile: head dim 512 with an odd number of warps. Two warps share each K/V tile
// at 512 (each holds half of O), so the warps come in pairs; config.cuh's static_assert says
// so, and the ctest compile_fail.d512_odd_warps looks for its words.
#include <vxqa/kernel/config.cuh>

using OddWarps = vxqa::DecodeConfig<512, vxqa::KvType::kE5M2, vxqa::opt::Warps<3>>;

// Odr-uses a derived constant, so the class (and its static_asserts) is instantiated.
const int* odd_warps_threads() { return &OddWarps::kThreads; }
