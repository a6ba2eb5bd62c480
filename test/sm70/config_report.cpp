// test/sm70/config_report.cpp — what each decode Config audited in test/sm70/*.cu asks of a
// V100 SM, and checks it:
//   threads        32 x Warps, at most the 1024 of a CTA;
//   smem B         the dynamic shared memory (kSmemBytes; the decode kernels declare no
//                  static shared memory), at most the 96 KB an SM70 CTA can have;
//   regs, CTAs/SM  per toolchain of the sm_70 cubins given on the command line: the
//                  registers ptxas gave the kernel (it must be in one of them, unspilled),
//                  and the CTAs per SM that registers, shared memory and warps allow on a
//                  V100, from NVIDIA's occupancy calculator (cuda_occupancy.h) with the
//                  V100's limits; at least the floor stated for the Config below.
// A row that misses a bound is marked FAIL and the exit status is 1.
//
//   sm70_config_report --cuobjdump PATH --repo-root DIR CUBIN...
// Cubins are named NAME.sm70.TOOLCHAIN.cubin (test/sm70/CMakeLists.txt); paths are printed
// relative to --repo-root (file names outside it), so the report names nothing of the machine.
#include <cuda_occupancy.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include <vxqa/kernel/config.cuh>

namespace {

// What cuobjdump -res-usage says of one kernel.
struct KernelResources {
  int registers = 0, stack = 0, local = 0, static_smem = 0;
};

// The sm_70 cubins of one toolchain: their kernels, by demangled name.
struct Toolchain {
  std::vector<std::string> shown_paths;
  std::map<std::string, KernelResources> kernels;
};

struct Options {
  std::string cuobjdump, repo_root;
  std::vector<std::string> cubins;
};

std::string shown_path(const std::string& path, const std::string& repo_root) {
  const std::string prefix = repo_root.empty() || repo_root.back() == '/' ? repo_root : repo_root + "/";
  if (!prefix.empty() && path.compare(0, prefix.size(), prefix) == 0) return path.substr(prefix.size());
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// NAME.sm70.TOOLCHAIN.cubin -> TOOLCHAIN.
std::string toolchain_of(const std::string& path) {
  const std::string file = shown_path(path, "");
  const size_t sm70 = file.find(".sm70."), ext = file.rfind(".cubin");
  if (sm70 == std::string::npos || ext == std::string::npos || ext <= sm70 + 6) return "";
  return file.substr(sm70 + 6, ext - sm70 - 6);
}

std::string demangle(const std::string& name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status),
                                             std::free);
  return status == 0 && out ? std::string(out.get()) : name;
}

int field(const std::string& line, const char* key) {
  const size_t at = line.find(key);
  return at == std::string::npos ? 0 : std::atoi(line.c_str() + at + std::string(key).size());
}

// Adds the kernels of the cubin at `path` to its toolchain's.
bool read_cubin(const Options& options, const std::string& path,
                std::map<std::string, Toolchain>* toolchains) {
  const std::string toolchain = toolchain_of(path);
  if (toolchain.empty()) {
    std::fprintf(stderr, "config_report: %s is not named NAME.sm70.TOOLCHAIN.cubin\n", path.c_str());
    return false;
  }
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fclose(f);
  } else {
    std::fprintf(stderr, "config_report: %s does not exist (build the target vxqa_sm70)\n", path.c_str());
    return false;
  }
  Toolchain& t = (*toolchains)[toolchain];
  t.shown_paths.push_back(shown_path(path, options.repo_root));
  const size_t kernels_before = t.kernels.size();
  const std::string command = "'" + options.cuobjdump + "' -res-usage '" + path + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return false;
  std::string function, line;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe)) {
    line = buffer;
    const size_t at = line.find("Function ");
    if (at != std::string::npos) {
      const size_t colon = line.rfind(':');
      function = line.substr(at + 9, colon == std::string::npos ? std::string::npos : colon - at - 9);
    } else if (!function.empty() && line.find("REG:") != std::string::npos) {
      KernelResources& k = t.kernels[demangle(function)];
      k.registers = field(line, "REG:");
      k.stack = field(line, "STACK:");
      k.local = field(line, "LOCAL:");
      k.static_smem = field(line, "SHARED:");
      function.clear();
    }
  }
  const int status = pclose(pipe);
  if (status != 0 || t.kernels.size() == kernels_before) {
    std::fprintf(stderr, "config_report: `%s` failed or listed no kernel\n", command.c_str());
    return false;
  }
  return true;
}

