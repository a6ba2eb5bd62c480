// Which body the device runs, for every Config the GPU suite uses (issue 23: "a GPU test
// asserts which body ran"). decode_kernel<Config> picks its body where it is compiled: the
// SM80 body (mma.m16n8k16, cp.async) in code for compute_80 or newer when the Config's atom
// is MmaAtom::kAuto, else the SM70 body. The host reads which from the kernel's ptxVersion
// (decode_smem_bytes' sm80_body) and sizes shared memory and plans for it. Without sm_80+
// code in the build, every default-atom test on an H200 would quietly run the SM70 body.
// On a device of compute capability 8.0 or newer, for each Config:
//   - decode_kernel<Config>'s code is for compute_80 or newer (cudaFuncGetAttributes:
//     ptxVersion and binaryVersion >= 80), in both binaries: a build without sm_80+ code
//     fails here (in vxqa_gpu_tests_sm70 too, so that its SM70 body is the forced atom's
//     doing, the m8n8k4 emulated on a newer GPU, not that of missing code);
//   - that ptxVersion is what __CUDA_ARCH__ was in device code of this file, compiled as the
//     kernel is (the host's rule reads what the kernel's #if read);
//   - decode_smem_bytes reports sm80_body == true in vxqa_gpu_tests (default atom kAuto) and
//     false in vxqa_gpu_tests_sm70 (VXQA_DEFAULT_MMA_ATOM = kSm70), and that body's shared
//     memory; decode_kernel's dispatch condition, evaluated on the device, picks the same body.
// On an older device the SM80 body cannot run: the cases skip (vxqa_test::skip; a run of
// nothing else exits 77, ctest's Skipped), the second after checking that the SM70 body is
// the one reported. VXQA_SUITE_CONFIGS lists the Configs of test/gpu/*.cu: a test that adds
// one adds it there.
#include "gpu/decode_harness.cuh"
#include "gpu/skip.h"

#include <string>
#include <vector>

