// vxqa_sweep: the random differential sweep. Each seed draws one decode step (sweep_case.h),
// worker threads build it and its float64 reference (sweep_prepare.h), and this thread runs
// it on the GPU with every Config that accepts it (sweep_configs.h) and compares.
//
//   vxqa_sweep [--seed-base B] [--seed-begin A] [--seed-end E] [--covering TEXT] [--threads N] [--verbose] [--cpu-only]
//   vxqa_sweep --smoke [--threads N] [--verbose] [--cpu-only]
//   vxqa_sweep [--seed-base B] --replay I
//   vxqa_sweep [--seed-base B] [--seed-begin A] [--seed-end E] --draw-only
//
// Case i of [A, E) (default [0, 10000)) is drawn from seed B · 2^32 + i (sweep_seeds.h;
// base 0: the seeds [A, E) themselves), so a fresh base draws cases no other base has.
// --smoke runs the 50 cheap seeds of base 0 that cover every Config, a merge of more than
// 32 chunks on each atom and the other items of smoke_required (the ctest gpu.sweep_smoke).
// --covering TEXT runs only the cases of [A, E) that cover an item (coverage_items, as
// --draw-only prints them) containing TEXT: a new draw's cases on a GPU in seconds, before
// the whole sweep.
// N CPU workers (default: every hardware thread). --replay runs one case and prints it in
// full; --cpu-only builds the cases and their references without a GPU (to time the CPU
// side); --draw-only only draws the cases and prints how many cover each item
// (coverage_items). Prints the base in its header, one line per failure with the command
// that replays it, then per-class counts, each Config's cases, how many Config runs had a
// masked chunk (MaskedTail: a chunk whose live scores are all -inf, NaN/inf V under it,
// beside a live chunk), the multi-token cases and Config runs by atom and q_len bucket, the
// cases that covered each item, the time taken, and last the line "N passed, M failed". Exit code 0: all passed; 1: a failure; 2: bad arguments; 77: no GPU.
#include "sweep/ordered_workers.h"
#include "sweep/sweep_runner.cuh"
#include "sweep/sweep_seeds.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace vxqa_sweep;

