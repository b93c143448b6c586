//===- Nvrtc.h - CUDA C++ to PTX at run time --------------------*- C++ -*-===//
//
// For reference kernels only: plain CUDA C++ that checks kiln's results on
// the GPU. libnvrtc is opened at run time ($KILN_NVRTC, then the usual names,
// then $CUDA_HOME/lib64).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_NVRTC_H
#define KILN_RUNTIME_NVRTC_H

#include <string>
#include <vector>

namespace kiln::nvrtc {

/// Whether libnvrtc can be loaded; when not, `why` says why.
bool available(std::string *why = nullptr);

/// Compiles `source` for `arch` ("sm_90a", "sm_80") to PTX. Throws
/// kiln::Error with NVRTC's log when it does not compile.
std::string compileToPtx(const std::string &source, const std::string &name,
                         const std::string &arch,
                         const std::vector<std::string> &options = {});

} // namespace kiln::nvrtc

#endif // KILN_RUNTIME_NVRTC_H
