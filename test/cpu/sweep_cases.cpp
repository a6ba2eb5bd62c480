// The sweep's cases (test/sweep/sweep_case.h, sweep_prepare.h, sweep_seeds.h) and the
// comparator it and the GPU tests share (vxqa/testing/compare.h), on the CPU: cases are the
// same for the same seed, and a seed base draws other cases; 10,000 seeds reach every class,
// page size and edge (masked chunks with NaN/inf V under them beside a live chunk, on
// Configs of both atoms, among them), every Config, q/out strides and offsets, bf16 q/out,
// device scales and graph replays, groups of three M tiles and compile-time page sizes that
// are not multiples of 16, multi-token queries of every q_len bucket (2..4, 5..16, ragged) on
// both atoms, each case within its CPU budget and workspace; built cases are
// decode steps that validate() accepts with their strides, types and scale pointers, q is
// laid out and out gathered exactly, bf16 q holds the values the reference takes; the smoke's
// 50 seeds cover every Config and a merge of more than 32 chunks; masked tails give NaN
// exactly where they must and the comparator refuses what the kernels gave before fc1accf,
// and the comparator flags every kind of wrong output.
#include <catch2/catch.hpp>

#include "sweep/sweep_configs.h"
#include "sweep/sweep_prepare.h"
#include "sweep/sweep_seeds.h"

#include <vxqa/api/validate.cuh>
#include <vxqa/testing/compare.h>
#include <vxqa/testing/problem_params.cuh>

#include <climits>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace vxqa_sweep;
using vxqa::reference::Comparison;
using vxqa::reference::KernelOutputs;

namespace {

constexpr uint64_t kSeeds = 10000;

std::vector<ConfigInfo> all_configs() { return all_config_infos(); }

// Calls f(Tag<Config>{}) for every Config of every family.
template <class Config>
struct Tag {
  using type = Config;
};
template <class F, class... Configs>
void for_each_config(ConfigList<Configs...>, F& f) {
  (f(Tag<Configs>{}), ...);
}
template <class F>
void for_every_config(F f) {
  for_each_config(D64Configs{}, f);
  for_each_config(D128Configs{}, f);
  for_each_config(D256Configs{}, f);
  for_each_config(D512Configs{}, f);
}

// The coverage items of a case's masked tail under every Config that takes it: "masked chunk,
// <atom> atom" where the Config's plan puts a V poison in a chunk whose live scores are all
// -inf (masked_chunk_exercised).
std::vector<std::string> masked_chunk_items(const SweepCase& c) {
  std::vector<std::string> items;
  if (c.masked.seq < 0) return items;
  for_every_config([&](auto tag) {
    using Config = typename decltype(tag)::type;
    if (!config_info<Config>().accepts(c)) return;
    vxqa::DecodePlan plan;
    REQUIRE(make_case_plan<Config>(c, &plan).ok());
    if (masked_chunk_exercised(c, plan.chunk_tokens))
      items.push_back(Config::kAtom == vxqa::MmaAtom::kSm70 ? "masked chunk, sm70 atom" : "masked chunk, default atom");
  });
  return items;
}

}  // namespace

TEST_CASE("sweep cases: the same seed gives the same case and the same problem", "[sweep_cases]") {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    INFO("seed " << seed);
    REQUIRE(describe(draw_case(seed)) == describe(draw_case(seed)));
    CHECK(describe(draw_case(seed)) != describe(draw_case(seed + 1)));
  }
  int built = 0;
  for (uint64_t seed = 0; built < 5; ++seed) {
    if (estimate_cpu_ns(draw_case(seed)) > 2e6) continue;
    ++built;
    const PreparedCase a = prepare_case(seed), b = prepare_case(seed);
    INFO("seed " << seed);
    REQUIRE(a.error.empty());
    CHECK(a.problem.cache == b.problem.cache);
    CHECK(a.problem.q == b.problem.q);
    CHECK(a.device_table == b.device_table);
    CHECK(a.device_lens == b.device_lens);
    CHECK(a.reference.out == b.reference.out);  // NaN-free here or not, the bits repeat
  }
}

