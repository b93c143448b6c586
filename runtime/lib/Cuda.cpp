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

Driver &driver() {
  // Never destroyed: objects destroyed at exit (caches of loaded kernels,
  // buffers) still reach the driver through it.
  static Driver &d = *new Driver;
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
    d.count = count;
    d.devices = std::make_unique<Driver::Device[]>(size_t(count));
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

Driver &usable() {
  Driver &d = driver();
  if (!d.error.empty())
    throw CudaError("no usable GPU: " + d.error);
  return d;
}

/// Device `ordinal`, its primary context retained and its description read
/// on first use.
Driver::Device &deviceState(int ordinal) {
  Driver &d = usable();
  if (ordinal < 0 || ordinal >= d.count)
    throw CudaError("no CUDA device " + std::to_string(ordinal) +
                    ": the driver reports " + std::to_string(d.count));
  Driver::Device &s = d.devices[size_t(ordinal)];
  std::call_once(s.once, [&] {
    KILN_CHECK(cuDeviceGet(&s.dev, ordinal));
    KILN_CHECK(cuDevicePrimaryCtxRetain(&s.ctx, s.dev));
    DeviceInfo &i = s.info;
    i.ordinal = ordinal;
    char name[256] = {};
    KILN_CHECK(cuDeviceGetName(name, sizeof(name), s.dev));
    i.name = name;
    auto attr = [&](CUdevice_attribute a) {
      int v = 0;
      KILN_CHECK(cuDeviceGetAttribute(&v, a, s.dev));
      return v;
    };
    i.major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    i.minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    i.smCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    i.maxSharedPerBlockOptin =
        attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    KILN_CHECK(cuDriverGetVersion(&i.driverVersion));
    KILN_CHECK(cuDeviceTotalMem(&i.totalMemory, s.dev));
    i.memoryBandwidth = 2.0 * 1e3 *
                        attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) *
                        attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH) / 8;
  });
  return s;
}

int ordinalOf(int ordinal) { return ordinal < 0 ? currentDevice() : ordinal; }

} // namespace

int deviceCount() {
  Driver &d = driver();
  return d.error.empty() ? d.count : 0;
}

