// vxqa/api/decoder.cuh — decode without choosing a Config at compile time: a Decoder is
// made once from the model's shape, picks the instantiation that fits (from a list the
// user may replace), owns its plan and workspace, and launches it every step.
//
//   vxqa::DecoderShape shape;  // head_dim, cache_type, page_size, heads, group, capacity
//   vxqa::Decoder<> decoder;
//   Status s = decoder.init(shape);          // once: plan and workspace
//   s = decoder.decode(params, stream);      // every step (capturable in a CUDA graph)
//
// Choice: among the Configs of the list with the shape's head dim, cache type and q/out
// type whose variant has every flag the shape asks for (DecoderShape::variant) and whose
// opt::MaxQueryLen takes the shape's max_q_len: where a KV head has more than 8 rows
// (G · max_q_len) multi-token ones (their warps share the KV across the rows: row_tiling),
// else ones of one query token, if the list has any; of those the ones whose CTAs hold the
// fewest row slots for the shape's rows on this device (a padded row costs a row's work: 24
// rows take 24 slots with 6 warps, 32 with 8); of those the ones with the fewest flags (none
// asked: a plain Config); of those the first whose compile-time page size equals the
// shape's, else the first with a run-time page size (0). None: init fails naming the field.
// Every Config of the list is instantiated (its kernels compiled) where a Decoder<List> is
// used, so a short list builds faster.
#pragma once
#include <cuda_runtime.h>
#include <string>
#include <vxqa/api/decode.cuh>
#include <vxqa/kernel/config.cuh>

