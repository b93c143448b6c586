//===- Cuda.cpp - the CUDA Driver API, checked ----------------------------===//
//
// libcuda is opened with dlopen. cuda.h maps names such as cuMemAlloc to
// versioned symbols (cuMemAlloc_v2) with macros; looking a function up by its
// macro-expanded name gets the symbol the header's prototype describes.
//
//===----------------------------------------------------------------------===//
#include "kiln/runtime/Cuda.h"

#include <cuda.h>
#include <dlfcn.h>

#include <mutex>

namespace kiln::cuda {
namespace {

#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)
#define KILN_DRIVER_FUNCTIONS(X)                                               \
  X(cuInit)                                                                    \
  X(cuDriverGetVersion)                                                        \
  X(cuGetErrorName)                                                            \
  X(cuGetErrorString)                                                          \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(                     \
      cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain)    \
      X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuMemAlloc) X(cuMemFree)        \
          X(cuMemGetInfo) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemsetD8) X(     \
              cuModuleLoadDataEx) X(cuModuleUnload) X(cuModuleGetFunction)     \
              X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuLaunchKernel)    \
                  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)          \
                      X(cuEventSynchronize) X(cuEventElapsedTime)              \
                          X(cuOccupancyMaxActiveBlocksPerMultiprocessor)       \
                              X(cuTensorMapEncodeTiled)

struct Driver {
#define KILN_DECLARE(fn) decltype(&::fn) fn = nullptr;
  KILN_DRIVER_FUNCTIONS(KILN_DECLARE)
#undef KILN_DECLARE
  std::string error; ///< why the driver is unusable; empty when it is usable
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  DeviceInfo info;
};

Driver &driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      d.error = "the CUDA driver (libcuda.so.1) is not installed";
      return;
    }
#define KILN_LOAD(fn)                                                          \
  d.fn = reinterpret_cast<decltype(d.fn)>(dlsym(h, KILN_STR(fn)));             \
  if (!d.fn) {                                                                 \
    d.error = "libcuda.so.1 lacks " KILN_STR(fn);                              \
    return;                                                                    \
  }
    KILN_DRIVER_FUNCTIONS(KILN_LOAD)
#undef KILN_LOAD
    int count = 0;
    if (CUresult r = d.cuInit(0); r != CUDA_SUCCESS) {
      const char *name = nullptr;
      d.cuGetErrorName(r, &name);
      d.error = std::string("cuInit failed: ") + (name ? name : "?");
      return;
    }
    if (d.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
      d.error = "the CUDA driver reports no device";
      return;
    }
  });
  return d;
}

std::string resultName(CUresult r) {
  const char *name = nullptr, *text = nullptr;
  Driver &d = driver();
  if (d.cuGetErrorName)
    d.cuGetErrorName(r, &name);
  if (d.cuGetErrorString)
    d.cuGetErrorString(r, &text);
  return std::string(name ? name : "CUDA_ERROR_?") + " (" +
         (text ? text : "no description") + ")";
}

void check(CUresult r, const char *call, const std::string &extra = "") {
  if (r != CUDA_SUCCESS)
    throw CudaError(std::string(call) + " failed: " + resultName(r) +
                    (extra.empty() ? "" : "\n" + extra));
}
#define KILN_CHECK(call, ...) check(d.call, #call __VA_OPT__(, ) __VA_ARGS__)

/// The driver with the device's primary context current on this thread.
Driver &ready() {
  Driver &d = driver();
  if (!d.error.empty())
    throw CudaError("no usable GPU: " + d.error);
  static std::once_flag once;
  std::call_once(once, [&] {
    KILN_CHECK(cuDeviceGet(&d.dev, 0));
    KILN_CHECK(cuDevicePrimaryCtxRetain(&d.ctx, d.dev));
    DeviceInfo &i = d.info;
    char name[256] = {};
    KILN_CHECK(cuDeviceGetName(name, sizeof(name), d.dev));
    i.name = name;
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      KILN_CHECK(cuDeviceGetAttribute(&v, a, d.dev));
      return v;
    };
    i.major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    i.minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    i.smCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    i.maxSharedPerBlockOptin =
        attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    KILN_CHECK(cuDriverGetVersion(&i.driverVersion));
    KILN_CHECK(cuDeviceTotalMem(&i.totalMemory, d.dev));
  });
  KILN_CHECK(cuCtxSetCurrent(d.ctx));
  return d;
}

} // namespace

