// Which seeds the sweep runs, and what each case covers.
//
// Seeds: under base B (--seed-base, default 0) the case of index i is drawn from seed
// B · 2^32 + i, so base 0 is the fixed seeds [0, N) and runs under two bases never share a
// case. A failure is replayed by its base and index (replay_command).
//
// Coverage: coverage_items() names what a case exercises on the sweep's Configs (which
// Configs take it, a plan of more than 32 chunks that merges them, bf16 q/out, device
// scales, graph replay, q/out layouts, multi-token queries by atom and q_len bucket, ...). The smoke (--smoke, ctest gpu.sweep_smoke) is
// kSmokeSeeds cheap seeds of base 0 picked so that together they cover every item of
// smoke_required(): every Config at least once, and each of the rarer items.
// Host only; plain C++17 (the CPU test checks the smoke's cover).
#pragma once

#include "sweep/sweep_configs.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace vxqa_sweep {

inline constexpr uint64_t kMaxSeedBase = 0xFFFFFFFFull;
inline constexpr uint64_t kMaxSeedIndex = 0x100000000ull;  // indices [0, 2^32)

inline uint64_t case_seed(uint64_t base, uint64_t index) { return base << 32 | index; }
inline uint64_t seed_base(uint64_t seed) { return seed >> 32; }
inline uint64_t seed_index(uint64_t seed) { return seed & 0xFFFFFFFFull; }

// "<program> --seed-base B --replay I": the command that replays the case of `seed`.
inline std::string replay_command(const std::string& program, uint64_t seed) {
  return program + " --seed-base " + std::to_string(seed_base(seed)) + " --replay " + std::to_string(seed_index(seed));
}

// The merge of more than kCombineNarrowAbove (32) chunks takes the combine's narrow slices.
inline constexpr int kManyChunks = vxqa::kCombineNarrowAbove;

inline const char* atom_words(const ConfigInfo& info) { return info.sm70_atom ? "sm70 atom" : "default atom"; }

// Whether the step has a sequence whose outputs come from more than kManyChunks chunks of
// `plan` (a sequence with query rows the device reads with a good length and good pages).
inline bool merges_many_chunks(const SweepCase& c, const vxqa::DecodePlan& plan) {
  if (plan.num_chunks <= kManyChunks) return false;
  const std::vector<int32_t> lens = c.device_lens();
  for (int b = 0; b < c.problem.batch; ++b)
    if (lens[b] == c.problem.seq_lens[b] && b != c.bad_page.seq && c.queries(b) > 0 &&
        int64_t(lens[b]) > int64_t(kManyChunks) * plan.chunk_tokens)
      return true;
  return false;
}

// The CTAs a KV head's rows (G · max_q_len) take (row_tiling): 8 rows a CTA on the SM70 atom,
// up to 8 · Warps on the default atom (the SM80 body, where the sweep is built for sm_80+).
inline int row_tiling_ctas(const SweepCase& c, const ConfigInfo& info) {
  const int per_cta = info.sm70_atom ? 8 : 8 * info.warps;
  return (c.problem.group * c.max_q_len + per_cta - 1) / per_cta;
}

// What the case covers, one item a string ("config N: NAME" for each Config that takes it).
inline std::vector<std::string> coverage_items(const SweepCase& c, const std::vector<ConfigInfo>& configs) {
  std::set<std::string> items;
  const RandomProblemOptions& o = c.problem;
  items.insert(std::string("class ") + class_name(c.cls));
  for (size_t i = 0; i < configs.size(); ++i) {
    const ConfigInfo& info = configs[i];
    if (!info.accepts(c)) continue;
    items.insert("config " + std::to_string(i) + ": " + info.name);
    vxqa::DecodePlan plan;
    if (!info.plan(c, &plan).ok()) continue;  // the CPU test requires every plan
    if (merges_many_chunks(c, plan)) items.insert(std::string("more than 32 chunks merged, ") + atom_words(info));
    if (masked_chunk_exercised(c, plan.chunk_tokens)) items.insert(std::string("masked chunk, ") + atom_words(info));
    if (info.qo == vxqa::ActType::kBf16) items.insert(std::string("bf16 q/out, ") + atom_words(info));
    if (info.page_size % 16 != 0) items.insert(std::string("compile-time page not a multiple of 16, ") + atom_words(info));
    if (o.window > 0) items.insert(std::string("sliding window, ") + atom_words(info));
    if (o.window > 0 && c.plan.max_window > 0) items.insert(std::string("plan cut over the window, ") + atom_words(info));
    if (o.logit_softcap > 0.f) items.insert(std::string("logit soft-cap, ") + atom_words(info));
    if (o.sinks) items.insert(std::string("attention sinks, ") + atom_words(info));
    if (c.variant_flags() && c.cls == CaseClass::kNonFinite)
      items.insert(std::string("a variant with NaN/inf inputs, ") + atom_words(info));
    if (c.multi_token()) {
      const std::string atom = atom_words(info);
      items.insert(std::string("multi-token ") + q_len_bucket(c) + ", " + atom);
      if (ragged_queries(c)) items.insert("multi-token ragged, " + atom);
      if (c.variant_flags()) items.insert("multi-token with a variant, " + atom);
      if (c.cls != CaseClass::kFinite) items.insert(std::string("multi-token ") + class_name(c.cls) + ", " + atom);
      if (merges_many_chunks(c, plan)) items.insert("multi-token, more than 32 chunks merged, " + atom);
      if (c.has_q_indptr() && row_tiling_ctas(c, info) > 1) items.insert("multi-token rows in several CTAs, " + atom);
    }
  }
  if (c.multi_token()) {
    if (!c.has_q_indptr()) items.insert("multi-token Config without q_indptr");
    if (c.most_queries() == kMaxQueryLen) items.insert("multi-token q_len 16");
    if (c.max_q_len > c.most_queries()) items.insert("multi-token max_q_len above the step's");
    if (c.plan.max_q_len > c.max_q_len) items.insert("multi-token plan max_q_len above max_q_len");
    if (c.has_q_indptr() && c.rows() == 0) items.insert("multi-token step without rows");
    for (int b = 0; b < o.batch; ++b) {
      if (c.has_q_indptr() && c.queries(b) == 0 && o.seq_lens[b] > 0) items.insert("multi-token sequence without rows");
      if (c.has_q_indptr() && c.queries(b) > 1 && o.seq_lens[b] == c.queries(b))
        items.insert("multi-token first query token sees one key");
    }
    for (const auto& [seq, len] : c.bad_lengths)
      if (c.fewer_keys_than_queries(seq, len)) items.insert("multi-token bad length: fewer keys than query tokens");
    if (c.graph) items.insert("multi-token graph replay");
  }
  if (c.bf16_q) items.insert("q of bf16 values");
  if (c.k_scale_on_device) items.insert("k scale on device");
  if (c.v_scale_on_device) items.insert("v scale on device");
  if (c.graph) items.insert("graph replay");
  if (c.graph && (c.k_scale_on_device || c.v_scale_on_device)) items.insert("graph replay, device scales");
  if (o.group > 16) items.insert("group > 16 (three M tiles)");
  if (!io_contiguous(c)) items.insert("q/out padded or offset");
  if (c.io.head_major) items.insert("q/out head-major");
  bool odd_row = false, junk = false;
  const int heads = c.query_heads();
  for (int row = 0; row < c.rows(); ++row)
    for (int h = 0; h < heads; ++h) odd_row |= c.io.out_row(row, h) % 2 != 0;
  if (odd_row) items.insert("out rows not 4-byte aligned");
  for (int64_t s : kJunkStrides) {
    junk |= c.layout_rows() == 1 && (c.io.q_batch_stride == s || c.io.out_batch_stride == s);
    junk |= heads == 1 && (c.io.q_head_stride == s || c.io.out_head_stride == s);
  }
  if (junk) items.insert("one-row dimension with a junk stride");
  return {items.begin(), items.end()};
}