int currentDevice() {
  Driver &d = usable();
  CUcontext ctx = nullptr;
  KILN_CHECK(cuCtxGetCurrent(&ctx));
  if (!ctx)
    return 0;
  CUdevice dev = 0;
  // A context destroyed under the thread reports an error: then device 0.
  if (d.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
    return 0;
  return int(dev); // an ordinal: cuDeviceGet(&dev, i) gives dev == i
}

int deviceOfStream(StreamHandle stream) {
  Driver &d = usable();
  if (!stream)
    return currentDevice();
  CUcontext ctx = nullptr, saved = nullptr;
  KILN_CHECK(cuStreamGetCtx(static_cast<CUstream>(stream), &ctx),
             "the stream given to kiln is not a valid CUstream");
  KILN_CHECK(cuCtxGetCurrent(&saved));
  if (ctx == saved)
    return currentDevice();
  KILN_CHECK(cuCtxSetCurrent(ctx));
  CUdevice dev = 0;
  CUresult r = d.cuCtxGetDevice(&dev);
  KILN_CHECK(cuCtxSetCurrent(saved));
  check(r, "cuCtxGetDevice");
  return int(dev);
}

int deviceOfPointer(const void *pointer) {
  Driver &d = usable();
  int ordinal = -1;
  CUresult r = d.cuPointerGetAttribute(
      &ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
      CUdeviceptr(reinterpret_cast<uintptr_t>(pointer)));
  if (r != CUDA_SUCCESS || ordinal < 0)
    throw CudaError(
        "the pointer is not device memory that the CUDA driver knows (" +
        resultName(r) + ")");
  return ordinal;
}

ContextScope::ContextScope(int ordinal) {
  Driver::Device &s = deviceState(ordinal);
  Driver &d = driver();
  CUcontext saved = nullptr;
  KILN_CHECK(cuCtxGetCurrent(&saved));
  if (saved == s.ctx)
    return;
  KILN_CHECK(cuCtxSetCurrent(s.ctx));
  saved_ = saved;
  restore_ = true;
}

ContextScope::~ContextScope() {
  if (restore_)
    driver().cuCtxSetCurrent(static_cast<CUcontext>(saved_));
}

/// Runs `release` with `device`'s context current; nothing to report in a
/// destructor (at exit the driver may be gone already).
template <typename F> static void releaseOn(int device, F &&release) noexcept {
  try {
    ContextScope scope(device);
    release(driver());
  } catch (...) {
  }
}

Stream::Stream(int ordinal) : device_(ordinal) {
  ContextScope scope(ordinal);
  Driver &d = driver();
  CUstream s = nullptr;
  KILN_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  stream_ = s;
}

Stream::~Stream() {
  if (stream_)
    releaseOn(device_, [&](Driver &d) {
      d.cuStreamDestroy(static_cast<CUstream>(stream_));
    });
}

void Stream::synchronize() const {
  ContextScope scope(device_);
  Driver &d = driver();
  KILN_CHECK(cuStreamSynchronize(static_cast<CUstream>(stream_)));
}

void Graph::begin() {
  ContextScope scope(device_);
  Driver &d = driver();
  KILN_CHECK(cuStreamBeginCapture(static_cast<CUstream>(stream_),
                                  CU_STREAM_CAPTURE_MODE_GLOBAL));
}

void Graph::end() {
  ContextScope scope(device_);
  Driver &d = driver();
  CUgraph g = nullptr;
  KILN_CHECK(cuStreamEndCapture(static_cast<CUstream>(stream_), &g));
  graph_ = g;
  CUgraphExec e = nullptr;
  KILN_CHECK(cuGraphInstantiate(&e, g, 0));
  exec_ = e;
}

void Graph::abandon() {
  releaseOn(device_, [&](Driver &d) {
    CUgraph g = nullptr;
    d.cuStreamEndCapture(static_cast<CUstream>(stream_), &g);
    if (g)
      d.cuGraphDestroy(g);
  });
}

Graph::~Graph() {
  if (graph_ || exec_)
    releaseOn(device_, [&](Driver &d) {
      if (exec_)
        d.cuGraphExecDestroy(static_cast<CUgraphExec>(exec_));
      if (graph_)
        d.cuGraphDestroy(static_cast<CUgraph>(graph_));
    });
}

Graph::Graph(Graph &&o) noexcept
    : stream_(o.stream_), device_(o.device_), graph_(o.graph_), exec_(o.exec_) {
  o.graph_ = o.exec_ = nullptr;
}

void Graph::launch(StreamHandle stream) const {
  ContextScope scope(device_);
  Driver &d = driver();
  KILN_CHECK(cuGraphLaunch(static_cast<CUgraphExec>(exec_),
                           static_cast<CUstream>(stream)));
}

size_t Graph::kernelNodes() const {
  Driver &d = driver();
  size_t n = 0;
  KILN_CHECK(cuGraphGetNodes(static_cast<CUgraph>(graph_), nullptr, &n));
  std::vector<CUgraphNode> nodes(n);
  KILN_CHECK(cuGraphGetNodes(static_cast<CUgraph>(graph_), nodes.data(), &n));
  size_t kernels = 0;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType t;
    KILN_CHECK(cuGraphNodeGetType(node, &t));
    kernels += t == CU_GRAPH_NODE_TYPE_KERNEL;
  }
  return kernels;
}

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

const DeviceInfo &device(int ordinal) { return deviceState(ordinal).info; }
const DeviceInfo &device() { return device(currentDevice()); }

Buffer::Buffer(size_t bytes, int ordinal)
    : bytes_(bytes), device_(ordinalOf(ordinal)) {
  ContextScope scope(device_);
  Driver &d = driver();
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
    releaseOn(device_, [&](Driver &d) { d.cuMemFree(CUdeviceptr(ptr_)); });
}

Buffer::Buffer(Buffer &&o) noexcept
    : ptr_(o.ptr_), bytes_(o.bytes_), device_(o.device_) {
  o.ptr_ = 0;
  o.bytes_ = 0;
}

Buffer &Buffer::operator=(Buffer &&o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  std::swap(device_, o.device_);
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
  ContextScope scope(device_);
  Driver &d = driver();
  if (bytes)
    KILN_CHECK(cuMemcpyHtoD(CUdeviceptr(ptr_ + offset), host, bytes));
}

