//===- Toolkit.cpp - SASS and resource usage through the CUDA tools ------===//
#include "kiln/Compiler/Toolkit.h"
#include "kiln/runtime/Error.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace kiln {

std::optional<std::string> findCudaTool(const std::string &name) {
  std::vector<std::string> dirs;
  if (const char *path = std::getenv("PATH")) {
    std::stringstream in(path);
    std::string d;
    while (std::getline(in, d, ':'))
      if (!d.empty())
        dirs.push_back(d);
  }
  if (const char *home = std::getenv("CUDA_HOME"))
    dirs.push_back(std::string(home) + "/bin");
  dirs.push_back("/usr/local/cuda/bin");
  for (const std::string &d : dirs) {
    std::string p = d + "/" + name;
    if (::access(p.c_str(), X_OK) == 0)
      return p;
  }
  return std::nullopt;
}

namespace {
/// A private temporary folder, removed with its contents on scope exit.
struct TempDir {
  TempDir() {
    std::string t = (fs::temp_directory_path() / "kiln-XXXXXX").string();
    if (!::mkdtemp(t.data()))
      throw Error("cannot create a temporary folder under " +
                  fs::temp_directory_path().string());
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

std::string quote(const std::string &s) {
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// Runs a command; returns its exit status, its stdout and stderr in `out`.
int run(const std::string &command, std::string &out) {
  FILE *p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p)
    throw Error("cannot run " + command);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, n);
  int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t field(const std::string &log, const std::string &pattern) {
  std::smatch m;
  if (std::regex_search(log, m, std::regex(pattern)))
    return std::stoll(m[1]);
  return 0;
}
} // namespace

Assembled assembleWithPtxas(const CompiledKernel &kernel) {
  std::optional<std::string> ptxas = findCudaTool("ptxas");
  if (!ptxas)
    throw Error("ptxas (CUDA toolkit) is not installed: not in PATH, "
                "$CUDA_HOME/bin or /usr/local/cuda/bin; it is needed to "
                "assemble the PTX for SASS and register counts");
  TempDir tmp;
  std::string ptx = tmp.path + "/kernel.ptx",
              cubin = tmp.path + "/kernel.cubin";
  std::ofstream(ptx) << kernel.ptx;
  Assembled a;
  int rc = run(fmt::format("{} -arch={} -v {} -o {}", quote(*ptxas),
                           kernel.arch, quote(ptx), quote(cubin)),
               a.log);
  if (rc != 0)
    throw Error("ptxas rejected the PTX of kernel " + kernel.name + ":\n" +
                a.log);
  a.cubin = readAll(cubin);
  a.registers = int(field(a.log, R"(Used (\d+) registers)"));
  a.stackBytes = field(a.log, R"((\d+) bytes stack frame)");
  a.spillStoreBytes = field(a.log, R"((\d+) bytes spill stores)");
  a.spillLoadBytes = field(a.log, R"((\d+) bytes spill loads)");
  a.staticSharedBytes = field(a.log, R"((\d+) bytes smem)");
  return a;
}

std::string disassemble(const std::string &cubin) {
  std::optional<std::string> objdump = findCudaTool("cuobjdump");
  std::optional<std::string> nvdisasm = findCudaTool("nvdisasm");
  // cuobjdump 13 (PyPI's wheel) runs nvdisasm for SASS: nvdisasm is what
  // is needed.
  const char *install =
      "PyPI has it alone: pip download --no-deps nvidia-cuda-nvdisasm, unzip "
      "the wheel, put its nvidia/cu*/bin on PATH";
  if (!objdump && !nvdisasm)
    throw Error(std::string("neither cuobjdump nor nvdisasm (CUDA toolkit) is "
                            "installed (looked in PATH, $CUDA_HOME/bin, "
                            "/usr/local/cuda/bin): cannot disassemble the "
                            "cubin to SASS (") +
                install + ")");
  TempDir tmp;
  std::string file = tmp.path + "/kernel.cubin";
  std::ofstream(file, std::ios::binary) << cubin;
  std::string out;
  int rc = objdump ? run(quote(*objdump) + " -sass " + quote(file), out)
                   : run(quote(*nvdisasm) + " -c " + quote(file), out);
  if (rc != 0 && objdump && nvdisasm) {
    out.clear();
    rc = run(quote(*nvdisasm) + " -c " + quote(file), out);
  }
  if (rc != 0)
    throw Error("disassembling the cubin failed" +
                (nvdisasm ? std::string()
                          : std::string(" (cuobjdump without nvdisasm? ") +
                                install + ")") +
                ":\n" + out);
  return out;
}

Occupancy estimateOccupancy(const std::string &arch, int threads, int registers,
                            int64_t sharedBytes) {
  // Per-SM limits (CUDA C Programming Guide, compute capabilities 8.0, 9.0).
  bool hopper = arch.rfind("sm_90", 0) == 0;
  const int maxWarps = 64, maxBlocks = 32, regsPerSM = 65536;
  const int64_t smemPerSM = hopper ? 228 * 1024 : 164 * 1024;
  const int64_t reservedPerBlock = 1024; // the driver's per-block reserve
  int warps = (threads + 31) / 32;
  Occupancy o;
  o.maxWarpsPerSM = maxWarps;
  auto limit = [&](int blocks, const char *what) {
    if (o.limiter.empty() || blocks < o.blocksPerSM) {
      o.blocksPerSM = blocks;
      o.limiter = what;
    }
  };
  limit(maxBlocks, "blocks per SM");
  limit(maxWarps / std::max(warps, 1), "threads");
  if (registers > 0) {
    int perWarp = (registers * 32 + 255) / 256 * 256;
    limit(regsPerSM / (perWarp * warps), "registers");
  }
  if (sharedBytes > 0)
    limit(int(smemPerSM / (sharedBytes + reservedPerBlock)), "shared memory");
  o.warpsPerSM = o.blocksPerSM * warps;
  return o;
}

} // namespace kiln
