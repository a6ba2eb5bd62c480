#include <vxqa/kernel/combine_kernel.cuh>
#include <vxqa/kernel/decode_kernel.cuh>
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<512, vxqa::KvType::kE4M3>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<512, vxqa::KvType::kFp16, vxqa::opt::Warps<2>>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<512, vxqa::KvType::kE5M2, vxqa::opt::Warps<6>>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<512, vxqa::KvType::kE5M2, vxqa::opt::Variant<vxqa::kAllVariantFlags>>>(const vxqa::DecodeKernelArgs);