TEST_CASE("sweep cases: 10,000 seeds reach every class, page size and edge, within budget",
          "[sweep_cases]") {
  const std::vector<ConfigInfo> configs = all_configs();
  std::map<std::string, int> seen;
  auto saw = [&seen](const std::string& what) { ++seen[what]; };
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    const SweepCase c = draw_case(seed);
    const RandomProblemOptions& o = c.problem;
    INFO(describe(c));

    // The budget and the workspace.
    REQUIRE(estimate_cpu_ns(c) <= kTierBudgetNs[int(c.tier)]);
    REQUIRE(worst_workspace_bytes(c) <= kMaxWorkspaceBytes);

    // The shape and the plan are ones the API takes.
    REQUIRE((o.group >= 1 && o.group <= kMaxGroup));
    REQUIRE((o.kv_heads >= 1 && o.kv_heads <= kMaxKvHeads));
    REQUIRE((o.batch >= 1 && o.batch <= kMaxBatch));
    REQUIRE(int(o.seq_lens.size()) == o.batch);
    REQUIRE(o.stride_align * vxqa::reference::element_bytes(o.format) == 16);
    const int room = c.max_pages() * o.page_size;
    REQUIRE(c.max_pages() >= 1);
    REQUIRE(c.plan.max_batch >= o.batch);
    REQUIRE(c.plan.max_context >= std::max(c.longest(), 1));
    REQUIRE(c.plan.max_context <= room);
    REQUIRE((c.plan.sm_count >= 1 && c.plan.sm_count <= 200));
    // Multi-token queries: the counts the problem will have (cut to the lengths), max_q_len
    // at or above the most of them and at most the plan's, which the Configs allow.
    REQUIRE((c.max_q_len >= 1 && c.max_q_len <= c.plan.max_q_len && c.plan.max_q_len <= kMaxQueryLen));
    REQUIRE(c.max_q_len >= c.most_queries());
    if (!c.multi_token()) {
      REQUIRE(c.q_counts.empty());
      REQUIRE(c.max_q_len == 1);
      REQUIRE(c.plan.max_q_len == 1);
      REQUIRE(o.q_len == 0);
    } else {
      REQUIRE((c.q_len >= 1 && c.q_len <= kMaxQueryLen));
      REQUIRE(o.format == multi_token_format(o.head_dim));
      REQUIRE(o.q_len == (c.q_len > 1 ? c.q_len : 0));
      REQUIRE(o.ragged == c.ragged);
      REQUIRE(c.has_q_indptr() == c.q_indptr);
      if (!c.q_indptr) {
        REQUIRE(c.q_len == 1);
        REQUIRE(c.max_q_len == 1);
      } else {
        REQUIRE(c.q_counts ==
                cut_query_counts(generator_query_counts(o, c.problem_seed), o.seq_lens));
        for (int b = 0; b < o.batch; ++b) {
          REQUIRE((c.q_counts[b] >= 0 && c.q_counts[b] <= c.q_len && c.q_counts[b] <= o.seq_lens[b]));
          if (!c.ragged) REQUIRE(c.q_counts[b] == std::min(c.q_len, o.seq_lens[b]));
        }
        if (c.cls != CaseClass::kFinite) REQUIRE(c.rows() >= 1);
        // The reference's cells (rows · keys of one KV head) stay within kMaxScoreCells.
        for (int b = 0; b < o.batch; ++b)
          REQUIRE(int64_t(o.group) * std::max(c.q_counts[b], 1) * o.seq_lens[b] <= kMaxScoreCells + int64_t(2) * o.group * kMaxQueryLen);
      }
      saw("multi-token");
      saw(std::string("multi-token ") + q_len_bucket(c));
      if (c.ragged) saw("multi-token drawn ragged");
    }
    int pages = o.spare_pages;
    for (int32_t len : o.seq_lens) {
      REQUIRE((len >= 0 && len <= kMaxLength));
      pages += (len + o.page_size - 1) / o.page_size;
    }
    REQUIRE(pages >= 1);
    REQUIRE(pages < 50000000);  // so every bad id below is outside [0, num_pages)
    REQUIRE(std::isfinite(o.softmax_scale * o.k_scale * 1.4426950408889634f));
    REQUIRE(o.softmax_scale * o.k_scale > 0.f);
    REQUIRE(double(o.v_scale) * 2 <= 3e4);  // |V| <= 2: out stays far from fp16's max
    REQUIRE((c.q_stddev >= 0x1p-6 && c.q_stddev <= 0x1p11));

    // Each case runs on some Config, and each Config gets cases.
    int accepted = 0;
    for (const ConfigInfo& info : configs)
      if (info.accepts(c)) ++accepted, saw("config " + info.name);
    REQUIRE(accepted >= 1);
    for (const std::string& item : coverage_items(c, configs)) saw(item);

    // q and out: rows of D elements that never overlap, inside their buffers, q's 16-byte
    // aligned; strides as validate() wants them where a dimension has more than one row.
    const IoLayout& io = c.io;
    const int heads = c.query_heads(), dim = o.head_dim;
    REQUIRE(io.q_offset % 8 == 0);
    REQUIRE((io.out_offset >= 0 && io.out_offset < 8));
    if (heads > 1) REQUIRE(io.q_head_stride % 8 == 0);
    if (c.layout_rows() > 1) REQUIRE(io.q_batch_stride % 8 == 0);
    if (c.rows() > 0) {
      std::vector<int64_t> q_rows, out_rows;
      for (int row = 0; row < c.rows(); ++row)
        for (int h = 0; h < heads; ++h) q_rows.push_back(io.q_row(row, h)), out_rows.push_back(io.out_row(row, h));
      for (auto* rows : {&q_rows, &out_rows}) {
        std::sort(rows->begin(), rows->end());
        REQUIRE(rows->front() >= 0);
        for (size_t i = 1; i < rows->size(); ++i) REQUIRE((*rows)[i] - (*rows)[i - 1] >= dim);
      }
      REQUIRE(q_rows.back() + dim + kIoTail == io.q_elements);
      REQUIRE(out_rows.back() + dim + kIoTail == io.out_elements);
    } else {
      REQUIRE(io.q_elements >= dim + kIoTail);
      REQUIRE(io.out_elements >= dim + kIoTail);
    }
    if (io_contiguous(c)) saw("q/out contiguous");
    if (io.out_head_stride % 2 || io.out_batch_stride % 2) saw("odd out stride");

    // The class's own draws are live, used or bad as they must be.
    for (const Injection& in : c.injections) {
      REQUIRE(in.seq >= 0);
      REQUIRE(o.seq_lens[in.seq] >= 1);
      REQUIRE(in.dim < o.head_dim);
      if (in.target == Target::kQ) {
        REQUIRE(in.head < c.query_heads());
        REQUIRE((in.token >= 0 && in.token < c.queries(in.seq)));
        if (in.zero_partner >= 0) REQUIRE(in.zero_partner < o.seq_lens[in.seq]);
      } else {
        REQUIRE(in.head < o.kv_heads);
        REQUIRE(in.token < o.seq_lens[in.seq]);
        if (in.zero_partner >= 0) REQUIRE(in.zero_partner < o.group);
      }
      saw(std::string("inject ") + "qkv"[int(in.target)] + " " + std::to_string(int(in.value)));
      if (in.zero_partner >= 0) saw(std::string("inf meets 0 at ") + "qkv"[int(in.target)]);
    }
    // A masked tail: its sequence is the longest, the masked tokens and V poisons live.
    if (c.masked.seq >= 0) {
      const MaskedTail& m = c.masked;
      REQUIRE(c.injections.empty());
      REQUIRE(o.seq_lens[m.seq] == c.longest());
      const int len = o.seq_lens[m.seq];
      REQUIRE(len >= 2);
      REQUIRE((m.kv_head >= 0 && m.kv_head < o.kv_heads));
      REQUIRE((m.dim >= 0 && m.dim < o.head_dim));
      REQUIRE((m.from >= 1 && m.from <= kMaskedTailMaxFrom && m.from < len));
      REQUIRE((m.v.size() == 1 || m.v.size() == 2));
      REQUIRE(m.v[0].token == len - 1);
      for (const MaskedTail::VPoison& v : m.v) {
        REQUIRE((v.token >= m.from && v.token < len));
        REQUIRE((v.dim >= 0 && v.dim < o.head_dim));
        saw(std::string("masked tail V ") + std::to_string(int(v.value)));
      }
      saw("masked tail");
      for (const std::string& item : masked_chunk_items(c)) saw(item);
    }
    REQUIRE((c.cls == CaseClass::kNonFinite) == (!c.injections.empty() || c.masked.seq >= 0));
    REQUIRE((c.cls == CaseClass::kBadPage) == (c.bad_page.seq >= 0));
    if (c.bad_page.seq >= 0) {
      REQUIRE(o.seq_lens[c.bad_page.seq] >= 1);
      REQUIRE(c.queries(c.bad_page.seq) >= 1);
      // In a key every query token of the sequence sees (multi-token: 0 .. len - n).
      REQUIRE(int64_t(c.bad_page.column) * o.page_size <= o.seq_lens[c.bad_page.seq] - c.queries(c.bad_page.seq));
      const int32_t id = c.bad_page.resolve(pages);  // pages >= num_pages (sharing only saves)
      REQUIRE((id < 0 || id >= pages || c.bad_page.from_num_pages));
      if (c.bad_page.from_num_pages) saw("bad page num_pages + " + std::string(c.bad_page.id ? "k" : "0"));
      else if (c.bad_page.id == -1 || c.bad_page.id == INT_MAX || c.bad_page.id == INT_MIN ||
               c.bad_page.id == 50000000)
        saw("bad page " + std::to_string(c.bad_page.id));
    }
    REQUIRE((c.cls == CaseClass::kBadLength) == !c.bad_lengths.empty());
    for (const auto& [seq, len] : c.bad_lengths) {
      REQUIRE(c.queries(seq) >= 1);  // multi-token: a sequence with rows
      if (c.fewer_keys_than_queries(seq, len)) {
        REQUIRE(len < o.seq_lens[seq]);
        saw("bad length: fewer keys than query tokens");
        continue;
      }
      REQUIRE((len < 0 || len > c.plan.max_context));
      saw(len < 0 ? "bad length < 0" : "bad length > max_context");
    }
    REQUIRE(c.expected_errors() == (c.cls == CaseClass::kBadLength ? 1u : c.cls == CaseClass::kBadPage ? 2u : 0u));

    saw(std::string("class ") + class_name(c.cls));
    saw(std::string("tier ") + tier_name(c.tier));
    saw("D" + std::to_string(o.head_dim) + " " + vxqa::reference::format_name(o.format));
    saw(std::string("layout ") + layout_name(o.layout));
    for (int page : kListedPageSizes)
      if (o.page_size == page) saw("page " + std::to_string(page));
    if (std::find(std::begin(kListedPageSizes), std::end(kListedPageSizes), o.page_size) ==
        std::end(kListedPageSizes))
      saw("page unlisted");
    if (o.group == 1 || o.group == 16 || o.group == 17 || o.group == kMaxGroup || o.group == 9)
      saw("group " + std::to_string(o.group));
    if (o.kv_heads == 1 || o.kv_heads == kMaxKvHeads) saw("kv heads " + std::to_string(o.kv_heads));
    if (o.batch == 1 || o.batch == kMaxBatch) saw("batch " + std::to_string(o.batch));
    if (o.shared_prefix_pages) saw("shared prefix");
    saw(c.plan.chunk_multiple ? "plan explicit" : "plan auto");
    if (c.plan.max_batch > o.batch) saw("plan max_batch above batch");
    if (c.plan.max_context > c.longest()) saw("plan max_context above longest");
    if (c.plan.chunk_multiple && int64_t(c.plan.chunk_multiple) * 16 >= c.plan.max_context) saw("one chunk");
    // An odd multiple of kChunkMultiple is not whole rounds of the SM70 body's CTA.
    if (c.plan.chunk_multiple % 2 == 1) saw("plan chunk of half SM70 rounds");
    if (c.score_spread < 1e-2) saw("flat scores");
    if (c.score_spread > 1e2) saw("peaked scores");
    if (o.softmax_scale < 1e-2f || o.k_scale < 1e-2f || o.v_scale < 1e-2f) saw("small scale");
    if (o.softmax_scale > 1e2f || o.k_scale > 1e2f || o.v_scale > 1e2f) saw("large scale");
    for (int32_t len : o.seq_lens) {
      if (len == 0 || len == 1 || len == 31 || len == 32 || len == 33) saw("length " + std::to_string(len));
      if (len == o.page_size - 1) saw("length page-1");
      if (len == o.page_size + 1) saw("length page+1");
      if (len > 60000) saw("length > 60000");
    }
  }

  const std::vector<std::string> wanted = [&] {
    std::vector<std::string> w;
    for (int i = 0; i < kCaseClasses; ++i) w.push_back(std::string("class ") + class_name(CaseClass(i)));
    for (int i = 0; i < kTiers; ++i) w.push_back(std::string("tier ") + tier_name(Tier(i)));
    for (int page : kListedPageSizes) w.push_back("page " + std::to_string(page));
    for (int d : kHeadDims)
      for (const char* f : {" e5m2", " e4m3", " fp16", " bf16"}) w.push_back("D" + std::to_string(d) + f);
    for (const ConfigInfo& info : configs) w.push_back("config " + info.name);
    for (const char* l : {"packed", "vllm", "strided"}) w.push_back(std::string("layout ") + l);
    for (char t : std::string("qkv"))
      for (int v = 0; v < 3; ++v) w.push_back(std::string("inject ") + t + " " + std::to_string(v));
    for (const std::string& item : smoke_required(configs)) w.push_back(item);
    for (const char* s :
         {"page unlisted", "group 1", "group 9", "group 16", "group 17", "group 24", "kv heads 1", "kv heads 8",
          "batch 1", "batch 32",
          "shared prefix", "plan explicit", "plan auto", "plan max_batch above batch",
          "plan max_context above longest", "one chunk", "plan chunk of half SM70 rounds", "flat scores",
          "peaked scores", "small scale",
          "large scale", "length 0", "length 1", "length 31", "length 32", "length 33", "length page-1",
          "length page+1", "length > 60000", "inf meets 0 at q", "inf meets 0 at k", "bad page -1",
          "bad page 2147483647", "bad page -2147483648", "bad page 50000000", "bad page num_pages + 0",
          "bad page num_pages + k", "bad length < 0", "bad length > max_context", "masked tail",
          "masked tail V 0", "masked tail V 1", "masked tail V 2", "q/out contiguous", "q/out padded or offset",
          "odd out stride", "q of bf16 values", "graph replay", "multi-token", "multi-token q_len 1",
          "multi-token q_len 2..4", "multi-token q_len 5..16", "multi-token drawn ragged",
          "bad length: fewer keys than query tokens"})
      w.push_back(s);
    return w;
  }();
  for (const std::string& what : wanted) {
    INFO(what);
    CHECK(seen[what] > 0);
  }
  // Most cases are finite, and every class is well represented.
  CHECK(seen["class finite"] > int(kSeeds) / 2);
  for (int i = 1; i < kCaseClasses; ++i) CHECK(seen[std::string("class ") + class_name(CaseClass(i))] > 500);
  // Masked chunks (fc1accf's case) on Configs of both atoms, each many times over.
  INFO("masked tails " << seen["masked tail"] << ", masked chunks: default atom "
                       << seen["masked chunk, default atom"] << ", sm70 atom " << seen["masked chunk, sm70 atom"]);
  CHECK(seen["masked tail"] > 200);
  CHECK(seen["masked chunk, default atom"] > 100);
  CHECK(seen["masked chunk, sm70 atom"] > 80);
  // Each Config many times over; the new axes on a good share of the cases.
  for (const ConfigInfo& info : configs) {
    INFO(info.name << ": " << seen["config " + info.name]);
    CHECK(seen["config " + info.name] > 60);
  }
  for (const auto& [item, at_least] : std::vector<std::pair<std::string, int>>{
           {"q/out contiguous", 2000},
           {"q/out padded or offset", 5000},
           {"q/out head-major", 2000},
           {"out rows not 4-byte aligned", 3000},
           {"odd out stride", 2000},
           {"one-row dimension with a junk stride", 300},
           {"q of bf16 values", 3000},
           // 600 before a third of the finite cases took a variant, 500 before a fifth of the
           // cases went to the multi-token Configs (fp16 q/out)
           {"bf16 q/out, default atom", 400},
           {"bf16 q/out, sm70 atom", 190},  // 250 before multi-token
           {"k scale on device", 3000},
           {"v scale on device", 3000},
           {"graph replay", 1500},
           {"graph replay, device scales", 700},
           {"group > 16 (three M tiles)", 2000},
           {"compile-time page not a multiple of 16, default atom", 60},
           {"compile-time page not a multiple of 16, sm70 atom", 60},
           {"more than 32 chunks merged, default atom", 240},  // 250 before E4M3 took 1/6 of the formats
           {"more than 32 chunks merged, sm70 atom", 185},  // 250 before multi-token, 200 before bf16 caches
           {"sliding window, default atom", 300},
           {"sliding window, sm70 atom", 300},
           {"plan cut over the window, default atom", 150},
           {"plan cut over the window, sm70 atom", 150},
           {"logit soft-cap, default atom", 200},
           {"logit soft-cap, sm70 atom", 200},
           {"attention sinks, default atom", 200},
           {"attention sinks, sm70 atom", 200},
           {"a variant with NaN/inf inputs, default atom", 120},  // 149 and 111 when added
           {"a variant with NaN/inf inputs, sm70 atom", 90},
           // Multi-token queries (a fifth of the cases), by the most query tokens of a
           // sequence and ragged counts, on each atom (D128 takes the SM70 atom, D64 and
           // D256 the default one); with a variant, in the other classes, over many chunks.
           {"multi-token", 1800},
           {"multi-token q_len 1", 300},
           {"multi-token q_len 2..4, default atom", 320},
           {"multi-token q_len 2..4, sm70 atom", 320},
           {"multi-token q_len 5..16, default atom", 300},
           {"multi-token q_len 5..16, sm70 atom", 300},
           {"multi-token ragged, default atom", 280},
           {"multi-token ragged, sm70 atom", 280},
           {"multi-token with a variant, default atom", 190},
           {"multi-token with a variant, sm70 atom", 190},
           {"multi-token non-finite, default atom", 40},
           {"multi-token non-finite, sm70 atom", 40},
           {"multi-token bad page, default atom", 40},
           {"multi-token bad page, sm70 atom", 40},
           {"multi-token bad length, default atom", 40},
           {"multi-token bad length, sm70 atom", 40},
           {"multi-token, more than 32 chunks merged, default atom", 8},
           {"multi-token, more than 32 chunks merged, sm70 atom", 8},
           {"multi-token rows in several CTAs, default atom", 300},
           {"multi-token rows in several CTAs, sm70 atom", 300},
           {"multi-token Config without q_indptr", 60},
           {"multi-token q_len 16", 60},
           {"multi-token max_q_len above the step's", 60},
           {"multi-token plan max_q_len above max_q_len", 60},
           {"multi-token sequence without rows", 60},
           {"multi-token first query token sees one key", 60},
           {"multi-token bad length: fewer keys than query tokens", 35},
           {"multi-token graph replay", 60}}) {
    INFO(item << ": " << seen[item]);
    CHECK(seen[item] >= at_least);
  }
  // The counts, for the log (ctest -V).
  for (const auto& [item, n] : seen)
    if (item.rfind("multi-token", 0) == 0) std::printf("sweep cases: %-60s %5d of %llu\n", item.c_str(), n,
                                                       static_cast<unsigned long long>(kSeeds));
}

