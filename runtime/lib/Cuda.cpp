//===- Cuda.cpp - devices, contexts, streams, graphs, timers --------------===//
#include "Driver.h"

namespace kiln::cuda {

using namespace detail;

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

void synchronize() {
  ContextScope scope(currentDevice());
  Driver &d = driver();
  KILN_CHECK(cuCtxSynchronize());
}

} // namespace kiln::cuda
