//===- GpuReferenceTest.cpp - the Driver API runtime and the NVRTC reference
//===//
//
// GPU tests skip, saying why, where there is no GPU. The NVRTC test needs no
// GPU: it compiles the reference kernels to PTX and, where ptxas is on the
// PATH, assembles that PTX.
//
//===----------------------------------------------------------------------===//
#include "../unit/TestUtil.h"

#include "kiln/Reference/CpuExecutor.h"
#include "kiln/kernels/GpuReference.h"
#include "kiln/kernels/Reference.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Nvrtc.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

using namespace kiln;
using ::testing::HasSubstr;

TEST(Nvrtc, CompilesAndAssemblesTheReferenceKernels) {
  std::string why;
  if (!nvrtc::available(&why))
    GTEST_SKIP() << "SKIPPED: no NVRTC: " << why;
  for (const char *arch : {"sm_80", "sm_90a"}) {
    std::string ptx = nvrtc::compileToPtx(kernels::gpuReferenceSource(),
                                          "attention_reference.cu", arch);
    EXPECT_THAT(ptx, HasSubstr(".entry attention_reference"));
    EXPECT_THAT(ptx, HasSubstr(std::string(".target ") + arch));
    if (std::system("command -v ptxas > /dev/null 2>&1") != 0) {
      std::printf("ptxas not on PATH: PTX not assembled\n");
      continue;
    }
    std::string path = ::testing::TempDir() + "kiln_ref_" + arch + ".ptx";
    std::ofstream(path) << ptx;
    std::string cmd =
        "ptxas -arch=" + std::string(arch) + " " + path + " -o /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  EXPECT_THAT(test::errorOf([] {
                nvrtc::compileToPtx("__global__ void f() { undeclared(); }",
                                    "bad.cu", "sm_80");
              }),
              HasSubstr("undeclared"));
}

TEST(Gpu, RuntimeBasics) {
  REQUIRE_GPU();
  const cuda::DeviceInfo &d = cuda::device();
  std::printf("device %s, %s, %d SMs, %d KB shared memory per block "
              "(opt-in), %.0f GB/s DRAM\n",
              d.name.c_str(), d.arch().c_str(), d.smCount,
              d.maxSharedPerBlockOptin / 1024, d.memoryBandwidth / 1e9);
  EXPECT_GT(d.smCount, 0);
  // Decoding's default tiles at D=128 read it (launchConfig): a GPU's DRAM
  // between 100 GB/s and 100 TB/s (the H100 SXM reads 3352).
  EXPECT_GT(d.memoryBandwidth, 1e11);
  EXPECT_LT(d.memoryBandwidth, 1e14);
  cuda::Buffer buf(1024);
  std::vector<uint8_t> host(1024), back(1024);
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = uint8_t(i * 7 + 1);
  buf.upload(host.data(), host.size());
  buf.download(back.data(), back.size());
  EXPECT_EQ(host, back);
  buf.fill(0xFF);
  buf.download(back.data(), back.size());
  EXPECT_EQ(back, std::vector<uint8_t>(1024, 0xFF));
  EXPECT_THAT(test::errorOf([&] { buf.upload(host.data(), 16, 1020); }),
              HasSubstr("overrun a buffer of 1024"));
  // A bad module names the call, the CUresult and carries the JIT log.
  std::string msg = test::errorOf([] {
    cuda::Module::fromPtx(".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry f() { bogus; }\n");
  });
  EXPECT_THAT(msg,
              HasSubstr("cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX"));
  EXPECT_THAT(msg, HasSubstr("JIT error log:"));
}

namespace {
struct Case {
  int64_t B, H, N, D;
  bool causal;
  DType dtype;
  bool bshd;
};

HostTensor bhnd(DType t, const Case &c, bool rand, uint64_t seed) {
  HostTensor x = c.bshd ? HostTensor(t, {c.B, c.H, c.N, c.D},
                                     {c.N * c.H * c.D, c.D, c.H * c.D, 1})
                        : HostTensor(t, {c.B, c.H, c.N, c.D});
  if (rand)
    x.fillRandom(seed, -2, 2);
  return x;
}

TensorRef onDevice(HostTensor &h, cuda::Buffer &buf) {
  buf = cuda::Buffer(h.storageBytes());
  buf.upload(h.data(), h.storageBytes());
  TensorRef r = h.ref();
  r.data = buf.data();
  return r;
}
} // namespace

