// vxqa::validate<Config>: a valid decode step passes, and every field broken alone is
// rejected with a status that names that field and says why.
//
// The plan is built the way vxqa::make_decode_plan<Config> builds it (api/decode.cuh includes
// the kernels and CUB, so it needs nvcc; make_plan below repeats its arithmetic with the
// host-usable choose_chunk_tokens and plan_workspace_bytes). Pointers are fake, aligned and
// never dereferenced: validate must not read device memory.
#include <catch2/catch.hpp>

#include <vxqa/api/params.cuh>
#include <vxqa/api/plan.cuh>
#include <vxqa/api/validate.cuh>
#include <vxqa/kernel/config.cuh>
#include <vxqa/kernel/split_plan.cuh>

#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace {

using namespace vxqa;

// A device address that is never dereferenced; 4 KB aligned unless offset.
template <class T = void>
T* fake(uintptr_t base, uintptr_t offset_bytes = 0) {
  return reinterpret_cast<T*>(base + offset_bytes);
}
template <class T>
T* nudge(T* p, uintptr_t bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + bytes);
}
template <class T>
const T* nudge(const T* p, uintptr_t bytes) {
  return reinterpret_cast<const T*>(reinterpret_cast<uintptr_t>(p) + bytes);
}

template <class Config>
DecodePlan make_plan(int max_batch, int max_context, int num_kv_heads, int group_size, int sm_count) {
  DecodePlan p;
  const Status st = make_decode_plan<Config>(max_batch, max_context, num_kv_heads, group_size, sm_count, &p);
  INFO(st.message());
  REQUIRE(st.ok());
  return p;
}

// One valid decode step: 8 sequences (capacity 8), 2 KV heads, G = 6, context up to 4096.
struct Step {
  DecodeParams params;
  DecodePlan plan;
  const void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::vector<int32_t> host_lens;
};

template <class Config>
Step valid_step(int page_size = Config::kPageSize ? Config::kPageSize : 16) {
  constexpr int D = Config::kHeadDim, kMaxBatch = 8, kMaxContext = 4096, kHkv = 2, kGroup = 6;
  Step s;
  s.plan = make_plan<Config>(kMaxBatch, kMaxContext, kHkv, kGroup, 80);
  DecodeParams& p = s.params;
  p.q = fake(0x7f0000010000);
  p.q_head_stride = D;
  p.q_batch_stride = int64_t(kHkv) * kGroup * D;
  p.out = fake(0x7f0000020000);
  p.out_head_stride = D;
  p.out_batch_stride = int64_t(kHkv) * kGroup * D;
  p.lse = fake<float>(0x7f0000030000);
  p.cache_type = Config::kKv;
  p.k_cache = fake(0x7f0001000000);
  p.v_cache = fake(0x7f0002000000);
  p.head_stride = D;
  p.token_stride = int64_t(kHkv) * D;
  p.page_stride = int64_t(page_size) * kHkv * D;
  p.page_size = page_size;
  p.max_pages_per_seq = (kMaxContext + page_size - 1) / page_size;
  p.num_pages = kMaxBatch * p.max_pages_per_seq;
  p.block_table = fake<const int32_t>(0x7f0000040000);
  p.block_table_stride = p.max_pages_per_seq;
  p.seq_lens = fake<const int32_t>(0x7f0000050000);
  p.batch = kMaxBatch;
  p.num_kv_heads = kHkv;
  p.group_size = kGroup;
  p.head_dim = D;
  p.k_scale = 0.5f;
  p.v_scale = 2.f;
  p.softmax_scale = 1.f / std::sqrt(float(D));
  s.workspace = fake(0x7f0004000000);
  s.workspace_bytes = s.plan.workspace_bytes;
  s.host_lens = {0, 1, 17, 800, 4095, 4096, 3000, 2};
  return s;
}

template <class Config>
Status run(const Step& s, bool with_host_lens = true) {
  return validate<Config>(s.params, s.plan, s.workspace, s.workspace_bytes,
                          with_host_lens ? s.host_lens.data() : nullptr);
}

