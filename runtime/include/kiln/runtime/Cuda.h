//===- Cuda.h - the CUDA Driver API, checked --------------------*- C++ -*-===//
//
// kiln's GPU runtime: Driver API only (libcuda is opened at run time, so
// programs start and GPU tests skip on machines without a driver). Every
// CUresult is checked; a failure throws CudaError naming the call, the
// CUresult's name and, for module loads, the JIT log.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_CUDA_H
#define KILN_RUNTIME_CUDA_H

#include "kiln/runtime/Error.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::cuda {

class CudaError : public Error {
public:
  explicit CudaError(const std::string &message) : Error(message) {}
};

/// cuMemAlloc found too little free device memory.
class OutOfMemory : public CudaError {
public:
  explicit OutOfMemory(const std::string &message) : CudaError(message) {}
};

/// Whether a GPU can be used: the driver loads, initialises and reports a
/// device. When not, `why` says what is missing.
bool available(std::string *why = nullptr);

struct DeviceInfo {
  std::string name;
  int ordinal = 0;
  int major = 0, minor = 0; ///< compute capability
  int smCount = 0;
  int maxSharedPerBlockOptin = 0; ///< bytes, with the opt-in attribute
  int driverVersion = 0;
  size_t totalMemory = 0;
  std::string arch() const; ///< "sm_90a" on Hopper, "sm_80" on Ampere...
};

/// The device in use (ordinal 0), its primary context made current on the
/// calling thread. Throws CudaError when there is none.
const DeviceInfo &device();

/// Device memory.
class Buffer {
public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  ~Buffer();
  Buffer(Buffer &&o) noexcept;
  Buffer &operator=(Buffer &&o) noexcept;
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;

  void *data() const { return reinterpret_cast<void *>(ptr_); }
  size_t size() const { return bytes_; }
  void upload(const void *host, size_t bytes, size_t offset = 0);
  void download(void *host, size_t bytes, size_t offset = 0) const;
  /// Sets every byte (0xFF poisons floats with NaN).
  void fill(uint8_t byte);

private:
  uint64_t ptr_ = 0;
  size_t bytes_ = 0;
};

struct FunctionAttributes {
  int registers = 0;
  int staticSharedBytes = 0;
  int localBytes = 0; ///< per thread: spills and stack
  int maxThreadsPerBlock = 0;
};

/// A kernel of a loaded module.
class Function {
public:
  FunctionAttributes attributes() const;
  /// Blocks of `threads` threads that fit on one SM at once (occupancy).
  int maxActiveBlocksPerSM(int threads, int dynamicSharedBytes) const;
  /// Raises the dynamic shared-memory limit (needed past 48 KB).
  void setMaxDynamicShared(int bytes);
  /// Launches and checks the launch; `args` points to each parameter's value.
  void launch(std::array<unsigned, 3> grid, std::array<unsigned, 3> block,
              unsigned sharedBytes, std::vector<void *> args);
  const std::string &name() const { return name_; }

private:
  friend class Module;
  void *fn_ = nullptr;
  std::string name_;
};

/// A module loaded from PTX; the driver compiles it for the device.
class Module {
public:
  static Module fromPtx(const std::string &ptx);
  ~Module();
  Module(Module &&o) noexcept;
  Module(const Module &) = delete;
  Function function(const std::string &name) const;
  /// What the JIT said while compiling the PTX (registers, spills, warnings).
  const std::string &infoLog() const { return infoLog_; }

private:
  Module() = default;
  void *module_ = nullptr;
  std::string infoLog_;
};

/// Timing with CUDA events on the default stream.
class Timer {
public:
  Timer();
  ~Timer();
  void start();
  /// Milliseconds since start(), waiting for the GPU to get there.
  float stop();

private:
  void *start_ = nullptr, *stop_ = nullptr;
};

void synchronize();

/// Encodes a tiled TMA tensor map (cuTensorMapEncodeTiled) into `out`, 128
/// bytes aligned to 64: `dims` and `box` innermost first, `strideBytes` for
/// every dimension but the innermost (which is contiguous), 128-byte swizzle,
/// zeros outside the tensor. Throws CudaError naming what the driver refused.
void encodeTensorMap(void *out, void *global, int elementBytes,
                     const std::vector<uint64_t> &dims,
                     const std::vector<uint64_t> &strideBytes,
                     const std::vector<uint32_t> &box);

struct MemoryInfo {
  size_t free = 0, total = 0; ///< bytes of device memory
};
MemoryInfo memoryInfo();

} // namespace kiln::cuda

#endif // KILN_RUNTIME_CUDA_H