// A V100 SM (SXM2): compute capability 7.0, 80 SMs, 64K registers, 96 KB of shared memory,
// all of it available to one CTA with the opt-in, none reserved per CTA.
cudaOccDeviceProp v100() {
  cudaOccDeviceProp p;
  p.computeMajor = 7;
  p.computeMinor = 0;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsPerMultiprocessor = 2048;
  p.regsPerBlock = 65536;
  p.regsPerMultiprocessor = 65536;
  p.warpSize = 32;
  p.sharedMemPerBlock = 48 * 1024;
  p.sharedMemPerMultiprocessor = 96 * 1024;
  p.numSms = 80;
  p.sharedMemPerBlockOptin = vxqa::kSm70MaxSmemBytes;
  p.reservedSharedMemPerBlock = 0;
  return p;
}

struct Row {
  std::string label, kernel;  // kernel: the demangled name prefix of its decode_kernel
  int threads, smem_bytes, min_ctas_per_sm;
};

// How the demangler writes an option of vxqa::opt, e.g. "vxqa::opt::Warps<2>".
template <int N>
std::string option_name(vxqa::opt::Warps<N>*) { return "vxqa::opt::Warps<" + std::to_string(N) + ">"; }
template <int N>
std::string option_name(vxqa::opt::Sm70Stages<N>*) { return "vxqa::opt::Sm70Stages<" + std::to_string(N) + ">"; }
template <int N>
std::string option_name(vxqa::opt::PageSize<N>*) { return "vxqa::opt::PageSize<" + std::to_string(N) + ">"; }
template <unsigned kFlags>
std::string option_name(vxqa::opt::Variant<kFlags>*) {
  return "vxqa::opt::Variant<" + std::to_string(kFlags) + "u>";
}
template <int N>
std::string option_name(vxqa::opt::MaxQueryLen<N>*) { return "vxqa::opt::MaxQueryLen<" + std::to_string(N) + ">"; }
template <vxqa::ConvertAt C>
std::string option_name(vxqa::opt::Convert<C>*) {
  return "vxqa::opt::Convert<(vxqa::pipeline::ConvertAt)" + std::to_string(int(C)) + ">";
}
// A name and the closing bracket of the template it ends: "> >" after a nested one.
std::string close_template(const std::string& s) { return s + (s.back() == '>' ? " >" : ">"); }

// The row of decode_kernel<DecodeConfig<D, Kv, Options...>>: `label` as the report prints it.
template <int D, vxqa::KvType Kv, class... Options>
Row row(vxqa::DecodeConfig<D, Kv, Options...>*, const char* label, int min_ctas_per_sm) {
  using C = vxqa::DecodeConfig<D, Kv, Options...>;
  std::string config = "vxqa::DecodeConfig<" + std::to_string(D) + ", (vxqa::KvType)" + std::to_string(int(Kv));
  ((config += ", " + option_name(static_cast<Options*>(nullptr))), ...);
  const std::string kernel = close_template("vxqa::decode_kernel<" + close_template(config)) + "(";
  return Row{label, kernel, C::kThreads, C::kSmemBytes, min_ctas_per_sm};
}
template <class C>
Row row(const char* label, int min_ctas_per_sm) {
  return row(static_cast<C*>(nullptr), label, min_ctas_per_sm);
}