struct Breakage {
  std::string what;   // what is broken
  std::string field;  // the field the status must name
  std::function<void(Step&)> apply;
};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Every field broken alone, for a Config with elements of `eb` bytes.
template <class Config>
std::vector<Breakage> breakages() {
  constexpr int eb = Config::kElemBytes, D = Config::kHeadDim;
  constexpr int64_t half16 = 8 / eb;  // 8 bytes of cache elements: not a multiple of 16 bytes
  std::vector<Breakage> b = {
      // Null pointers (lse may be null: see the valid cases).
      {"q null", "q", [](Step& s) { s.params.q = nullptr; }},
      {"out null", "out", [](Step& s) { s.params.out = nullptr; }},
      {"k_cache null", "k_cache", [](Step& s) { s.params.k_cache = nullptr; }},
      {"v_cache null", "v_cache", [](Step& s) { s.params.v_cache = nullptr; }},
      {"block_table null", "block_table", [](Step& s) { s.params.block_table = nullptr; }},
      {"seq_lens null", "seq_lens", [](Step& s) { s.params.seq_lens = nullptr; }},
      {"workspace null", "workspace", [](Step& s) { s.workspace = nullptr; }},
      // Misaligned pointers: 8 bytes off for 16-byte loads, 1/2 bytes off for 2/4-byte
      // stores, 16 bytes off for the 256-byte workspace.
      {"q 8 bytes off", "q", [](Step& s) { s.params.q = nudge(s.params.q, 8); }},
      {"q 2 bytes off", "q", [](Step& s) { s.params.q = nudge(s.params.q, 2); }},
      {"k_cache 8 bytes off", "k_cache", [](Step& s) { s.params.k_cache = nudge(s.params.k_cache, 8); }},
      {"k_cache 1 byte off", "k_cache", [](Step& s) { s.params.k_cache = nudge(s.params.k_cache, 1); }},
      {"v_cache 8 bytes off", "v_cache", [](Step& s) { s.params.v_cache = nudge(s.params.v_cache, 8); }},
      {"v_cache 4 bytes off", "v_cache", [](Step& s) { s.params.v_cache = nudge(s.params.v_cache, 4); }},
      {"out 1 byte off", "out", [](Step& s) { s.params.out = nudge(s.params.out, 1); }},
      {"lse 2 bytes off", "lse", [](Step& s) { s.params.lse = nudge(s.params.lse, 2); }},
      {"workspace 16 bytes off", "workspace", [](Step& s) { s.workspace = nudge(s.workspace, 16); }},
      {"workspace 128 bytes off", "workspace", [](Step& s) { s.workspace = nudge(s.workspace, 128); }},
      {"block_table 2 bytes off", "block_table",
       [](Step& s) { s.params.block_table = nudge(s.params.block_table, 2); }},
      {"seq_lens 2 bytes off", "seq_lens", [](Step& s) { s.params.seq_lens = nudge(s.params.seq_lens, 2); }},
      // Cache strides that are not multiples of 16 bytes.
      {"page_stride + 8 bytes", "page_stride", [=](Step& s) { s.params.page_stride += half16; }},
      {"token_stride + 8 bytes", "token_stride", [=](Step& s) {
         s.params.token_stride += half16;
         if (s.params.page_size == 1) s.params.page_size = 2;  // one token a page needs no stride
       }},
      {"head_stride + 8 bytes", "head_stride", [=](Step& s) { s.params.head_stride += half16; }},
      {"head_stride + 1 element", "head_stride", [=](Step& s) { s.params.head_stride += 1; }},
      // q rows: 16-byte aligned rows, at least D apart; out rows at least D apart.
      {"q_head_stride + 4 halves", "q_head_stride", [](Step& s) { s.params.q_head_stride += 4; }},
      {"q_head_stride < head_dim", "q_head_stride", [=](Step& s) { s.params.q_head_stride = D - 8; }},
      {"out_head_stride < head_dim", "out_head_stride", [=](Step& s) { s.params.out_head_stride = D - 1; }},
      // Rows that would overlap: a forgotten (0) or too small stride reads or writes the
      // same rows for several sequences, heads or tokens.
      {"q_batch_stride 0", "q_batch_stride", [](Step& s) { s.params.q_batch_stride = 0; }},
      {"q_batch_stride inside the heads", "q_batch_stride",
       [=](Step& s) { s.params.q_batch_stride = 2 * D; }},
      {"out_batch_stride 0", "out_batch_stride", [](Step& s) { s.params.out_batch_stride = 0; }},
      {"out_batch_stride = out_head_stride", "out_batch_stride",
       [=](Step& s) { s.params.out_batch_stride = D; }},
      {"token_stride 0", "token_stride", [](Step& s) {
         s.params.token_stride = 0;
         if (s.params.page_size == 1) s.params.page_size = 2;  // one token a page needs no stride
       }},
      {"head_stride 0", "head_stride", [](Step& s) { s.params.head_stride = 0; }},
      {"head_stride inside a token row", "head_stride", [=](Step& s) { s.params.head_stride = D / 2; }},
      {"page_stride 0", "page_stride", [](Step& s) { s.params.page_stride = 0; }},
      // Shapes.
      {"head_dim mismatch", "head_dim", [=](Step& s) { s.params.head_dim = D == 128 ? 64 : 128; }},
      {"head_dim 0", "head_dim", [](Step& s) { s.params.head_dim = 0; }},
      {"group_size 0", "group_size", [](Step& s) { s.params.group_size = 0; }},
      {"group_size -1", "group_size", [](Step& s) { s.params.group_size = -1; }},
      {"group_size differs from the plan", "group_size", [](Step& s) { s.params.group_size = 5; }},
      {"num_kv_heads 0", "num_kv_heads", [](Step& s) { s.params.num_kv_heads = 0; }},
      {"num_kv_heads differs from the plan", "num_kv_heads", [](Step& s) { s.params.num_kv_heads = 3; }},
      {"batch -1", "batch", [](Step& s) { s.params.batch = -1; }},
      {"cache_type not set", "cache_type", [](Step& s) { s.params.cache_type = KvType::kUnset; }},
      {"cache_type of the other format", "cache_type", [](Step& s) {
         s.params.cache_type = Config::kKv == KvType::kE5M2 ? KvType::kFp16 : KvType::kE5M2;
       }},
      {"batch > plan.max_batch", "batch", [](Step& s) { s.params.batch = s.plan.max_batch + 1; }},
      {"page_size 0", "page_size", [](Step& s) { s.params.page_size = 0; }},
      {"page_size -16", "page_size", [](Step& s) { s.params.page_size = -16; }},
      // Block table.
      {"block table too short", "max_pages_per_seq", [](Step& s) {
         s.params.max_pages_per_seq = (s.plan.max_context - 1) / s.params.page_size;
         REQUIRE(int64_t(s.params.max_pages_per_seq) * s.params.page_size < s.plan.max_context);
       }},
      {"max_pages_per_seq 0", "max_pages_per_seq", [](Step& s) { s.params.max_pages_per_seq = 0; }},
      {"num_pages 0 (not given)", "num_pages", [](Step& s) { s.params.num_pages = 0; }},
      {"num_pages -1", "num_pages", [](Step& s) { s.params.num_pages = -1; }},
      {"block_table_stride < max_pages_per_seq", "block_table_stride",
       [](Step& s) { s.params.block_table_stride = s.params.max_pages_per_seq - 1; }},
      {"block_table_stride 0", "block_table_stride", [](Step& s) { s.params.block_table_stride = 0; }},
      // Workspace.
      {"workspace_bytes one short", "workspace_bytes", [](Step& s) { s.workspace_bytes -= 1; }},
      {"workspace_bytes 0", "workspace_bytes", [](Step& s) { s.workspace_bytes = 0; }},
      // Host copy of the lengths.
      {"seq_lens[3] = -1", "seq_lens", [](Step& s) { s.host_lens[3] = -1; }},
      {"seq_lens[7] = INT_MIN", "seq_lens", [](Step& s) { s.host_lens[7] = std::numeric_limits<int32_t>::min(); }},
      {"seq_lens[0] > max_context", "seq_lens", [](Step& s) { s.host_lens[0] = s.plan.max_context + 1; }},
      // Plan.
      {"plan.chunk_tokens not a multiple of kChunkMultiple", "plan.chunk_tokens",
       [](Step& s) { s.plan.chunk_tokens += Config::kChunkMultiple / 2; }},
      {"plan.chunk_tokens 0", "plan.chunk_tokens", [](Step& s) { s.plan.chunk_tokens = 0; }},
      {"plan.chunk_tokens < kChunkMultiple", "plan.chunk_tokens",
       [](Step& s) { s.plan.chunk_tokens = Config::kChunkMultiple / 2; }},
      {"plan.chunk_tokens negative", "plan.chunk_tokens",
       [](Step& s) { s.plan.chunk_tokens = -Config::kChunkMultiple; }},
      {"plan.num_chunks one too many", "plan.num_chunks", [](Step& s) { s.plan.num_chunks += 1; }},
      {"plan.num_chunks one too few", "plan.num_chunks", [](Step& s) { s.plan.num_chunks -= 1; }},
      {"plan.num_chunks 0", "plan.num_chunks", [](Step& s) { s.plan.num_chunks = 0; }},
      {"plan.max_batch 0", "plan.max_batch", [](Step& s) { s.plan.max_batch = 0; }},
      {"plan.max_context 0", "plan.max_context", [](Step& s) { s.plan.max_context = 0; }},
      {"plan.max_batch over the grid limit", "plan.max_batch", [](Step& s) { s.plan.max_batch = 70000; }},
      {"plan.max_context + chunk_tokens wraps an int", "plan.max_context", [](Step& s) {
         s.plan.max_context = INT32_MAX - s.plan.chunk_tokens + 1;
         s.plan.num_chunks = int((int64_t(s.plan.max_context) + s.plan.chunk_tokens - 1) / s.plan.chunk_tokens);
       }},
      // Each scale fine alone, their product not representable in fp32.
      {"softmax_scale * k_scale overflows", "softmax_scale", [](Step& s) {
         s.params.softmax_scale = 1e20f;
         s.params.k_scale = 1e20f;
       }},
  };
  // Scales: NaN, ±inf, 0, -0, negative.
  struct Scale {
    const char* field;
    float DecodeParams::*member;
  };
  for (const Scale scale : {Scale{"k_scale", &DecodeParams::k_scale}, Scale{"v_scale", &DecodeParams::v_scale},
                            Scale{"softmax_scale", &DecodeParams::softmax_scale}}) {
    for (const float bad : {kNaN, kInf, -kInf, 0.f, -0.f, -1.f}) {
      const auto member = scale.member;
      b.push_back({std::string(scale.field) + " = " + std::to_string(bad), scale.field,
                   [=](Step& s) { s.params.*member = bad; }});
    }
  }
  return b;
}

