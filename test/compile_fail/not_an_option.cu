// Must NOT compile: an argument after the head dim and the cache type that is not an option
// of vxqa::opt (here a plain int type, as a misremembered positional Warps would be
// spelled). config.cuh's static_assert names the options, and the ctest
// compile_fail.not_an_option looks for its words.
#include <vxqa/kernel/config.cuh>

struct NotAnOption {};
using Misspelled = vxqa::DecodeConfig<128, vxqa::KvType::kE5M2, NotAnOption>;

// Odr-uses a derived constant, so the class (and its static_asserts) is instantiated.
const int* misspelled_threads() { return &Misspelled::kThreads; }