namespace {

struct Options {
  uint64_t base = 0, begin = 0, end = 10000;
  std::string covering;  // non-empty: only the cases covering an item that contains it
  int threads = 0;
  bool verbose = false, replay = false, cpu_only = false, smoke = false, draw_only = false;
};

int usage(const char* argv0, FILE* to = stderr) {
  std::fprintf(to,
               "usage: %s [--seed-base B] [--seed-begin A] [--seed-end E] [--covering TEXT] [--threads N] [--verbose] "
               "[--cpu-only]\n"
               "       %s --smoke [--threads N] [--verbose] [--cpu-only]\n"
               "       %s [--seed-base B] --replay I\n"
               "       %s [--seed-base B] [--seed-begin A] [--seed-end E] --draw-only\n"
               "case I of base B is drawn from seed B * 2^32 + I (B < 2^32, I < 2^32); default: base 0, [0, 10000)\n",
               argv0, argv0, argv0, argv0);
  return to == stderr ? 2 : 0;
}

bool parse_u64(const char* text, uint64_t* value) {
  char* end = nullptr;
  errno = 0;
  *value = std::strtoull(text, &end, 10);
  return text[0] >= '0' && text[0] <= '9' && end && *end == '\0' && errno == 0;
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    uint64_t value = 0;
    if (arg == "--verbose") {
      o->verbose = true;
    } else if (arg == "--cpu-only") {
      o->cpu_only = true;
    } else if (arg == "--smoke") {
      o->smoke = true;
    } else if (arg == "--draw-only") {
      o->draw_only = true;
    } else if (arg == "--covering" && has_value && argv[i + 1][0] != '\0') {
      o->covering = argv[++i];
    } else if (!has_value || !parse_u64(argv[i + 1], &value)) {
      return false;
    } else if (arg == "--seed-base") {
      o->base = value, ++i;
    } else if (arg == "--seed-begin") {
      o->begin = value, ++i;
    } else if (arg == "--seed-end") {
      o->end = value, ++i;
    } else if (arg == "--threads") {
      o->threads = int(std::min<uint64_t>(value, 4096)), ++i;
    } else if (arg == "--replay") {
      o->replay = true, o->begin = value, o->end = value + 1, ++i;
    } else {
      return false;
    }
  }
  if (o->threads <= 0) o->threads = std::max(1u, std::thread::hardware_concurrency());
  if (o->replay) o->threads = 1, o->verbose = true;
  if (o->smoke && (o->replay || o->draw_only || o->base != 0)) return false;
  if (!o->covering.empty() && (o->smoke || o->replay || o->draw_only)) return false;
  return o->base <= kMaxSeedBase && o->begin < o->end && o->end <= kMaxSeedIndex;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The built problem, for --replay.
void print_problem(const PreparedCase& c) {
  const RandomProblem& p = c.problem;
  std::printf("  built: num_pages %d, table columns %d (stride %lld), strides page %lld token %lld "
              "head %lld, offsets K %lld V %lld, cache %.2f MB, CPU %.3f s\n",
              p.num_pages, p.max_pages, static_cast<long long>(p.table_stride),
              static_cast<long long>(p.page_stride), static_cast<long long>(p.token_stride),
              static_cast<long long>(p.head_stride), static_cast<long long>(p.k_offset),
              static_cast<long long>(p.v_offset), double(p.cache.size()) / (1 << 20), c.prepare_seconds);
  for (int b = 0; b < p.batch; ++b) {
    const int pages = (p.seq_lens[b] + p.page_size - 1) / p.page_size;
    std::printf("  seq %d: length %d", b, p.seq_lens[b]);
    if (c.device_lens[b] != p.seq_lens[b]) std::printf(" (the device reads %d)", c.device_lens[b]);
    if (!p.q_indptr.empty()) std::printf(", query tokens %d (rows %d..)", p.query_count(b), p.first_row(b));
    std::printf(", pages");
    for (int i = 0; i < std::min(pages, 16); ++i) std::printf(" %d", c.device_table[b * p.table_stride + i]);
    std::printf("%s\n", pages > 16 ? " ..." : "");
  }
}

struct Count {
  uint64_t cases = 0, failed = 0;
  double seconds = 0;
  double worst = 0;
};

// Multi-token cases, and their Config runs, by bucket (q_len_bucket, ragged_queries) and atom.
struct MultiTokenCount {
  static constexpr const char* kBuckets[] = {"q_len 1", "q_len 2..4", "q_len 5..16", "ragged", "no q_indptr"};
  static constexpr int kCount = 5;
  uint64_t cases[kCount] = {}, runs[2][kCount] = {}, failed[2][kCount] = {};
  static std::vector<int> buckets(const SweepCase& c) {
    std::vector<int> in;
    if (!c.multi_token()) return in;
    for (int i = 0; i < 3; ++i)
      if (!std::strcmp(q_len_bucket(c), kBuckets[i])) in.push_back(i);
    if (ragged_queries(c)) in.push_back(3);
    if (!c.has_q_indptr()) in.push_back(4);
    return in;
  }
  void print(bool with_runs) const {
    uint64_t all = 0;
    for (int i = 0; i < 3; ++i) all += cases[i];
    std::printf("multi-token cases %llu:", static_cast<unsigned long long>(all));
    for (int i = 0; i < kCount; ++i) {
      std::printf("%s %s %llu", i ? ";" : "", kBuckets[i], static_cast<unsigned long long>(cases[i]));
      if (with_runs)
        std::printf(" (Config runs: default atom %llu, %llu failed; sm70 atom %llu, %llu failed)",
                    static_cast<unsigned long long>(runs[0][i]), static_cast<unsigned long long>(failed[0][i]),
                    static_cast<unsigned long long>(runs[1][i]), static_cast<unsigned long long>(failed[1][i]));
    }
    std::printf("\n");
  }
};

// The items cases covered (coverage_items), and how many cases each.
void print_coverage(const std::map<std::string, uint64_t>& covered, uint64_t cases) {
  std::printf("covered (cases of %llu):\n", static_cast<unsigned long long>(cases));
  for (const auto& [item, n] : covered)
    if (item.rfind("config ", 0) != 0) std::printf("  %-60s %7llu\n", item.c_str(), static_cast<unsigned long long>(n));
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) return usage(argv[0], stdout);
  if (!parse(argc, argv, &opt)) return usage(argv[0]);

