//===- GpuFusedOpsTest.cpp - rotary, cross-entropy, GEMM epilogue on GPU --===//
//
// The library's fused kernels the Python package and examples tune, each
// Config of their tuning spaces, on the GPU against fp64: rotary embedding
// (strided, ragged token counts), cross-entropy forward and backward (a
// ragged vocabulary, ignored labels, padded rows), the GEMM with bias and
// GELU (ragged M). Outputs poisoned before each launch. Skips without a GPU.
//
//===----------------------------------------------------------------------===//
#include "../unit/CodegenUtil.h"
#include "../unit/FusedOpsData.h"
#include "../unit/GemmColumnSums.h"
#include "../unit/TestUtil.h"
#include "DeviceTensors.h"

#include "kiln/kernels/CrossEntropy.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/kernels/Reference.h"
#include "kiln/kernels/Rotary.h"

#include <gtest/gtest.h>

using namespace kiln;
using test::DeviceTensors;
using test::runOnGpu;

TEST(GpuFusedOps, RotaryEveryConfig) {
  REQUIRE_GPU();
  for (auto [H, T, D, strided] :
       {std::tuple{32, 1001, 128, true}, std::tuple{8, 4096, 64, false}}) {
    for (bool inverse : {false, true})
      for (const kernels::RotaryConfig &c : kernels::rotaryConfigs()) {
        SCOPED_TRACE(c.name() + " T=" + std::to_string(T) +
                     (inverse ? " inverse" : ""));
        test::RotaryData d(H, T, D, 8192, strided, inverse);
        DeviceTensors dt;
        dt.add("X", d.x, false);
        dt.add("Pos", d.pos, false);
        dt.add("Cos", d.cos, false);
        dt.add("Sin", d.sin, false);
        dt.add("Y", d.y, true);
        runOnGpu(kernels::rotary(D, c, inverse), dt);
        dt.download("Y", d.y);
        d.check();
      }
  }
}

TEST(GpuFusedOps, CrossEntropyEveryConfig) {
  REQUIRE_GPU();
  for (auto [R, V, stride] :
       {std::tuple{37, 50257, 50264}, std::tuple{64, 32000, 32000}}) {
    for (const kernels::CrossEntropyConfig &c :
         kernels::crossEntropyConfigs()) {
      SCOPED_TRACE(c.name() + " V=" + std::to_string(V));
      test::CrossEntropyData d(R, V, stride);
      DeviceTensors dt;
      dt.add("X", d.x, false);
      dt.add("Labels", d.labels, false);
      dt.add("LSE", d.lse, true);
      dt.add("Loss", d.loss, true);
      runOnGpu(kernels::crossEntropyForward(c), dt);
      dt.download("LSE", d.lse);
      dt.download("Loss", d.loss);
      d.checkForward();
      for (bool perRow : {false, true}) {
        DeviceTensors bt;
        bt.add("X", d.x, false);
        bt.add("Labels", d.labels, false);
        bt.add("LSE", d.lse, false);
        bt.add("Scale", d.scale, false);
        if (perRow)
          bt.add("DLoss", d.dloss, false);
        bt.add("DX", d.dx, true);
        runOnGpu(kernels::crossEntropyBackward(c, -100, perRow), bt);
        bt.download("DX", d.dx);
        d.checkBackward(perRow);
      }
    }
  }
}

TEST(GpuFusedOps, GemmBiasGeluEveryConfig) {
  REQUIRE_GPU();
  const int64_t M = 333, N = 1024, K = 512;
  HostTensor a(DType::bf16, {M, K}), b(DType::bf16, {K, N}),
      bias(DType::bf16, {N}), c(DType::bf16, {M, N}), ref(DType::f32, {M, N});
  a.fillRandom(1);
  b.fillRandom(2);
  bias.fillRandom(3, -2, 2);
  kernels::gemmReference(a, b, ref, &bias, kernels::GemmActivation::GeluTanh);
  // And with a residual added, read in the accumulator's layout.
  HostTensor r(DType::bf16, {M, N}), refR(DType::f32, {M, N});
  r.fillRandom(4, -2, 2);
  kernels::gemmReference(a, b, refR, &bias, kernels::GemmActivation::GeluTanh,
                         &r);
  const int sm = cuda::device().major * 10;
  for (bool residual : {false, true})
    for (const auto &[name, config] : kernels::gemmConfigs(sm)) {
      SCOPED_TRACE(name + (residual ? " +residual" : ""));
      c.poison();
      DeviceTensors dt;
      dt.add("A", a, false);
      dt.add("B", b, false);
      dt.add("Bias", bias, false);
      if (residual)
        dt.add("R", r, false);
      dt.add("C", c, true);
      runOnGpu(kernels::gemm({1, 1, 1, DType::bf16, DType::bf16, true,
                              kernels::GemmActivation::GeluTanh, residual},
                             config),
               dt);
      dt.download("C", c);
      ErrorStats e = compareTensors(c, residual ? refR : ref);
      EXPECT_LE(e.relative, 1e-2); // bf16 output, tanh.approx
      EXPECT_EQ(e.nonFinite, 0);
    }
}

