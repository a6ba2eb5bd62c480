// nvrtc_cubin — compiles one device-only CUDA translation unit to a cubin with NVRTC.
//
//   nvrtc_cubin [--arch sm_70] [-I DIR]... [-D NAME[=VALUE]]... [--opt OPTION]...
//               [--name-expr EXPR]... [--ptx OUT.ptx] [--no-ptxas-verbose] [--no-lineinfo]
//               -o OUT.cubin IN.cu
//
// What it passes to NVRTC: -std=c++17, --gpu-architecture=ARCH (a real sm_XX, so NVRTC runs
// ptxas and a cubin exists), -lineinfo, --ptxas-options=-v (ptxas's "registers / spill stores /
// stack frame / smem" lines then appear in the program log), every -I and -D, the directory of
// IN.cu as a last include directory (as nvcc does for "quoted" includes), and each --opt as is.
//
// __global__ kernels are always emitted, including explicit instantiations of __global__
// templates (`template __global__ void k<int>(int*);`); --name-expr is only needed to learn
// the lowered (mangled) name of such an instantiation, which is then printed.
//
// The program log is printed to stderr on every run, success or not. Exit status: 0 on
// success, 1 when compilation fails, 2 on bad usage or I/O errors. The cubin is written to a
// temporary file first and renamed, so a failed run never leaves a stale or partial output.
//
// libnvrtc is linked (tools/CMakeLists.txt points the RPATH at the venv's copy); its own
// RUNPATH ($ORIGIN) then finds libnvrtc-builtins next to it.
#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Args {
  std::string arch = "sm_70";
  std::vector<std::string> include_dirs;
  std::vector<std::string> defines;
  std::vector<std::string> extra_options;
  std::vector<std::string> name_exprs;
  std::string output;
  std::string ptx_output;
  std::string input;
  bool ptxas_verbose = true;
  bool lineinfo = true;
};

void usage(std::ostream& os) {
  os << "usage: nvrtc_cubin [--arch sm_70] [-I DIR]... [-D NAME[=VALUE]]... [--opt OPTION]...\n"
        "                   [--name-expr EXPR]... [--ptx OUT.ptx] [--no-ptxas-verbose]\n"
        "                   [--no-lineinfo] -o OUT.cubin IN.cu\n";
}

[[noreturn]] void fail_usage(const std::string& message) {
  std::cerr << "nvrtc_cubin: " << message << "\n";
  usage(std::cerr);
  std::exit(2);
}

// Accepts "-X value", "-Xvalue" and (for long options) "--opt=value".
bool take_value(const std::vector<std::string>& argv, size_t& i, const std::string& flag,
                std::string& value) {
  const std::string& a = argv[i];
  if (a == flag) {
    if (i + 1 >= argv.size()) fail_usage("missing value after " + flag);
    value = argv[++i];
    return true;
  }
  if (flag.size() == 2 && a.size() > 2 && a.compare(0, 2, flag) == 0) {  // -Idir, -DX=Y
    value = a.substr(2);
    return true;
  }
  if (flag.size() > 2 && a.size() > flag.size() + 1 && a.compare(0, flag.size(), flag) == 0 &&
      a[flag.size()] == '=') {
    value = a.substr(flag.size() + 1);
    return true;
  }
  return false;
}

Args parse(int argc, char** argv) {
  std::vector<std::string> av(argv + 1, argv + argc);
  Args args;
  for (size_t i = 0; i < av.size(); ++i) {
    std::string v;
    const std::string& a = av[i];
    if (a == "-h" || a == "--help") {
      usage(std::cout);
      std::exit(0);
    } else if (a == "--no-ptxas-verbose") {
      args.ptxas_verbose = false;
    } else if (a == "--no-lineinfo") {
      args.lineinfo = false;
    } else if (take_value(av, i, "--arch", v)) {
      args.arch = v;
    } else if (take_value(av, i, "--opt", v)) {
      args.extra_options.push_back(v);
    } else if (take_value(av, i, "--name-expr", v)) {
      args.name_exprs.push_back(v);
    } else if (take_value(av, i, "--ptx", v)) {
      args.ptx_output = v;
    } else if (take_value(av, i, "-I", v)) {
      args.include_dirs.push_back(v);
    } else if (take_value(av, i, "-D", v)) {
      args.defines.push_back(v);
    } else if (take_value(av, i, "-o", v)) {
      args.output = v;
    } else if (!a.empty() && a[0] == '-') {
      fail_usage("unknown option " + a);
    } else if (args.input.empty()) {
      args.input = a;
    } else {
      fail_usage("more than one input file: " + args.input + ", " + a);
    }
  }
  if (args.input.empty()) fail_usage("no input file");
  if (args.output.empty()) fail_usage("no output file (-o)");
  if (args.arch.compare(0, 3, "sm_") != 0)
    fail_usage("--arch must name a real architecture (sm_XX) to get a cubin, got " + args.arch);
  return args;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return static_cast<bool>(in) || in.eof();
}