template <class Config>
void check_every_field(int page_size) {
  INFO("Config: D " << Config::kHeadDim << ", " << KvTraits<Config::kKv>::kName << ", " << Config::kWarps
                    << " warps, page " << Config::kPageSize << "; run-time page_size " << page_size);
  {
    const Step s = valid_step<Config>(page_size);
    const Status ok = run<Config>(s);
    INFO("valid step: " << ok.message());
    REQUIRE(ok.ok());
    REQUIRE(ok.code() == StatusCode::kOk);
    REQUIRE(ok.field().empty());
    REQUIRE(ok.message().empty());
    REQUIRE(s.plan.num_chunks > 1);  // so that the workspace holds partials and can be short
  }
  for (const Breakage& b : breakages<Config>()) {
    Step s = valid_step<Config>(page_size);
    b.apply(s);
    const Status st = run<Config>(s);
    INFO("broken: " << b.what << " -> " << st.message());
    CHECK_FALSE(st.ok());
    CHECK(st.code() == StatusCode::kInvalidArgument);
    CHECK(st.field() == b.field);
    CHECK(st.message().size() > b.field.size() + 2);  // "field: why", the why non-empty
    CHECK(st.message().rfind(b.field + ": ", 0) == 0);
  }
}

}  // namespace

TEST_CASE("validate: a valid step passes; every field broken alone is named, E5M2 D128", "[validate]") {
  using Config = DecodeConfig<128, KvType::kE5M2>;
  check_every_field<Config>(16);
  check_every_field<Config>(800);
  check_every_field<Config>(1);
}

