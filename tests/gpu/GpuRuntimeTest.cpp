//===- GpuRuntimeTest.cpp - streams, graphs, contexts and devices ---------===//
//
// The runtime as a library inside someone else's process: launches on the
// caller's stream, captured in a CUDA graph and replayed, one dynamic-tile
// kernel on two streams at once, the caller's current context left alone,
// pointers of the wrong device or of the host refused before the launch, a
// second GPU where there is one. Results are checked against the NVRTC
// reference on fresh random inputs, outputs poisoned before every launch.
// Skips, saying why, without a GPU.
//
//===----------------------------------------------------------------------===//
#include "../unit/TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/DiskCache.h"
#include "kiln/kernels/Attention.h"
#include "kiln/kernels/GpuReference.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Launch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <map>
#include <memory>

using namespace kiln;
using ::testing::HasSubstr;

namespace {

/// Causal attention at D=128 under the Hopper schedule (a producer
/// warpgroup, persistent CTAs, dynamic tiles), or mma.sync elsewhere.
struct Problem {
  kernels::AttentionShape shape{2, 6, 1000, 1000, 128, true, DType::bf16, 0};
  Kernel kernel;
  HostTensor q, k, v;
  std::map<std::string, cuda::Buffer> buffers;
  std::map<std::string, TensorRef> refs;
  HostTensor oRef, lseRef;