// The weight as nn.Linear stores it, BT (N x K), read as stored: every
// Config, against fp64 on its transpose; N = 1000 (C's rows aligned) and
// 1001 (C's rows not: st.global), BT's rows (K = 512) aligned in both.
TEST(GpuFusedOps, GemmTransposedWeightEveryConfig) {
  REQUIRE_GPU();
  const int64_t M = 333, K = 512;
  const int sm = cuda::device().major * 10;
  for (int64_t N : {1000, 1001}) {
    HostTensor a(DType::bf16, {M, K}), bt(DType::bf16, {N, K}),
        bias(DType::bf16, {N}), c(DType::bf16, {M, N}), ref(DType::f32, {M, N});
    a.fillRandom(uint64_t(N));
    bt.fillRandom(uint64_t(N) + 1);
    bias.fillRandom(uint64_t(N) + 2, -2, 2);
    kernels::gemmReference(a, kernels::transposeMatrix(bt), ref, &bias,
                           kernels::GemmActivation::GeluTanh);
    for (const auto &[name, config] : kernels::gemmConfigs(sm)) {
      SCOPED_TRACE(name + " N=" + std::to_string(N));
      c.poison();
      DeviceTensors dt;
      dt.add("A", a, false);
      dt.add("BT", bt, false);
      dt.add("Bias", bias, false);
      dt.add("C", c, true);
      kernels::GemmShape s{1, 1, 1, DType::bf16, DType::bf16, true,
                           kernels::GemmActivation::GeluTanh};
      s.bTransposed = true;
      runOnGpu(kernels::gemm(s, config), dt);
      dt.download("C", c);
      ErrorStats e = compareTensors(c, ref);
      EXPECT_LE(e.relative, 1e-2); // bf16 output, tanh.approx
      EXPECT_EQ(e.nonFinite, 0);
    }
  }
}

// The backward's GEMMs: A given as AT (K x M, a weight gradient's X^T) by
// every Config, and a forward writing Z (the pre-activation) beside C;
// M = 333 (AT's rows of 333 elements are not 16-byte aligned: its loads
// take their other path) and 336, against fp64.
TEST(GpuFusedOps, GemmTransposedInputAndPreActivationEveryConfig) {
  REQUIRE_GPU();
  const int64_t N = 1000, K = 512;
  const int sm = cuda::device().major * 10;
  for (int64_t M : {333, 336}) {
    HostTensor at(DType::bf16, {K, M}), b(DType::bf16, {K, N}),
        bias(DType::bf16, {N}), c(DType::bf16, {M, N}), z(DType::bf16, {M, N}),
        cRef(DType::f32, {M, N}), zRef(DType::f32, {M, N});
    at.fillRandom(uint64_t(M));
    b.fillRandom(uint64_t(M) + 1);
    bias.fillRandom(uint64_t(M) + 2, -2, 2);
    const HostTensor a = kernels::transposeMatrix(at);
    kernels::gemmReference(a, b, cRef, &bias,
                           kernels::GemmActivation::GeluTanh);
    kernels::gemmReference(a, b, zRef, &bias);
    for (const auto &[name, config] : kernels::gemmConfigs(sm)) {
      SCOPED_TRACE(name + " M=" + std::to_string(M));
      c.poison();
      z.poison();
      DeviceTensors dt;
      dt.add("AT", at, false);
      dt.add("B", b, false);
      dt.add("Bias", bias, false);
      dt.add("C", c, true);
      dt.add("Z", z, true);
      kernels::GemmShape s{1,
                           1,
                           1,
                           DType::bf16,
                           DType::bf16,
                           true,
                           kernels::GemmActivation::GeluTanh};
      s.aTransposed = s.preActivation = true;
      runOnGpu(kernels::gemm(s, config), dt);
      dt.download("C", c);
      dt.download("Z", z);
      for (auto [out, ref] : {std::pair{&c, &cRef}, std::pair{&z, &zRef}}) {
        ErrorStats e = compareTensors(*out, *ref);
        EXPECT_LE(e.relative, 1e-2);
        EXPECT_EQ(e.nonFinite, 0);
      }
    }
  }
}

