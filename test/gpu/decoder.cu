// Decoder: the run-time entry point picks the Config of its list that fits the shape (a
// compile-time page size when one matches, else the run-time one), owns plan and workspace,
// decodes like the Config path (against the float64 reference, eagerly and replayed in a
// CUDA graph while the lengths change), and names the field when nothing fits.
#include "gpu/decode_harness.cuh"

#include <algorithm>
#include <vector>

namespace {

using List = vxqa::ConfigList<vxqa::DecodeConfig<64, vxqa::KvType::kE5M2, vxqa::opt::PageSize<16>>,
                              vxqa::DecodeConfig<64, vxqa::KvType::kE5M2>,
                              vxqa::DecodeConfig<128, vxqa::KvType::kFp16, vxqa::opt::Warps<2>>,
                              vxqa::DecodeConfig<128, vxqa::KvType::kE4M3>,
                              vxqa::DecodeConfig<512, vxqa::KvType::kE5M2>,
                              vxqa::DecodeConfig<64, vxqa::KvType::kE5M2, vxqa::opt::QoType<vxqa::ActType::kBf16>>>;

vxqa::DecoderShape shape_of(const vxqa::reference::RandomProblem& p, int max_context) {
  vxqa::DecoderShape s;
  s.head_dim = p.head_dim;
  s.cache_type = vxqa::problem_kv_type(p.format);
  s.page_size = p.page_size;
  s.num_kv_heads = p.kv_heads;
  s.group_size = p.group;
  s.max_batch = p.batch;
  s.max_context = max_context;
  return s;
}

// The plan's capacity: the longest sequence (the problem's block table holds no more).
int max_length(const vxqa::reference::RandomProblem& p) {
  int len = 1;
  for (int l : p.seq_lens) len = std::max(len, l);
  return len;
}

// One eager step through `launch(params)` on NaN-poisoned out and lse; `read_errors(&bits)`
// reads the error word after it.
template <class Launch, class ReadErrors>
vxqa_test::DecodeResult run_poisoned(const vxqa::reference::RandomProblem& p, const vxqa_test::DeviceProblem& d,
                                     vxqa::ActType qo, Launch launch, ReadErrors read_errors) {
  vxqa_test::DeviceBuffer<uint16_t> out(p.q.size());
  vxqa_test::DeviceBuffer<float> lse(size_t(p.batch) * p.query_heads());
  out.poison(vxqa_test::kNanPoison);
  lse.poison(vxqa_test::kNanPoison);
  vxqa::DecodeParams params = vxqa_test::make_params(p, d, out.get(), lse.get());
  params.qo_type = qo;
  const vxqa::Status run = launch(params);
  INFO(run.message());
  REQUIRE(run.ok());
  VXQA_CUDA_CHECK_LAUNCH();
  vxqa_test::DecodeResult r;
  r.out = out.download();
  r.lse = lse.download();
  REQUIRE(read_errors(&r.errors).ok());
  return r;
}

}  // namespace

TEST_CASE("Decoder picks the Config that fits and decodes like it", "[decoder]") {
  struct Want {
    int head_dim, page;
    vxqa::reference::KvFormat format;
    bool bf16;  // q and out
    const char* config;
  };
  const Want cases[] = {{64, 16, vxqa::reference::KvFormat::kE5M2, false, "D64 e5m2 fp16 W4 page16"},
                        {64, 7, vxqa::reference::KvFormat::kE5M2, false, "D64 e5m2 fp16 W4 page*"},
                        {128, 32, vxqa::reference::KvFormat::kFp16, false, "D128 fp16 fp16 W2 page*"},
                        {128, 16, vxqa::reference::KvFormat::kE4M3, false, "D128 e4m3 fp16 W4 page*"},
                        {512, 16, vxqa::reference::KvFormat::kE5M2, false, "D512 e5m2 fp16 W4 page*"},
                        {64, 16, vxqa::reference::KvFormat::kE5M2, true, "D64 e5m2 bf16 W4 page*"}};
  uint64_t seed = 1200;
  for (const Want& w : cases) {
    vxqa::reference::RandomProblemOptions o;
    o.head_dim = w.head_dim;
    o.format = w.format;
    o.stride_align = w.format == vxqa::reference::KvFormat::kFp16 ? 8 : 16;
    o.page_size = w.page;
    o.batch = 3;
    o.kv_heads = 2;
    o.group = 3;
    o.max_seq_len = 700;
    auto p = vxqa::reference::make_random_problem(o, seed++);
    const vxqa::ActType qo = w.bf16 ? vxqa::ActType::kBf16 : vxqa::ActType::kFp16;
    const std::vector<uint16_t> q_bf16 = w.bf16 ? vxqa_test::round_q_to_bf16(p) : std::vector<uint16_t>();
    vxqa_test::DeviceProblem d(p);
    if (w.bf16) d.q.upload(q_bf16);
    vxqa::Decoder<List> decoder;
    vxqa::DecoderShape shape = shape_of(p, max_length(p));
    shape.qo_type = qo;
    const vxqa::Status s = decoder.init(shape);
    INFO(s.message());
    REQUIRE(s.ok());
    REQUIRE(decoder.config_name() == w.config);
    const vxqa_test::DecodeResult r = run_poisoned(
        p, d, qo, [&](const vxqa::DecodeParams& params) { return decoder.decode(params, 0); },
        [&](uint32_t* errors) { return decoder.read_errors(0, errors); });
    vxqa_test::check_against_reference(p, r, qo);
  }
}