  explicit Problem(int device = -1, uint64_t seed = 7)
      : kernel(kernels::attentionForward(shape, config())),
        q(DType::bf16, dims()), k(DType::bf16, dims()), v(DType::bf16, dims()),
        oRef(DType::f32, dims()),
        lseRef(DType::f32, {shape.batch, shape.heads, shape.seqQ}) {
    q.fillRandom(seed);
    k.fillRandom(seed + 1);
    v.fillRandom(seed + 2);
    for (auto [name, t] : {std::pair{"Q", &q}, {"K", &k}, {"V", &v}}) {
      cuda::Buffer &b = buffers[name] = cuda::Buffer(t->storageBytes(), device);
      b.upload(t->data(), t->storageBytes());
      refs[name] = t->ref();
      refs[name].data = b.data();
    }
    addOutputs("", device);
  }
  static kernels::AttentionConfig config() {
    kernels::AttentionConfig c;
    if (cuda::device().arch() != "sm_90a")
      c.wgmma = 0;
    return c;
  }
  std::vector<int64_t> dims() const {
    return {shape.batch, shape.heads, shape.seqQ, shape.headDim};
  }
  /// O and LSE under names with `suffix`, for a second set of outputs.
  void addOutputs(const std::string &suffix, int device = -1) {
    HostTensor o(DType::bf16, dims()),
        lse(DType::f32, {shape.batch, shape.heads, shape.seqQ});
    for (auto [name, t] : {std::pair{"O", &o}, {"LSE", &lse}}) {
      cuda::Buffer &b = buffers[name + suffix] =
          cuda::Buffer(t->storageBytes(), device);
      refs[name + suffix] = t->ref();
      refs[name + suffix].data = b.data();
    }
  }
  std::map<std::string, TensorRef> io(const std::string &suffix = "") const {
    return {{"Q", refs.at("Q")},
            {"K", refs.at("K")},
            {"V", refs.at("V")},
            {"O", refs.at("O" + suffix)},
            {"LSE", refs.at("LSE" + suffix)}};
  }
  void poison(const std::string &suffix = "") {
    buffers.at("O" + suffix).fill(0xFF);
    buffers.at("LSE" + suffix).fill(0xFF);
  }
  /// The NVRTC reference's output, computed once.
  void reference() {
    if (referenced_)
      return;
    cuda::Buffer ro(oRef.storageBytes()), rl(lseRef.storageBytes());
    kernels::attentionReferenceGpu(shape, refs.at("Q"), refs.at("K"),
                                   refs.at("V"), ro.data(), rl.data());
    ro.download(oRef.data(), oRef.storageBytes());
    rl.download(lseRef.data(), lseRef.storageBytes());
    referenced_ = true;
  }
  /// Checks the outputs under `suffix` against the reference.
  void check(const std::string &suffix = "") {
    reference();
    HostTensor o(DType::bf16, dims()), lse(DType::f32, lseRef.shape());
    buffers.at("O" + suffix).download(o.data(), o.storageBytes());
    buffers.at("LSE" + suffix).download(lse.data(), lse.storageBytes());
    ErrorStats eo = compareTensors(o, oRef), el = compareTensors(lse, lseRef);
    EXPECT_EQ(eo.nonFinite, 0) << "O" << suffix << ": unwritten outputs";
    EXPECT_LE(eo.relative, 1e-2) << "O" << suffix;
    EXPECT_EQ(el.nonFinite, 0) << "LSE" << suffix << ": unwritten outputs";
    EXPECT_LE(el.relative, 1e-4) << "LSE" << suffix;
  }
  /// Whether every output element under `suffix` is still the poison.
  bool untouched(const std::string &suffix = "") const {
    const cuda::Buffer &b = buffers.at("O" + suffix);
    std::vector<unsigned char> bytes(b.size());
    b.download(bytes.data(), bytes.size());
    for (unsigned char c : bytes)
      if (c != 0xFF)
        return false;
    return true;
  }

private:
  bool referenced_ = false;
};

/// The driver's context calls, for a test that plays a caller with a
/// context of its own.
struct CallerContexts {
  using GetCurrent = int (*)(void **);
  using SetCurrent = int (*)(void *);
  using Create = int (*)(void **, void *, unsigned, int);
  using Destroy = int (*)(void *);
  GetCurrent getCurrent = nullptr;
  SetCurrent setCurrent = nullptr;
  Create create = nullptr;
  Destroy destroy = nullptr;
  CallerContexts() {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    getCurrent = reinterpret_cast<GetCurrent>(dlsym(h, "cuCtxGetCurrent"));
    setCurrent = reinterpret_cast<SetCurrent>(dlsym(h, "cuCtxSetCurrent"));
    create = reinterpret_cast<Create>(dlsym(h, "cuCtxCreate_v4"));
    destroy = reinterpret_cast<Destroy>(dlsym(h, "cuCtxDestroy_v2"));
  }
  void *current() const {
    void *c = nullptr;
    getCurrent(&c);
    return c;
  }
};

TEST(GpuRuntime, LaunchesOnTheCallersStream) {
  REQUIRE_GPU();
  Problem p;
  std::shared_ptr<GpuKernel> g = jitKernel(p.kernel, p.io());
  cuda::Stream stream;
  p.poison();
  g->launch(p.kernel.bind(p.io()), {.stream = stream.handle()});
  stream.synchronize();
  p.check();
}

// The driver's compile of a JIT kernel joins its disk entry: after the
// in-process caches are cleared (a new process, as far as kiln knows), the
// kernel loads from that image and still computes the reference's result.
TEST(GpuRuntime, LoadsTheDriversImageFromTheDiskCache) {
  REQUIRE_GPU();
  if (!DiskCache::fromEnvironment())
    GTEST_SKIP() << "SKIPPED: the disk cache is off";
  const char *saved = std::getenv("KILN_CACHE_SASS");
  const std::string previous = saved ? saved : "";
  ::setenv("KILN_CACHE_SASS", "1", 1); // opt-in
  Problem p;
  clearInProcessCompileCache();
  jitKernel(p.kernel, p.io()); // compiled or read, and loaded: image stored
  clearInProcessCompileCache();
  std::shared_ptr<GpuKernel> again = jitKernel(p.kernel, p.io());
  EXPECT_TRUE(again->loadedFromImage());
  EXPECT_FALSE(again->jitLog().empty()) << "the stored compile log";
  p.poison();
  again->launch(p.kernel.bind(p.io()));
  cuda::synchronize();
  p.check();
  clearInProcessCompileCache();
  if (saved)
    ::setenv("KILN_CACHE_SASS", previous.c_str(), 1);
  else
    ::unsetenv("KILN_CACHE_SASS");
}

TEST(GpuRuntime, CapturedInAGraphAndReplayed) {
  REQUIRE_GPU();
  Problem p;
  std::shared_ptr<GpuKernel> g = jitKernel(p.kernel, p.io());
  EXPECT_EQ(g->spec().tileCounter, cuda::device().arch() == "sm_90a")
      << "the default causal D=128 schedule hands out tiles dynamically";
  cuda::Stream stream;
  const std::vector<ArgValue> args = p.kernel.bind(p.io());
  p.poison();
  cuda::Graph graph = cuda::Graph::capture(
      stream, [&] { g->launch(args, {.stream = stream.handle()}); });
  EXPECT_EQ(graph.kernelNodes(), 1u);
  stream.synchronize();
  EXPECT_TRUE(p.untouched()) << "capturing ran the kernel";
  // Each replay from poisoned outputs: the tile counter is back at zero
  // after every one.
  for (int replay = 0; replay < 3; ++replay) {
    p.poison();
    graph.launch(stream.handle());
    stream.synchronize();
    p.check();
  }
}

TEST(GpuRuntime, OneKernelOnTwoStreamsAtOnce) {
  REQUIRE_GPU();
  Problem p;
  p.addOutputs("2");
  std::shared_ptr<GpuKernel> g = jitKernel(p.kernel, p.io());
  cuda::Stream a, b;
  const std::vector<ArgValue> argsA = p.kernel.bind(p.io()),
                              argsB = p.kernel.bind(p.io("2"));
  // Launches queued on both streams with no synchronisation between them:
  // with one counter for both, tiles would be taken twice or never.
  for (int round = 0; round < 4; ++round) {
    p.poison();
    p.poison("2");
    for (int i = 0; i < 3; ++i) {
      g->launch(argsA, {.stream = a.handle()});
      g->launch(argsB, {.stream = b.handle()});
    }
    a.synchronize();
    b.synchronize();
    p.check();
    p.check("2");
  }
}

TEST(GpuRuntime, LeavesTheCallersContextCurrent) {
  REQUIRE_GPU();
  CallerContexts driver;
  ASSERT_TRUE(driver.getCurrent && driver.setCurrent && driver.create &&
              driver.destroy);
  Problem p;
  std::shared_ptr<GpuKernel> g = jitKernel(p.kernel, p.io());
  const std::vector<ArgValue> args = p.kernel.bind(p.io());
  void *saved = driver.current();
  // No context at all, then a context of the caller's own on the device.
  ASSERT_EQ(driver.setCurrent(nullptr), 0);
  p.poison();
  g->launch(args);
  EXPECT_EQ(driver.current(), nullptr);
  cuda::synchronize();
  p.check();
  void *mine = nullptr;
  ASSERT_EQ(driver.create(&mine, nullptr, 0, 0), 0);
  ASSERT_EQ(driver.current(), mine);
  p.poison();
  g->launch(args, {.device = 0});
  cuda::Buffer scratch(256, 0);
  scratch.fill(0);
  EXPECT_EQ(driver.current(), mine) << "kiln changed the caller's context";
  driver.setCurrent(saved);
  cuda::synchronize();
  p.check();
  EXPECT_EQ(driver.destroy(mine), 0);
  driver.setCurrent(saved);
}

TEST(GpuRuntime, RefusesPointersTheDeviceCannotRead) {
  REQUIRE_GPU();
  Problem p;
  std::shared_ptr<GpuKernel> g = jitKernel(p.kernel, p.io());
  std::map<std::string, TensorRef> io = p.io();
  HostTensor host(DType::bf16, p.dims());
  io["O"].data = host.data();
  EXPECT_THAT(test::errorOf([&] { g->launch(p.kernel.bind(io)); }),
              HasSubstr("argument O is not device memory"));
  if (cuda::deviceCount() > 1) {
    cuda::Buffer other(p.buffers.at("O").size(), 1);
    io["O"].data = other.data();
    EXPECT_THAT(test::errorOf([&] { g->launch(p.kernel.bind(io)); }),
                HasSubstr("argument O is memory of device 1; the launch runs "
                          "on device 0"));
  }
  cuda::Stream stream(0);
  EXPECT_THAT(test::errorOf([&] {
                g->launch(p.kernel.bind(p.io()),
                          {.stream = stream.handle(), .device = 7});
              }),
              HasSubstr("the stream is on device 0, the launch asks for "
                        "device 7"));
}

TEST(GpuRuntime, RunsOnASecondGpu) {
  REQUIRE_GPU();
  if (cuda::deviceCount() < 2)
    GTEST_SKIP() << "SKIPPED: one GPU on this machine; the second-device "
                    "launch needs two";
  // Device 1's result against device 0's, each checked against the
  // reference (run on device 0 from device 0's copy of the inputs).
  Problem p0(0, 11), p1(1, 11);
  std::shared_ptr<GpuKernel> g = jitKernel(p0.kernel, p0.io());
  cuda::Stream s1(1);
  p1.poison();
  g->launch(p1.kernel.bind(p1.io()), {.stream = s1.handle()});
  s1.synchronize();
  p0.poison();
  g->launch(p0.kernel.bind(p0.io()));
  cuda::synchronize();
  p0.check();
  HostTensor o0(DType::bf16, p0.dims()), o1(DType::bf16, p0.dims());
  p0.buffers.at("O").download(o0.data(), o0.storageBytes());
  p1.buffers.at("O").download(o1.data(), o1.storageBytes());
  ErrorStats e = compareTensors(o1, o0);
  EXPECT_EQ(e.nonFinite, 0);
  EXPECT_EQ(e.maxAbs, 0) << "the same kernel on the same inputs";
}

} // namespace