bool write_file_atomically(const std::string& path, const std::vector<char>& data) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) return false;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

std::string dirname_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string basename_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

#define NVRTC_OK(call)                                                                      \
  do {                                                                                      \
    nvrtcResult nvrtc_ok_result_ = (call);                                                  \
    if (nvrtc_ok_result_ != NVRTC_SUCCESS) {                                                \
      std::cerr << "nvrtc_cubin: " #call " failed: " << nvrtcGetErrorString(nvrtc_ok_result_) \
                << "\n";                                                                    \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);

  std::string source;
  if (!read_file(args.input, source)) {
    std::cerr << "nvrtc_cubin: cannot read " << args.input << "\n";
    return 2;
  }

  int major = 0, minor = 0;
  NVRTC_OK(nvrtcVersion(&major, &minor));

  std::vector<std::string> options;
  options.push_back("-std=c++17");
  options.push_back("--gpu-architecture=" + args.arch);
  if (args.lineinfo) options.push_back("-lineinfo");
  if (args.ptxas_verbose) options.push_back("--ptxas-options=-v");
  for (const auto& d : args.defines) options.push_back("-D" + d);
  for (const auto& i : args.include_dirs) options.push_back("-I" + i);
  options.push_back("-I" + dirname_of(args.input));
  for (const auto& o : args.extra_options) options.push_back(o);

  std::cerr << "nvrtc_cubin: NVRTC " << major << "." << minor << ": " << args.input << " ->"
            << " " << args.output << "\n  options:";
  for (const auto& o : options) std::cerr << " " << o;
  std::cerr << "\n";

  nvrtcProgram prog = nullptr;
  // The program's name is the input path, so diagnostics and -lineinfo name the real file.
  NVRTC_OK(nvrtcCreateProgram(&prog, source.c_str(), args.input.c_str(), 0, nullptr, nullptr));
  for (const auto& e : args.name_exprs) NVRTC_OK(nvrtcAddNameExpression(prog, e.c_str()));

  std::vector<const char*> option_ptrs;
  for (const auto& o : options) option_ptrs.push_back(o.c_str());
  const nvrtcResult compiled =
      nvrtcCompileProgram(prog, static_cast<int>(option_ptrs.size()), option_ptrs.data());

  size_t log_size = 0;
  NVRTC_OK(nvrtcGetProgramLogSize(prog, &log_size));
  std::string log(log_size, '\0');
  if (log_size > 0) NVRTC_OK(nvrtcGetProgramLog(prog, &log[0]));
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  std::cerr << "nvrtc_cubin: program log for " << basename_of(args.input) << ":\n"
            << (log.empty() ? std::string("(empty)") : log) << "\n";

  if (compiled != NVRTC_SUCCESS) {
    std::cerr << "nvrtc_cubin: compilation of " << args.input
              << " failed: " << nvrtcGetErrorString(compiled) << "\n";
    nvrtcDestroyProgram(&prog);
    return 1;
  }

  for (const auto& e : args.name_exprs) {
    const char* lowered = nullptr;
    NVRTC_OK(nvrtcGetLoweredName(prog, e.c_str(), &lowered));
    std::cerr << "nvrtc_cubin: name expression " << e << " -> " << lowered << "\n";
  }

  size_t cubin_size = 0;
  NVRTC_OK(nvrtcGetCUBINSize(prog, &cubin_size));
  if (cubin_size == 0) {
    std::cerr << "nvrtc_cubin: NVRTC produced no cubin (is --arch a real sm_XX?)\n";
    nvrtcDestroyProgram(&prog);
    return 1;
  }
  std::vector<char> cubin(cubin_size);
  NVRTC_OK(nvrtcGetCUBIN(prog, cubin.data()));

  if (!args.ptx_output.empty()) {
    size_t ptx_size = 0;
    NVRTC_OK(nvrtcGetPTXSize(prog, &ptx_size));
    std::vector<char> ptx(ptx_size);
    NVRTC_OK(nvrtcGetPTX(prog, ptx.data()));
    while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
    if (!write_file_atomically(args.ptx_output, ptx)) {
      std::cerr << "nvrtc_cubin: cannot write " << args.ptx_output << "\n";
      nvrtcDestroyProgram(&prog);
      return 2;
    }
  }
  nvrtcDestroyProgram(&prog);

  if (!write_file_atomically(args.output, cubin)) {
    std::cerr << "nvrtc_cubin: cannot write " << args.output << "\n";
    return 2;
  }
  std::cerr << "nvrtc_cubin: wrote " << args.output << " (" << cubin_size << " bytes)\n";
  return 0;
}