TEST_CASE("sweep cases: every Config that accepts a case plans it within the workspace cap",
          "[sweep_cases]") {
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    const SweepCase c = draw_case(seed);
    for_every_config([&](auto tag) {
      using Config = typename decltype(tag)::type;
      if (!config_info<Config>().accepts(c)) return;
      vxqa::DecodePlan plan;
      const vxqa::Status s = make_case_plan<Config>(c, &plan);
      INFO("seed " << seed << " " << config_info<Config>().name << ": " << s.message());
      REQUIRE(s.ok());
      REQUIRE(vxqa::validate_plan<Config>(plan).ok());
      REQUIRE(plan.workspace_bytes <= kMaxWorkspaceBytes);
    });
  }
}

TEST_CASE("sweep cases: built cases are decode steps validate() accepts, with their expectations",
          "[sweep_cases]") {
  int built = 0, multi_built = 0, multi_classes = 0;
  std::set<int> classes;
  // The first 120 cheap cases, and as many more multi-token ones as make 40 of those.
  for (uint64_t seed = 0; (built < 120 || multi_built < 40) && seed < kSeeds; ++seed) {
    const SweepCase drawn = draw_case(seed);
    if (estimate_cpu_ns(drawn) > 3e6) continue;  // cheap ones: this is a unit test
    if (built >= 120 && !drawn.multi_token()) continue;
    ++built;
    multi_built += drawn.multi_token();
    multi_classes += drawn.multi_token() && drawn.cls != CaseClass::kFinite;
    const PreparedCase pc = prepare_case(seed);
    const SweepCase& c = pc.spec;
    const RandomProblem& p = pc.problem;
    INFO(describe(c));
    REQUIRE(pc.error.empty());
    classes.insert(int(c.cls));
    REQUIRE(int64_t(p.cache.size()) <= cache_elements_bound(c.problem) * vxqa::reference::element_bytes(p.format));
    REQUIRE(p.max_pages == c.max_pages());
    REQUIRE(p.num_pages >= 1);

    // What the device gets differs from the problem exactly where the class says.
    size_t table_diffs = 0;
    for (size_t i = 0; i < p.block_table.size(); ++i) table_diffs += pc.device_table[i] != p.block_table[i];
    if (c.cls == CaseClass::kBadPage) {
      REQUIRE(table_diffs == 1);
      const int32_t id = pc.device_table[c.bad_page.seq * p.table_stride + c.bad_page.column];
      REQUIRE((id < 0 || id >= p.num_pages));
    } else {
      REQUIRE(table_diffs == 0);
    }
    REQUIRE(pc.device_lens == c.device_lens());
    REQUIRE(pc.expected_errors == c.expected_errors());
    for (int b = 0; b < p.batch; ++b) {
      const bool bad_length = pc.device_lens[b] != p.seq_lens[b];
      const bool bad_page = b == c.bad_page.seq;
      const Expect want = bad_length || bad_page ? Expect::kNan
                          : p.seq_lens[b] == 0   ? Expect::kEmpty
                                                 : Expect::kReference;
      REQUIRE(pc.expect[b] == want);
    }
    if (c.cls != CaseClass::kNonFinite) {
      for (double x : pc.reference.out) REQUIRE(std::isfinite(x));
    }

    // Rows: the case's query tokens, as the problem, the reference and its model have them.
    REQUIRE(p.num_tokens == c.rows());
    REQUIRE(p.q_indptr.empty() == !c.has_q_indptr());
    for (int b = 0; b < p.batch; ++b) {
      REQUIRE(p.query_count(b) == c.queries(b));
      REQUIRE(p.first_row(b) == c.first_row(b));
    }
    REQUIRE(pc.reference.out.size() == size_t(c.rows()) * p.query_heads() * p.head_dim);
    REQUIRE(pc.reference.lse.size() == size_t(c.rows()) * p.query_heads());
    REQUIRE(pc.model.out_sigma.size() == pc.reference.out.size());
    REQUIRE(vxqa::problem_max_q_len(p) == c.most_queries());
    // The reference as the kernels would give it passes the comparator, row by row.
    if (c.cls == CaseClass::kFinite) {
      std::vector<uint16_t> out;
      std::vector<float> lse;
      for (double x : pc.reference.out) out.push_back(vxqa::reference::fp16_from_double(x));
      for (double x : pc.reference.lse) lse.push_back(float(x));
      const Comparison cmp = vxqa::reference::compare_with_reference(
          pc.reference, pc.model, pc.expect, p.query_heads(), p.head_dim, KernelOutputs{out.data(), lse.data(), 0u},
          pc.expected_errors, {}, vxqa::reference::row_layout(p.inputs()));
      INFO(cmp.first);
      REQUIRE(cmp.ok());
    }

    // q as the device gets it: the problem's rows in the case's layout, NaN around them;
    // for bf16 q the same values as bf16 bits.
    REQUIRE(pc.device_q.size() == size_t(c.io.q_elements));
    REQUIRE(pc.device_q_bf16.size() == (c.bf16_q ? size_t(c.io.q_elements) : 0u));
    {
      const int heads = p.query_heads(), D = p.head_dim;
      size_t in_rows = 0;
      for (int row = 0; row < p.num_tokens; ++row)
        for (int h = 0; h < heads; ++h)
          for (int d = 0; d < D; ++d) {
            const size_t at = size_t(c.io.q_row(row, h) + d), i = (size_t(row) * heads + h) * D + d;
            REQUIRE(pc.device_q[at] == p.q[i]);
            if (c.bf16_q) {
              const float value = vxqa::detail::act_to_float<vxqa::ActType::kBf16>(pc.device_q_bf16[at]);
              REQUIRE(vxqa::reference::fp16_from_double(value) == p.q[i]);
            }
            ++in_rows;
          }
      size_t gaps = 0;
      for (uint16_t x : pc.device_q) gaps += x == kQGap;
      REQUIRE(gaps >= pc.device_q.size() - in_rows);
    }

    // validate() takes it, with its strides, q/out type and device scales, for every Config
    // that accepts it, and, given the lengths the device reads, refuses exactly the
    // bad-length cases.
    for_every_config([&](auto tag) {
      using Config = typename decltype(tag)::type;
      if (!config_info<Config>().accepts(c)) return;
      vxqa::DecodePlan plan;
      REQUIRE(make_case_plan<Config>(c, &plan).ok());
      auto fake = [](uintptr_t address) { return reinterpret_cast<void*>(address); };
      CaseBuffers buffers;
      buffers.cache = fake(1ull << 32);
      buffers.q = fake(2ull << 32);
      buffers.block_table = static_cast<const int32_t*>(fake(3ull << 32));
      buffers.seq_lens = static_cast<const int32_t*>(fake(4ull << 32));
      buffers.out = fake(5ull << 32);
      buffers.lse = static_cast<float*>(fake(6ull << 32));
      buffers.scales = static_cast<const float*>(fake(8ull << 32));
      buffers.sinks = static_cast<const float*>(fake(9ull << 32));
      buffers.q_indptr = static_cast<const int32_t*>(fake(10ull << 32));
      const vxqa::DecodeParams params = case_params(pc, buffers, Config::kQo);
      REQUIRE((params.q_indptr != nullptr) == c.has_q_indptr());
      REQUIRE(params.max_q_len == c.max_q_len);
      REQUIRE(plan.max_q_len == c.plan.max_q_len);
      REQUIRE(Config::kMultiToken == c.multi_token());
      REQUIRE(params.sliding_window == c.problem.window);
      REQUIRE(params.logit_softcap == c.problem.logit_softcap);
      REQUIRE((params.sinks != nullptr) == c.problem.sinks);
      REQUIRE(params.qo_type == Config::kQo);
      REQUIRE((params.k_scale_ptr != nullptr) == c.k_scale_on_device);
      REQUIRE((params.v_scale_ptr != nullptr) == c.v_scale_on_device);
      if (c.k_scale_on_device) REQUIRE(std::isnan(params.k_scale));  // must be ignored
      if (c.v_scale_on_device) REQUIRE(std::isnan(params.v_scale));
      const vxqa::Status s = vxqa::validate<Config>(params, plan, fake(7ull << 32), plan.workspace_bytes);
      INFO(config_info<Config>().name << ": " << s.message());
      REQUIRE(s.ok());
      const vxqa::Status with_lens =
          vxqa::validate<Config>(params, plan, fake(7ull << 32), plan.workspace_bytes, pc.device_lens.data());
      // ... except too few keys for the query tokens, which only the kernels can see.
      bool host_bad = false;
      for (const auto& [seq, len] : c.bad_lengths) host_bad |= !c.fewer_keys_than_queries(seq, len);
      REQUIRE(with_lens.ok() == !host_bad);
    });
  }
  CHECK(classes.size() == size_t(kCaseClasses));
  CHECK(multi_built >= 40);
  CHECK(multi_classes >= 5);
}

