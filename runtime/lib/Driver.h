//===- Driver.h - libcuda opened with dlopen, its entry points --*- C++ -*-===//
//
// Internal to runtime/lib (Cuda.cpp, CudaMemory.cpp, CudaModule.cpp).
// libcuda is opened with dlopen. cuda.h maps names such as cuMemAlloc to
// versioned symbols (cuMemAlloc_v2) with macros; looking a function up by
// its macro-expanded name gets the symbol the header's prototype describes.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_LIB_DRIVER_H
#define KILN_RUNTIME_LIB_DRIVER_H

#include "kiln/runtime/Cuda.h"

#include <cuda.h>

#include <memory>
#include <mutex>
#include <string>

namespace kiln::cuda::detail {

#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)
// clang-format off
#define KILN_DRIVER_FUNCTIONS(X)                                               \
  X(cuInit)                                                                    \
  X(cuDriverGetVersion)                                                        \
  X(cuGetErrorName)                                                            \
  X(cuGetErrorString)                                                          \
  X(cuDeviceGetCount)                                                          \
  X(cuDeviceGet)                                                               \
  X(cuDeviceGetName)                                                           \
  X(cuDeviceGetAttribute)                                                      \
  X(cuDeviceTotalMem)                                                          \
  X(cuDevicePrimaryCtxRetain)                                                  \
  X(cuCtxSetCurrent)                                                           \
  X(cuCtxGetCurrent)                                                           \
  X(cuCtxGetDevice)                                                            \
  X(cuCtxSynchronize)                                                          \
  X(cuMemAlloc)                                                                \
  X(cuMemFree)                                                                 \
  X(cuMemGetInfo)                                                              \
  X(cuMemcpyHtoD)                                                              \
  X(cuMemcpyDtoH)                                                              \
  X(cuMemcpyDtoDAsync)                                                         \
  X(cuMemsetD8)                                                                \
  X(cuStreamCreate)                                                            \
  X(cuStreamDestroy)                                                           \
  X(cuStreamSynchronize)                                                       \
  X(cuStreamGetCtx)                                                            \
  X(cuStreamBeginCapture)                                                      \
  X(cuStreamEndCapture)                                                        \
  X(cuGraphInstantiate)                                                        \
  X(cuGraphLaunch)                                                             \
  X(cuGraphDestroy)                                                            \
  X(cuGraphExecDestroy)                                                        \
  X(cuGraphGetNodes)                                                           \
  X(cuGraphNodeGetType)                                                        \
  X(cuPointerGetAttribute)                                                     \
  X(cuModuleLoadDataEx)                                                        \
  X(cuLinkCreate)                                                              \
  X(cuLinkAddData)                                                             \
  X(cuLinkComplete)                                                            \
  X(cuLinkDestroy)                                                             \
  X(cuModuleUnload)                                                            \
  X(cuModuleGetFunction)                                                       \
  X(cuFuncGetAttribute)                                                        \
  X(cuFuncSetAttribute)                                                        \
  X(cuLaunchKernelEx)                                                          \
  X(cuEventCreate)                                                             \
  X(cuEventDestroy)                                                            \
  X(cuEventRecord)                                                             \
  X(cuEventSynchronize)                                                        \
  X(cuEventElapsedTime)                                                        \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)                               \
  X(cuTensorMapEncodeTiled)
// clang-format on

struct Driver {
#define KILN_DECLARE(fn) decltype(&::fn) fn = nullptr;
  KILN_DRIVER_FUNCTIONS(KILN_DECLARE)
#undef KILN_DECLARE
  std::string error; ///< why the driver is unusable; empty when it is usable
  int count = 0;
  /// Per ordinal, filled on first use: its primary context and description.
  struct Device {
    std::once_flag once;
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    DeviceInfo info;
  };
  std::unique_ptr<Device[]> devices;
};

/// The driver, opened on first use; never destroyed (objects destroyed at
/// exit still reach it). Its `error` says why it is unusable.
Driver &driver();
/// The driver, or a CudaError naming why there is no usable GPU.
Driver &usable();
/// "CUDA_ERROR_... (description)".
std::string resultName(CUresult r);
/// Throws a CudaError naming `call` and `r` (and `extra`) unless r is
/// CUDA_SUCCESS.
void check(CUresult r, const char *call, const std::string &extra = "");
/// Device `ordinal`, its primary context retained and its description read
/// on first use.
Driver::Device &deviceState(int ordinal);
/// `ordinal`, or the current device where it is negative.
int ordinalOf(int ordinal);

/// Runs `release` with `device`'s context current; nothing to report in a
/// destructor (at exit the driver may be gone already).
template <typename F> void releaseOn(int device, F &&release) noexcept {
  try {
    ContextScope scope(device);
    release(driver());
  } catch (...) {
  }
}

} // namespace kiln::cuda::detail

/// Calls `d.call`, checked: `d` is a Driver & in scope.
#define KILN_CHECK(call, ...)                                                  \
  ::kiln::cuda::detail::check(d.call, #call __VA_OPT__(, ) __VA_ARGS__)

#endif // KILN_RUNTIME_LIB_DRIVER_H