// The Configs of test/sm70/decode_d*.cu and the CTAs per V100 SM each must keep: the seed
// Config's 2 CTAs (8 warps an SM) are what docs/measurements.md's issue estimate assumes;
// the other floors are what each reached with both toolchains when it was first audited, so
// that a change that costs a Config a CTA per SM fails here instead of passing unnoticed.
std::vector<Row> audited_rows() {
  using vxqa::ConvertAt;
  using vxqa::DecodeConfig;
  using vxqa::KvType;
  namespace opt = vxqa::opt;
  using Publish = opt::Convert<ConvertAt::kPublish>;
  using AllVariants = opt::Variant<vxqa::kAllVariantFlags>;
  return {
      row<DecodeConfig<256, KvType::kE5M2>>("DecodeConfig<256, E5M2>", 2),
      row<DecodeConfig<256, KvType::kE5M2, opt::PageSize<800>>>("DecodeConfig<256, E5M2, PageSize<800>>", 2),
      row<DecodeConfig<256, KvType::kE5M2, opt::Warps<2>, Publish>>("DecodeConfig<256, E5M2, Warps<2>, Publish>", 2),
      row<DecodeConfig<256, KvType::kFp16, opt::Warps<2>>>("DecodeConfig<256, fp16, Warps<2>>", 2),
      row<DecodeConfig<128, KvType::kE5M2>>("DecodeConfig<128, E5M2>", 3),
      row<DecodeConfig<128, KvType::kE5M2, opt::Sm70Stages<2>>>("DecodeConfig<128, E5M2, Sm70Stages<2>>", 3),
      row<DecodeConfig<128, KvType::kE5M2, Publish>>("DecodeConfig<128, E5M2, Publish>", 2),
      row<DecodeConfig<128, KvType::kFp16>>("DecodeConfig<128, fp16>", 2),
      row<DecodeConfig<128, KvType::kFp16, opt::Sm70Stages<2>>>("DecodeConfig<128, fp16, Sm70Stages<2>>", 2),
      row<DecodeConfig<64, KvType::kE5M2>>("DecodeConfig<64, E5M2>", 5),
      row<DecodeConfig<64, KvType::kE5M2, opt::Sm70Stages<2>>>("DecodeConfig<64, E5M2, Sm70Stages<2>>", 4),
      row<DecodeConfig<64, KvType::kE5M2, Publish>>("DecodeConfig<64, E5M2, Publish>", 3),
      row<DecodeConfig<64, KvType::kFp16>>("DecodeConfig<64, fp16>", 3),
      row<DecodeConfig<64, KvType::kFp16, opt::Sm70Stages<2>>>("DecodeConfig<64, fp16, Sm70Stages<2>>", 3),
      // The attention variants: each flag alone on the seed Config, and every flag; each
      // keeps its plain Config's CTAs per SM.
      row<DecodeConfig<256, KvType::kE5M2, opt::Variant<vxqa::kSlidingWindow>>>("DecodeConfig<256, E5M2, window>", 2),
      row<DecodeConfig<256, KvType::kE5M2, opt::Variant<vxqa::kLogitSoftCap>>>("DecodeConfig<256, E5M2, soft-cap>", 2),
      row<DecodeConfig<256, KvType::kE5M2, opt::Variant<vxqa::kAttentionSinks>>>("DecodeConfig<256, E5M2, sinks>", 2),
      row<DecodeConfig<256, KvType::kE5M2, AllVariants>>("DecodeConfig<256, E5M2, every variant>", 2),
      row<DecodeConfig<128, KvType::kE5M2, AllVariants>>("DecodeConfig<128, E5M2, every variant>", 3),
      row<DecodeConfig<64, KvType::kFp16, AllVariants>>("DecodeConfig<64, fp16, every variant>", 3),
      // Decoder's multi-token and every-variant Configs (decode_decoder_list.cu).
      row<DecodeConfig<256, KvType::kE5M2, opt::Warps<6>, AllVariants, opt::MaxQueryLen<16>>>(
          "DecodeConfig<256, E5M2, Warps<6>, every variant, q_len 16>", 1),
      row<DecodeConfig<256, KvType::kE5M2, opt::Warps<8>, AllVariants, opt::MaxQueryLen<16>>>(
          "DecodeConfig<256, E5M2, Warps<8>, every variant, q_len 16>", 1),
      row<DecodeConfig<64, KvType::kE5M2, opt::Warps<8>, AllVariants, opt::MaxQueryLen<16>>>(
          "DecodeConfig<64, E5M2, Warps<8>, every variant, q_len 16>", 2),
      row<DecodeConfig<512, KvType::kE5M2, AllVariants>>("DecodeConfig<512, E5M2, every variant>", 2),
  };
}

// "regs", "smem", "warps", "blocks": what holds the CTAs per SM at their number.
std::string limiters(const cudaOccResult& r) {
  std::string s;
  const std::pair<unsigned, const char*> names[] = {{OCC_LIMIT_REGISTERS, "regs"},
                                                    {OCC_LIMIT_SHARED_MEMORY, "smem"},
                                                    {OCC_LIMIT_WARPS, "warps"},
                                                    {OCC_LIMIT_BLOCKS, "blocks"}};
  for (const auto& [bit, name] : names)
    if (r.limitingFactors & bit) s += (s.empty() ? "" : "+") + std::string(name);
  return s.empty() ? "-" : s;
}