// The sweep predicts each sequence's query tokens (generator_query_counts, cut_query_counts)
// before it builds the problem: the prediction is what make_random_problem draws, for any
// batch, q_len, ragged, lengths and seed.
TEST_CASE("sweep cases: the predicted query tokens are the problem generator's", "[sweep_cases]") {
  detail::CaseRng r(12345);
  int ragged = 0, cut = 0, all_zero = 0;
  for (int i = 0; i < 600; ++i) {
    RandomProblemOptions o;
    o.batch = r.in(1, 12);
    o.kv_heads = 1;
    o.group = 1;
    o.head_dim = 64;
    o.page_size = r.in(1, 8);
    o.spare_pages = 1;
    o.spare_table_cols = 1;
    o.q_len = r.in(2, kMaxQueryLen);
    o.ragged = r.chance(50);
    for (int b = 0; b < o.batch; ++b) o.seq_lens.push_back(r.chance(20) ? r.in(0, 3) : r.in(0, 24));
    const uint64_t seed = r.bits();
    const std::vector<int32_t> drawn = generator_query_counts(o, seed);
    const std::vector<int32_t> n = cut_query_counts(drawn, o.seq_lens);
    const RandomProblem p = vxqa::reference::make_random_problem(o, seed);
    INFO("case " << i);
    REQUIRE(int(p.q_indptr.size()) == o.batch + 1);
    for (int b = 0; b < o.batch; ++b) REQUIRE(p.query_count(b) == n[b]);
    ragged += o.ragged && std::adjacent_find(n.begin(), n.end(), std::not_equal_to<int32_t>()) != n.end();
    cut += n != drawn;
    all_zero += std::count(drawn.begin(), drawn.end(), 0) == o.batch - 1 && o.batch > 1;
  }
  CHECK(ragged > 100);
  CHECK(cut > 100);
  CHECK(all_zero > 0);
}