namespace vxqa {

template <class... Configs>
struct ConfigList {};

// The default lists for one q/out type: head dims 64, 128, 256, 512; E5M2, E4M3 and fp16 caches
// (and bf16 ones, with bf16 q/out); page 16 at compile time for the FP8 caches (vLLM's
// default) and any other page size at run time. Each head dim and cache also has a Config with every variant flag (any page size at
// run time), which serves a shape asking for any variant; flags it has that a step does not
// use are off at run time. And one with every flag and up to 16 query tokens a sequence,
// 8 warps (64 rows a CTA; 4 for D 256 16-bit, whose stages take twice the bytes), which
// serves multi-token steps and groups of more than 8 heads; D 256 FP8 has a second with 6
// warps (48 rows a CTA): two of its CTAs share an sm_90 SM where one of 8 warps fills it
// (registers and shared memory), and rows of 3 or 6 tiles (G 6 × q_len 4 or 8) need no
// padded tile (docs/performance.md, "Multi-token queries"). Head dim 512 (one query token:
// its tiles are already shared by two warps) has page 16 and, with every variant flag, any
// page size for FP8, and the every-flag one for 16-bit caches (2 warps: the SM80 stages of
// 1 KB rows fill the rest).
template <ActType Qo, KvType Fp8>
using DefaultFp8DecoderConfigs =
    ConfigList<DecodeConfig<64, Fp8, opt::PageSize<16>, opt::QoType<Qo>>,
               DecodeConfig<128, Fp8, opt::PageSize<16>, opt::QoType<Qo>>,
               DecodeConfig<256, Fp8, opt::PageSize<16>, opt::QoType<Qo>>, DecodeConfig<64, Fp8, opt::QoType<Qo>>,
               DecodeConfig<128, Fp8, opt::QoType<Qo>>, DecodeConfig<256, Fp8, opt::QoType<Qo>>,
               DecodeConfig<64, Fp8, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>>,
               DecodeConfig<128, Fp8, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>>,
               DecodeConfig<256, Fp8, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>>,
               DecodeConfig<64, Fp8, opt::Warps<8>, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>,
                            opt::MaxQueryLen<16>>,
               DecodeConfig<128, Fp8, opt::Warps<8>, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>,
                            opt::MaxQueryLen<16>>,
               DecodeConfig<256, Fp8, opt::Warps<8>, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>,
                            opt::MaxQueryLen<16>>,
               DecodeConfig<256, Fp8, opt::Warps<6>, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>,
                            opt::MaxQueryLen<16>>,
               DecodeConfig<512, Fp8, opt::PageSize<16>, opt::QoType<Qo>>,
               DecodeConfig<512, Fp8, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>>>;
// A 16-bit cache's (fp16, or bf16 with bf16 q/out: the SM80 body only).
template <ActType Qo, KvType Kv16>
using Default16BitDecoderConfigs =
    ConfigList<DecodeConfig<64, Kv16, opt::QoType<Qo>>, DecodeConfig<128, Kv16, opt::QoType<Qo>>,
               DecodeConfig<256, Kv16, opt::Warps<2>, opt::QoType<Qo>>,
               DecodeConfig<64, Kv16, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>>,
               DecodeConfig<128, Kv16, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>>,
               DecodeConfig<256, Kv16, opt::Warps<2>, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>>,
               DecodeConfig<64, Kv16, opt::Warps<8>, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>,
                            opt::MaxQueryLen<16>>,
               DecodeConfig<128, Kv16, opt::Warps<8>, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>,
                            opt::MaxQueryLen<16>>,
               DecodeConfig<256, Kv16, opt::Warps<4>, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>,
                            opt::MaxQueryLen<16>>,
               DecodeConfig<512, Kv16, opt::Warps<2>, opt::QoType<Qo>, opt::Variant<kAllVariantFlags>>>;

template <class... Lists>
struct ConcatConfigLists;
template <class... A>
struct ConcatConfigLists<ConfigList<A...>> {
  using type = ConfigList<A...>;
};
template <class... A, class... B, class... Rest>
struct ConcatConfigLists<ConfigList<A...>, ConfigList<B...>, Rest...> {
  using type = typename ConcatConfigLists<ConfigList<A..., B...>, Rest...>::type;
};

template <ActType Qo>
using DefaultDecoderConfigsFor =
    typename ConcatConfigLists<DefaultFp8DecoderConfigs<Qo, KvType::kE5M2>, DefaultFp8DecoderConfigs<Qo, KvType::kE4M3>,
                               Default16BitDecoderConfigs<Qo, KvType::kFp16>>::type;

// What the default Decoder can run: the lists above, fp16 and bf16 q/out, and the bf16
// cache's (bf16 q/out).
using DefaultDecoderConfigs =
    typename ConcatConfigLists<DefaultDecoderConfigsFor<ActType::kFp16>, DefaultDecoderConfigsFor<ActType::kBf16>,
                               Default16BitDecoderConfigs<ActType::kBf16, KvType::kBf16>>::type;

// The model's shape and the capacity the plan is made for.
struct DecoderShape {
  int head_dim = 0;
  KvType cache_type = KvType::kUnset;  // must be set: never assumed
  int page_size = 0;
  int num_kv_heads = 0;
  int group_size = 0;
  int max_batch = 0;
  int max_context = 0;
  ActType qo_type = ActType::kFp16;  // of q and out (last: older aggregate initialisers still compile)
  // The attention variant's flags the steps may use (VariantFlag bits; 0: plain attention),
  // and with kSlidingWindow the largest window a step gives (0: any, chunks over the whole
  // context; > 0: chunks over the window: make_decode_plan's max_window).
  unsigned variant = 0u;
  int max_window = 0;
  // The most query tokens a sequence has in a step (DecodeParams::max_q_len; > 1 needs a
  // Config with opt::MaxQueryLen).
  int max_q_len = 1;
};

template <class List = DefaultDecoderConfigs>
class Decoder;

template <class... Configs>
class Decoder<ConfigList<Configs...>> {
  static_assert(sizeof...(Configs) > 0, "Decoder: the Config list is empty");

 public:
  Decoder() = default;
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;
  ~Decoder() { release(); }

  // What init chose, without the workspace: the Config (an index into the list) and its
  // plan. For callers that allocate the workspace themselves, e.g. from a framework's
  // caching allocator, which stays legal inside a CUDA-graph capture where cudaMalloc is not.
  struct Choice {
    int index = -1;
    DecodePlan plan{};
  };