// The GPU reference agrees with the fp64 host reference: it is fit to check
// kiln's GPU kernels at sizes the host reference is too slow for.
TEST(Gpu, ReferenceAttentionMatchesFp64) {
  REQUIRE_GPU();
  for (const Case &c : {Case{1, 2, 1, 64, false, DType::bf16, false},
                        Case{2, 3, 257, 64, true, DType::f16, true},
                        Case{1, 2, 1000, 128, false, DType::bf16, false},
                        Case{1, 1, 1000, 128, true, DType::f32, true}}) {
    kernels::AttentionShape s{c.B, c.H, c.N, c.N, c.D, c.causal, c.dtype, 0};
    HostTensor q = bhnd(c.dtype, c, true, 11 + c.N),
               k = bhnd(c.dtype, c, true, 12 + c.N),
               v = bhnd(c.dtype, c, true, 13 + c.N);
    HostTensor o(DType::f32, {c.B, c.H, c.N, c.D}),
        lse(DType::f32, {c.B, c.H, c.N});
    HostTensor oRef(DType::f32, o.shape()), lseRef(DType::f32, lse.shape());
    cuda::Buffer bq, bk, bv, bo(o.storageBytes()), bl(lse.storageBytes());
    bo.fill(0xFF); // NaN poison
    bl.fill(0xFF);
    kernels::attentionReferenceGpu(s, onDevice(q, bq), onDevice(k, bk),
                                   onDevice(v, bv), bo.data(), bl.data());
    bo.download(o.data(), o.storageBytes());
    bl.download(lse.data(), lse.storageBytes());
    kernels::attentionReference(s, q, k, v, oRef, lseRef);
    ErrorStats eo = compareTensors(o, oRef), el = compareTensors(lse, lseRef);
    EXPECT_LE(eo.relative, 1e-5) << "N=" << c.N << " max abs " << eo.maxAbs;
    EXPECT_LE(el.relative, 1e-6) << "N=" << c.N;
  }
}

// kiln's attention on the CPU executor against the GPU reference.
TEST(Gpu, CpuExecutorAgreesWithGpuReference) {
  REQUIRE_GPU();
  Case c{1, 2, 300, 64, true, DType::bf16, false};
  kernels::AttentionShape s{c.B, c.H, c.N, c.N, c.D, c.causal, c.dtype, 0};
  HostTensor q = bhnd(c.dtype, c, true, 1), k = bhnd(c.dtype, c, true, 2),
             v = bhnd(c.dtype, c, true, 3), o = bhnd(c.dtype, c, false, 0);
  HostTensor lse(DType::f32, {c.B, c.H, c.N});
  o.poison();
  lse.poison();
  Kernel kernel = kernels::attentionForward(s);
  runOnCpu(kernel, kernel.bind({{"Q", q.ref()},
                                {"K", k.ref()},
                                {"V", v.ref()},
                                {"O", o.ref()},
                                {"LSE", lse.ref()}}));
  HostTensor oGpu(DType::f32, o.shape()), lseGpu(DType::f32, lse.shape());
  cuda::Buffer bq, bk, bv, bo(oGpu.storageBytes()), bl(lseGpu.storageBytes());
  kernels::attentionReferenceGpu(s, onDevice(q, bq), onDevice(k, bk),
                                 onDevice(v, bv), bo.data(), bl.data());
  bo.download(oGpu.data(), oGpu.storageBytes());
  bl.download(lseGpu.data(), lseGpu.storageBytes());
  EXPECT_LE(compareTensors(o, oGpu).relative, 1e-2);
  EXPECT_LE(compareTensors(lse, lseGpu).relative, 1e-5);
}