  // Every Config (host data and a run function; nothing touches the device until run).
  std::vector<SweepConfig> configs;
  for (auto family : {d64_configs, d128_configs, d256_configs, d512_configs})
    for (SweepConfig& c : family()) configs.push_back(std::move(c));
  std::vector<ConfigInfo> infos;
  for (const SweepConfig& c : configs) infos.push_back(c.info);

  // The seeds: case i's seed (seed_of), for i in [begin, end), or the i-th of a list picked
  // before (--smoke, --covering).
  std::string seeds_words = "seed base " + std::to_string(opt.base) + ", cases [" + std::to_string(opt.begin) +
                            ", " + std::to_string(opt.end) + ")";
  std::vector<uint64_t> picked_seeds;
  const bool picked = opt.smoke || !opt.covering.empty();
  if (opt.smoke) {
    const Smoke smoke = smoke_seeds(infos);
    if (!smoke.missing.empty()) {
      for (const std::string& item : smoke.missing) std::printf("smoke: no cheap seed covers \"%s\"\n", item.c_str());
      std::printf("0 passed, 1 failed\n");
      return 1;
    }
    picked_seeds = smoke.seeds;
    seeds_words = "smoke: " + std::to_string(picked_seeds.size()) + " seeds of base 0 covering every Config and " +
                  std::to_string(smoke_required(infos).size() - infos.size()) + " other items:";
    for (uint64_t seed : picked_seeds) seeds_words += " " + std::to_string(seed);
  } else if (picked) {
    for (uint64_t i = opt.begin; i < opt.end; ++i) {
      const uint64_t seed = case_seed(opt.base, i);
      for (const std::string& item : coverage_items(draw_case(seed), infos))
        if (item.find(opt.covering) != std::string::npos) {
          picked_seeds.push_back(seed);
          break;
        }
    }
    seeds_words += ", the " + std::to_string(picked_seeds.size()) + " covering an item with \"" + opt.covering + "\"";
    if (picked_seeds.empty()) {
      std::printf("vxqa_sweep: %s: none to run\n0 passed, 1 failed\n", seeds_words.c_str());
      return 1;
    }
  }
  if (picked) opt.begin = 0, opt.end = picked_seeds.size();
  auto seed_of = [&](uint64_t i) { return picked ? picked_seeds[i] : case_seed(opt.base, i); };

  if (opt.draw_only) {
    std::printf("vxqa_sweep: %s, drawn only\n", seeds_words.c_str());
    std::map<std::string, uint64_t> covered;
    std::vector<uint64_t> per_config(infos.size());
    MultiTokenCount multi;
    for (uint64_t i = opt.begin; i < opt.end; ++i) {
      const SweepCase c = draw_case(seed_of(i));
      for (int bucket : MultiTokenCount::buckets(c)) ++multi.cases[bucket];
      for (const std::string& item : coverage_items(c, infos)) ++covered[item];
      for (size_t k = 0; k < infos.size(); ++k) per_config[k] += infos[k].accepts(c);
    }
    for (size_t k = 0; k < infos.size(); ++k)
      std::printf("  %-60s %7llu cases\n", infos[k].name.c_str(), static_cast<unsigned long long>(per_config[k]));
    print_coverage(covered, opt.end - opt.begin);
    multi.print(false);
    return 0;
  }

  if (!opt.cpu_only) {
    int devices = 0;
    const cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0) {
      std::printf("SKIPPED: no CUDA device (%s): the sweep needs a GPU (--cpu-only builds the cases "
                  "without one)\n",
                  status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
      return 77;
    }
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::printf("vxqa_sweep: %s on %s (sm_%d%d), %d CPU workers\n", seeds_words.c_str(), prop.name, prop.major,
                prop.minor, opt.threads);
  } else {
    std::printf("vxqa_sweep: %s, CPU only, %d CPU workers\n", seeds_words.c_str(), opt.threads);
    configs.clear();
  }
  std::fflush(stdout);