TEST_CASE("Decoder in a CUDA graph follows the lengths at every replay", "[decoder]") {
  vxqa::reference::RandomProblemOptions o;
  o.head_dim = 64;
  o.stride_align = 16;
  o.page_size = 16;
  o.batch = 4;
  o.kv_heads = 1;
  o.group = 6;
  o.min_seq_len = 600;
  o.max_seq_len = 900;
  const auto p = vxqa::reference::make_random_problem(o, 1300);
  vxqa_test::DeviceProblem d(p);
  vxqa::Decoder<List> decoder;
  REQUIRE(decoder.init(shape_of(p, max_length(p))).ok());
  vxqa_test::DeviceBuffer<uint16_t> out(p.q.size());
  vxqa_test::DeviceBuffer<float> lse(size_t(p.batch) * p.query_heads());
  const vxqa::DecodeParams params = vxqa_test::make_params(p, d, out.get(), lse.get());
  cudaStream_t stream;
  VXQA_CUDA_CHECK(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  VXQA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const vxqa::Status captured = decoder.decode(params, stream);
  VXQA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  INFO(captured.message());
  REQUIRE(captured.ok());
  VXQA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  // Shorter lengths at each replay: the graph reads them on the device.
  auto q = p;
  for (int step = 0; step < 3; ++step) {
    for (int b = 0; b < q.batch; ++b) q.seq_lens[b] = std::max(0, p.seq_lens[b] - 137 * step - 11 * b);
    d.lens.upload(q.seq_lens);
    out.poison(vxqa_test::kNanPoison);
    lse.poison(vxqa_test::kNanPoison);
    VXQA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    VXQA_CUDA_CHECK(cudaStreamSynchronize(stream));
    vxqa_test::DecodeResult r;
    r.out = out.download();
    r.lse = lse.download();
    REQUIRE(decoder.read_errors(stream, &r.errors).ok());
    INFO("replay " << step);
    vxqa_test::check_against_reference(q, r);
  }
  VXQA_CUDA_CHECK(cudaGraphExecDestroy(exec));
  VXQA_CUDA_CHECK(cudaGraphDestroy(graph));
  VXQA_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("Decoder::choose and decode_with: the same choice with the caller's workspace", "[decoder]") {
  vxqa::reference::RandomProblemOptions o;
  o.head_dim = 64;
  o.stride_align = 16;
  o.page_size = 7;
  o.batch = 3;
  o.kv_heads = 2;
  o.group = 4;
  o.max_seq_len = 900;
  const auto p = vxqa::reference::make_random_problem(o, 1250);
  vxqa_test::DeviceProblem d(p);
  vxqa::Decoder<List>::Choice choice;
  const vxqa::Status chosen = vxqa::Decoder<List>::choose(shape_of(p, max_length(p)), &choice);
  INFO(chosen.message());
  REQUIRE(chosen.ok());
  REQUIRE(vxqa::Decoder<List>::config_name(choice) == "D64 e5m2 fp16 W4 page*");
  vxqa_test::DeviceBuffer<unsigned char> ws(choice.plan.workspace_bytes);
  const vxqa_test::DecodeResult r = run_poisoned(
      p, d, vxqa::ActType::kFp16,
      [&](const vxqa::DecodeParams& params) {
        return vxqa::Decoder<List>::decode_with(choice, params, ws.get(), choice.plan.workspace_bytes, 0);
      },
      [&](uint32_t* errors) { return vxqa::read_decode_errors(ws.get(), 0, errors); });
  vxqa_test::check_against_reference(p, r);
  // A workspace smaller than the plan's is refused, as is a choice choose() never made.
  vxqa_test::DeviceBuffer<uint16_t> out(p.q.size());
  const vxqa::DecodeParams params = vxqa_test::make_params(p, d, out.get(), nullptr);
  REQUIRE(vxqa::Decoder<List>::decode_with(choice, params, ws.get(), choice.plan.workspace_bytes - 1, 0).field() ==
          "workspace_bytes");
  REQUIRE(vxqa::Decoder<List>::decode_with(vxqa::Decoder<List>::Choice{}, params, ws.get(),
                                           choice.plan.workspace_bytes, 0).field() == "decoder");
}

TEST_CASE("Decoder names the field when no Config fits, and refuses to decode before init", "[decoder]") {
  vxqa::Decoder<List> decoder;
  vxqa::DecodeParams params;
  REQUIRE(decoder.decode(params, 0).field() == "decoder");
  vxqa::DecoderShape s;
  s.head_dim = 256;
  s.page_size = 16;
  REQUIRE(decoder.init(s).field() == "cache_type");  // never assumed
  s.cache_type = vxqa::KvType::kE5M2;
  s.num_kv_heads = 1;
  s.group_size = 1;
  s.max_batch = 1;
  s.max_context = 100;
  const vxqa::Status none = decoder.init(s);
  INFO(none.message());
  REQUIRE(none.field() == "head_dim");
  REQUIRE_FALSE(decoder.ready());
  s.head_dim = 128;  // the list has D128 with an fp16 cache, for fp16 q/out only
  s.cache_type = vxqa::KvType::kFp16;
  s.qo_type = vxqa::ActType::kBf16;
  REQUIRE(decoder.init(s).field() == "head_dim");
  s.qo_type = vxqa::ActType::kFp16;
  REQUIRE(decoder.init(s).ok());
  s.head_dim = 64;
  s.cache_type = vxqa::KvType::kE5M2;
  s.max_batch = 0;
  REQUIRE(decoder.init(s).field() == "max_batch");
}

TEST_CASE("decode reads k/v scales from device pointers when given", "[decoder]") {
  using Config = vxqa::DecodeConfig<64, vxqa::KvType::kE5M2>;
  auto o = vxqa_test::aligned_options<Config>();
  o.batch = 3;
  o.kv_heads = 2;
  o.group = 5;
  o.max_seq_len = 2000;
  o.k_scale = 0.37f;
  o.v_scale = 2.5f;
  const auto p = vxqa::reference::make_random_problem(o, 1400);
  vxqa_test::DeviceProblem d(p);
  vxqa_test::DeviceBuffer<float> scales(2);
  scales.upload({p.k_scale, p.v_scale});
  vxqa::DecodeParams params = vxqa_test::make_params(p, d, nullptr, nullptr);
  params.k_scale = params.v_scale = -1.f;  // ignored: the pointers win
  params.k_scale_ptr = scales.get();
  params.v_scale_ptr = scales.get() + 1;
  const int max_len = max_length(p), whole = (max_len + 127) / 128 * 128;
  for (int chunk : {whole, 128}) {  // one chunk (no combine) and several
    const vxqa::DecodePlan plan = vxqa_test::plan_for<Config>(p, max_len, chunk);
    INFO("chunks " << plan.num_chunks);
    vxqa_test::check_against_reference(p, vxqa_test::run_params<Config>(params, plan, p.batch));
  }
  params.k_scale_ptr = reinterpret_cast<const float*>(reinterpret_cast<const char*>(scales.get()) + 2);
  const vxqa::DecodePlan plan = vxqa_test::plan_for<Config>(p, max_len);
  vxqa_test::DeviceBuffer<unsigned char> ws(plan.workspace_bytes);
  vxqa_test::DeviceBuffer<uint16_t> out(size_t(p.batch) * p.query_heads() * Config::kHeadDim);
  params.out = out.get();  // everything valid but the misaligned scale pointer
  REQUIRE(vxqa::validate<Config>(params, plan, ws.get(), plan.workspace_bytes).field() == "k_scale_ptr");
}

// The shape's variant flags pick the Config: of those with every flag asked, the one with
// the fewest (plain when none is asked), whatever the list's order; a flag no Config has,
// or a max_window without the window, is refused by name.
TEST_CASE("Decoder picks a Config by the shape's variant flags", "[decoder]") {
  namespace opt = vxqa::opt;
  using VariantList =
      vxqa::ConfigList<vxqa::DecodeConfig<64, vxqa::KvType::kE5M2, opt::Variant<vxqa::kAllVariantFlags>>,
                       vxqa::DecodeConfig<64, vxqa::KvType::kE5M2>,
                       vxqa::DecodeConfig<64, vxqa::KvType::kE5M2, opt::Variant<vxqa::kSlidingWindow>>>;
  using Decoder = vxqa::Decoder<VariantList>;
  vxqa::DecoderShape s;
  s.head_dim = 64;
  s.cache_type = vxqa::KvType::kE5M2;
  s.page_size = 16;
  s.num_kv_heads = 2;
  s.group_size = 4;
  s.max_batch = 4;
  s.max_context = 8192;
  struct Want {
    unsigned variant;
    int max_window;
    const char* config;
  };
  const Want cases[] = {{0u, 0, "D64 e5m2 fp16 W4 page*"},
                        {vxqa::kSlidingWindow, 0, "D64 e5m2 fp16 W4 page* +window"},
                        {vxqa::kSlidingWindow, 512, "D64 e5m2 fp16 W4 page* +window"},
                        {vxqa::kAttentionSinks, 0, "D64 e5m2 fp16 W4 page* +window +softcap +sinks"},
                        {vxqa::kLogitSoftCap | vxqa::kSlidingWindow, 100,
                         "D64 e5m2 fp16 W4 page* +window +softcap +sinks"}};
  for (const Want& w : cases) {
    s.variant = w.variant;
    s.max_window = w.max_window;
    Decoder::Choice choice;
    const vxqa::Status st = Decoder::choose(s, &choice);
    INFO("variant " << w.variant << " max_window " << w.max_window << ": " << st.message());
    REQUIRE(st.ok());
    CHECK(Decoder::config_name(choice) == w.config);
    CHECK(choice.plan.max_window == w.max_window);
    if (w.max_window > 0) CHECK(choice.plan.num_chunks * choice.plan.chunk_tokens < s.max_context);
  }
  s.variant = vxqa::kSlidingWindow;
  s.max_window = -1;
  Decoder::Choice choice;
  CHECK(Decoder::choose(s, &choice).field() == "max_window");
  s.variant = 0u;
  s.max_window = 64;
  CHECK(Decoder::choose(s, &choice).field() == "max_window");
  s.max_window = 0;
  s.variant = 8u;
  CHECK(Decoder::choose(s, &choice).field() == "variant");
  using PlainOnly = vxqa::Decoder<vxqa::ConfigList<vxqa::DecodeConfig<64, vxqa::KvType::kE5M2>>>;
  s.variant = vxqa::kAttentionSinks;
  PlainOnly::Choice plain_choice;
  const vxqa::Status none = PlainOnly::choose(s, &plain_choice);
  CHECK(none.field() == "head_dim");
  CHECK(none.message().find("variant flags 4") != std::string::npos);
}

// The shape's query tokens pick the Config too: more than 8 rows a KV head (G · max_q_len)
// take a multi-token Config (one KV read for them all) when the list has one, at most 8 one
// of one token; of two multi-token Configs the one whose CTAs hold fewer row slots on the
// device (the SM80 body's row tiles: 24 rows fill 3 tiles of 6 warps, but 4 of 8 warps; 64
// rows fill one CTA of 8 warps, two of 6); a max_q_len no Config takes is refused by name.
// Then a multi-token step through the chosen Config matches the reference.
TEST_CASE("Decoder picks a Config by the shape's query tokens, and decodes several a sequence",
          "[decoder]") {
  namespace opt = vxqa::opt;
  using List = vxqa::ConfigList<vxqa::DecodeConfig<64, vxqa::KvType::kE5M2, opt::PageSize<16>>,
                                vxqa::DecodeConfig<64, vxqa::KvType::kE5M2, opt::Warps<8>, opt::MaxQueryLen<8>>,
                                vxqa::DecodeConfig<64, vxqa::KvType::kE5M2, opt::Variant<vxqa::kSlidingWindow>>,
                                vxqa::DecodeConfig<64, vxqa::KvType::kE5M2, opt::Warps<6>, opt::MaxQueryLen<8>>>;
  using Decoder = vxqa::Decoder<List>;
  int smem = 0;
  bool sm80_body = false;  // the SM70 body has 8 rows a CTA whatever its warps: a tie, the first wins
  REQUIRE(vxqa::decode_smem_bytes<vxqa::DecodeConfig<64, vxqa::KvType::kE5M2, opt::Warps<6>, opt::MaxQueryLen<8>>>(
              &smem, &sm80_body)
              .ok());
  const char* const w6_on_sm80 = sm80_body ? "D64 e5m2 fp16 W6 page* q8" : "D64 e5m2 fp16 W8 page* q8";
  vxqa::DecoderShape s;
  s.head_dim = 64;
  s.cache_type = vxqa::KvType::kE5M2;
  s.page_size = 16;
  s.num_kv_heads = 2;
  s.max_batch = 4;
  s.max_context = 2048;
  struct Want {
    int group, max_q_len;
    unsigned variant;
    const char* config;
  };
  const Want cases[] = {{4, 1, 0u, "D64 e5m2 fp16 W4 page16"},
                        {4, 2, 0u, "D64 e5m2 fp16 W8 page* q8"},  // 8 rows: one tile either way, the first
                        {12, 1, 0u, "D64 e5m2 fp16 W8 page* q8"},
                        {4, 3, 0u, "D64 e5m2 fp16 W8 page* q8"},
                        {1, 8, 0u, "D64 e5m2 fp16 W8 page* q8"},
                        {6, 4, 0u, w6_on_sm80},  // 24 rows: 24 slots with 6 warps, 32 with 8
                        {6, 8, 0u, w6_on_sm80},  // 48 rows: 48 slots, 64
                        {8, 8, 0u, "D64 e5m2 fp16 W8 page* q8"},  // 64 rows: 64 slots, 96 (two CTAs of 48)
                        {4, 3, vxqa::kSlidingWindow, "none: no Config has both"}};
  for (const Want& w : cases) {
    s.group_size = w.group;
    s.max_q_len = w.max_q_len;
    s.variant = w.variant;
    Decoder::Choice choice;
    const vxqa::Status st = Decoder::choose(s, &choice);
    INFO("G " << w.group << " max_q_len " << w.max_q_len << " variant " << w.variant << ": " << st.message());
    if (w.max_q_len > 1 && w.variant) {  // no Config has both: refused
      CHECK(st.field() == "head_dim");
      continue;
    }
    REQUIRE(st.ok());
    CHECK(Decoder::config_name(choice) == w.config);
    CHECK(choice.plan.max_q_len == w.max_q_len);
  }
  s.group_size = 4;
  s.variant = 0u;
  s.max_q_len = 9;  // above every Config's MaxQueryLen
  Decoder::Choice choice;
  CHECK(Decoder::choose(s, &choice).field() == "head_dim");
  s.max_q_len = 0;
  CHECK(Decoder::choose(s, &choice).field() == "max_q_len");

  // A ragged multi-token step through the default list's Decoder.
  vxqa::reference::RandomProblemOptions o = vxqa_test::aligned_options<vxqa::DecodeConfig<128, vxqa::KvType::kE5M2>>();
  o.kv_heads = 2;
  o.group = 6;
  o.page_size = 16;
  o.q_len = 5;
  o.ragged = true;
  o.seq_lens = {5, 40, 300, 1000};
  o.batch = 4;
  const vxqa::reference::RandomProblem p = vxqa::reference::make_random_problem(o, 14000);
  vxqa::DecoderShape shape;
  shape.head_dim = 128;
  shape.cache_type = vxqa::KvType::kE5M2;
  shape.page_size = 16;
  shape.num_kv_heads = 2;
  shape.group_size = 6;
  shape.max_batch = 4;
  shape.max_context = 1000;
  shape.max_q_len = 5;
  vxqa::Decoder<> decoder;
  const vxqa::Status init = decoder.init(shape);
  INFO(init.message());
  REQUIRE(init.ok());
  CHECK(decoder.config_name() == "D128 e5m2 fp16 W8 page* +window +softcap +sinks q16");
  const vxqa_test::DeviceProblem d(p);
  vxqa::DecodeParams params = vxqa_test::make_params(p, d, nullptr, nullptr);
  params.max_q_len = 5;
  vxqa_test::DeviceBuffer<uint16_t> out(size_t(p.num_tokens) * p.query_heads() * p.head_dim);
  vxqa_test::DeviceBuffer<float> lse(size_t(p.num_tokens) * p.query_heads());
  out.poison(vxqa_test::kNanPoison);
  lse.poison(vxqa_test::kNanPoison);
  params.out = out.get();
  params.lse = lse.get();
  const vxqa::Status decoded = decoder.decode(params, 0);
  INFO(decoded.message());
  REQUIRE(decoded.ok());
  VXQA_CUDA_CHECK_LAUNCH();
  vxqa_test::DecodeResult r;
  r.out = out.download();
  r.lse = lse.download();
  REQUIRE(decoder.read_errors(0, &r.errors).ok());
  vxqa_test::check_against_reference(p, r);
}
