// test/sm70/decode_decoder_list.cu — SM70 audit TU: the Configs of Decoder's default list
// (api/decoder.cuh) that serve multi-token queries and the variants and that no other TU
// instantiates: what a user of Decoder runs on a V100 for MTP, speculative verification and
// Gemma-style windows, held to the same audit as the TUs of the tests' Configs.
//
// Device-only and NVRTC-compatible, audited as decode_d256.cu is (test/sm70/CMakeLists.txt).
//
// vxqa-audit: kernel=decode_kernel toolchain=^(cu118|nvrtc128)$ loop-require=HMMA.884,LDG.E.128,LDS.128,STS.128 forbid=LDL,STL,LDGSTS max-registers=255
// vxqa-audit: kernel=decode_kernel toolchain=sm(80|90) loop-require=HMMA.16816,LDGSTS.128,LDS.128,MOVM forbid=LDL,STL,HMMA.884 max-registers=255
#include <vxqa/kernel/decode_kernel.cuh>

namespace {
using vxqa::DecodeConfig;
using vxqa::DecodeKernelArgs;
using vxqa::KvType;
namespace opt = vxqa::opt;
using AllVariants = opt::Variant<vxqa::kAllVariantFlags>;
}  // namespace

template __global__ void vxqa::decode_kernel<DecodeConfig<64, KvType::kE5M2, opt::Warps<8>, AllVariants, opt::MaxQueryLen<16>>>(const DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<DecodeConfig<256, KvType::kE5M2, opt::Warps<8>, AllVariants, opt::MaxQueryLen<16>>>(const DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<DecodeConfig<256, KvType::kE5M2, opt::Warps<6>, AllVariants, opt::MaxQueryLen<16>>>(const DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<DecodeConfig<512, KvType::kE5M2, AllVariants>>(const DecodeKernelArgs);