  const auto start = std::chrono::steady_clock::now();
  Count classes[kCaseClasses], tiers[kTiers];
  std::vector<Count> per_config(configs.size());
  std::map<std::string, uint64_t> covered;
  // Masked chunks (masked_chunk_exercised): Config runs, their failures, the cases with one.
  uint64_t masked_runs = 0, masked_failed = 0, masked_cases = 0;
  uint64_t graph_runs = 0, bf16_runs = 0;
  MultiTokenCount multi;
  uint64_t passed = 0, failed = 0;
  double gpu_seconds = 0, wait_seconds = 0;
  std::string fatal;
  DeviceCase device;
  {
    OrderedWorkers<PreparedCase> workers(opt.begin, opt.end, opt.threads, 4 * uint64_t(opt.threads) + 8,
                                         [&](uint64_t i) { return prepare_case(seed_of(i)); });
    PreparedCase c;
    for (;;) {
      const auto wait_start = std::chrono::steady_clock::now();
      if (!workers.next(&c)) break;
      wait_seconds += seconds_since(wait_start);
      const uint64_t seed = c.spec.seed;
      if (opt.replay) {
        std::printf("%s", describe(c.spec).c_str());
        if (c.error.empty()) print_problem(c);
      }
      std::vector<std::string> failures;
      if (!c.error.empty()) failures.push_back("preparing: " + c.error);
      double worst = 0;
      const std::vector<int> multi_buckets = MultiTokenCount::buckets(c.spec);
      for (int bucket : multi_buckets) ++multi.cases[bucket];
      if (c.error.empty() && !opt.cpu_only) {
        for (const std::string& item : coverage_items(c.spec, infos)) ++covered[item];
        const auto gpu_start = std::chrono::steady_clock::now();
        try {
          device.upload(c);
          int runs = 0;
          bool masked_case = false;
          for (size_t i = 0; i < configs.size(); ++i) {
            if (!configs[i].info.accepts(c.spec)) continue;
            ++runs;
            const ConfigRun run = configs[i].run(c, device);
            std::string failure = run.refused.empty() ? run.failure : run.refused;
            double run_worst = 0;
            if (run.refused.empty()) {
              const vxqa::reference::Comparison cmp = vxqa::reference::compare_with_reference(
                  c.reference, c.model, c.expect, c.problem.query_heads(), c.problem.head_dim,
                  {run.out.data(), run.lse.data(), run.errors}, c.expected_errors, compare_bounds(run.qo),
                  vxqa::reference::row_layout(c.problem.inputs()));
              if (!cmp.ok()) {
                const std::string text = cmp.first + " (" + std::to_string(cmp.mismatches) + " mismatches)";
                failure = failure.empty() ? text : text + "; " + failure;
              }
              run_worst = cmp.worst;
              worst = std::max(worst, run_worst);
              per_config[i].worst = std::max(per_config[i].worst, run_worst);
              graph_runs += run.graph_replayed;
              bf16_runs += run.qo == vxqa::ActType::kBf16;
            }
            ++per_config[i].cases;
            for (int bucket : multi_buckets) {
              ++multi.runs[configs[i].info.sm70_atom][bucket];
              multi.failed[configs[i].info.sm70_atom][bucket] += !failure.empty();
            }
            if (!failure.empty()) {
              ++per_config[i].failed;
              failures.push_back(configs[i].info.name + ": " + failure);
            }
            const bool masked = run.refused.empty() && masked_chunk_exercised(c.spec, run.plan.chunk_tokens);
            if (masked) {
              ++masked_runs;
              masked_failed += !failure.empty();
              masked_case = true;
            }
            if (opt.replay)
              std::printf("  %s: chunk %d x %d chunks%s, workspace %zu B, error word %u, worst error/bound "
                          "%.3f%s: %s\n",
                          configs[i].info.name.c_str(), run.plan.chunk_tokens, run.plan.num_chunks,
                          masked ? " (a masked chunk)" : "", run.plan.workspace_bytes, run.errors, run_worst,
                          run.graph_replayed ? ", graph replay" : "", failure.empty() ? "ok" : failure.c_str());
          }
          masked_cases += masked_case;
          if (runs == 0) failures.push_back("no Config accepts this case");
        } catch (const CudaFailure& e) {
          failures.push_back(std::string("CUDA: ") + e.what());
          fatal = e.what();
        }
        gpu_seconds += seconds_since(gpu_start);
      }

      Count* counts[] = {&classes[int(c.spec.cls)], &tiers[int(c.spec.tier)]};
      for (Count* n : counts) {
        ++n->cases;
        n->failed += !failures.empty();
        n->seconds += c.prepare_seconds;
      }
      if (failures.empty()) {
        ++passed;
        if (opt.verbose)
          std::printf("ok seed %llu: %s; worst error/bound %.3f\n", static_cast<unsigned long long>(seed),
                      summary(c.spec).c_str(), worst);
      } else {
        ++failed;
        for (const std::string& f : failures)
          std::printf("FAIL seed %llu (base %llu, case %llu): %s | %s | replay: %s\n",
                      static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed_base(seed)),
                      static_cast<unsigned long long>(seed_index(seed)), summary(c.spec).c_str(), f.c_str(),
                      replay_command(argv[0], seed).c_str());
      }
      std::fflush(stdout);
      if (!fatal.empty()) {
        std::printf("stopping at seed %llu: a CUDA error leaves the device unusable\n",
                    static_cast<unsigned long long>(seed));
        break;
      }
    }
  }

  const double wall = seconds_since(start);
  std::printf("classes:");
  for (int i = 0; i < kCaseClasses; ++i)
    std::printf("%s %s %llu (%llu failed)", i ? "," : "", class_name(CaseClass(i)),
                static_cast<unsigned long long>(classes[i].cases),
                static_cast<unsigned long long>(classes[i].failed));
  std::printf("\ntiers (CPU seconds to build and reference):");
  double cpu_seconds = 0;
  for (int i = 0; i < kTiers; ++i) {
    std::printf("%s %s %llu cases %.1f s", i ? "," : "", tier_name(Tier(i)),
                static_cast<unsigned long long>(tiers[i].cases), tiers[i].seconds);
    cpu_seconds += tiers[i].seconds;
  }
  std::printf("\n");
  for (size_t i = 0; i < configs.size(); ++i)
    std::printf("  %-60s %7llu cases, %llu failed, worst error/bound %.3f\n", configs[i].info.name.c_str(),
                static_cast<unsigned long long>(per_config[i].cases),
                static_cast<unsigned long long>(per_config[i].failed), per_config[i].worst);
  if (!opt.cpu_only) {
    std::printf("masked chunks (every live score -inf, NaN/inf V under it, beside a live chunk): %llu Config "
                "runs in %llu cases, %llu failed\n",
                static_cast<unsigned long long>(masked_runs), static_cast<unsigned long long>(masked_cases),
                static_cast<unsigned long long>(masked_failed));
    std::printf("Config runs with bf16 q/out: %llu; replayed from a graph: %llu\n",
                static_cast<unsigned long long>(bf16_runs), static_cast<unsigned long long>(graph_runs));
    multi.print(true);
    print_coverage(covered, passed + failed);
  }
  std::printf("wall %.1f s on %d CPU workers: %.1f CPU s building cases, %.1f s on the GPU, %.1f s "
              "waiting for cases\n",
              wall, opt.threads, cpu_seconds, gpu_seconds, wait_seconds);
  if (opt.cpu_only) {
    multi.print(false);
    std::printf("CPU only: %llu cases built, %llu failed to build; no GPU run\n",
                static_cast<unsigned long long>(passed), static_cast<unsigned long long>(failed));
    return failed ? 1 : 0;
  }
  std::printf("%llu passed, %llu failed\n", static_cast<unsigned long long>(passed),
              static_cast<unsigned long long>(failed));
  return failed ? 1 : 0;
}
