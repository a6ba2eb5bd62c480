// The Configs the sweep runs, one family (and one translation unit) per head dim. Every case
// runs on each Config that accepts it (its head dim, cache type and page size; a Config
// built for bf16 q/out only the cases whose q holds bf16 values), so a new kernel variant,
// such as a second MMA atom, is one more line in each family.
// Host only; plain C++17 (the CPU test plans and validates cases with these Configs).
#pragma once

#include "sweep/sweep_case.h"

#include <vxqa/api/plan.cuh>
#include <vxqa/kernel/config.cuh>

#include <string>
#include <vector>

namespace vxqa_sweep {

template <class... Configs>
struct ConfigList {};

using vxqa::ActType;
using vxqa::ConvertAt;
using vxqa::DecodeConfig;
namespace opt = vxqa::opt;
using vxqa::KvType;

using vxqa::MmaAtom;
using vxqa::PageIdCheck;
// The SM70 path forced (m8n8k4 and register-staged loads) next to the default atom, which
// is the SM80 path where the sweep is built for sm_80 and newer. Stages and ConvertAt are
// the SM70 path's knobs.
template <int D, KvType Kv, int Warps = 4, int Stages = 1, int PageSize = 0, ConvertAt Convert = ConvertAt::kConsume,
          ActType Qo = ActType::kFp16>
using Sm70 = DecodeConfig<D, Kv, opt::Warps<Warps>, opt::Sm70Stages<Stages>, opt::PageSize<PageSize>,
                          opt::Convert<Convert>, opt::Atom<MmaAtom::kSm70>, opt::QoType<Qo>>;
// Every attention variant flag: the Configs the variant cases run on, one a head dim and
// cache format (any page size), the atoms alternating so that each format and each atom
// gets variant cases.
template <int D, KvType Kv, class... Options>
using EveryVariant = DecodeConfig<D, Kv, opt::Variant<vxqa::kAllVariantFlags>, Options...>;
// Multi-token queries (opt::MaxQueryLen<16>, every variant flag): the Configs the
// multi-token cases run on (SweepCase::q_len > 0), one a head dim, its format the one
// multi_token_format (sweep_case.h) gives it: D64 and D256 E5M2 on the default atom with 8
// warps (the SM80 body's warps share a K/V tile across up to 64 rows), D256 also with 6 (the
// Decoder's other D 256 E5M2 one: row tiles of 3 and 6 warps), D128 fp16 on the SM70 atom.
template <int D, KvType Kv, class... Options>
using MultiToken = DecodeConfig<D, Kv, opt::Variant<vxqa::kAllVariantFlags>, opt::MaxQueryLen<kMaxQueryLen>, Options...>;

// E4M3, in each head dim: the default atom (the hardware cvt where built for sm_89+), the SM70
// atom with the software decode (a V100's path), and every variant flag with the software
// decode (an A100's path on the default atom); D64's first and D128's second take bf16 q/out.
using E4m3Software = opt::E4m3Path<vxqa::E4m3Decode::kSoftware>;
// A bf16 cache, in each head dim: the SM80 body only, bf16 q/out (plain single-token cases).
template <int D, class... Options>
using Bf16Cache = DecodeConfig<D, KvType::kBf16, opt::QoType<ActType::kBf16>, Options...>;

// Besides the common Configs of each head dim: Warps 1, 2, 4 and 8; Stages 1 and 2 (D 256
// takes 1 only: 2 would need 192 registers a lane); ConvertAt::kPublish; an explicit
// AsyncStages; bf16 q/out on either atom; compile-time page sizes 16 and 800 and, not
// multiples of 16, 24 (default atom) and 40 (SM70 atom). Each line is one more decode and
// combine instantiation in its head dim's translation unit (compile time).
using D64Configs = ConfigList<DecodeConfig<64, KvType::kE5M2>,
                              DecodeConfig<64, KvType::kE5M2, opt::Warps<2>>,
                              DecodeConfig<64, KvType::kFp16>,
                              Sm70<64, KvType::kE5M2>,
                              DecodeConfig<64, KvType::kE5M2, opt::Warps<8>, opt::PageSize<24>>,
                              Sm70<64, KvType::kFp16, /*Warps*/ 8, /*Stages*/ 2>,
                              EveryVariant<64, KvType::kE5M2>, EveryVariant<64, KvType::kFp16, opt::Atom<MmaAtom::kSm70>>,
                              MultiToken<64, KvType::kE5M2, opt::Warps<8>>,
                              DecodeConfig<64, KvType::kE4M3, opt::QoType<ActType::kBf16>>,
                              DecodeConfig<64, KvType::kE4M3, opt::Atom<MmaAtom::kSm70>, E4m3Software>,
                              EveryVariant<64, KvType::kE4M3, E4m3Software>, Bf16Cache<64>>;
using D128Configs = ConfigList<DecodeConfig<128, KvType::kE5M2>,
                               Sm70<128, KvType::kE5M2, 4, 1, 0, ConvertAt::kPublish>,
                               DecodeConfig<128, KvType::kE5M2, opt::PageSize<16>>,
                               DecodeConfig<128, KvType::kFp16>,
                               Sm70<128, KvType::kE5M2>, Sm70<128, KvType::kFp16>,
                               Sm70<128, KvType::kE5M2, 2, 2, /*PageSize*/ 40, ConvertAt::kPublish>,
                               Sm70<128, KvType::kFp16, 4, 2, 0, ConvertAt::kConsume, ActType::kBf16>,
                               EveryVariant<128, KvType::kFp16>,
                               EveryVariant<128, KvType::kE5M2, opt::Atom<MmaAtom::kSm70>>,
                               MultiToken<128, KvType::kFp16, opt::Atom<MmaAtom::kSm70>, opt::Warps<4>>,
                               DecodeConfig<128, KvType::kE4M3>,
                               DecodeConfig<128, KvType::kE4M3, opt::Atom<MmaAtom::kSm70>, E4m3Software,
                                            opt::Convert<ConvertAt::kPublish>, opt::QoType<ActType::kBf16>>,
                               EveryVariant<128, KvType::kE4M3, E4m3Software>, Bf16Cache<128>>;
using D256Configs = ConfigList<DecodeConfig<256, KvType::kE5M2>,
                               DecodeConfig<256, KvType::kE5M2, opt::PageSize<800>>,
                               DecodeConfig<256, KvType::kFp16>,
                               Sm70<256, KvType::kE5M2>, Sm70<256, KvType::kFp16, 2>,
                               DecodeConfig<256, KvType::kE5M2, opt::Warps<1>, opt::Atom<MmaAtom::kAuto>, opt::AsyncStages<3>, opt::QoType<ActType::kBf16>>,
                               Sm70<256, KvType::kE5M2, 2, 1, 0, ConvertAt::kPublish>,
                               EveryVariant<256, KvType::kE5M2>,
                               EveryVariant<256, KvType::kFp16, opt::Warps<2>, opt::Atom<MmaAtom::kSm70>>,
                               MultiToken<256, KvType::kE5M2, opt::Warps<8>>,
                               MultiToken<256, KvType::kE5M2, opt::Warps<6>>,
                               DecodeConfig<256, KvType::kE4M3>,
                               DecodeConfig<256, KvType::kE4M3, opt::Atom<MmaAtom::kSm70>, E4m3Software>,
                               EveryVariant<256, KvType::kE4M3, E4m3Software, opt::Atom<MmaAtom::kSm70>>,
                               Bf16Cache<256, opt::Warps<2>>>;
// Head dim 512 (two warps share each K/V tile): single-token cases only, each cache format on
// both atoms (fp16 on 2 warps: the SM80 body's stages of 1 KB rows), and every variant flag
// on E5M2 (the format draw_d512 lets variant cases keep).
using D512Configs = ConfigList<DecodeConfig<512, KvType::kE5M2>,
                               Sm70<512, KvType::kE5M2, 6>,
                               DecodeConfig<512, KvType::kE4M3>,
                               DecodeConfig<512, KvType::kE4M3, opt::Atom<MmaAtom::kSm70>, E4m3Software>,
                               DecodeConfig<512, KvType::kFp16, opt::Warps<2>>,
                               Sm70<512, KvType::kFp16, 2>,
                               EveryVariant<512, KvType::kE5M2>,
                               EveryVariant<512, KvType::kE5M2, opt::Atom<MmaAtom::kSm70>>,
                               Bf16Cache<512, opt::Warps<2>>>;

// The plan Config makes for the case.
template <class Config>
vxqa::Status make_case_plan(const SweepCase& c, vxqa::DecodePlan* plan) {
  const PlanSpec& s = c.plan;
  return vxqa::make_decode_plan<Config>(s.max_batch, s.max_context, c.problem.kv_heads, c.problem.group,
                                        s.sm_count, plan, s.chunk_multiple * Config::kChunkMultiple, 4, 1,
                                        s.max_window, s.max_q_len);
}

// What the sweep needs to know of a Config on the host.
struct ConfigInfo {
  std::string name;
  int head_dim = 0;
  KvFormat format = KvFormat::kE5M2;
  int page_size = 0;  // 0: any
  ActType qo = ActType::kFp16;
  bool sm70_atom = false;
  unsigned variant = 0u;  // VariantFlag bits compiled in
  int max_q_len = 1;      // opt::MaxQueryLen
  int warps = 4;
  vxqa::Status (*plan)(const SweepCase&, vxqa::DecodePlan*) = nullptr;  // make_case_plan<Config>
  bool multi_token() const { return max_q_len > 1; }
  // A multi-token case goes to the multi-token Configs (plain or with a variant), a
  // single-token one to the others: one with a variant to the Configs with its flags, a
  // plain one to those without any (the every-flag Configs' plain answers are the
  // decode_variants tests').
  bool accepts(const SweepCase& c) const {
    return c.problem.head_dim == head_dim && c.problem.format == format &&
           (page_size == 0 || c.problem.page_size == page_size) && (qo == ActType::kFp16 || c.bf16_q) &&
           c.multi_token() == multi_token() && c.max_q_len <= max_q_len && c.plan.max_q_len <= max_q_len &&
           (multi_token() || (c.variant_flags() == 0u) == (variant == 0u)) && (c.variant_flags() & ~variant) == 0u;
  }
};

template <class Config>
ConfigInfo config_info() {
  ConfigInfo info;
  info.head_dim = Config::kHeadDim;
  info.format = Config::kKv == KvType::kE5M2   ? KvFormat::kE5M2
                : Config::kKv == KvType::kE4M3 ? KvFormat::kE4M3
                : Config::kKv == KvType::kBf16 ? KvFormat::kBf16
                                               : KvFormat::kFp16;
  info.page_size = Config::kPageSize;
  info.qo = Config::kQo;
  info.sm70_atom = Config::kAtom == MmaAtom::kSm70;
  info.variant = Config::Variant::kVariantFlags;
  info.max_q_len = Config::kMaxQueryLen;
  info.warps = Config::kWarps;
  info.plan = &make_case_plan<Config>;
  info.name = "D" + std::to_string(Config::kHeadDim) + " " + vxqa::KvTraits<Config::kKv>::kName +
              " W" + std::to_string(Config::kWarps) + " S" + std::to_string(Config::kStages) +
              " page " + (Config::kPageSize ? std::to_string(Config::kPageSize) : std::string("any")) +
              (Config::kConvertAt == ConvertAt::kPublish ? " convert-at-publish" : "") +
              (Config::kAsyncStages ? " async-stages " + std::to_string(Config::kAsyncStages) : std::string()) +
              (Config::kQo == ActType::kBf16 ? " bf16-qo" : "") +
              (Config::kAtom == MmaAtom::kSm70 ? " sm70-atom" : "") +
              (Config::kKv == KvType::kE4M3 && Config::kE4m3Path == vxqa::E4m3Decode::kSoftware ? " e4m3-software" : "") +
              (info.variant ? " every-variant" : "") +
              (Config::kMultiToken ? " max-q-len " + std::to_string(Config::kMaxQueryLen) : std::string());
  return info;
}

template <class... Configs>
std::vector<ConfigInfo> config_infos(ConfigList<Configs...>) {
  return {config_info<Configs>()...};
}

// Every Config of every family, in the sweep's order.
inline std::vector<ConfigInfo> all_config_infos() {
  std::vector<ConfigInfo> all;
  for (const auto& family : {config_infos(D64Configs{}), config_infos(D128Configs{}), config_infos(D256Configs{}),
                             config_infos(D512Configs{})})
    all.insert(all.end(), family.begin(), family.end());
  return all;
}

}  // namespace vxqa_sweep
