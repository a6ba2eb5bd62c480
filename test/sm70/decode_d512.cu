// test/sm70/decode_d512.cu — SM70 audit TU: head dim 512, where the SM70 body's two warps share
// each K/V tile and each holds 256 dims of O (Config::kParts), so that a lane's accumulators
// stay as at D 256 and nothing spills; the SM80 body's warps each take their own tiles with all
// 512 dims of O, Q's fragments read from shared memory (LDS.64); plus the combine kernel.
//
// Device-only and NVRTC-compatible, audited as decode_d256.cu is (test/sm70/CMakeLists.txt).
//
// vxqa-audit: kernel=decode_kernel toolchain=^(cu118|nvrtc128)$ loop-require=HMMA.884,LDG.E.128,LDS.128,STS.128,BAR.SYNC forbid=LDL,STL,LDGSTS max-registers=255
// vxqa-audit: kernel=decode_kernel toolchain=sm(80|90) loop-require=HMMA.16816,LDGSTS.128,LDS.128,LDS.64,MOVM forbid=LDL,STL,HMMA.884 max-registers=255
// vxqa-audit: kernel=combine_kernel require=LDG.E,MUFU.EX2,STG.E forbid=LDL,STL max-registers=64
#include <vxqa/kernel/combine_kernel.cuh>
#include <vxqa/kernel/decode_kernel.cuh>

template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<512, vxqa::KvType::kE5M2>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<512, vxqa::KvType::kE4M3>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<512, vxqa::KvType::kFp16, vxqa::opt::Warps<2>>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::combine_kernel<512>(const vxqa::DecodeKernelArgs);
