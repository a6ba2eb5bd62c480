// The attention variant's host-visible arithmetic (kernel/attention_variant.cuh,
// kernel/split_plan.cuh): which keys a windowed sequence's chunks cover, and that a plan
// cut over the window has every chunk a step needs. The kernels and the combine compute
// the same functions; a chunk they would miss or read twice fails here first.
#include <catch2/catch.hpp>

#include <vxqa/api/plan.cuh>
#include <vxqa/kernel/attention_variant.cuh>
#include <vxqa/kernel/config.cuh>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace {

using vxqa::AttentionVariant;
using vxqa::DecodeKernelArgs;
using Window = AttentionVariant<vxqa::kSlidingWindow>;

DecodeKernelArgs args_with_window(int window) {
  DecodeKernelArgs a{};
  a.window = window;
  return a;
}

}  // namespace

TEST_CASE("a window's first key and chunk base", "[attention_variant]") {
  const DecodeKernelArgs a = args_with_window(100);
  CHECK(Window::first_key(a, 0) == 0);
  CHECK(Window::first_key(a, 100) == 0);  // the whole context fits the window
  CHECK(Window::first_key(a, 101) == 1);  // keys 1 .. 100: the query at 100 sees 100 of them
  CHECK(Window::first_key(a, 1000) == 900);
  CHECK(Window::chunk_base(a, 1000) == 896);  // 16-aligned at or below the first key
  CHECK(Window::chunk_base(a, 117) == 16);
  CHECK(Window::first_key(args_with_window(0), 1000) == 0);  // 0: no window at run time
  CHECK(vxqa::PlainAttention::first_key(a, 1000) == 0);      // no flag: the value is not read
  CHECK(vxqa::PlainAttention::chunk_base(a, 1000) == 0);
}

// For random lengths, windows and chunks: the chunks the kernels give a sequence (begin =
// base + c · chunk, c < the combine's count) cover [first, len) exactly once, start
// 16-aligned, cross into no chunk past the combine's count, and fit the plan's num_chunks
// for any max_context >= len (and, with a plan for the window, max_window >= the window).
TEST_CASE("windowed chunks cover the window once and fit the plan", "[attention_variant]") {
  using Config = vxqa::DecodeConfig<128, vxqa::KvType::kE5M2, vxqa::opt::Variant<vxqa::kSlidingWindow>>;
  std::mt19937_64 rng(2026);
  for (int trial = 0; trial < 20000; ++trial) {
    const int len = int(rng() % 70000);
    const int window = int(rng() % 3) == 0 ? 1 + int(rng() % 40) : 1 + int(rng() % 80000);
    const int chunk = Config::kChunkMultiple * (1 + int(rng() % 64));
    DecodeKernelArgs a = args_with_window(window);
    a.chunk_tokens = chunk;
    const int first = Window::first_key(a, len), base = Window::chunk_base(a, len);
    INFO("len " << len << " window " << window << " chunk " << chunk);
    REQUIRE(first == std::max(0, len - window));
    REQUIRE(base % vxqa::kWindowChunkAlign == 0);
    REQUIRE((base <= first && first - base < vxqa::kWindowChunkAlign));
    const int chunks = (len - base + chunk - 1) / chunk;  // the combine's count
    int64_t covered = 0;
    for (int c = 0; c < chunks; ++c) {
      const int begin = std::max(base + c * chunk, first), end = std::min(base + (c + 1) * chunk, len);
      REQUIRE(begin < end);  // every chunk the combine reads has keys
      covered += end - begin;
    }
    REQUIRE(covered == len - first);
    REQUIRE((chunks == 0 || base + (chunks - 1) * chunk < len));
    // Plans: over the context, and over the window.
    const int max_context = std::max(len, 1) + int(rng() % 1000);
    vxqa::DecodePlan whole, windowed;
    REQUIRE(vxqa::make_decode_plan<Config>(4, max_context, 1, 8, 132, &whole, chunk).ok());
    REQUIRE(chunks <= whole.num_chunks);
    const int max_window = window + int(rng() % 50);
    REQUIRE(vxqa::make_decode_plan<Config>(4, max_context, 1, 8, 132, &windowed, chunk, 4, 1, max_window).ok());
    REQUIRE(chunks <= windowed.num_chunks);
    REQUIRE(windowed.num_chunks <= whole.num_chunks);
  }
}
