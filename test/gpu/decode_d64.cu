// Decode kernel, head dim 64, against the float64 reference through the public API.
#include "gpu/decode_harness.cuh"

using namespace vxqa_test;
using E5m2Runtime = vxqa::DecodeConfig<64, vxqa::KvType::kE5M2>;
using Fp16Runtime = vxqa::DecodeConfig<64, vxqa::KvType::kFp16>;
using E5m2ConvertAtPublish =
    vxqa::DecodeConfig<64, vxqa::KvType::kE5M2, vxqa::opt::Convert<vxqa::ConvertAt::kPublish>>;
// Two register stages: each warp keeps two pieces of its K/V stream in flight (D = 64
// takes 1 or 2 stages; more than the 2 pieces of a tile is rejected).
using Fp16TwoStages = vxqa::DecodeConfig<64, vxqa::KvType::kFp16, vxqa::opt::Sm70Stages<2>>;
using E5m2TwoStages = vxqa::DecodeConfig<64, vxqa::KvType::kE5M2, vxqa::opt::Sm70Stages<2>>;

TEST_CASE("D64 E5M2: groups x page sizes x edge lengths", "[decode_d64]") {
  sweep_groups_and_pages<E5m2Runtime>({1, 2, 4, 6, 8, 12, 16}, {16, 64, 784, 800}, 8000);
}

TEST_CASE("D64 E4M3: native and software decode", "[decode_d64]") {
  sweep_groups_and_pages<vxqa::DecodeConfig<64, vxqa::KvType::kE4M3>>({1, 4, 8}, {16, 784}, 8600);
  sweep_groups_and_pages<vxqa::DecodeConfig<64, vxqa::KvType::kE4M3, vxqa::opt::E4m3Path<vxqa::E4m3Decode::kSoftware>>>(
      {1, 6, 16}, {16, 800}, 8700);
}

TEST_CASE("D64 fp16 cache", "[decode_d64]") {
  sweep_groups_and_pages<Fp16Runtime>({1, 6, 16}, {1, 16, 800}, 9000);
}

TEST_CASE("D64 E5M2 converted to fp16 when published", "[decode_d64]") {
  sweep_groups_and_pages<E5m2ConvertAtPublish>({1, 6, 16}, {16, 800}, 8500);
}

TEST_CASE("D64 fp16 cache, 2 stages", "[decode_d64]") {
  sweep_groups_and_pages<Fp16TwoStages>({1, 6, 16}, {1, 16, 800}, 9500);
}

TEST_CASE("D64 E5M2, 2 stages", "[decode_d64]") {
  sweep_groups_and_pages<E5m2TwoStages>({1, 6, 16}, {16, 800}, 9600);
}
