// Must NOT compile: a bf16 cache on the SM70 atom, whose m8n8k4 has no bf16 form (the SM80
// body's bf16 MMA is sm_80+). config.cuh's static_assert says so, and the ctest
// compile_fail.bf16_cache_sm70_atom looks for its words.
#include <vxqa/kernel/config.cuh>

using Sm70Bf16 = vxqa::DecodeConfig<128, vxqa::KvType::kBf16, vxqa::opt::QoType<vxqa::ActType::kBf16>,
                                    vxqa::opt::Atom<vxqa::MmaAtom::kSm70>>;

// Odr-uses a derived constant, so the class (and its static_asserts) is instantiated.
const int* sm70_bf16_threads() { return &Sm70Bf16::kThreads; }
