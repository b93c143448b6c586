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
#include <functional>
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
  /// DRAM bytes a second at its peak clock: 2 transfers a memory clock over
  /// the bus width (0 where the driver reports neither).
  double memoryBandwidth = 0;
  std::string arch() const; ///< "sm_90a" on Hopper, "sm_80" on Ampere...
};

/// A CUDA stream (a CUstream handle): null is the legacy default stream. The
/// runtime never owns a stream it is given.
using StreamHandle = void *;

/// GPUs the driver reports (0 without a usable driver).
int deviceCount();

/// The device kiln works on for this thread when not told otherwise: the
/// device of the context current on the thread (the one PyTorch or the CUDA
/// runtime made current), else ordinal 0.
int currentDevice();

/// The device `ordinal` (default: currentDevice()). Throws CudaError when
/// there is none.
const DeviceInfo &device(int ordinal);
const DeviceInfo &device();

/// The device of a stream's context; for the null stream, currentDevice().
int deviceOfStream(StreamHandle stream);

/// The device a pointer's memory was allocated on or registered with;
/// throws CudaError when it is not device memory the driver knows.
int deviceOfPointer(const void *pointer);

/// Makes the primary context of `ordinal` current on this thread for the
/// scope's life and then puts back whatever the caller had current (nothing
/// included): every runtime call that needs a context goes through one, so
/// that kiln never changes the caller's context under it.
class ContextScope {
public:
  explicit ContextScope(int ordinal);
  ~ContextScope();
  ContextScope(const ContextScope &) = delete;
  ContextScope &operator=(const ContextScope &) = delete;

private:
  void *saved_ = nullptr;
  bool restore_ = false;
};

/// A stream kiln creates (non-blocking with respect to the legacy default
/// stream) on a device; destroyed with the object.
class Stream {
public:
  explicit Stream(int ordinal = currentDevice());
  ~Stream();
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
  StreamHandle handle() const { return stream_; }
  int deviceOrdinal() const { return device_; }
  void synchronize() const;

private:
  StreamHandle stream_ = nullptr;
  int device_ = 0;
};

/// A CUDA graph captured from the work issued on a stream (global capture
/// mode: a call anywhere in the process that capture forbids fails), then
/// instantiated, ready to replay.
class Graph {
public:
  template <typename F> static Graph capture(const Stream &stream, F &&work) {
    Graph g(stream);
    g.begin();
    try {
      work();
    } catch (...) {
      g.abandon();
      throw;
    }
    g.end();
    return g;
  }
  ~Graph();
  Graph(Graph &&o) noexcept;
  Graph(const Graph &) = delete;
  /// Replays the graph on `stream` (does not synchronise).
  void launch(StreamHandle stream) const;
  /// Kernel launches the capture recorded.
  size_t kernelNodes() const;

private:
  explicit Graph(const Stream &stream)
      : stream_(stream.handle()), device_(stream.deviceOrdinal()) {}
  void begin();
  void end();
  void abandon();
  StreamHandle stream_ = nullptr;
  int device_ = 0;
  void *graph_ = nullptr, *exec_ = nullptr;
};

/// Device memory.
class Buffer {
public:
  Buffer() = default;
  /// `bytes` on device `ordinal` (default: currentDevice()).
  explicit Buffer(size_t bytes, int ordinal = -1);
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
  int deviceOrdinal() const { return device_; }

private:
  uint64_t ptr_ = 0;
  size_t bytes_ = 0;
  int device_ = 0;
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
  /// Launches on `stream` (of this function's device) and checks the
  /// launch; `args` points to each parameter's value. `overlapPrevious`:
  /// a programmatic dependent launch (sm_90), which may start before the
  /// previous launch on the stream ends (LaunchSpec::overlapPrevious).
  void launch(std::array<unsigned, 3> grid, std::array<unsigned, 3> block,
              unsigned sharedBytes, void **args, StreamHandle stream = nullptr,
              bool overlapPrevious = false);
  const std::string &name() const { return name_; }
  int deviceOrdinal() const { return device_; }

private:
  friend class Module;
  void *fn_ = nullptr;
  std::string name_;
  int device_ = 0;
};

/// A module loaded from PTX (the driver compiles it for the device) or from
/// an image the driver compiled before.
class Module {
public:
  /// Loaded in the primary context of device `ordinal` (default:
  /// currentDevice()). With `image`, compiled through the driver's linker,
  /// the device code (SASS, a cubin) copied there for the caller to keep.
  static Module fromPtx(const std::string &ptx, int ordinal = -1,
                        std::string *image = nullptr);
  /// An image fromPtx gave, on a device of the same compute capability;
  /// `log` stands for the compile's info log. Throws CudaError when the
  /// driver refuses it (another GPU, an older driver).
  static Module fromImage(const std::string &image, const std::string &log,
                          int ordinal = -1);
  ~Module();
  Module(Module &&o) noexcept;
  Module(const Module &) = delete;
  Function function(const std::string &name) const;
  /// What the JIT said while compiling the PTX (registers, spills, warnings).
  const std::string &infoLog() const { return infoLog_; }

private:
  Module(void *module, std::string infoLog, int device)
      : module_(module), infoLog_(std::move(infoLog)), device_(device) {}
  void *module_ = nullptr;
  std::string infoLog_;
  int device_ = 0;
};

/// Timing with CUDA events recorded on a stream (default: the legacy default
/// stream of the current device).
class Timer {
public:
  explicit Timer(StreamHandle stream = nullptr);
  ~Timer();
  void start();
  /// Milliseconds since start(), waiting for the GPU to get there.
  float stop();

private:
  StreamHandle stream_ = nullptr;
  int device_ = 0;
  void *start_ = nullptr, *stop_ = nullptr;
};

/// Waits for all work on the current device.
void synchronize();

/// Per-call milliseconds of `calls` run back to back, as the peers'
/// benchmarks time them: `samples` samples of `batch` calls, CUDA events
/// around each sample. Each sample's time over its calls is appended to
/// `all`; returns their median. No warm-up: that is the caller's.
double backToBackMs(const std::function<void()> &calls, int samples, int batch,
                    std::vector<float> *all = nullptr);

/// Encodes a tiled TMA tensor map (cuTensorMapEncodeTiled) into `out`, 128
/// bytes aligned to 64: `dims` and `box` innermost first, `strideBytes` for
/// every dimension but the innermost (which is contiguous), 128-byte swizzle,
/// zeros outside the tensor. Throws CudaError naming what the driver refused.
void encodeTensorMap(void *out, void *global, int elementBytes,
                     const std::vector<uint64_t> &dims,
                     const std::vector<uint64_t> &strideBytes,
                     const std::vector<uint32_t> &box);

/// Copies `bytes` of device memory (any device, unified addressing) to the
/// host; waits for it.
void copyToHost(void *host, const void *device, size_t bytes);

/// Copies `bytes` between device allocations (of one device) on the legacy
/// default stream of the source's device; does not wait.
void copyDeviceToDevice(void *dst, const void *src, size_t bytes);

struct MemoryInfo {
  size_t free = 0, total = 0; ///< bytes of device memory
};
MemoryInfo memoryInfo(); ///< of the current device

} // namespace kiln::cuda

#endif // KILN_RUNTIME_CUDA_H