  // Picks the Config and makes the plan for the current device, as init does; allocates
  // nothing.
  static Status choose(const DecoderShape& shape, Choice* choice) {
    if (const Status set = detail::check_cache_type_set(shape.cache_type); !set.ok()) return set;
    if (shape.head_dim < 1) return Status::invalid("head_dim", "must be >= 1");
    if (shape.page_size < 1) return Status::invalid("page_size", "must be >= 1");
    if (shape.variant & ~kAllVariantFlags)
      return Status::invalid("variant", "has bits that are not VariantFlag values");
    if (shape.max_window < 0) return Status::invalid("max_window", "must be >= 0");
    if (shape.max_window > 0 && !(shape.variant & kSlidingWindow))
      return Status::invalid("max_window", "is set, but the shape's variant has no kSlidingWindow");
    if (shape.max_q_len < 1) return Status::invalid("max_q_len", "must be >= 1");
    const int index = find(shape);
    if (index < 0)
      return Status::invalid("head_dim", "no Config of the Decoder's list takes head dim " +
                                             std::to_string(shape.head_dim) + " with a " +
                                             kv_type_name(shape.cache_type) +
                                             " cache, " + act_type_name(shape.qo_type) +
                                             " q/out and page size " + std::to_string(shape.page_size) +
                                             (shape.variant ? " with variant flags " + std::to_string(shape.variant)
                                                            : std::string()) +
                                             (shape.max_q_len > 1 ? " and " + std::to_string(shape.max_q_len) +
                                                                        " query tokens a sequence"
                                                                  : std::string()));
    DecodePlan plan;
    const Status s = entries()[index].plan(shape, &plan);
    if (!s.ok()) return s;
    choice->index = index;
    choice->plan = plan;
    return Status();
  }

  // One step of the chosen Config with the caller's workspace (at least
  // choice.plan.workspace_bytes, 256-byte aligned; its first word holds the error bits).
  static Status decode_with(const Choice& choice, const DecodeParams& params, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream) {
    if (choice.index < 0 || choice.index >= int(sizeof...(Configs)))
      return Status::invalid("decoder", "the choice did not come from a successful choose()");
    return entries()[choice.index].decode(params, choice.plan, workspace, workspace_bytes, stream);
  }

  // The Config a choice names, e.g. "D128 e5m2 fp16 W4 page16".
  static std::string config_name(const Choice& choice) {
    return choice.index < 0 || choice.index >= int(sizeof...(Configs)) ? std::string()
                                                                         : entries()[choice.index].name();
  }

  // choose(), then allocates the workspace (cudaMalloc: call it outside a graph capture).
  Status init(const DecoderShape& shape) {
    release();
    Choice choice;
    const Status s = choose(shape, &choice);
    if (!s.ok()) return s;
    void* ws = nullptr;
    const cudaError_t err = cudaMalloc(&ws, choice.plan.workspace_bytes);
    if (err != cudaSuccess) return Status::cuda("cudaMalloc (workspace)", cudaGetErrorString(err));
    entry_ = &entries()[choice.index];
    plan_ = choice.plan;
    workspace_ = ws;
    return Status();
  }

  // One step: `params` must match the shape given to init (validate checks it against the
  // chosen Config and the plan). Never synchronises.
  Status decode(const DecodeParams& params, cudaStream_t stream) const {
    if (!entry_) return Status::invalid("decoder", "init() has not succeeded");
    return entry_->decode(params, plan_, workspace_, plan_.workspace_bytes, stream);
  }

  // The error bits of the last step on `stream` (synchronises: for checks, not the loop).
  Status read_errors(cudaStream_t stream, uint32_t* errors) const {
    if (!entry_) return Status::invalid("decoder", "init() has not succeeded");
    return read_decode_errors(workspace_, stream, errors);
  }

  bool ready() const { return entry_ != nullptr; }
  const DecodePlan& plan() const { return plan_; }
  const void* workspace() const { return workspace_; }
  // The chosen Config, e.g. "D128 e5m2 W4 page16".
  std::string config_name() const { return entry_ ? entry_->name() : std::string(); }

