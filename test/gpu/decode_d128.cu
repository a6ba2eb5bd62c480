// Decode kernel, head dim 128, against the float64 reference through the public API.
#include "gpu/decode_harness.cuh"

using namespace vxqa_test;
using E5m2Runtime = vxqa::DecodeConfig<128, vxqa::KvType::kE5M2>;
using Fp16Runtime = vxqa::DecodeConfig<128, vxqa::KvType::kFp16>;
using E5m2ConvertAtPublish =
    vxqa::DecodeConfig<128, vxqa::KvType::kE5M2, vxqa::opt::Convert<vxqa::ConvertAt::kPublish>>;
using E4m3Runtime = vxqa::DecodeConfig<128, vxqa::KvType::kE4M3>;
// E4M3 decoded in software (the bit-move), converted to fp16 where the SM70 body publishes.
using E4m3SoftwarePublish = vxqa::DecodeConfig<128, vxqa::KvType::kE4M3, vxqa::opt::E4m3Path<vxqa::E4m3Decode::kSoftware>,
                                               vxqa::opt::Convert<vxqa::ConvertAt::kPublish>>;
// Two register stages: each warp keeps two pieces of its K/V stream in flight (D = 128
// takes 1 or 2 stages; more than the 2 pieces of a tile is rejected).
using E5m2TwoStages = vxqa::DecodeConfig<128, vxqa::KvType::kE5M2, vxqa::opt::Sm70Stages<2>>;
using Fp16TwoStages = vxqa::DecodeConfig<128, vxqa::KvType::kFp16, vxqa::opt::Sm70Stages<2>>;

TEST_CASE("D128 E5M2: groups x page sizes x edge lengths", "[decode_d128]") {
  sweep_groups_and_pages<E5m2Runtime>({1, 2, 4, 6, 8, 12, 16}, {16, 64, 784, 800}, 6000);
}

TEST_CASE("D128 fp16 cache", "[decode_d128]") {
  sweep_groups_and_pages<Fp16Runtime>({1, 4, 8, 16}, {16, 784}, 7000);
}

TEST_CASE("D128 E4M3, native decode and software decode converted when published", "[decode_d128]") {
  sweep_groups_and_pages<E4m3Runtime>({1, 4, 8, 16}, {16, 800}, 6200);
  sweep_groups_and_pages<E4m3SoftwarePublish>({1, 6, 16}, {16, 784}, 6300);
}

TEST_CASE("D128 E5M2 converted to fp16 when published", "[decode_d128]") {
  sweep_groups_and_pages<E5m2ConvertAtPublish>({1, 6, 16}, {16, 800}, 6500);
}

TEST_CASE("D128 E5M2, 2 stages", "[decode_d128]") {
  sweep_groups_and_pages<E5m2TwoStages>({1, 6, 16}, {16, 64, 800}, 7500);
}

TEST_CASE("D128 fp16 cache, 2 stages", "[decode_d128]") {
  sweep_groups_and_pages<Fp16TwoStages>({1, 6, 16}, {16, 784}, 7600);
}