namespace {

using vxqa::ActType;
using vxqa::ConvertAt;
using vxqa::DecodeConfig;
namespace opt = vxqa::opt;
using vxqa::KvType;
using vxqa_test::DeviceBuffer;

// The Configs the GPU suite instantiates (each with the build's default atom), and where.
#define VXQA_SUITE_CONFIGS(X)                                                                   \
  /* decode_d64, decode_errors, decode_nonfinite, decoder, pieces, decode_bf16, decode_variants */\
  X(DecodeConfig<64, KvType::kE5M2>)                                                          \
  X(DecodeConfig<64, KvType::kFp16>)                                                          \
  X(DecodeConfig<64, KvType::kE5M2, opt::Convert<ConvertAt::kPublish>>)                       \
  X(DecodeConfig<64, KvType::kE5M2, opt::Sm70Stages<2>>)                                      \
  X(DecodeConfig<64, KvType::kFp16, opt::Sm70Stages<2>>)                                      \
  X(DecodeConfig<64, KvType::kE5M2, opt::PageSize<16>>)                                       \
  X(DecodeConfig<64, KvType::kE5M2, opt::QoType<ActType::kBf16>>)                             \
  X(DecodeConfig<64, KvType::kFp16, opt::PageSize<16>, opt::Variant<vxqa::kAllVariantFlags>>)\
  X(DecodeConfig<64, KvType::kE5M2, opt::Warps<8>, opt::MaxQueryLen<8>>)                     \
  X(DecodeConfig<64, KvType::kE5M2, opt::Warps<6>, opt::MaxQueryLen<8>>)                     \
  /* decode_d128, append_kv, decode_errors, decode_nonfinite, decode_invariants, decoder,    */\
  /* decode_bf16, sanitize_reduced                                                           */\
  X(DecodeConfig<128, KvType::kE5M2>)                                                         \
  X(DecodeConfig<128, KvType::kFp16>)                                                         \
  X(DecodeConfig<128, KvType::kE5M2, opt::Convert<ConvertAt::kPublish>>)                      \
  X(DecodeConfig<128, KvType::kE5M2, opt::Sm70Stages<2>>)                                     \
  X(DecodeConfig<128, KvType::kFp16, opt::Sm70Stages<2>>)                                     \
  X(DecodeConfig<128, KvType::kFp16, opt::Warps<2>>)                                          \
  X(DecodeConfig<128, KvType::kE5M2, opt::PageSize<16>, opt::QoType<ActType::kBf16>>)         \
  X(DecodeConfig<128, KvType::kFp16, opt::QoType<ActType::kBf16>>)                            \
  X(DecodeConfig<128, KvType::kE5M2, opt::Variant<vxqa::kAllVariantFlags>>)                  \
  /* decode_d256, context_reset, decode_invariants, decode_nonfinite, decode_bf16,           */\
  /* sanitize_reduced                                                                        */\
  X(DecodeConfig<256, KvType::kE5M2>)                                                         \
  X(DecodeConfig<256, KvType::kE5M2, opt::PageSize<800>>)                                     \
  X(DecodeConfig<256, KvType::kE5M2, opt::Warps<2>, opt::Convert<ConvertAt::kPublish>>)       \
  X(DecodeConfig<256, KvType::kFp16>)                                                         \
  X(DecodeConfig<256, KvType::kFp16, opt::Warps<2>>)                                          \
  X(DecodeConfig<256, KvType::kE5M2, opt::QoType<ActType::kBf16>>)                             \
  X(DecodeConfig<256, KvType::kE5M2, opt::Variant<vxqa::kSlidingWindow>>)                    \
  /* decode_multi_token                                                                      */\
  X(DecodeConfig<256, KvType::kE5M2, opt::MaxQueryLen<16>, opt::Warps<8>>)                    \
  X(DecodeConfig<256, KvType::kE5M2, opt::Warps<6>, opt::Variant<vxqa::kAllVariantFlags>, opt::MaxQueryLen<16>>)

constexpr vxqa::MmaAtom kDefaultAtom = VXQA_DEFAULT_MMA_ATOM;
// The body this binary must run on sm_80+: the SM80 one unless the build forces the SM70 atom.
constexpr bool kExpectSm80Body = kDefaultAtom == vxqa::MmaAtom::kAuto;
constexpr const char* kVariant = kExpectSm80Body ? "vxqa_gpu_tests (default atom kAuto: the SM80 body on sm_80+)"
                                                 : "vxqa_gpu_tests_sm70 (VXQA_DEFAULT_MMA_ATOM kSm70: the SM70 body)";

int device_major() {
  int device = 0, major = 0;
  VXQA_CUDA_CHECK(cudaGetDevice(&device));
  VXQA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

std::string why_skipped() {
  return "the SM80 body needs sm_80 or newer (this GPU is sm_" + std::to_string(device_major()) +
         "x): which body an sm_80+ device runs is not checked";
}

// decode_kernel's dispatch (kernel/decode_kernel.cuh: `#if __CUDA_ARCH__ >= 800` then
// `if constexpr (Config::kHasSm80Path)` takes the SM80 body), in device code compiled as the
// kernel is: out[0] = __CUDA_ARCH__, out[1] = 80 for the SM80 body, 70 for the SM70 one.
template <class Config>
__global__ void body_probe(int* out) {
#ifdef __CUDA_ARCH__
  int body = 70;
#if __CUDA_ARCH__ >= 800
  if constexpr (Config::kHasSm80Path) body = 80;
#endif
  out[0] = __CUDA_ARCH__;
  out[1] = body;
#endif
}

struct Probe {
  int arch = 0, body = 0;
};

template <class Config>
Probe probe() {
  DeviceBuffer<int> d(2);
  d.poison();  // -1 where the probe wrote nothing
  body_probe<Config><<<1, 1>>>(d.get());
  VXQA_CUDA_CHECK_LAUNCH();
  const std::vector<int> h = d.download();
  return {h[0], h[1]};
}

// The code the device runs for decode_kernel<Config> is for compute_80 or newer.
template <class Config>
void check_code(const char* name) {
  INFO(kVariant << ": " << name);
  REQUIRE(Config::kAtom == kDefaultAtom);
  cudaFuncAttributes a{};
  VXQA_CUDA_CHECK(cudaFuncGetAttributes(&a, vxqa::decode_kernel<Config>));
  const Probe p = probe<Config>();
  INFO("decode_kernel: ptxVersion " << a.ptxVersion << ", binaryVersion " << a.binaryVersion
                                    << "; __CUDA_ARCH__ of this file's device code " << p.arch);
  REQUIRE(a.ptxVersion >= 80);
  REQUIRE(a.binaryVersion >= 80);
  REQUIRE(p.arch == 10 * a.ptxVersion);
}

// decode_smem_bytes and the kernel's dispatch both say `sm80` of decode_kernel<Config>.
template <class Config>
void check_body(const char* name, bool sm80) {
  INFO(kVariant << ": " << name << ", expecting the " << (sm80 ? "SM80" : "SM70") << " body");
  REQUIRE(Config::kAtom == kDefaultAtom);
  int bytes = 0;
  bool sm80_body = !sm80;
  const vxqa::Status s = vxqa::decode_smem_bytes<Config>(&bytes, &sm80_body);
  INFO("decode_smem_bytes: " << (s.ok() ? "ok" : s.message()) << ", " << bytes << " bytes, sm80_body "
                             << sm80_body);
  REQUIRE(s.ok());
  REQUIRE(sm80_body == sm80);
  REQUIRE(bytes == (sm80 ? Config::kSm80SmemBytes : Config::kSmemBytes));
  const Probe p = probe<Config>();
  INFO("the kernel's dispatch on the device (__CUDA_ARCH__ " << p.arch << "): the SM" << p.body << " body");
  REQUIRE(p.body == (sm80 ? 80 : 70));
}

}  // namespace

#define VXQA_CHECK_CODE(...) check_code<__VA_ARGS__>(#__VA_ARGS__);
#define VXQA_CHECK_BODY(...) check_body<__VA_ARGS__>(#__VA_ARGS__, expect_sm80);

TEST_CASE("which body: decode_kernel's code is for compute_80 or newer on an sm_80+ device, every suite Config",
          "[which_body]") {
  if (device_major() < 8) return vxqa_test::skip(why_skipped());
  VXQA_SUITE_CONFIGS(VXQA_CHECK_CODE)
}

TEST_CASE("which body: decode_smem_bytes and the kernel's dispatch report this build's body, every suite Config",
          "[which_body]") {
  const bool sm80_device = device_major() >= 8;
  // An sm_7x device runs the SM70 body whatever the atom: checked, then reported as a skip.
  const bool expect_sm80 = sm80_device && kExpectSm80Body;
  VXQA_SUITE_CONFIGS(VXQA_CHECK_BODY)
  if (!sm80_device) return vxqa_test::skip(why_skipped());
}
