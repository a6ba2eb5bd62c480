#include <vxqa/kernel/combine_kernel.cuh>
#include <vxqa/kernel/decode_kernel.cuh>
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<512, vxqa::KvType::kE5M2>>(const vxqa::DecodeKernelArgs);