TEST_CASE("sweep cases: masked_chunk_exercised says where a V poison lies in a chunk of -inf scores",
          "[sweep_cases]") {
  SweepCase c;
  CHECK_FALSE(masked_chunk_exercised(c, 64));  // no masked tail
  c.masked.seq = 0;
  c.masked.from = 5;
  c.masked.v = {MaskedTail::VPoison{299, 3, Poison::kNan}};
  CHECK(masked_chunk_exercised(c, 64));        // token 299 in chunk 4: tokens [256, 300), all masked
  CHECK(masked_chunk_exercised(c, 299));       // chunk 1: [299, ...)
  CHECK_FALSE(masked_chunk_exercised(c, 300));  // one chunk: the live tokens [0, 5) share it
  c.masked.v = {MaskedTail::VPoison{63, 3, Poison::kPlusInf}, MaskedTail::VPoison{64, 1, Poison::kNan}};
  CHECK(masked_chunk_exercised(c, 64));
  CHECK_FALSE(masked_chunk_exercised(c, 128));
  c.masked.from = 100;                         // a chunk shorter than `from` is not all masked
  CHECK_FALSE(masked_chunk_exercised(c, 64));
}

// Masked tails, built: the problem is what MaskedTail says, the float64 reference is NaN
// exactly at the poisoned dims of the masked group's heads (with a finite LSE), and the
// comparator, which passes the reference itself, refuses the outputs a kernel gave before
// fc1accf: finite values there (a masked chunk's O was 0, which is the reference of the
// same problem with the poisons replaced by 0, since their probabilities are 0).
TEST_CASE("sweep cases: a masked tail gives NaN where it must, and the old finite answer fails",
          "[sweep_cases]") {
  int built = 0;
  for (uint64_t seed = 0; built < 12 && seed < kSeeds; ++seed) {
    const SweepCase spec = draw_case(seed);
    // Without shared prefix pages: another sequence reading the masked pages would have its
    // own NaN (its q is not made > 0), which this test does not count.
    // Single-token: with several query tokens only the rows that see a V poison are NaN.
    if (spec.masked.seq < 0 || spec.problem.shared_prefix_pages || spec.multi_token() || estimate_cpu_ns(spec) > 3e7)
      continue;
    ++built;
    const PreparedCase pc = prepare_case(seed);
    const SweepCase& c = pc.spec;
    const RandomProblem& p = pc.problem;
    const MaskedTail& m = c.masked;
    INFO(describe(c));
    REQUIRE(pc.error.empty());
    const int len = p.seq_lens[m.seq], hq = p.query_heads(), D = p.head_dim;
    for (int g = 0; g < p.group; ++g)
      REQUIRE(vxqa::reference::fp16_to_double(p.q[(size_t(m.seq) * hq + m.kv_head * p.group + g) * D + m.dim]) > 0);
    for (int t = 0; t < len; ++t) {
      const double k = p.k_at(m.seq, t, m.kv_head, m.dim);
      REQUIRE((t < m.from ? std::isfinite(k) : (std::isinf(k) && k < 0)));
    }
    std::set<int> poisoned;
    for (const MaskedTail::VPoison& v : m.v) {
      REQUIRE(!std::isfinite(p.v_at(m.seq, v.token, m.kv_head, v.dim)));
      poisoned.insert(v.dim);
    }
    // The reference: NaN at the poisoned dims of the group's heads, nowhere else.
    size_t nans = 0;
    for (size_t i = 0; i < pc.reference.out.size(); ++i) nans += std::isnan(pc.reference.out[i]);
    REQUIRE(nans == poisoned.size() * p.group);
    for (double x : pc.reference.lse) REQUIRE(!std::isnan(x));
    for (int g = 0; g < p.group; ++g) {
      const size_t row = size_t(m.seq) * hq + m.kv_head * p.group + g;
      REQUIRE(std::isfinite(pc.reference.lse[row]));
      for (int dim : poisoned) REQUIRE(std::isnan(pc.reference.out[row * D + dim]));
    }

    // The reference as the kernels' outputs (fp16 out, fp32 lse) passes the comparator ...
    auto as_outputs = [](const DecodeOutput& r, std::vector<uint16_t>* out, std::vector<float>* lse) {
      for (double x : r.out) out->push_back(vxqa::reference::fp16_from_double(x));
      for (double x : r.lse) lse->push_back(float(x));
    };
    std::vector<uint16_t> out;
    std::vector<float> lse;
    as_outputs(pc.reference, &out, &lse);
    const Comparison right = vxqa::reference::compare_with_reference(
        pc.reference, pc.model, pc.expect, hq, D, KernelOutputs{out.data(), lse.data(), 0u}, pc.expected_errors);
    INFO(right.first);
    REQUIRE(right.ok());
    // ... and the old answer, finite at the poisoned dims, fails it there and only there.
    RandomProblem old = p;
    for (const MaskedTail::VPoison& v : m.v) old.set_v(m.seq, v.token, m.kv_head, v.dim, 0.0);
    const DecodeOutput old_ref = vxqa::reference::decode_reference(old.inputs());
    for (double x : old_ref.out) REQUIRE(std::isfinite(x));
    out.clear();
    lse.clear();
    as_outputs(old_ref, &out, &lse);
    const Comparison wrong = vxqa::reference::compare_with_reference(
        pc.reference, pc.model, pc.expect, hq, D, KernelOutputs{out.data(), lse.data(), 0u}, pc.expected_errors);
    REQUIRE(wrong.mismatches == poisoned.size() * p.group);
    REQUIRE(wrong.first.find("out seq " + std::to_string(m.seq)) == 0);
  }
  CHECK(built == 12);
}