TEST_CASE("validate: every field, fp16 D256", "[validate]") {
  check_every_field<DecodeConfig<256, KvType::kFp16>>(16);
  check_every_field<DecodeConfig<256, KvType::kFp16>>(784);
}

TEST_CASE("validate: every field, fp16 D128 2 stages", "[validate]") {
  // D = 256 takes one stage only (two spill); D = 128 fp16 takes two, at the register limit.
  using Config = DecodeConfig<128, KvType::kFp16, opt::Sm70Stages<2>>;
  static_assert(Config::kStages == 2, "this case is about a two-stage Config");
  check_every_field<Config>(16);
  check_every_field<Config>(784);
}

TEST_CASE("validate: every field, E5M2 D64 with a compile-time page of 16", "[validate]") {
  using Config = DecodeConfig<64, KvType::kE5M2, opt::Warps<2>, opt::PageSize<16>>;
  check_every_field<Config>(16);
}

TEST_CASE("validate: a page size other than the Config's compile-time one is rejected", "[validate]") {
  using Config = DecodeConfig<64, KvType::kE5M2, opt::Warps<2>, opt::PageSize<16>>;
  for (const int page_size : {8, 17, 32, 800}) {
    INFO("page_size " << page_size);
    Step s = valid_step<Config>(16);
    s.params.page_size = page_size;
    s.params.page_stride = int64_t(page_size) * s.params.token_stride;
    s.params.max_pages_per_seq = (s.plan.max_context + page_size - 1) / page_size;
    s.params.block_table_stride = s.params.max_pages_per_seq;
    const Status st = run<Config>(s);
    CHECK_FALSE(st.ok());
    CHECK(st.field() == "page_size");
    CHECK_FALSE(st.message().empty());
    // The same step is fine for a run-time page Config.
    CHECK(run<DecodeConfig<64, KvType::kE5M2, opt::Warps<2>>>(s).ok());
  }
}

TEST_CASE("validate: what is allowed stays allowed", "[validate]") {
  using Config = DecodeConfig<128, KvType::kE5M2>;
  auto expect_ok = [](const char* what, const Step& s, bool with_host_lens = true) {
    const Status st = run<Config>(s, with_host_lens);
    INFO(what << ": " << st.message());
    CHECK(st.ok());
  };
  Step s = valid_step<Config>();
  s.params.lse = nullptr;
  expect_ok("lse null", s);

  s = valid_step<Config>();
  expect_ok("no host copy of the lengths", s, false);
  s.host_lens.assign(8, -5);
  expect_ok("bad host lengths are not read without the pointer", s, false);

  s = valid_step<Config>();
  s.params.batch = 3;
  s.host_lens[5] = -1;  // past the batch: not read
  expect_ok("batch below capacity, lengths past it ignored", s);

  s = valid_step<Config>();
  s.params.batch = 1;
  s.params.block_table_stride = 0;  // one row: its stride is never used
  expect_ok("one sequence, block table stride 0", s);

  s = valid_step<Config>();
  s.workspace_bytes = s.plan.workspace_bytes + 1000;
  expect_ok("more workspace than needed", s);

  s = valid_step<Config>();
  s.params.q_head_stride = 3 * 128 + 8;  // padded rows, 16-byte aligned
  s.params.q_batch_stride = 12 * s.params.q_head_stride;
  s.params.out_head_stride = 129;  // out is written 2 bytes at a time
  s.params.out_batch_stride = 12 * 129 + 1;
  s.params.lse = nudge(s.params.lse, 4);
  expect_ok("padded q and out rows, lse 4-byte aligned", s);

  s = valid_step<Config>();
  s.params.head_stride = 128 + 16;  // padded head rows, vLLM [pages, 2, page, Hkv, D] strides
  s.params.token_stride = 2 * s.params.head_stride;
  s.params.page_stride = 2 * 16 * s.params.token_stride;
  s.params.max_pages_per_seq = 300;  // longer than needed
  s.params.block_table_stride = 512;
  s.params.k_scale = 1e-20f;
  s.params.softmax_scale = 1e20f;
  expect_ok("padded cache strides, longer block table, extreme finite scales", s);

  s = valid_step<Config>();
  s.params.batch = 0;  // nothing to do: no pointer is looked at
  s.params.q = s.params.out = nullptr;
  s.params.block_table = s.params.seq_lens = nullptr;
  s.workspace = nullptr;
  expect_ok("batch 0", s);

  // A dimension of one row: its stride is never used, and framework views carry any.
  s = valid_step<Config>();
  s.params.num_kv_heads = 1;
  s.plan = make_plan<Config>(8, 4096, 1, 6, 80);
  s.workspace_bytes = s.plan.workspace_bytes;
  s.params.head_stride = 3;
  expect_ok("one KV head, head_stride 3", s);
  s.params.page_size = 1;
  s.params.max_pages_per_seq = 4096;
  s.params.block_table_stride = 4096;
  s.params.num_pages = 8 * 4096;
  s.params.page_stride = 128;
  s.params.token_stride = 5;
  expect_ok("one token a page, token_stride 5", s);
  s.params.num_pages = 1;
  s.params.page_stride = 0;
  expect_ok("one page in the pool, page_stride 0", s);
  s.params.page_stride = 7;
  expect_ok("one page in the pool, page_stride 7", s);
  s.params.num_pages = 2;
  CHECK(run<Config>(s).field() == "page_stride");  // two pages: the stride matters again

  s = valid_step<Config>();
  s.host_lens.assign(8, s.plan.max_context);
  expect_ok("every length at max_context", s);
  s.host_lens.assign(8, 0);
  expect_ok("every length 0", s);
}

