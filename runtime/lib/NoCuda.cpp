//===- NoCuda.cpp - the GPU runtime in a build without cuda.h -------------===//
//
// Every entry point says that this build has no GPU runtime, so that callers
// (and GPU tests, which skip) see the reason instead of a link error.
//
//===----------------------------------------------------------------------===//
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Launch.h"
#include "kiln/runtime/Nvrtc.h"

namespace kiln {
namespace {
const char *kWhy =
    "kiln was built without CUDA headers (set CUDA_HOME and rebuild)";
[[noreturn]] void none() { throw cuda::CudaError(kWhy); }
} // namespace

namespace cuda {
bool available(std::string *why) {
  if (why)
    *why = kWhy;
  return false;
}
std::string DeviceInfo::arch() const {
  return "sm_" + std::to_string(major * 10 + minor);
}
int deviceCount() { return 0; }
int currentDevice() { none(); }
const DeviceInfo &device(int) { none(); }
const DeviceInfo &device() { none(); }
int deviceOfStream(StreamHandle) { none(); }
int deviceOfPointer(const void *) { none(); }
ContextScope::ContextScope(int) { none(); }
ContextScope::~ContextScope() = default;
Stream::Stream(int) { none(); }
Stream::~Stream() = default;
void Stream::synchronize() const { none(); }
void Graph::begin() { none(); }
void Graph::end() { none(); }
void Graph::abandon() {}
Graph::~Graph() = default;
Graph::Graph(Graph &&) noexcept {}
void Graph::launch(StreamHandle) const { none(); }
size_t Graph::kernelNodes() const { none(); }
Buffer::Buffer(size_t, int) { none(); }
Buffer::~Buffer() = default;
Buffer::Buffer(Buffer &&) noexcept {}
Buffer &Buffer::operator=(Buffer &&) noexcept { return *this; }
void Buffer::upload(const void *, size_t, size_t) { none(); }
void Buffer::download(void *, size_t, size_t) const { none(); }
void Buffer::fill(uint8_t) { none(); }
FunctionAttributes Function::attributes() const { none(); }
void Function::setMaxDynamicShared(int) { none(); }
int Function::maxActiveBlocksPerSM(int, int) const { none(); }
void Function::launch(std::array<unsigned, 3>, std::array<unsigned, 3>,
                      unsigned, void **, StreamHandle, bool) {
  none();
}
Module Module::fromPtx(const std::string &, int) { none(); }
Module::~Module() = default;
Module::Module(Module &&) noexcept {}
Function Module::function(const std::string &) const { none(); }
Timer::Timer(StreamHandle) { none(); }
Timer::~Timer() = default;
void Timer::start() { none(); }
float Timer::stop() { none(); }
void synchronize() { none(); }
void encodeTensorMap(void *, void *, int, const std::vector<uint64_t> &,
                     const std::vector<uint64_t> &,
                     const std::vector<uint32_t> &) {
  none();
}
void copyToHost(void *, const void *, size_t) { none(); }
void copyDeviceToDevice(void *, const void *, size_t) { none(); }
MemoryInfo memoryInfo() { none(); }
} // namespace cuda

struct GpuKernel::Loaded {};
GpuKernel::GpuKernel(LaunchSpec, int) { none(); }
GpuKernel::~GpuKernel() = default;
void GpuKernel::launch(const std::vector<ArgValue> &, const LaunchOptions &) {
  none();
}
cuda::FunctionAttributes GpuKernel::attributes() const { none(); }
int GpuKernel::blocksPerSM() const { none(); }
const std::string &GpuKernel::jitLog() const { none(); }
std::array<unsigned, 3>
GpuKernel::launchGridFor(const std::vector<ArgValue> &) const {
  none();
}

namespace nvrtc {
bool available(std::string *why) {
  if (why)
    *why = kWhy;
  return false;
}
std::string compileToPtx(const std::string &, const std::string &,
                         const std::string &,
                         const std::vector<std::string> &) {
  none();
}
} // namespace nvrtc
} // namespace kiln
