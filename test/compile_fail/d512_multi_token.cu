// Must NOT compile: multi-token queries at head dim 512, whose tiles are already shared by
// the two warps holding the halves of O. config.cuh's static_assert says so, and the ctest
// compile_fail.d512_multi_token looks for its words.
#include <vxqa/kernel/config.cuh>

using MultiD512 = vxqa::DecodeConfig<512, vxqa::KvType::kE5M2, vxqa::opt::MaxQueryLen<4>>;

// Odr-uses a derived constant, so the class (and its static_asserts) is instantiated.
const int* multi_d512_threads() { return &MultiD512::kThreads; }