bool available(std::string *why) {
  Driver &d = driver();
  if (why)
    *why = d.error;
  return d.error.empty();
}

std::string DeviceInfo::arch() const {
  // sm_90a: the architecture-specific target that wgmma and setmaxnreg need.
  return "sm_" + std::to_string(major) + std::to_string(minor) +
         (major == 9 ? "a" : "");
}

const DeviceInfo &device() { return ready().info; }

Buffer::Buffer(size_t bytes) : bytes_(bytes) {
  Driver &d = ready();
  if (bytes == 0)
    return;
  CUdeviceptr p = 0;
  CUresult r = d.cuMemAlloc(&p, bytes);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    throw OutOfMemory("cuMemAlloc: out of device memory: asked for " +
                      std::to_string(bytes) + " bytes");
  check(r, "cuMemAlloc", "asked for " + std::to_string(bytes) + " bytes");
  ptr_ = p;
}

Buffer::~Buffer() {
  if (ptr_)
    driver().cuMemFree(CUdeviceptr(ptr_)); // nothing to report in a destructor
}

Buffer::Buffer(Buffer &&o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = 0;
  o.bytes_ = 0;
}

Buffer &Buffer::operator=(Buffer &&o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

static void checkRange(size_t offset, size_t bytes, size_t size,
                       const char *op) {
  if (offset > size || bytes > size - offset)
    throw Error(std::string("Buffer::") + op + ": " + std::to_string(bytes) +
                " bytes at offset " + std::to_string(offset) +
                " overrun a buffer of " + std::to_string(size));
}

void Buffer::upload(const void *host, size_t bytes, size_t offset) {
  checkRange(offset, bytes, bytes_, "upload");
  Driver &d = ready();
  if (bytes)
    KILN_CHECK(cuMemcpyHtoD(CUdeviceptr(ptr_ + offset), host, bytes));
}

void Buffer::download(void *host, size_t bytes, size_t offset) const {
  checkRange(offset, bytes, bytes_, "download");
  Driver &d = ready();
  if (bytes)
    KILN_CHECK(cuMemcpyDtoH(host, CUdeviceptr(ptr_ + offset), bytes));
}

void Buffer::fill(uint8_t byte) {
  Driver &d = ready();
  if (bytes_)
    KILN_CHECK(cuMemsetD8(CUdeviceptr(ptr_), byte, bytes_));
}

Module Module::fromPtx(const std::string &ptx) {
  Driver &d = ready();
  std::string info(1 << 14, '\0'), err(1 << 14, '\0');
  CUjit_option opts[] = {
      CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_LOG_VERBOSE};
  void *vals[] = {info.data(), reinterpret_cast<void *>(info.size()),
                  err.data(), reinterpret_cast<void *>(err.size()),
                  reinterpret_cast<void *>(1)};
  CUmodule m = nullptr;
  CUresult r = d.cuModuleLoadDataEx(&m, ptx.c_str(), 5, opts, vals);
  info.resize(info.find('\0'));
  err.resize(err.find('\0'));
  check(r, "cuModuleLoadDataEx",
        "JIT error log:\n" + err + "\nJIT info log:\n" + info);
  Module mod;
  mod.module_ = m;
  mod.infoLog_ = info;
  return mod;
}

Module::~Module() {
  if (module_)
    driver().cuModuleUnload(static_cast<CUmodule>(module_));
}

Module::Module(Module &&o) noexcept
    : module_(o.module_), infoLog_(std::move(o.infoLog_)) {
  o.module_ = nullptr;
}

Function Module::function(const std::string &name) const {
  Driver &d = ready();
  CUfunction f = nullptr;
  KILN_CHECK(
      cuModuleGetFunction(&f, static_cast<CUmodule>(module_), name.c_str()),
      "kernel name: " + name);
  Function fn;
  fn.fn_ = f;
  fn.name_ = name;
  return fn;
}

FunctionAttributes Function::attributes() const {
  Driver &d = ready();
  auto f = static_cast<CUfunction>(fn_);
  FunctionAttributes a;
  KILN_CHECK(cuFuncGetAttribute(&a.registers, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
  KILN_CHECK(cuFuncGetAttribute(&a.staticSharedBytes,
                                CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f));
  KILN_CHECK(
      cuFuncGetAttribute(&a.localBytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f));
  KILN_CHECK(cuFuncGetAttribute(&a.maxThreadsPerBlock,
                                CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
  return a;
}

int Function::maxActiveBlocksPerSM(int threads, int dynamicSharedBytes) const {
  Driver &d = ready();
  int blocks = 0;
  KILN_CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(
                 &blocks, static_cast<CUfunction>(fn_), threads,
                 size_t(dynamicSharedBytes)),
             "kernel " + name_);
  return blocks;
}

void Function::setMaxDynamicShared(int bytes) {
  Driver &d = ready();
  KILN_CHECK(cuFuncSetAttribute(static_cast<CUfunction>(fn_),
                                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                bytes),
             "kernel " + name_ + ", " + std::to_string(bytes) + " bytes");
}

void Function::launch(std::array<unsigned, 3> grid,
                      std::array<unsigned, 3> block, unsigned sharedBytes,
                      std::vector<void *> args) {
  Driver &d = ready();
  KILN_CHECK(cuLaunchKernel(static_cast<CUfunction>(fn_), grid[0], grid[1],
                            grid[2], block[0], block[1], block[2], sharedBytes,
                            nullptr, args.data(), nullptr),
             "kernel " + name_);
}

Timer::Timer() {
  Driver &d = ready();
  CUevent a = nullptr, b = nullptr;
  KILN_CHECK(cuEventCreate(&a, CU_EVENT_DEFAULT));
  KILN_CHECK(cuEventCreate(&b, CU_EVENT_DEFAULT));
  start_ = a;
  stop_ = b;
}

Timer::~Timer() {
  Driver &d = driver();
  d.cuEventDestroy(static_cast<CUevent>(start_));
  d.cuEventDestroy(static_cast<CUevent>(stop_));
}

void Timer::start() {
  Driver &d = ready();
  KILN_CHECK(cuEventRecord(static_cast<CUevent>(start_), nullptr));
}

float Timer::stop() {
  Driver &d = ready();
  KILN_CHECK(cuEventRecord(static_cast<CUevent>(stop_), nullptr));
  KILN_CHECK(cuEventSynchronize(static_cast<CUevent>(stop_)));
  float ms = 0;
  KILN_CHECK(cuEventElapsedTime(&ms, static_cast<CUevent>(start_),
                                static_cast<CUevent>(stop_)));
  return ms;
}

MemoryInfo memoryInfo() {
  Driver &d = ready();
  size_t free = 0, total = 0;
  KILN_CHECK(cuMemGetInfo(&free, &total));
  return {free, total};
}

void synchronize() {
  Driver &d = ready();
  KILN_CHECK(cuCtxSynchronize());
}

void encodeTensorMap(void *out, void *global, int elementBytes,
                     const std::vector<uint64_t> &dims,
                     const std::vector<uint64_t> &strideBytes,
                     const std::vector<uint32_t> &box) {
  Driver &d = ready();
  CUtensorMapDataType type = elementBytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                             : elementBytes == 2
                                 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                 : CU_TENSOR_MAP_DATA_TYPE_UINT32;
  std::vector<uint32_t> elementStrides(dims.size(), 1);
  KILN_CHECK(cuTensorMapEncodeTiled(
                 static_cast<CUtensorMap *>(out), type, unsigned(dims.size()),
                 global, dims.data(), strideBytes.data(), box.data(),
                 elementStrides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE,
                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
             "cuTensorMapEncodeTiled");
}

} // namespace kiln::cuda
