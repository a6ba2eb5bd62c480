// A reduced decode matrix for compute-sanitizer (memcheck, racecheck, synccheck): every
// Config family and both conversion policies, split and single-chunk plans, ragged edge
// lengths, small enough to run under the sanitizers in seconds. Also a plain test.
#include "gpu/decode_harness.cuh"

using namespace vxqa_test;

namespace {

template <class Config>
void reduced(uint64_t seed) {
  for (int group : {6, 12}) {
    for (int page : {16, 800}) {
      for (int chunk : {Config::kCtaTokens, 0}) {  // several chunks, then the automatic plan
        RandomProblemOptions o = aligned_options<Config>();
        o.group = group;
        o.kv_heads = 1;
        o.page_size = page;
        o.seq_lens = {1, 33, page + 1, 2 * Config::kCtaTokens + 5, 0};
        o.batch = int(o.seq_lens.size());
        decode_matches_reference<Config>(o, seed++, chunk);
      }
    }
  }
}

}  // namespace

TEST_CASE("reduced matrix: D256 E5M2", "[sanitize_reduced]") {
  reduced<vxqa::DecodeConfig<256, vxqa::KvType::kE5M2>>(100);
}
TEST_CASE("reduced matrix: D128 E5M2 converted at publish", "[sanitize_reduced]") {
  reduced<vxqa::DecodeConfig<128, vxqa::KvType::kE5M2, vxqa::opt::Convert<vxqa::ConvertAt::kPublish>>>(200);
}
TEST_CASE("reduced matrix: D64 fp16", "[sanitize_reduced]") {
  reduced<vxqa::DecodeConfig<64, vxqa::KvType::kFp16>>(300);
}
// D 512: Q's fragments in one shared copy a CTA (SM80 body), the teams' exchange (SM70 body).
TEST_CASE("reduced matrix: D512 E5M2", "[sanitize_reduced]") {
  reduced<vxqa::DecodeConfig<512, vxqa::KvType::kE5M2>>(400);
}