// Split-K by every Config: K = 8000 in 3 ranges added into an fp32 C that
// starts from random values the sums must keep (TMA reductions where C's rows
// allow, else red.global), M = 333 ragged, A as AT (a weight gradient's
// layout), against fp64. C is an input here: poisoning it would add into NaN.
TEST(GpuFusedOps, GemmSplitKEveryConfig) {
  REQUIRE_GPU();
  const int64_t M = 333, N = 512, K = 8000;
  const int sm = cuda::device().major * 10;
  HostTensor at(DType::bf16, {K, M}), b(DType::bf16, {K, N}),
      start(DType::f32, {M, N}), ref(DType::f32, {M, N});
  at.fillRandom(31);
  b.fillRandom(32);
  start.fillRandom(33, -4, 4);
  kernels::gemmReference(kernels::transposeMatrix(at), b, ref);
  for (int64_t i = 0; i < M * N; ++i)
    ref.flatSet(i, ref.flatAt(i) + start.flatAt(i));
  for (const auto &[name, base] : kernels::gemmConfigs(sm)) {
    SCOPED_TRACE(name);
    kernels::GemmConfig config = base;
    config.splitK = 3;
    HostTensor c = start;
    DeviceTensors dt;
    dt.add("AT", at, false);
    dt.add("B", b, false);
    dt.add("C", c, false);
    kernels::GemmShape s{1, 1, 1, DType::bf16, DType::f32};
    s.aTransposed = true;
    runOnGpu(kernels::gemm(s, config), dt);
    c.poison();
    dt.download("C", c);
    ErrorStats e = compareTensors(c, ref);
    EXPECT_LE(e.relative, 1e-3);
    EXPECT_EQ(e.nonFinite, 0);
  }
}

// Split-K partials (kiln.linear's weight gradients): each range's product
// into its own slice of a poisoned C (S, M, N), for every Config kiln.linear
// tunes them over; their sum against fp64, M = 333 ragged, A as AT.
TEST(GpuFusedOps, GemmSplitPartialsEveryConfig) {
  REQUIRE_GPU();
  const int64_t M = 333, N = 512, K = 8000, S = 3;
  const int sm = cuda::device().major * 10;
  HostTensor at(DType::bf16, {K, M}), b(DType::bf16, {K, N}),
      ref(DType::f32, {M, N});
  at.fillRandom(41);
  b.fillRandom(42);
  kernels::gemmReference(kernels::transposeMatrix(at), b, ref);
  for (const auto &[name, base] : kernels::gemmConfigs(sm)) {
    if (base.persistent)
      continue;
    SCOPED_TRACE(name);
    kernels::GemmConfig config = base;
    config.splitK = S;
    HostTensor parts(DType::f32, {S, M, N}), sum(DType::f32, {M, N});
    parts.poison();
    DeviceTensors dt;
    dt.add("AT", at, false);
    dt.add("B", b, false);
    dt.add("C", parts, true);
    kernels::GemmShape s{1, 1, 1, DType::bf16, DType::f32};
    s.aTransposed = s.splitPartials = true;
    runOnGpu(kernels::gemm(s, config), dt);
    dt.download("C", parts);
    for (int64_t i = 0; i < M * N; ++i)
      sum.flatSet(i, parts.flatAt(i) + parts.flatAt(M * N + i) +
                         parts.flatAt(2 * M * N + i));
    ErrorStats e = compareTensors(sum, ref);
    EXPECT_LE(e.relative, 1e-3);
    EXPECT_EQ(e.nonFinite, 0);
  }
}

