//===- Variant.cpp - what a compiled variant is specialised for -----------===//
//
// Each tensor argument is compiled as aligned (16-byte vectors, cp.async,
// TMA) or not on its own; these say which a set of tensors needs, and what a
// compiled variant took, for the user who launches it.
//
//===----------------------------------------------------------------------===//
#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/DiskCache.h"

#include "llvm/ADT/StringExtras.h"

#include <algorithm>

namespace kiln {

bool stridesAligned(DType dtype, const std::vector<int64_t> &strides) {
  if (strides.empty() || strides.back() != 1)
    return false;
  for (size_t d = 0; d + 1 < strides.size(); ++d)
    if ((strides[d] * int64_t(dtypeSize(dtype))) % 16)
      return false;
  return true;
}

bool tensorAligned(const TensorRef &r) {
  return reinterpret_cast<uintptr_t>(r.data) % 16 == 0 &&
         stridesAligned(r.dtype, r.strides);
}

std::vector<std::string>
unalignedTensors(const Kernel &kernel,
                 const std::map<std::string, TensorRef> &tensors) {
  std::vector<std::string> out;
  for (const TensorParamInfo &t : kernel.tensors()) {
    auto it = tensors.find(t.name);
    if (t.specialisable && (it == tensors.end() || !tensorAligned(it->second)))
      out.push_back(t.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::map<std::string, ScalarClass>
scalarClasses(const Kernel &kernel,
              const std::map<std::string, int64_t> &values,
              const std::map<std::string, TensorRef> &tensors) {
  std::map<std::string, ScalarClass> out;
  for (const ParamInfo &p : kernel.params())
    if (auto it = values.find(p.name); it != values.end())
      out[p.name] = scalarClassOf(it->second);
  for (const TensorParamInfo &t : kernel.tensors()) {
    auto it = tensors.find(t.name);
    for (size_t d = 0; it != tensors.end() && d < t.dimParams.size(); ++d)
      if (t.dimParams[d] >= 0 && d < it->second.shape.size())
        out.emplace(kernel.params()[t.dimParams[d]].name,
                    scalarClassOf(it->second.shape[d]));
  }
  return out;
}

GpuTarget variantTarget(const Kernel &kernel,
                        const std::map<std::string, TensorRef> &tensors,
                        const std::map<std::string, int64_t> &scalars,
                        GpuTarget target) {
  target.unalignedTensors = unalignedTensors(kernel, tensors);
  target.scalarClasses = scalarClasses(kernel, scalars, tensors);
  return target;
}

std::string specialisationKey(const GpuTarget &t) {
  std::string key;
  for (const std::string &name : t.unalignedTensors)
    key += "," + name;
  for (const auto &[name, c] : t.scalarClasses)
    key += ";" + name + "=" + scalarClassName(c);
  return key;
}

std::string tensorSpecialisation(const CompiledKernel &kernel) {
  std::vector<std::string> aligned, any;
  for (const TensorParamInfo &t : kernel.tensors)
    (t.aligned ? aligned : any)
        .push_back(t.name + (t.specialisable ? "" : " (kept unspecialised)"));
  std::string out =
      "aligned rows: " + (aligned.empty() ? "none" : llvm::join(aligned, ", "));
  if (!any.empty())
    out += "; element accesses: " + llvm::join(any, ", ");
  for (const ParamInfo &p : kernel.params) {
    if (p.assumed != ScalarClass::Any)
      out += std::string("; ") + p.name + " " + scalarClassName(p.assumed);
    if (p.multipleOf > 1)
      out += "; " + p.name + " multiple of " + std::to_string(p.multipleOf);
  }
  return out;
}

LaunchSpec CompiledKernel::spec() const {
  LaunchSpec s{name,   ptx,     grid,       threads,   sharedBytes,
               params, tensors, tensorMaps, persistent};
  s.tileCounter = tileCounter;
  s.overlapPrevious = overlapPrevious;
  s.variant = variantSummary(*this);
  s.report = report;
  if (DiskCache::keepsImages()) // opt-in: see DiskCache::keepsImages
    s.images = images;
  return s;
}

std::string variantSummary(const CompiledKernel &k) {
  std::string paths;
  for (const std::string &line : k.report) {
    // "File.cpp:12: load 128x64: TMA (details), ...": what, and its path.
    // Lines about the whole kernel ("warp roles: ...") have no file:line.
    size_t what = line.find(": ");
    size_t lineNo = line.rfind(':', what == std::string::npos ? 0 : what - 1);
    if (what == std::string::npos || lineNo == std::string::npos ||
        lineNo + 1 == what ||
        line.find_first_not_of("0123456789", lineNo + 1) != what)
      continue;
    std::string item = line.substr(what + 2);
    size_t colon = item.find(": ");
    if (colon == std::string::npos)
      continue;
    size_t end = item.find_first_of("(,;", colon + 2);
    std::string path = item.substr(0, end);
    while (!path.empty() && path.back() == ' ')
      path.pop_back();
    paths += (paths.empty() ? "" : " | ") + path;
  }
  return k.name + " " + k.arch + " (" + tensorSpecialisation(k) +
         (k.persistent ? "; persistent" : "") + "): " + paths;
}

} // namespace kiln