void Buffer::download(void *host, size_t bytes, size_t offset) const {
  checkRange(offset, bytes, bytes_, "download");
  ContextScope scope(device_);
  Driver &d = driver();
  if (bytes)
    KILN_CHECK(cuMemcpyDtoH(host, CUdeviceptr(ptr_ + offset), bytes));
}

void Buffer::fill(uint8_t byte) {
  ContextScope scope(device_);
  Driver &d = driver();
  if (bytes_)
    KILN_CHECK(cuMemsetD8(CUdeviceptr(ptr_), byte, bytes_));
}

Module Module::fromPtx(const std::string &ptx, int ordinal,
                       std::string *image) {
  ordinal = ordinalOf(ordinal);
  ContextScope scope(ordinal);
  Driver &d = driver();
  std::string info(1 << 14, '\0'), err(1 << 14, '\0');
  CUjit_option opts[] = {
      CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
      CU_JIT_LOG_VERBOSE};
  void *vals[] = {info.data(), reinterpret_cast<void *>(info.size()),
                  err.data(), reinterpret_cast<void *>(err.size()),
                  reinterpret_cast<void *>(1)};
  // The driver writes NUL-terminated logs into the buffers.
  auto logs = [&] {
    info.resize(std::min(info.size(), info.find('\0')));
    err.resize(std::min(err.size(), err.find('\0')));
    return "JIT error log:\n" + err + "\nJIT info log:\n" + info;
  };
  CUmodule m = nullptr;
  if (!image) {
    CUresult r = d.cuModuleLoadDataEx(&m, ptx.c_str(), 5, opts, vals);
    check(r, "cuModuleLoadDataEx", logs());
  } else {
    // The driver's compile through its linker, which hands back the image
    // (SASS) for the caller to keep.
    CUlinkState link = nullptr;
    check(d.cuLinkCreate(5, opts, vals, &link), "cuLinkCreate", "");
    CUresult r =
        d.cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char *>(ptx.c_str()),
                        ptx.size() + 1, "kiln.ptx", 0, nullptr, nullptr);
    void *bytes = nullptr;
    size_t size = 0;
    if (r == CUDA_SUCCESS)
      r = d.cuLinkComplete(link, &bytes, &size);
    if (r == CUDA_SUCCESS)
      image->assign(static_cast<const char *>(bytes), size);
    d.cuLinkDestroy(link);
    check(r, "cuLinkComplete", logs());
    return fromImage(*image, info, ordinal);
  }
  return Module(m, info, ordinal);
}

Module Module::fromImage(const std::string &image, const std::string &log,
                         int ordinal) {
  ordinal = ordinalOf(ordinal);
  ContextScope scope(ordinal);
  Driver &d = driver();
  CUmodule m = nullptr;
  check(d.cuModuleLoadDataEx(&m, image.data(), 0, nullptr, nullptr),
        "cuModuleLoadDataEx (image)", "");
  return Module(m, log, ordinal);
}

Module::~Module() {
  if (module_)
    releaseOn(device_, [&](Driver &d) {
      d.cuModuleUnload(static_cast<CUmodule>(module_));
    });
}

Module::Module(Module &&o) noexcept
    : module_(o.module_), infoLog_(std::move(o.infoLog_)), device_(o.device_) {
  o.module_ = nullptr;
}

Function Module::function(const std::string &name) const {
  ContextScope scope(device_);
  Driver &d = driver();
  CUfunction f = nullptr;
  KILN_CHECK(
      cuModuleGetFunction(&f, static_cast<CUmodule>(module_), name.c_str()),
      "kernel name: " + name);
  Function fn;
  fn.fn_ = f;
  fn.name_ = name;
  fn.device_ = device_;
  return fn;
}

FunctionAttributes Function::attributes() const {
  ContextScope scope(device_);
  Driver &d = driver();
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
  ContextScope scope(device_);
  Driver &d = driver();
  int blocks = 0;
  KILN_CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(
                 &blocks, static_cast<CUfunction>(fn_), threads,
                 size_t(dynamicSharedBytes)),
             "kernel " + name_);
  return blocks;
}