TEST_CASE("validate: a q_batch_stride that breaks 16-byte q rows is rejected", "[validate]") {
  using Config = DecodeConfig<128, KvType::kE5M2>;
  for (const int64_t delta : {1, 2, 4, -4}) {
    Step s = valid_step<Config>();
    s.params.q_batch_stride += delta;
    const Status st = run<Config>(s);
    INFO("q_batch_stride + " << delta << " -> " << st.message());
    CHECK_FALSE(st.ok());
    CHECK(st.field() == "q_batch_stride");
    CHECK_FALSE(st.message().empty());
  }
}

TEST_CASE("validate: the first problem is reported when several fields are bad", "[validate]") {
  using Config = DecodeConfig<128, KvType::kE5M2>;
  Step s = valid_step<Config>();
  s.params.q = nullptr;
  s.params.k_scale = kNaN;
  s.workspace = nullptr;
  const Status st = run<Config>(s);
  CHECK_FALSE(st.ok());
  CHECK((st.field() == "q" || st.field() == "k_scale" || st.field() == "workspace"));
}

TEST_CASE("make_decode_plan rejects capacities past the grid and int limits", "[validate]") {
  using Config = DecodeConfig<256, KvType::kE5M2>;
  DecodePlan plan;
  CHECK(make_decode_plan<Config>(65536, 1024, 1, 6, 80, &plan).field() == "max_batch");
  CHECK(make_decode_plan<Config>(16, 1024, 40000, 12, 80, &plan).field() == "num_kv_heads");
  // The largest context (a chunk's end must still fit in an int): chunk arithmetic in 64
  // bits, a positive chunk count that covers it.
  const int largest = std::numeric_limits<int>::max() - 64 * Config::kCtaTokens;
  const Status st = make_decode_plan<Config>(1, largest, 1, 6, 80, &plan);
  INFO(st.message());
  REQUIRE(st.ok());
  CHECK(plan.num_chunks > 0);
  CHECK(int64_t(plan.num_chunks) * plan.chunk_tokens >= int64_t(largest));
  CHECK(validate_plan<Config>(plan).ok());
}

TEST_CASE("validate accepts other legal layouts of q, out and the cache", "[validate]") {
  using Config = DecodeConfig<128, KvType::kE5M2>;
  {  // q and out head-major ([Hq, B, D]) with padding
    Step s = valid_step<Config>();
    s.params.q_batch_stride = 128 + 8;
    s.params.q_head_stride = (128 + 8) * 8 + 16;
    s.params.out_batch_stride = 128;
    s.params.out_head_stride = 128 * 8;
    CHECK(run<Config>(s).ok());
  }
  {  // cache head-major within a page (HND): token rows D apart, heads a page apart
    Step s = valid_step<Config>();
    s.params.token_stride = 128;
    s.params.head_stride = int64_t(s.params.page_size) * 128;
    s.params.page_stride = 2 * s.params.head_stride;
    CHECK(run<Config>(s).ok());
  }
  {  // one sequence, one head, one page: strides that are never used may be anything
    Step s = valid_step<Config>(4096);
    s.params.batch = 1;
    s.params.q_batch_stride = 3;  // never used with one sequence: neither aligned nor refused
    s.params.out_batch_stride = 0;
    s.params.max_pages_per_seq = 1;
    s.params.page_stride = 0;
    CHECK(run<Config>(s).ok());
  }
}

TEST_CASE("make_decode_plan gives a plan validate accepts, for several Configs and capacities", "[validate]") {
  auto check = [](auto config_tag, int max_batch, int max_context, int hkv, int group, int sms) {
    using Config = decltype(config_tag);
    const DecodePlan plan = make_plan<Config>(max_batch, max_context, hkv, group, sms);
    INFO("D " << Config::kHeadDim << " warps " << Config::kWarps << ", B " << max_batch << " ctx " << max_context
              << " Hkv " << hkv << " G " << group << " SMs " << sms << ": chunk " << plan.chunk_tokens);
    const Status st = validate_plan<Config>(plan);
    CHECK(st.ok());
    CHECK(plan.chunk_tokens % Config::kCtaTokens == 0);  // the SM70 body's rule: whole rounds
    CHECK(int64_t(plan.num_chunks) * plan.chunk_tokens >= max_context);
    CHECK(int64_t(plan.num_chunks - 1) * plan.chunk_tokens < max_context);
  };
  for (const int ctx : {1, 127, 128, 129, 4096, 17800, 262144})
    for (const int batch : {1, 4, 16}) {
      check(DecodeConfig<256, KvType::kE5M2>{}, batch, ctx, 1, 6, 80);
      check(DecodeConfig<128, KvType::kFp16, opt::Warps<2>>{}, batch, ctx, 8, 16, 132);
      check(DecodeConfig<64, KvType::kE5M2, opt::Warps<8>, opt::PageSize<16>>{}, batch, ctx, 4, 1, 1);
    }
}

TEST_CASE("validate names q_batch_stride when the batch stride breaks 16-byte q rows",
          "[validate]") {
  using Config = DecodeConfig<128, KvType::kE5M2>;
  Step s = valid_step<Config>();
  s.params.q_batch_stride += 4;  // 8 bytes: rows of sequence 1.. misaligned
  const Status st = run<Config>(s);
  REQUIRE_FALSE(st.ok());  // rejected (also checked above); only the name is wrong
  CHECK(st.field() == "q_batch_stride");
}

