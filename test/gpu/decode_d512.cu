// Decode kernel, head dim 512, against the float64 reference through the public API.
// At D 512 the SM70 body's two warps share each K/V tile, each owning 256 dims of O
// (WarpTileGeometry::kParts), and the SM80 body's warps each own a tile with all of O and read
// Q from the CTA's shared copy: the cases below cross every edge of both — odd tile counts per
// team or warp, one with no tile, split-KV with chunks that are not whole rounds.
#include "gpu/decode_harness.cuh"

using namespace vxqa_test;
using E5m2Runtime = vxqa::DecodeConfig<512, vxqa::KvType::kE5M2>;
using E5m2Warps6 = vxqa::DecodeConfig<512, vxqa::KvType::kE5M2, vxqa::opt::Warps<6>>;
using E4m3Runtime = vxqa::DecodeConfig<512, vxqa::KvType::kE4M3>;
using E4m3Software = vxqa::DecodeConfig<512, vxqa::KvType::kE4M3, vxqa::opt::E4m3Path<vxqa::E4m3Decode::kSoftware>>;
using E5m2ConvertAtPublish =
    vxqa::DecodeConfig<512, vxqa::KvType::kE5M2, vxqa::opt::Warps<2>, vxqa::opt::Convert<vxqa::ConvertAt::kPublish>>;
using Fp16Runtime = vxqa::DecodeConfig<512, vxqa::KvType::kFp16, vxqa::opt::Warps<2>>;
using E5m2AllVariants = vxqa::DecodeConfig<512, vxqa::KvType::kE5M2, vxqa::opt::Variant<vxqa::kAllVariantFlags>>;

TEST_CASE("D512 E5M2: groups x page sizes x edge lengths, split and combine", "[decode_d512]") {
  sweep_groups_and_pages<E5m2Runtime>({1, 2, 6, 8, 12}, {16, 64, 800}, 51000);
}

TEST_CASE("D512 E5M2 with 6 warps (three teams)", "[decode_d512]") {
  sweep_groups_and_pages<E5m2Warps6>({4, 16}, {16, 784}, 52000);
}

TEST_CASE("D512 E4M3: native and software decode", "[decode_d512]") {
  sweep_groups_and_pages<E4m3Runtime>({1, 6, 8}, {16, 800}, 53000);
  sweep_groups_and_pages<E4m3Software>({6, 12}, {16, 64}, 53100);
}

TEST_CASE("D512 E5M2 converted to fp16 when published", "[decode_d512]") {
  sweep_groups_and_pages<E5m2ConvertAtPublish>({1, 8}, {16, 800}, 54000);
}

TEST_CASE("D512 fp16 cache", "[decode_d512]") {
  sweep_groups_and_pages<Fp16Runtime>({1, 6}, {16, 800}, 55000);
}

TEST_CASE("D512 E5M2: batches and long contexts, automatic plan", "[decode_d512]") {
  uint64_t seed = 56000;
  struct Case { int batch; std::vector<int32_t> lens; };
  for (const Case& c : {Case{16, {}}, Case{4, {16384, 8191, 1, 12345}}, Case{1, {65536}}}) {
    RandomProblemOptions o = aligned_options<E5m2Runtime>();
    o.group = 8;
    o.kv_heads = 1;
    o.page_size = 16;
    o.batch = c.batch;
    if (c.lens.empty()) {
      o.min_seq_len = 1;
      o.max_seq_len = 4000;
    } else {
      o.seq_lens = c.lens;
    }
    o.layout = vxqa::reference::CacheLayout::kVllm;
    decode_matches_reference<E5m2Runtime>(o, seed++);
  }
}

TEST_CASE("D512 E5M2: sliding window, soft-cap and sinks", "[decode_d512]") {
  uint64_t seed = 57000;
  for (int window : {1, 100, 700}) {
    RandomProblemOptions o = aligned_options<E5m2AllVariants>();
    o.group = 8;
    o.kv_heads = 2;
    o.page_size = 64;
    o.min_seq_len = 1;
    o.max_seq_len = 3000;
    o.batch = 6;
    o.window = window;
    o.logit_softcap = 30.f;
    o.sinks = true;
    decode_matches_reference<E5m2AllVariants>(o, seed++, 3 * E5m2AllVariants::kChunkMultiple);
  }
}