namespace {

// Three sequences, Hq 2, D 4: seq 0 compared with the reference, seq 1 empty, seq 2 NaN.
struct Synthetic {
  static constexpr int kHeads = 2, kDim = 4;
  vxqa::reference::DecodeOutput ref;
  std::vector<Expect> expect = {Expect::kReference, Expect::kEmpty, Expect::kNan};
  std::vector<uint16_t> out;
  std::vector<float> lse;
  uint32_t errors = 2;
  // Every standard deviation 2.5e-4: bounds of 2e-3 (8 of them), plus half an fp16 ulp for out.
  vxqa::reference::ErrorModel model{std::vector<double>(24, 2.5e-4), std::vector<double>(24, 0.0),
                                    std::vector<double>(6, 2.5e-4), std::vector<double>(6, 0.0)};

  Synthetic() {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    ref.out = {0.5, -0.25, nan, inf,  0.125, 1.0, -1.0, -inf,  // seq 0
               0, 0, 0, 0, 0, 0, 0, 0,                          // seq 1 (empty)
               0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8};          // seq 2 (its reference is not used)
    ref.lse = {1.5, -3.0, -inf, -inf, 2.0, 2.0};
    for (double x : ref.out) out.push_back(vxqa::reference::fp16_from_double(x));
    for (int i : {16, 17, 18, 19, 20, 21, 22, 23}) out[i] = 0x7E00;  // seq 2: NaN
    lse = {1.5f, -3.0f, -INFINITY, -INFINITY, NAN, NAN};
  }
  Comparison compare(uint32_t expected_errors = 2) const {
    return vxqa::reference::compare_with_reference(ref, model, expect, kHeads, kDim,
                                                   KernelOutputs{out.data(), lse.data(), errors},
                                                   expected_errors);
  }
};

uint16_t fp16_bits(double x) { return vxqa::reference::fp16_from_double(x); }

}  // namespace