TEST_CASE("validate rejects a plan whose workspace is too small for this Config's head dim",
          "[validate]") {
  // A plan made for D = 128 launched with a D = 256 Config (same kCtaTokens): every check
  // passes, the workspace it sizes holds half the partial O the kernel writes.
  using Small = DecodeConfig<128, KvType::kE5M2>;
  using Big = DecodeConfig<256, KvType::kE5M2>;
  static_assert(Small::kCtaTokens == Big::kCtaTokens, "same chunking");
  Step s = valid_step<Big>();
  s.plan = make_plan<Small>(8, 4096, 2, 6, 80);
  s.workspace_bytes = s.plan.workspace_bytes;
  REQUIRE(s.plan.num_chunks > 1);
  REQUIRE(s.workspace_bytes < plan_workspace_bytes(8, 12, s.plan.num_chunks, Big::kHeadDim));
  const Status st = run<Big>(s);
  CHECK_FALSE(st.ok());
  CHECK(st.field() == "plan.workspace_bytes");
}

TEST_CASE("groups larger than one M tile: any G is planned and validated, up to the grid limit",
          "[validate]") {
  using Config = DecodeConfig<128, KvType::kE5M2>;
  for (const int group : {9, 16, 17, 24, 64, 100}) {
    Step s = valid_step<Config>();
    s.plan = make_plan<Config>(8, 4096, 2, group, 80);
    s.workspace_bytes = s.plan.workspace_bytes;
    s.params.group_size = group;
    s.params.q_batch_stride = s.params.out_batch_stride = int64_t(2) * group * Config::kHeadDim;
    const Status st = run<Config>(s);
    INFO("G " << group << ": " << st.message());
    CHECK(st.ok());
  }
  DecodePlan plan;  // 8192 KV heads x 8 M tiles of a group of 64 = 65536 > 65535
  const Status st = make_decode_plan<Config>(1, 4096, 8192, 64, 80, &plan);
  CHECK(st.field() == "num_kv_heads");
}

TEST_CASE("make_decode_plan bounds max_context so that a chunk's end cannot wrap an int",
          "[validate]") {
  using Config = DecodeConfig<128, KvType::kE5M2>;
  DecodePlan plan;
  const int chunk = 64 * Config::kCtaTokens;
  CHECK(make_decode_plan<Config>(1, INT32_MAX - chunk, 1, 6, 80, &plan, chunk).ok());
  const Status st = make_decode_plan<Config>(1, INT32_MAX - chunk + 1, 1, 6, 80, &plan, chunk);
  CHECK(st.field() == "max_context");
  CHECK(make_decode_plan<Config>(1, INT32_MAX, 1, 6, 80, &plan).field() == "max_context");
}

// The variant's run-time values: each off passes on any Config; on, it needs a Config with
// its flag, and a value in range; each bad one is named.
TEST_CASE("validate: the variant's values, each named when it is bad", "[validate]") {
  using Plain = DecodeConfig<128, KvType::kE5M2>;
  using All = DecodeConfig<128, KvType::kE5M2, opt::Variant<kAllVariantFlags>>;
  using WindowOnly = DecodeConfig<128, KvType::kE5M2, opt::Variant<kSlidingWindow>>;
  const float* sinks = fake<const float>(0x7f0000060000);
  {  // all off: every Config takes it
    CHECK(run<Plain>(valid_step<Plain>()).ok());
    CHECK(run<All>(valid_step<All>()).ok());
  }
  {  // all on, with a Config that has them
    Step s = valid_step<All>();
    s.params.sliding_window = 100;
    s.params.logit_softcap = 30.f;
    s.params.sinks = sinks;
    CHECK(run<All>(s).ok());
  }
  const std::vector<Breakage> broken = {
      {"a window given to a Config without one", "sliding_window", [](Step& s) { s.params.sliding_window = 4; }},
      {"a soft-cap given to a Config without one", "logit_softcap", [](Step& s) { s.params.logit_softcap = 5.f; }},
      {"sinks given to a Config without them", "sinks",
       [sinks](Step& s) { s.params.sinks = sinks; }},
  };
  for (const Breakage& b : broken) {
    INFO(b.what);
    Step plain = valid_step<Plain>();
    b.apply(plain);
    CHECK(run<Plain>(plain).field() == b.field);
    Step window_only = valid_step<WindowOnly>();
    b.apply(window_only);
    CHECK((b.field == "sliding_window" ? run<WindowOnly>(window_only).ok()
                                       : run<WindowOnly>(window_only).field() == b.field));
  }
  const std::vector<Breakage> bad_values = {
      {"a negative window", "sliding_window", [](Step& s) { s.params.sliding_window = -1; }},
      {"a negative soft-cap", "logit_softcap", [](Step& s) { s.params.logit_softcap = -1.f; }},
      {"a NaN soft-cap", "logit_softcap", [](Step& s) { s.params.logit_softcap = kNaN; }},
      {"an infinite soft-cap", "logit_softcap",
       [](Step& s) { s.params.logit_softcap = std::numeric_limits<float>::infinity(); }},
      {"a soft-cap whose log2(e) multiple overflows", "logit_softcap", [](Step& s) { s.params.logit_softcap = 3e38f; }},
      {"a soft-cap so small that the score's factor overflows", "logit_softcap",
       [](Step& s) { s.params.logit_softcap = std::numeric_limits<float>::denorm_min(); }},
      {"misaligned sinks", "sinks", [sinks](Step& s) { s.params.sinks = nudge(sinks, 2); }},
  };
  for (const Breakage& b : bad_values) {
    INFO(b.what);
    Step s = valid_step<All>();
    b.apply(s);
    CHECK(run<All>(s).field() == b.field);
  }
}