bool parse_options(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--cuobjdump" && i + 1 < argc) {
      o->cuobjdump = argv[++i];
    } else if (arg == "--repo-root" && i + 1 < argc) {
      o->repo_root = argv[++i];
    } else if (!arg.empty() && arg[0] != '-') {
      o->cubins.push_back(arg);
    } else {
      return false;
    }
  }
  return !o->cuobjdump.empty() && !o->cubins.empty();
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse_options(argc, argv, &options)) {
    std::fprintf(stderr, "usage: sm70_config_report --cuobjdump PATH [--repo-root DIR] CUBIN...\n");
    return 2;
  }
  std::map<std::string, Toolchain> toolchains;
  for (const std::string& path : options.cubins)
    if (!read_cubin(options, path, &toolchains)) return 2;

  for (const auto& [name, t] : toolchains) {
    std::printf("# %s registers from:", name.c_str());
    for (const std::string& path : t.shown_paths) std::printf(" %s", path.c_str());
    std::printf("\n");
  }
  std::printf("# CTAs/SM: cuda_occupancy.h for a V100 (64K registers, %d B of shared memory an SM)\n",
              vxqa::kSm70MaxSmemBytes);
  std::printf("%-44s %7s %7s", "config", "threads", "smem B");
  for (const auto& [name, t] : toolchains) std::printf("  %8s %-14s", (name + " regs").c_str(), "CTAs/SM");
  std::printf(" %5s  %s\n", "floor", "check");

  const cudaOccDeviceProp device = v100();
  const cudaOccDeviceState state;
  std::vector<std::string> failures;
  for (const Row& r : audited_rows()) {
    const size_t failures_before = failures.size();
    if (r.threads > device.maxThreadsPerBlock)
      failures.push_back(r.label + ": " + std::to_string(r.threads) + " threads, over the 1024 of a CTA");
    if (r.smem_bytes > vxqa::kSm70MaxSmemBytes)
      failures.push_back(r.label + ": " + std::to_string(r.smem_bytes) + " B of shared memory, over the " +
                         std::to_string(vxqa::kSm70MaxSmemBytes) + " B an SM70 CTA can have");
    std::printf("%-44s %7d %7d", r.label.c_str(), r.threads, r.smem_bytes);
    for (const auto& [toolchain, t] : toolchains) {
      const KernelResources* k = nullptr;
      for (const auto& [name, resources] : t.kernels)
        if (name.find(r.kernel) != std::string::npos) k = &resources;
      if (!k) {
        failures.push_back(r.label + ": its decode_kernel is in no " + toolchain +
                           " cubin (audit every Config reported here)");
        std::printf("  %8s %-14s", "-", "-");
        continue;
      }
      if (k->stack || k->local)
        failures.push_back(r.label + " [" + toolchain + "]: spills (" + std::to_string(k->stack) +
                           " B stack, " + std::to_string(k->local) + " B local)");
      cudaOccFuncAttributes attributes;
      attributes.maxThreadsPerBlock = r.threads;  // __launch_bounds__(kThreads)
      attributes.numRegs = k->registers;
      attributes.sharedSizeBytes = size_t(k->static_smem);
      attributes.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;  // decode() opts in to kSmemBytes
      attributes.maxDynamicSharedSizeBytes = size_t(r.smem_bytes);
      attributes.numBlockBarriers = 1;
      cudaOccResult occupancy{};
      const cudaOccError status = cudaOccMaxActiveBlocksPerMultiprocessor(
          &occupancy, &device, &attributes, &state, r.threads, size_t(r.smem_bytes));
      const int ctas = status == CUDA_OCC_SUCCESS ? occupancy.activeBlocksPerMultiprocessor : 0;
      if (status != CUDA_OCC_SUCCESS)
        failures.push_back(r.label + " [" + toolchain + "]: the occupancy calculator rejects it (error " +
                           std::to_string(int(status)) + ")");
      else if (ctas < r.min_ctas_per_sm)
        failures.push_back(r.label + " [" + toolchain + "]: " + std::to_string(ctas) + " CTAs per V100 SM (" +
                           std::to_string(k->registers) + " registers), below its floor of " +
                           std::to_string(r.min_ctas_per_sm));
      const std::string ctas_text = std::to_string(ctas) + " (" + limiters(occupancy) + ")";
      std::printf("  %8d %-14s", k->registers, ctas_text.c_str());
    }
    std::printf(" %5d  %s\n", r.min_ctas_per_sm, failures.size() > failures_before ? "FAIL" : "ok");
  }
  if (!failures.empty()) {
    std::printf("\nconfig_report: %zu failure%s:\n", failures.size(), failures.size() == 1 ? "" : "s");
    for (const std::string& f : failures) std::printf("  FAIL: %s\n", f.c_str());
    return 1;
  }
  std::printf("config_report: %zu Configs x %zu toolchains: OK\n", audited_rows().size(), toolchains.size());
  return 0;
}