// Persistent CTAs over more tiles than SMs (352 at 4000x2576), C through a
// TMA staging tile and column sums through the scratch area: with 3 stages
// every buffer lives across tiles; with 4 the staging tile and the scratch
// take the stage ring's bytes and the producer waits for each tile's end
// (the report says so). Fixed rounds and dynamic tiles; C and S against
// fp64, S starting from values the sums must keep.
TEST(GpuFusedOps, PersistentEpilogueSharesTheRing) {
  REQUIRE_GPU();
  if (cuda::device().arch() != "sm_90a")
    GTEST_SKIP() << "wgmma, TMA and a producer warpgroup need sm_90a";
  // Ragged M and N; K and N in the size class the TMA path needs (div16).
  const int64_t M = 4000, N = 2576, K = 256;
  HostTensor a(DType::bf16, {M, K}), b(DType::bf16, {K, N}),
      c(DType::bf16, {M, N}), s(DType::f32, {N}), ref(DType::f32, {M, N}),
      refS(DType::f32, {N});
  a.fillRandom(11);
  b.fillRandom(12);
  kernels::gemmReference(a, b, ref);
  for (int stages : {3, 4})
    for (bool dynamic : {false, true}) {
      SCOPED_TRACE(std::to_string(stages) + " stages" +
                   (dynamic ? ", dynamic tiles" : ""));
      s.fillRandom(13 + stages, -10, 10);
      for (int64_t n = 0; n < N; ++n) {
        double sum = s.flatAt(n);
        for (int64_t m = 0; m < M; ++m)
          sum += ref.flatAt(m * N + n);
        refS.flatSet(n, sum);
      }
      DeviceTensors dt;
      dt.add("A", a, false);
      dt.add("B", b, false);
      dt.add("C", c, true);
      dt.add("S", s, false); // its initial values are part of the result
      CompiledKernel k = runOnGpu(
          test::gemmWithColumnSums(true, true, true, stages, dynamic), dt);
      const std::string report = test::reportOf(k);
      EXPECT_EQ(report.find("placed by liveness within the tile") !=
                    std::string::npos,
                stages == 4)
          << report;
      EXPECT_NE(report.find("store 128x256: TMA"), std::string::npos) << report;
      dt.download("C", c);
      dt.download("S", s);
      ErrorStats e = compareTensors(c, ref);
      EXPECT_LE(e.relative, 1e-2); // bf16 output
      EXPECT_EQ(e.nonFinite, 0);
      ErrorStats es = compareTensors(s, refS);
      EXPECT_LE(es.relative, 1e-5);
      EXPECT_EQ(es.nonFinite, 0);
    }
}

// The dead-row skip on a kernel of no library's: at M = 4000 the last 128-row
// block holds 32 rows, so its second warpgroup runs only the K loop's
// pipeline (waits, releases) while the first computes; C against fp64 on
// fresh inputs, poisoned before the launch, with and without persistent CTAs
// and TMA stores.
TEST(GpuFusedOps, GemmWarpgroupPastMSkipsItsWork) {
  REQUIRE_GPU();
  if (cuda::device().arch() != "sm_90a")
    GTEST_SKIP() << "wgmma, TMA and a producer warpgroup need sm_90a";
  const int64_t M = 4000, N = 512, K = 320;
  HostTensor a(DType::bf16, {M, K}), b(DType::bf16, {K, N}),
      c(DType::bf16, {M, N}), s(DType::f32, {N}), ref(DType::f32, {M, N});
  a.fillRandom(21);
  b.fillRandom(22);
  kernels::gemmReference(a, b, ref);
  for (bool persistent : {false, true})
    for (bool tmaStore : {false, true}) {
      SCOPED_TRACE(std::string(persistent ? "persistent" : "a CTA a tile") +
                   (tmaStore ? ", TMA store" : ""));
      DeviceTensors dt;
      dt.add("A", a, false);
      dt.add("B", b, false);
      dt.add("C", c, true);
      dt.add("S", s, true); // not written without column sums
      CompiledKernel k =
          runOnGpu(test::gemmWithColumnSums(false, tmaStore, persistent), dt);
      const std::string report = test::reportOf(k);
      EXPECT_NE(report.find("rows all fall outside what the stores to C "
                            "keep"),
                std::string::npos)
          << report;
      dt.download("C", c);
      ErrorStats e = compareTensors(c, ref);
      EXPECT_LE(e.relative, 1e-2); // bf16 output
      EXPECT_EQ(e.nonFinite, 0);
    }
}