TEST_CASE("comparator: right outputs pass, every kind of wrong one is flagged", "[sweep_cases]") {
  const Synthetic good;
  REQUIRE(good.compare().ok());

  SECTION("an infinite reference also takes NaN (0 · inf), not the other inf or a finite value") {
    Synthetic s;
    s.out[3] = 0x7E00;
    CHECK(s.compare().ok());
    s.out[3] = 0xFC00;  // -inf where +inf is expected
    CHECK_FALSE(s.compare().ok());
    s.out[3] = fp16_bits(65504);
    CHECK_FALSE(s.compare().ok());
  }
  SECTION("a finite value where the reference is NaN") {
    Synthetic s;
    s.out[2] = fp16_bits(0.0);
    const Comparison c = s.compare();
    CHECK(c.mismatches == 1);
    CHECK(c.first.find("out seq 0 head 0 dim 2") == 0);
  }
  SECTION("NaN where a finite value is expected") {
    Synthetic s;
    s.out[5] = 0x7E00;
    CHECK_FALSE(s.compare().ok());
    s = Synthetic();
    s.lse[1] = NAN;
    CHECK(s.compare().first.find("lse seq 0 head 1") == 0);
  }
  SECTION("a value out of the bound, and one just inside it") {
    Synthetic s;
    s.out[4] = fp16_bits(0.125 + 0.004);  // bound 2e-3 + half an ulp at 0.127 (2^-14)
    const Comparison c = s.compare();
    CHECK_FALSE(c.ok());
    CHECK(c.worst > 1.0);
    s.out[4] = fp16_bits(0.125 + 0.001);
    CHECK(s.compare().ok());
    CHECK(s.compare().worst > 0.3);
  }
  SECTION("a wrong LSE") {
    Synthetic s;
    s.lse[0] = 1.5f + 3e-3f;
    CHECK_FALSE(s.compare().ok());
    s.lse[0] = 1.5f + 1e-3f;
    CHECK(s.compare().ok());
  }
  SECTION("a missing or an extra error bit") {
    Synthetic s;
    s.errors = 0;
    CHECK(s.compare().first.find("error word") == 0);
    s.errors = 3;
    CHECK_FALSE(s.compare().ok());
    s.errors = 0;
    CHECK(s.compare(0).ok());
  }
  SECTION("a sequence that must be NaN: one finite value or LSE is enough") {
    Synthetic s;
    s.out[21] = fp16_bits(0.6);
    CHECK_FALSE(s.compare().ok());
    s = Synthetic();
    s.lse[5] = 2.0f;
    CHECK_FALSE(s.compare().ok());
  }
  SECTION("an empty sequence: out exactly 0 and lse -inf") {
    Synthetic s;
    s.out[9] = fp16_bits(1e-6);
    CHECK_FALSE(s.compare().ok());
    s = Synthetic();
    s.out[9] = 0x8000;  // -0 is 0
    CHECK(s.compare().ok());
    s.lse[2] = -1e30f;
    CHECK_FALSE(s.compare().ok());
  }
  SECTION("the model's fixed part widens the bound (the LSE's grows with |lse|)") {
    Synthetic s;
    s.ref.lse[0] = 4096.0;
    s.model.lse_fixed[0] = 4096 * 0x1p-20;
    s.lse[0] = 4096.0f + 5e-3f;  // 2e-3 + 4096 · 2^-20 ≈ 5.9e-3
    CHECK(s.compare().ok());
    s.lse[0] = 4096.0f + 8e-3f;
    CHECK_FALSE(s.compare().ok());
  }
}

TEST_CASE("sweep seeds: base 0 is the seeds themselves, another base other cases, replayable",
          "[sweep_cases]") {
  CHECK(case_seed(0, 0) == 0u);
  CHECK(case_seed(0, 9999) == 9999u);
  const uint64_t base = 1767225600;  // a `date +%s`
  const uint64_t seed = case_seed(base, 1234);
  CHECK(seed == (base << 32) + 1234);
  CHECK(seed_base(seed) == base);
  CHECK(seed_index(seed) == 1234u);
  CHECK(case_seed(kMaxSeedBase, kMaxSeedIndex - 1) == ~uint64_t(0));
  CHECK(replay_command("vxqa_sweep", seed) == "vxqa_sweep --seed-base 1767225600 --replay 1234");
  CHECK(replay_command("./vxqa_sweep", 42) == "./vxqa_sweep --seed-base 0 --replay 42");
  // Other cases, and the seed they name is theirs.
  int differ = 0;
  for (uint64_t i = 0; i < 100; ++i) {
    const SweepCase fresh = draw_case(case_seed(base, i));
    CHECK(fresh.seed == case_seed(base, i));
    differ += summary(fresh) != summary(draw_case(i));
    REQUIRE(describe(fresh) == describe(draw_case(case_seed(base, i))));
  }
  CHECK(differ == 100);
}

TEST_CASE("sweep io: q rows scattered and out rows gathered exactly, writes outside out's rows counted",
          "[sweep_cases]") {
  int checked = 0, multi_token = 0;
  for (uint64_t seed = 0; checked < 200 && seed < kSeeds; ++seed) {
    const SweepCase c = draw_case(seed);
    if (c.query_heads() * c.rows() > 64) continue;
    ++checked;
    multi_token += c.has_q_indptr() && c.rows() > c.problem.batch;
    const IoLayout& io = c.io;
    const int batch = c.rows(), heads = c.query_heads(), dim = c.problem.head_dim;  // rows: query tokens
    INFO(describe(c));
    // Rows of varied values, each exact in bf16 (integers in [-125, 125]; fp16 too).
    std::vector<uint16_t> rows(size_t(batch) * heads * dim);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = vxqa::reference::fp16_from_double(double(i % 251) - 125);
    const std::vector<uint16_t> q = detail::scatter_q(rows, io, batch, heads, dim);
    REQUIRE(q.size() == size_t(io.q_elements));
    // The kernels' writes: each row at its place in a poisoned out buffer.
    std::vector<uint16_t> out(size_t(io.out_elements), kOutPoison);
    std::vector<uint16_t> bf16_out = out;
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < dim; ++d) {
          const size_t i = (size_t(b) * heads + h) * dim + d;
          REQUIRE(q[size_t(io.q_row(b, h) + d)] == rows[i]);
          out[size_t(io.out_row(b, h) + d)] = rows[i];
          bf16_out[size_t(io.out_row(b, h) + d)] = vxqa::detail::float_to_act<vxqa::ActType::kBf16>(
              float(vxqa::reference::fp16_to_double(rows[i])));
        }
    GatheredOut g = gather_out(out, io, batch, heads, dim, vxqa::ActType::kFp16);
    REQUIRE(g.rows == rows);
    REQUIRE(g.stray == 0u);
    // bf16 outputs come back as the fp16 bits of their values (these are exact in bf16).
    g = gather_out(bf16_out, io, batch, heads, dim, vxqa::ActType::kBf16);
    REQUIRE(g.rows == rows);
    REQUIRE(g.stray == 0u);
    // A write in the tail, and one between rows where there is padding.
    out.back() = 0;
    g = gather_out(out, io, batch, heads, dim, vxqa::ActType::kFp16);
    CHECK(g.stray == 1u);
    CHECK(g.first_stray == io.out_elements - 1);
    if (io.out_offset > 0) {
      out[0] = 0;
      g = gather_out(out, io, batch, heads, dim, vxqa::ActType::kFp16);
      CHECK(g.stray == 2u);
      CHECK(g.first_stray == 0);
    }
  }
  CHECK(checked == 200);
  CHECK(multi_token >= 10);  // steps with more rows than sequences among them
}