TEST_CASE("a plan for windows: chunks over the window's span, and the window bounded by it", "[validate]") {
  using All = DecodeConfig<128, KvType::kE5M2, opt::Variant<kAllVariantFlags>>;
  using Plain = DecodeConfig<128, KvType::kE5M2>;
  CHECK(plan_span(4096, 0) == 4096);
  CHECK(plan_span(4096, 100) == 100 + kWindowChunkAlign - 1);
  CHECK(plan_span(4096, 4090) == 4096);
  CHECK(plan_span(100, 1) == 16);
  DecodePlan plan;
  REQUIRE(make_decode_plan<All>(8, 4096, 2, 6, 80, &plan, 64, 4, 1, 100).ok());
  CHECK(plan.max_window == 100);
  CHECK(plan.num_chunks == 2);  // 115 keys at most: two chunks of 64
  CHECK(make_decode_plan<Plain>(8, 4096, 2, 6, 80, &plan, 64, 4, 1, 100).field() == "max_window");
  CHECK(make_decode_plan<All>(8, 4096, 2, 6, 80, &plan, 64, 4, 1, -1).field() == "max_window");

  Step s = valid_step<All>();
  REQUIRE(make_decode_plan<All>(8, 4096, 2, 6, 80, &s.plan, 64, 4, 1, 100).ok());
  s.workspace_bytes = s.plan.workspace_bytes;
  s.params.sliding_window = 100;
  CHECK(run<All>(s).ok());
  s.params.sliding_window = 1;
  CHECK(run<All>(s).ok());
  s.params.sliding_window = 101;  // more than the plan's chunks cover
  CHECK(run<All>(s).field() == "sliding_window");
  s.params.sliding_window = 0;  // the whole context: neither
  CHECK(run<All>(s).field() == "sliding_window");
  s.params.sliding_window = 100;
  s.plan.num_chunks = 64;  // a plan whose chunks are not its span's
  CHECK(run<All>(s).field() == "plan.num_chunks");
  s.plan.num_chunks = 2;
  s.plan.max_window = 5;  // the plan changed under its chunk count
  CHECK(run<All>(s).field() == "plan.num_chunks");
  DecodePlan plain_plan = s.plan;
  plain_plan.max_window = 100;
  Step plain = valid_step<Plain>();
  plain.plan = plain_plan;
  CHECK(run<Plain>(plain).field() == "plan.max_window");
}

// A Config spells only the options it changes, in any order; each lands where it should.
static_assert(DecodeConfig<128, KvType::kE5M2, opt::PageSize<16>, opt::Warps<2>>::kWarps == 2 &&
                  DecodeConfig<128, KvType::kE5M2, opt::Warps<2>, opt::PageSize<16>>::kPageSize == 16,
              "options in any order");
static_assert(DecodeConfig<128, KvType::kE5M2>::kWarps == 4 && DecodeConfig<128, KvType::kE5M2>::kStages == 1 &&
                  DecodeConfig<128, KvType::kE5M2>::kPageSize == 0 &&
                  DecodeConfig<128, KvType::kE5M2>::kQo == ActType::kFp16 &&
                  DecodeConfig<128, KvType::kE5M2>::kChecksPageIds &&
                  DecodeConfig<128, KvType::kE5M2>::Variant::kVariantFlags == 0u,
              "the defaults");
static_assert(DecodeConfig<128, KvType::kE5M2, opt::Variant<kSlidingWindow | kAttentionSinks>>::Variant::kSinks &&
                  !DecodeConfig<128, KvType::kE5M2, opt::Variant<kSlidingWindow>>::Variant::kSinks,
              "the variant's flags");
static_assert(DecodeConfig<128, KvType::kE5M2>::kMaxQueryLen == 1 && !DecodeConfig<128, KvType::kE5M2>::kMultiToken &&
                  DecodeConfig<128, KvType::kE5M2, opt::MaxQueryLen<16>>::kMultiToken,
              "the query length option");

// Multi-token queries: q_indptr and max_q_len against the Config and the plan, each named.
TEST_CASE("validate: query tokens a sequence, against the Config and the plan", "[validate]") {
  using Plain = DecodeConfig<128, KvType::kE5M2>;
  using Multi = DecodeConfig<128, KvType::kE5M2, opt::MaxQueryLen<8>>;
  const int32_t* indptr = fake<const int32_t>(0x7f0000070000);
  DecodePlan plan;
  CHECK(make_decode_plan<Plain>(8, 4096, 2, 6, 80, &plan, 0, 4, 1, 0, 2).field() == "max_q_len");
  CHECK(make_decode_plan<Multi>(8, 4096, 2, 6, 80, &plan, 0, 4, 1, 0, 9).field() == "max_q_len");
  CHECK(make_decode_plan<Multi>(8, 4096, 2, 6, 80, &plan, 0, 4, 1, 0, 0).field() == "max_q_len");
  CHECK(make_decode_plan<Multi>(9000, 4096, 2, 6, 80, &plan, 0, 4, 1, 0, 8).field() == "max_q_len");  // grid y
  REQUIRE(make_decode_plan<Multi>(8, 4096, 2, 6, 80, &plan, 64, 4, 1, 0, 4).ok());
  CHECK(plan.max_q_len == 4);
  // Partials for 8 sequences x 4 tokens: four times the rows of a one-token plan.
  CHECK(plan.workspace_bytes == plan_workspace_bytes(32, 12, plan.num_chunks, 128));

  Step s = valid_step<Multi>();
  s.plan = plan;
  s.workspace_bytes = plan.workspace_bytes;
  CHECK(run<Multi>(s).ok());  // one token a sequence, without q_indptr
  s.params.q_indptr = indptr;
  s.params.max_q_len = 4;
  CHECK(run<Multi>(s).ok());
  s.params.max_q_len = 5;  // more than the plan's
  CHECK(run<Multi>(s).field() == "max_q_len");
  s.params.max_q_len = 0;
  CHECK(run<Multi>(s).field() == "max_q_len");
  s.params.max_q_len = 4;
  s.params.q_indptr = nudge(indptr, 2);
  CHECK(run<Multi>(s).field() == "q_indptr");
  s.params.q_indptr = nullptr;  // several tokens need their rows
  CHECK(run<Multi>(s).field() == "q_indptr");
  s.params.q_indptr = indptr;
  s.params.q_batch_stride = 4;  // rows of 16-byte q: breaks with several rows
  CHECK(run<Multi>(s).field() == "q_batch_stride");

  Step plain = valid_step<Plain>();
  plain.params.q_indptr = indptr;  // the Config takes one token a sequence
  CHECK(run<Plain>(plain).field() == "q_indptr");
  plain.params.q_indptr = nullptr;
  plain.params.max_q_len = 2;
  CHECK(run<Plain>(plain).field() == "max_q_len");
  plain.params.max_q_len = 1;
  plain.plan.max_q_len = 2;  // a plan the Config cannot take
  CHECK(run<Plain>(plain).field() == "plan.max_q_len");
}

