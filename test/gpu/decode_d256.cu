// Decode kernel, head dim 256, against the float64 reference through the public API.
#include "gpu/decode_harness.cuh"

using namespace vxqa_test;
using E5m2Runtime = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2>;
using E5m2Page800 = vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::PageSize<800>>;
using Fp16Runtime = vxqa::DecodeConfig<256, vxqa::KvType::kFp16, vxqa::opt::Warps<2>>;
// E4M3: the hardware cvt where the device has it (sm_89+), and the bit-move an A100 or V100 runs.
using E4m3Runtime = vxqa::DecodeConfig<256, vxqa::KvType::kE4M3>;
using E4m3Software = vxqa::DecodeConfig<256, vxqa::KvType::kE4M3, vxqa::opt::E4m3Path<vxqa::E4m3Decode::kSoftware>>;
using E4m3Page16 = vxqa::DecodeConfig<256, vxqa::KvType::kE4M3, vxqa::opt::PageSize<16>>;
using E5m2ConvertAtPublish =
    vxqa::DecodeConfig<256, vxqa::KvType::kE5M2, vxqa::opt::Warps<2>, vxqa::opt::Convert<vxqa::ConvertAt::kPublish>>;

TEST_CASE("D256 E5M2: groups x page sizes x edge lengths, split and combine", "[decode_d256]") {
  sweep_groups_and_pages<E5m2Runtime>({1, 2, 4, 6, 8, 12, 16}, {16, 64, 784, 800}, 1000);
}

TEST_CASE("D256 E5M2, page size fixed at compile time (800)", "[decode_d256]") {
  sweep_groups_and_pages<E5m2Page800>({6}, {800}, 2000);
}

TEST_CASE("D256 E5M2 converted to fp16 when published", "[decode_d256]") {
  sweep_groups_and_pages<E5m2ConvertAtPublish>({1, 6, 16}, {16, 800}, 2500);
}

TEST_CASE("D256 E4M3: groups x page sizes, split and combine, native and software decode", "[decode_d256]") {
  sweep_groups_and_pages<E4m3Runtime>({1, 6, 8, 12}, {16, 64, 800}, 2600);
  sweep_groups_and_pages<E4m3Software>({1, 6, 16}, {16, 784}, 2700);
  sweep_groups_and_pages<E4m3Page16>({6}, {16}, 2800);
}

TEST_CASE("D256 fp16 cache", "[decode_d256]") {
  sweep_groups_and_pages<Fp16Runtime>({1, 6, 12}, {16, 800}, 3000);
}

TEST_CASE("D256 E5M2: batches 1..16, uniform and ragged, automatic plan", "[decode_d256]") {
  uint64_t seed = 4000;
  for (int batch : {1, 4, 8, 12, 16}) {
    for (bool ragged : {false, true}) {
      RandomProblemOptions o = aligned_options<E5m2Runtime>();
      o.group = 6;
      o.kv_heads = 1;
      o.page_size = 800;
      o.batch = batch;
      o.min_seq_len = ragged ? 1 : 3000;
      o.max_seq_len = 3000;
      decode_matches_reference<E5m2Runtime>(o, seed++);
    }
  }
}

TEST_CASE("D256 E5M2: long contexts", "[decode_d256]") {
  uint64_t seed = 5000;
  struct Case { int batch; std::vector<int32_t> lens; };
  for (const Case& c : {Case{4, {16384, 17756, 16383, 17757}}, Case{1, {65536}}, Case{1, {131072}}}) {
    RandomProblemOptions o = aligned_options<E5m2Runtime>();
    o.group = 6;
    o.kv_heads = 1;
    o.page_size = 800;
    o.batch = c.batch;
    o.seq_lens = c.lens;
    o.layout = vxqa::reference::CacheLayout::kVllm;
    decode_matches_reference<E5m2Runtime>(o, seed++);
  }
}