 private:
  struct Entry {
    int head_dim;
    KvType kv;
    ActType qo;
    int page_size;  // 0: run time
    unsigned variant;  // VariantFlag bits
    int max_q_len;     // opt::MaxQueryLen
    int (*row_slots)(const DecoderShape&);  // rows its CTAs hold for the shape's, padding included
    Status (*plan)(const DecoderShape&, DecodePlan*);
    Status (*decode)(const DecodeParams&, const DecodePlan&, void*, size_t, cudaStream_t);
    std::string (*name)();
  };

  template <class Config>
  static Entry entry_for() {
    return Entry{Config::kHeadDim, Config::kKv, Config::kQo, Config::kPageSize, Config::Variant::kVariantFlags,
                 Config::kMaxQueryLen,
                 [](const DecoderShape& s) {
                   int smem = 0;
                   bool sm80_body = false;  // where the device cannot say, the plan will
                   if (!decode_smem_bytes<Config>(&smem, &sm80_body).ok()) sm80_body = false;
                   const RowTiling t = row_tiling<Config>(s.group_size, s.max_q_len, sm80_body);
                   return t.m_tiles * t.rows_per_cta;
                 },
                 [](const DecoderShape& s, DecodePlan* plan) {
                   return make_decode_plan<Config>(s.max_batch, s.max_context, s.num_kv_heads, s.group_size, plan,
                                                   s.max_window, s.max_q_len);
                 },
                 &vxqa::decode<Config>,
                 [] {
                   return "D" + std::to_string(Config::kHeadDim) + " " + KvTraits<Config::kKv>::kName + " " +
                          ActTraits<Config::kQo>::kName + " W" +
                          std::to_string(Config::kWarps) +
                          (Config::kPageSize ? " page" + std::to_string(Config::kPageSize) : std::string(" page*")) +
                          (Config::Variant::kWindow ? " +window" : "") + (Config::Variant::kSoftCap ? " +softcap" : "") +
                          (Config::Variant::kSinks ? " +sinks" : "") +
                          (Config::kMultiToken ? " q" + std::to_string(Config::kMaxQueryLen) : std::string());
                 }};
  }

  static const Entry* entries() {
    static const Entry table[] = {entry_for<Configs>()...};
    return table;
  }

  static int flag_count(unsigned flags) { return int(flags & 1u) + int((flags >> 1) & 1u) + int((flags >> 2) & 1u); }

  // Lower is better: with more than 8 rows a KV head a multi-token Config (one KV read for
  // them all), with at most 8 one of one query token; then the fewest row slots; then the
  // fewest variant flags; then the shape's compile-time page size over a run-time one.
  static int64_t rank(const Entry& e, const DecoderShape& s) {
    const bool want_multi = int64_t(s.group_size) * s.max_q_len > 8;
    return (int64_t((e.max_q_len > 1) != want_multi) << 40) + (int64_t(e.row_slots(s)) << 8) +
           2 * flag_count(e.variant) + (e.page_size == 0 ? 1 : 0);
  }

  static int find(const DecoderShape& s) {
    int best = -1;
    for (int i = 0; i < int(sizeof...(Configs)); ++i) {
      const Entry& e = entries()[i];
      if (e.head_dim != s.head_dim || e.kv != s.cache_type || e.qo != s.qo_type) continue;
      if ((e.variant & s.variant) != s.variant || e.max_q_len < s.max_q_len) continue;
      if (e.page_size != s.page_size && e.page_size != 0) continue;
      if (best < 0 || rank(e, s) < rank(entries()[best], s)) best = i;
    }
    return best;
  }

  void release() {
    if (workspace_) cudaFree(workspace_);
    workspace_ = nullptr;
    entry_ = nullptr;
  }

  const Entry* entry_ = nullptr;
  DecodePlan plan_{};
  void* workspace_ = nullptr;
};

}  // namespace vxqa