// --- the smoke -------------------------------------------------------------------------------
inline constexpr int kSmokeSeeds = 50;
// A smoke case takes at most this much CPU to build (estimate_cpu_ns), a small case's
// budget: the smoke is a ctest.
inline constexpr double kSmokeMaxCpuNs = kTierBudgetNs[int(Tier::kSmall)];
// Seeds of base 0 the smoke looks through for what it must cover.
inline constexpr uint64_t kSmokeScan = 200000;

// Every Config, a merge of more than 32 chunks, a masked chunk, bf16 q/out, a compile-time
// page size that is not a multiple of 16, each variant and multi-token queries of each q_len
// bucket (2..4, 5..16, ragged) on each atom, every class, and the rarer ways a step reaches
// the kernels.
inline std::vector<std::string> smoke_required(const std::vector<ConfigInfo>& configs) {
  std::vector<std::string> need;
  for (size_t i = 0; i < configs.size(); ++i) need.push_back("config " + std::to_string(i) + ": " + configs[i].name);
  for (const char* atom : {"default atom", "sm70 atom"})
    for (const char* what : {"more than 32 chunks merged, ", "masked chunk, ", "bf16 q/out, ",
                             "compile-time page not a multiple of 16, ", "sliding window, ",
                             "plan cut over the window, ", "logit soft-cap, ", "attention sinks, ",
                             "multi-token q_len 2..4, ", "multi-token q_len 5..16, ", "multi-token ragged, "})
      need.push_back(std::string(what) + atom);
  for (int i = 0; i < kCaseClasses; ++i) need.push_back(std::string("class ") + class_name(CaseClass(i)));
  for (const char* s : {"k scale on device", "v scale on device", "graph replay, device scales",
                        "group > 16 (three M tiles)", "q/out head-major", "out rows not 4-byte aligned",
                        "one-row dimension with a junk stride"})
    need.push_back(s);
  return need;
}

struct Smoke {
  std::vector<uint64_t> seeds;       // ascending, seeds of base 0
  std::vector<std::string> missing;  // required items no seed covers (empty: a full cover)
};

// The first cheap seed (scanning up from 0) that covers an item not yet covered is taken,
// until every required item is; then the cheapest seeds from 0 up fill the count.
inline Smoke smoke_seeds(const std::vector<ConfigInfo>& configs, int count = kSmokeSeeds) {
  const std::vector<std::string> need = smoke_required(configs);
  std::set<std::string> left(need.begin(), need.end());
  std::set<uint64_t> taken;
  for (uint64_t seed = 0; seed < kSmokeScan && !left.empty() && int(taken.size()) < count; ++seed) {
    const SweepCase c = draw_case(seed);
    if (estimate_cpu_ns(c) > kSmokeMaxCpuNs) continue;
    bool useful = false;
    for (const std::string& item : coverage_items(c, configs)) useful |= left.erase(item) > 0;
    if (useful) taken.insert(seed);
  }
  for (uint64_t seed = 0; seed < kSmokeScan && int(taken.size()) < count; ++seed)
    if (!taken.count(seed) && estimate_cpu_ns(draw_case(seed)) <= kSmokeMaxCpuNs) taken.insert(seed);
  Smoke smoke;
  smoke.seeds.assign(taken.begin(), taken.end());
  smoke.missing.assign(left.begin(), left.end());
  return smoke;
}

}  // namespace vxqa_sweep
