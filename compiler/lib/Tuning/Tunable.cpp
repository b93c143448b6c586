//===- Tunable.cpp - kernels `kiln tune <name>` can tune ------------------===//
#include "kiln/Compiler/Tunable.h"

#include <mutex>

namespace kiln {

namespace {
std::mutex &registryMutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, TunableKernel> &registry() {
  static std::map<std::string, TunableKernel> r;
  return r;
}
} // namespace

void registerTunable(TunableKernel k) {
  std::lock_guard<std::mutex> lock(registryMutex());
  registry()[k.name] = std::move(k);
}

const std::map<std::string, TunableKernel> &tunableKernels() {
  std::lock_guard<std::mutex> lock(registryMutex());
  return registry();
}

} // namespace kiln