// How a KV head's rows (G · q_len) are cut into CTAs: the SM80 body of a multi-token Config
// shares each K/V tile between the fewest warps (a divisor of the Config's) whose 8-row tiles
// hold them all, up to 8 · Warps rows a CTA; else 8 rows a CTA.
TEST_CASE("row_tiling: warps sharing a tile, rows a CTA, CTAs a KV head", "[config]") {
  using Plain = DecodeConfig<128, KvType::kE5M2, opt::Warps<8>>;
  using Multi8 = DecodeConfig<128, KvType::kE5M2, opt::Warps<8>, opt::MaxQueryLen<16>>;
  using Multi6 = DecodeConfig<128, KvType::kE5M2, opt::Warps<6>, opt::MaxQueryLen<16>>;
  auto tiling = [](RowTiling t) { return std::vector<int>{t.row_warps, t.rows_per_cta, t.m_tiles}; };
  CHECK(tiling(row_tiling<Plain>(12, 1, true)) == std::vector<int>{1, 8, 2});
  CHECK(tiling(row_tiling<Multi8>(12, 1, false)) == std::vector<int>{1, 8, 2});  // the SM70 body
  CHECK(tiling(row_tiling<Multi8>(12, 4, false)) == std::vector<int>{1, 8, 6});
  CHECK(tiling(row_tiling<Multi8>(1, 1, true)) == std::vector<int>{1, 8, 1});
  CHECK(tiling(row_tiling<Multi8>(12, 1, true)) == std::vector<int>{2, 16, 1});
  CHECK(tiling(row_tiling<Multi8>(6, 4, true)) == std::vector<int>{4, 32, 1});
  CHECK(tiling(row_tiling<Multi8>(8, 8, true)) == std::vector<int>{8, 64, 1});
  CHECK(tiling(row_tiling<Multi8>(8, 16, true)) == std::vector<int>{8, 64, 2});
  CHECK(tiling(row_tiling<Multi8>(5, 13, true)) == std::vector<int>{8, 64, 2});
  CHECK(tiling(row_tiling<Multi6>(4, 3, true)) == std::vector<int>{2, 16, 1});
  CHECK(tiling(row_tiling<Multi6>(4, 5, true)) == std::vector<int>{3, 24, 1});  // 6's divisors: 1, 2, 3, 6
  CHECK(tiling(row_tiling<Multi6>(4, 7, true)) == std::vector<int>{6, 48, 1});
  for (int group = 1; group <= 16; ++group)
    for (int q_len = 1; q_len <= 16; ++q_len) {
      const RowTiling t = row_tiling<Multi6>(group, q_len, true);
      INFO("G " << group << " q_len " << q_len);
      CHECK(6 % t.row_warps == 0);
      CHECK(int64_t(t.m_tiles) * t.rows_per_cta >= group * q_len);
      CHECK(int64_t(t.m_tiles - 1) * t.rows_per_cta < group * q_len);
    }
}

// A multi-token plan's chunks cover the first token's window too: max_q_len - 1 more keys.
TEST_CASE("a plan for windows and several query tokens covers the first token's window", "[validate]") {
  CHECK(plan_span(4096, 100, 1) == plan_span(4096, 100));
  CHECK(plan_span(4096, 100, 16) == 100 + 15 + kWindowChunkAlign - 1);
  CHECK(plan_span(120, 100, 16) == 120);
  using All = DecodeConfig<128, KvType::kE5M2, opt::Variant<kAllVariantFlags>, opt::MaxQueryLen<16>>;
  DecodePlan plan;
  REQUIRE(make_decode_plan<All>(8, 4096, 2, 6, 80, &plan, 64, 4, 1, 100, 16).ok());
  CHECK(plan.num_chunks == (100 + 15 + 15 + 63) / 64);
  Step s = valid_step<All>();
  s.plan = plan;
  s.workspace_bytes = plan.workspace_bytes;
  CHECK(run<All>(s).field() == "sliding_window");  // the plan is for windows
  s.params.sliding_window = 100;
  CHECK(run<All>(s).ok());
}
