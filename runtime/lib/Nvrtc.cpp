//===- Nvrtc.cpp - CUDA C++ to PTX at run time ----------------------------===//
#include "kiln/runtime/Nvrtc.h"
#include "kiln/runtime/Error.h"

#include <dlfcn.h>
#include <nvrtc.h>

#include <cstdlib>
#include <mutex>

namespace kiln::nvrtc {
namespace {

struct Lib {
  decltype(&::nvrtcCreateProgram) create = nullptr;
  decltype(&::nvrtcCompileProgram) compile = nullptr;
  decltype(&::nvrtcGetProgramLogSize) logSize = nullptr;
  decltype(&::nvrtcGetProgramLog) log = nullptr;
  decltype(&::nvrtcGetPTXSize) ptxSize = nullptr;
  decltype(&::nvrtcGetPTX) ptx = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy = nullptr;
  decltype(&::nvrtcGetErrorString) errorString = nullptr;
  std::string error;
};

Lib &lib() {
  static Lib l;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names;
    if (const char *p = std::getenv("KILN_NVRTC"))
      names.push_back(p);
    names.insert(names.end(),
                 {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"});
    for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
      if (const char *home = std::getenv(var))
        names.push_back(std::string(home) + "/lib64/libnvrtc.so");
    names.push_back("/usr/local/cuda/lib64/libnvrtc.so");
    void *h = nullptr;
    for (const std::string &n : names)
      if ((h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)))
        break;
    if (!h) {
      l.error = "libnvrtc is not installed (set KILN_NVRTC to its path)";
      return;
    }
    auto sym = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
          dlsym(h, name));
      if (!fn && l.error.empty())
        l.error = std::string("libnvrtc lacks ") + name;
    };
    sym(l.create, "nvrtcCreateProgram");
    sym(l.compile, "nvrtcCompileProgram");
    sym(l.logSize, "nvrtcGetProgramLogSize");
    sym(l.log, "nvrtcGetProgramLog");
    sym(l.ptxSize, "nvrtcGetPTXSize");
    sym(l.ptx, "nvrtcGetPTX");
    sym(l.destroy, "nvrtcDestroyProgram");
    sym(l.errorString, "nvrtcGetErrorString");
  });
  return l;
}

} // namespace

bool available(std::string *why) {
  if (why)
    *why = lib().error;
  return lib().error.empty();
}

std::string compileToPtx(const std::string &source, const std::string &name,
                         const std::string &arch,
                         const std::vector<std::string> &options) {
  Lib &l = lib();
  if (!l.error.empty())
    throw Error("NVRTC: " + l.error);
  nvrtcProgram prog = nullptr;
  auto fail = [&](nvrtcResult r, const char *call, const std::string &log) {
    throw Error(std::string("NVRTC: ") + call + " failed on " + name + ": " +
                l.errorString(r) + (log.empty() ? "" : "\n" + log));
  };
  if (nvrtcResult r =
          l.create(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr);
      r != NVRTC_SUCCESS)
    fail(r, "nvrtcCreateProgram", "");
  std::vector<std::string> opts = {"--gpu-architecture=" + arch, "--std=c++17"};
  opts.insert(opts.end(), options.begin(), options.end());
  std::vector<const char *> cOpts;
  for (auto &o : opts)
    cOpts.push_back(o.c_str());
  nvrtcResult r = l.compile(prog, int(cOpts.size()), cOpts.data());
  size_t logSize = 0;
  l.logSize(prog, &logSize);
  std::string log(logSize, '\0');
  if (logSize)
    l.log(prog, log.data());
  if (r != NVRTC_SUCCESS) {
    l.destroy(&prog);
    fail(r, "nvrtcCompileProgram", log);
  }
  size_t ptxSize = 0;
  l.ptxSize(prog, &ptxSize);
  std::string ptx(ptxSize, '\0');
  l.ptx(prog, ptx.data());
  l.destroy(&prog);
  if (!ptx.empty() && ptx.back() == '\0')
    ptx.pop_back();
  return ptx;
}

} // namespace kiln::nvrtc
