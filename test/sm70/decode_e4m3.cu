// test/sm70/decode_e4m3.cu — SM70 audit TU: decode Configs over an E4M3 cache (KvDecode: the
// bit-move on sm_70 and sm_80, the hardware cvt on sm_90 unless E4m3Decode::kSoftware).
//
// Device-only and NVRTC-compatible, audited as decode_d256.cu is (test/sm70/CMakeLists.txt);
// the per-phase counts (sass.phases) give the decode's instructions a KV byte beside E5M2's.
//
// vxqa-audit: kernel=decode_kernel toolchain=^(cu118|nvrtc128)$ loop-require=HMMA.884,LDG.E.128,LDS.128,STS.128 forbid=LDL,STL,LDGSTS max-registers=255
// vxqa-audit: kernel=decode_kernel toolchain=sm(80|90) loop-require=HMMA.16816,LDGSTS.128,LDS.128,MOVM forbid=LDL,STL,HMMA.884 max-registers=255
#include <vxqa/kernel/decode_kernel.cuh>

template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<256, vxqa::KvType::kE4M3>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<256, vxqa::KvType::kE4M3, vxqa::opt::E4m3Path<vxqa::E4m3Decode::kSoftware>>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<128, vxqa::KvType::kE4M3>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<128, vxqa::KvType::kE4M3, vxqa::opt::Convert<vxqa::ConvertAt::kPublish>>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<64, vxqa::KvType::kE4M3>>(const vxqa::DecodeKernelArgs);
