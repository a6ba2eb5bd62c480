// test/sm70/decode_d128.cu — SM70 audit TU: the head-dim-128 decode Configs the tests, the demo
// and the benchmark instantiate, plus the combine kernel.
//
// Device-only and NVRTC-compatible; compiled to sm_70 by nvcc 11.8 and NVRTC 12.8 and
// checked by scripts/sass_audit.py (see test/sm70/CMakeLists.txt). The decode kernels must
// use the SM70 tensor-core instruction (HMMA.884) for QK and PV, 16-byte global loads for
// the KV cache, 16-byte shared loads for the consumers, all inside the main loop
// (loop-require: the Q load before it does not count), and never spill (no local memory,
// no stack): registers and shared memory are printed in the audit table. The combine kernel
// must hold its loads, exp2 and stores (require: an empty parse fails).
//
// vxqa-audit: kernel=decode_kernel toolchain=^(cu118|nvrtc128)$ loop-require=HMMA.884,LDG.E.128,LDS.128,STS.128 forbid=LDL,STL,LDGSTS max-registers=255
// vxqa-audit: kernel=decode_kernel toolchain=sm(80|90) loop-require=HMMA.16816,LDGSTS.128,LDS.128,MOVM forbid=LDL,STL,HMMA.884 max-registers=255
// vxqa-audit: kernel=combine_kernel require=LDG.E,MUFU.EX2,STG.E forbid=LDL,STL max-registers=64
#include <vxqa/kernel/combine_kernel.cuh>
#include <vxqa/kernel/decode_kernel.cuh>

template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<128, vxqa::KvType::kE5M2>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<128, vxqa::KvType::kFp16>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<128, vxqa::KvType::kE5M2, vxqa::opt::Convert<vxqa::ConvertAt::kPublish>>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<128, vxqa::KvType::kE5M2, vxqa::opt::Sm70Stages<2>>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<128, vxqa::KvType::kFp16, vxqa::opt::Sm70Stages<2>>>(const vxqa::DecodeKernelArgs);
// Every attention variant flag (kernel/attention_variant.cuh).
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<128, vxqa::KvType::kE5M2, vxqa::opt::Variant<vxqa::kAllVariantFlags>>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::combine_kernel<128>(const vxqa::DecodeKernelArgs);
// The Decoder's multi-token Config: every variant flag, 16 query tokens, 8 warps.
template __global__ void vxqa::decode_kernel<vxqa::DecodeConfig<128, vxqa::KvType::kE5M2, vxqa::opt::Warps<8>, vxqa::opt::Variant<vxqa::kAllVariantFlags>, vxqa::opt::MaxQueryLen<16>>>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::combine_kernel<128, vxqa::ActType::kFp16, 64, vxqa::AttentionVariant<vxqa::kAllVariantFlags>, true>(const vxqa::DecodeKernelArgs);
template __global__ void vxqa::combine_kernel<128, vxqa::ActType::kFp16, 64, vxqa::AttentionVariant<vxqa::kAllVariantFlags>>(const vxqa::DecodeKernelArgs);