void Function::setMaxDynamicShared(int bytes) {
  ContextScope scope(device_);
  Driver &d = driver();
  KILN_CHECK(cuFuncSetAttribute(static_cast<CUfunction>(fn_),
                                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                bytes),
             "kernel " + name_ + ", " + std::to_string(bytes) + " bytes");
}

void Function::launch(std::array<unsigned, 3> grid,
                      std::array<unsigned, 3> block, unsigned sharedBytes,
                      void **args, StreamHandle stream,
                      bool overlapPrevious) {
  ContextScope scope(device_);
  Driver &d = driver();
  // One call for both: no attribute is an ordinary launch.
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = grid[0];
  config.gridDimY = grid[1];
  config.gridDimZ = grid[2];
  config.blockDimX = block[0];
  config.blockDimY = block[1];
  config.blockDimZ = block[2];
  config.sharedMemBytes = sharedBytes;
  config.hStream = static_cast<CUstream>(stream);
  config.attrs = &attr;
  config.numAttrs = overlapPrevious ? 1 : 0;
  CUresult r =
      d.cuLaunchKernelEx(&config, static_cast<CUfunction>(fn_), args, nullptr);
  if (r != CUDA_SUCCESS)
    check(r, "cuLaunchKernelEx", "kernel " + name_);
}

Timer::Timer(StreamHandle stream)
    : stream_(stream), device_(deviceOfStream(stream)) {
  ContextScope scope(device_);
  Driver &d = driver();
  CUevent a = nullptr, b = nullptr;
  KILN_CHECK(cuEventCreate(&a, CU_EVENT_DEFAULT));
  KILN_CHECK(cuEventCreate(&b, CU_EVENT_DEFAULT));
  start_ = a;
  stop_ = b;
}

Timer::~Timer() {
  releaseOn(device_, [&](Driver &d) {
    d.cuEventDestroy(static_cast<CUevent>(start_));
    d.cuEventDestroy(static_cast<CUevent>(stop_));
  });
}

void Timer::start() {
  ContextScope scope(device_);
  Driver &d = driver();
  KILN_CHECK(cuEventRecord(static_cast<CUevent>(start_),
                           static_cast<CUstream>(stream_)));
}

float Timer::stop() {
  ContextScope scope(device_);
  Driver &d = driver();
  KILN_CHECK(cuEventRecord(static_cast<CUevent>(stop_),
                           static_cast<CUstream>(stream_)));
  KILN_CHECK(cuEventSynchronize(static_cast<CUevent>(stop_)));
  float ms = 0;
  KILN_CHECK(cuEventElapsedTime(&ms, static_cast<CUevent>(start_),
                                static_cast<CUevent>(stop_)));
  return ms;
}

void copyToHost(void *host, const void *device, size_t bytes) {
  ContextScope scope(deviceOfPointer(device));
  Driver &d = driver();
  if (bytes)
    KILN_CHECK(cuMemcpyDtoH(host, CUdeviceptr(reinterpret_cast<uintptr_t>(device)),
                            bytes));
}

void copyDeviceToDevice(void *dst, const void *src, size_t bytes) {
  ContextScope scope(deviceOfPointer(src));
  Driver &d = driver();
  if (bytes)
    KILN_CHECK(cuMemcpyDtoDAsync(CUdeviceptr(reinterpret_cast<uintptr_t>(dst)),
                                 CUdeviceptr(reinterpret_cast<uintptr_t>(src)),
                                 bytes, nullptr));
}

MemoryInfo memoryInfo() {
  ContextScope scope(currentDevice());
  Driver &d = driver();
  size_t free = 0, total = 0;
  KILN_CHECK(cuMemGetInfo(&free, &total));
  return {free, total};
}

void synchronize() {
  ContextScope scope(currentDevice());
  Driver &d = driver();
  KILN_CHECK(cuCtxSynchronize());
}

void encodeTensorMap(void *out, void *global, int elementBytes,
                     const std::vector<uint64_t> &dims,
                     const std::vector<uint64_t> &strideBytes,
                     const std::vector<uint32_t> &box) {
  Driver &d = usable();
  // Copies move bits whatever the type; 4-byte elements are fp32 so that a
  // bulk reduction through the map adds floats (kiln's fp32 atomics).
  CUtensorMapDataType type = elementBytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                             : elementBytes == 2
                                 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
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