// bf16 q/out: the reference takes q's bf16 values; outputs rounded to bf16 pass under the
// bf16 bound (7 mantissa bits) and not, somewhere, under fp16's, so the bound is the one
// that lets them through.
TEST_CASE("sweep bf16: q holds bf16 values, bf16 outputs pass under the bf16 bound only", "[sweep_cases]") {
  int built = 0, failed_as_fp16 = 0;
  for (uint64_t seed = 0; built < 20 && seed < kSeeds; ++seed) {
    const SweepCase spec = draw_case(seed);
    if (!spec.bf16_q || spec.cls != CaseClass::kFinite || estimate_cpu_ns(spec) > 3e6) continue;
    ++built;
    const PreparedCase pc = prepare_case(seed);
    INFO(describe(pc.spec));
    REQUIRE(pc.error.empty());
    for (uint16_t x : pc.problem.q) {
      const double v = vxqa::reference::fp16_to_double(x);
      const uint16_t bf = vxqa::detail::float_to_act<vxqa::ActType::kBf16>(float(v));
      REQUIRE(vxqa::reference::fp16_from_double(vxqa::detail::act_to_float<vxqa::ActType::kBf16>(bf)) == x);
    }
    // The reference rounded to bf16, laid out as the case's out and gathered back.
    const IoLayout& io = pc.spec.io;
    const int batch = pc.problem.num_tokens, heads = pc.problem.query_heads(), dim = pc.problem.head_dim;  // rows
    std::vector<uint16_t> out(size_t(io.out_elements), kOutPoison);
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < dim; ++d)
          out[size_t(io.out_row(b, h) + d)] = vxqa::detail::float_to_act<vxqa::ActType::kBf16>(
              float(pc.reference.out[(size_t(b) * heads + h) * dim + d]));
    const GatheredOut g = gather_out(out, io, batch, heads, dim, vxqa::ActType::kBf16);
    REQUIRE(g.stray == 0u);
    std::vector<float> lse;
    for (double x : pc.reference.lse) lse.push_back(float(x));
    const KernelOutputs ours{g.rows.data(), lse.data(), 0u};
    const vxqa::reference::RowLayout layout = vxqa::reference::row_layout(pc.problem.inputs());
    const Comparison as_bf16 = vxqa::reference::compare_with_reference(
        pc.reference, pc.model, pc.expect, heads, dim, ours, pc.expected_errors, compare_bounds(vxqa::ActType::kBf16),
        layout);
    INFO(as_bf16.first);
    REQUIRE(as_bf16.ok());
    failed_as_fp16 += !vxqa::reference::compare_with_reference(pc.reference, pc.model, pc.expect, heads, dim, ours,
                                                               pc.expected_errors, compare_bounds(vxqa::ActType::kFp16),
                                                               layout)
                           .ok();
  }
  CHECK(built == 20);
  CHECK(failed_as_fp16 > 10);
}

// The smoke (vxqa_sweep --smoke, ctest gpu.sweep_smoke): 50 cheap seeds of base 0 whose
// cases, together, run every Config and merge more than 32 chunks on each atom, checked here
// apart from coverage_items (plans made with each Config's own make_case_plan).
TEST_CASE("sweep smoke: 50 cheap seeds cover every Config and a merge of more than 32 chunks",
          "[sweep_cases]") {
  const std::vector<ConfigInfo> configs = all_configs();
  std::set<std::string> names;
  for (const ConfigInfo& info : configs) names.insert(info.name);
  REQUIRE(names.size() == configs.size());  // each Config's line in the logs is its own

  const Smoke smoke = smoke_seeds(configs);
  INFO("missing: " << (smoke.missing.empty() ? std::string("none") : smoke.missing.front()));
  REQUIRE(smoke.missing.empty());
  REQUIRE(smoke.seeds.size() == size_t(kSmokeSeeds));
  REQUIRE(std::is_sorted(smoke.seeds.begin(), smoke.seeds.end()));
  REQUIRE(std::adjacent_find(smoke.seeds.begin(), smoke.seeds.end()) == smoke.seeds.end());
  REQUIRE(smoke_seeds(configs).seeds == smoke.seeds);  // the same every run

  std::set<std::string> covered;
  std::vector<int> runs(configs.size());
  int many_chunks[2] = {0, 0};  // default atom, sm70 atom
  double cpu_ns = 0;
  for (uint64_t seed : smoke.seeds) {
    REQUIRE(seed_base(seed) == 0u);
    const SweepCase c = draw_case(seed);
    INFO(describe(c));
    REQUIRE(estimate_cpu_ns(c) <= kSmokeMaxCpuNs);
    cpu_ns += estimate_cpu_ns(c);
    for (const std::string& item : coverage_items(c, configs)) covered.insert(item);
    int index = 0;
    for_every_config([&](auto tag) {
      using Config = typename decltype(tag)::type;
      const int i = index++;
      if (!config_info<Config>().accepts(c)) return;
      ++runs[i];
      vxqa::DecodePlan plan;
      REQUIRE(make_case_plan<Config>(c, &plan).ok());
      if (plan.num_chunks <= 32 || vxqa::combine_slice_dims(plan.num_chunks) != 16) return;
      for (int b = 0; b < c.problem.batch; ++b)
        if (c.device_lens()[b] == c.problem.seq_lens[b] && b != c.bad_page.seq && c.queries(b) > 0 &&
            c.problem.seq_lens[b] > 32 * plan.chunk_tokens) {
          ++many_chunks[Config::kAtom == vxqa::MmaAtom::kSm70];
          break;
        }
    });
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    INFO(configs[i].name);
    CHECK(runs[i] >= 1);
  }
  CHECK(many_chunks[0] >= 1);
  CHECK(many_chunks[1] >= 1);
  for (const std::string& item : smoke_required(configs)) {
    INFO(item);
    CHECK(covered.count(item) == 1);
  }
  // Cheap: under 2 s of CPU to build all of them on the 2-core CI machine's estimate.
  CHECK(cpu_ns < 2e9);
}
