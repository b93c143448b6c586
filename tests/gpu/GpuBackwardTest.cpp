//===- GpuBackwardTest.cpp - attention backward on the GPU vs fp64 --------===//
//
// The backward's three kernels on the GPU (the default schedule: wgmma and
// TMA on sm_90a) against the fp64 reference: bf16 and fp16, D 64 and 128,
// causal and not, ragged N, Nq != Nk, B·H > 1, both layouts; fresh random
// inputs, gradients and the workspace poisoned before every launch. Also: the
// gradients are the same bit for bit on every run, and one compile serves
// every length. Skips, saying why, without a GPU.
//
//===----------------------------------------------------------------------===//
#include "../unit/AttentionBackwardCase.h"
#include "../unit/TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Launch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

using namespace kiln;
using test::BackwardCase;
using test::BackwardTensors;

namespace {

/// The problem's tensors in device memory; the outputs poisoned (0xFF, NaN)
/// before each run.
struct OnDevice {
  BackwardTensors &host;
  std::map<std::string, cuda::Buffer> buffers;
  std::map<std::string, TensorRef> refs;

  explicit OnDevice(BackwardTensors &t) : host(t) {
    for (auto &[name, h] : t.byName()) {
      cuda::Buffer &b = buffers[name] = cuda::Buffer(h->storageBytes());
      b.upload(h->data(), h->storageBytes());
      refs[name] = h->ref();
      refs[name].data = b.data();
    }
  }
  /// Poisons the workspace and the gradients, launches the kernels, and
  /// downloads the gradients into the host tensors. Returns the dK/dV
  /// kernel's lowering report.
  std::string run(const kernels::AttentionBackwardKernels &ks) {
    for (auto &[name, w] : host.workspace)
      buffers.at(name).fill(0xFF);
    for (const char *out : {"dQ", "dK", "dV"})
      buffers.at(out).fill(0xFF);
    std::string report;
    for (const Kernel &k : ks) {
      auto mine = k.tensorsIn(refs);
      std::shared_ptr<GpuKernel> g = jitKernel(k, mine);
      g->launch(k.bind(mine));
      if (k.name() == "attention_bwd_dkdv")
        for (const std::string &line : g->spec().report)
          report += line + "\n";
    }
    cuda::synchronize();
    for (auto [name, t] :
         {std::pair{"dQ", &host.dq}, {"dK", &host.dk}, {"dV", &host.dv}})
      buffers.at(name).download(t->data(), t->storageBytes());
    return report;
  }
};

class BackwardOnGpu : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(BackwardOnGpu, MatchesFp64Reference) {
  REQUIRE_GPU();
  const BackwardCase &c = GetParam();
  BackwardTensors t(c);
  OnDevice dev(t);
  std::string report =
      dev.run(kernels::attentionBackward(c.shape(), c.config()));
  if (cuda::device().arch() == "sm_90a") {
    // Q and dO stream through TMA; every dot on wgmma (a dot's line reads
    // "DkDvKernel.cpp:N: dot MxNxK: wgmma ..."; other lines may name dots).
    EXPECT_THAT(report, ::testing::HasSubstr(": TMA (cp.async.bulk.tensor"))
        << report;
    EXPECT_EQ(test::countOf(report, ": wgmma"), test::countOf(report, ": dot "))
        << report;
  }
  t.expectGradientsMatch(c);
}

constexpr DType bf16 = DType::bf16, f16 = DType::f16;

INSTANTIATE_TEST_SUITE_P(
    Shapes, BackwardOnGpu,
    ::testing::Values(
        BackwardCase{2, 3, 1000, 1000, 64, false, bf16},
        BackwardCase{2, 3, 1000, 1000, 64, true, bf16},
        BackwardCase{1, 2, 1023, 1023, 128, true, bf16},
        BackwardCase{1, 2, 768, 768, 128, false, f16},
        BackwardCase{1, 2, 700, 1100, 128, false, bf16},
        BackwardCase{2, 2, 513, 257, 64, true, f16, true},
        BackwardCase{1, 3, 300, 700, 128, true, bf16, true},
        BackwardCase{1, 1, 1, 1, 128, false, bf16},
        // B·H past the GPU's 65535 grid y (delta and dq_convert fold it).
        BackwardCase{4100, 16, 9, 9, 64, false, bf16},
        BackwardCase{1, 2, 384, 384, 128, true, f16, false, 1},
        // Both ways to dQ, whichever is the default.
        BackwardCase{2, 3, 1000, 1000, 64, true, bf16, false, -1, 0},
        BackwardCase{1, 2, 700, 1100, 128, false, f16, true, -1, 0},
        BackwardCase{1, 3, 300, 700, 128, true, bf16, false, -1, 1},
        BackwardCase{1, 2, 1000, 1000, 128, false, bf16, false, -1, 1},
        BackwardCase{1, 2, 1023, 1023, 128, true, bf16, false, 1, 0},
        // dK/dV on persistent CTAs (K and V by the producer's TMA; the
        // default for causal D=64 with two warpgroups at every length since
        // session 41, past 4096 keys below) and not.
        BackwardCase{2, 3, 1000, 1000, 64, true, bf16, false, -1, -1, 0},
        BackwardCase{1, 3, 700, 1100, 128, false, f16, false, -1, -1, 1},
        BackwardCase{1, 2, 4100, 4100, 64, true, bf16},
        // Causal key blocks longest first in groups of 4 of 6 heads (the
        // last group holds 2), and in the grid's order.
        BackwardCase{2, 3, 1000, 1000, 128, true, bf16, false, -1, -1, -1, -1,
                     4},
        BackwardCase{2, 3, 1000, 1000, 64, true, bf16, false, -1, -1, 0, 0},
        // The scores as S = Q·Kᵀ in 128x128 steps (the default at D=64 but
        // for causal below 2048 keys) and as Sᵀ, each where the other is
        // the default; with a transposed layout, Nq != Nk, D=128, and dQ by
        // its own kernel.
        BackwardCase{2, 3, 1000, 1000, 64, true, bf16, false, -1, -1, -1, -1, 0,
                     1},
        BackwardCase{2, 2, 513, 257, 64, true, f16, true, -1, -1, -1, -1, 0, 1},
        BackwardCase{2, 3, 1000, 1000, 64, false, bf16, false, -1, -1, -1, -1,
                     0, 0},
        BackwardCase{1, 2, 700, 1100, 128, false, bf16, false, -1, -1, -1, -1,
                     0, 1},
        BackwardCase{1, 2, 300, 700, 64, true, bf16, false, -1, 1, -1, -1, 0,
                     1},
        // Grouped heads: each K/V head's dK/dV summed over its query heads
        // (8 per K/V head, or 3), causal or not, D=64 and 128, bshd, dQ by
        // atomics and by its own kernel.
        BackwardCase{.B = 2,
                     .H = 8,
                     .Nq = 1000,
                     .Nk = 1000,
                     .D = 64,
                     .causal = true,
                     .dtype = bf16,
                     .kvHeads = 1},
        BackwardCase{.B = 1,
                     .H = 6,
                     .Nq = 1023,
                     .Nk = 1023,
                     .D = 128,
                     .causal = true,
                     .dtype = bf16,
                     .bshd = true,
                     .kvHeads = 2},
        BackwardCase{.B = 2,
                     .H = 4,
                     .Nq = 700,
                     .Nk = 1100,
                     .D = 128,
                     .causal = false,
                     .dtype = f16,
                     .kvHeads = 2},
        BackwardCase{.B = 1,
                     .H = 6,
                     .Nq = 1000,
                     .Nk = 1000,
                     .D = 64,
                     .causal = false,
                     .dtype = bf16,
                     .deterministic = 1,
                     .kvHeads = 2}),
    [](const auto &info) { return info.param.name(); });

// The deterministic mode (no atomics): two runs give the same gradients,
// bit for bit.
TEST(BackwardOnGpu, GradientsAreBitwiseRepeatable) {
  REQUIRE_GPU();
  BackwardCase c{2, 4, 1500, 1500, 128, true, bf16, false, -1, 1};
  BackwardTensors t(c);
  OnDevice dev(t);
  auto ks = kernels::attentionBackward(c.shape(), c.config());
  dev.run(ks);
  std::vector<HostTensor> first{t.dq, t.dk, t.dv};
  dev.run(ks);
  const HostTensor *second[] = {&t.dq, &t.dk, &t.dv};
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(std::memcmp(first[i].data(), second[i]->data(),
                          first[i].storageBytes()),
              0)
        << "gradient " << i << " differs between two runs";
  t.expectGradientsMatch(c);
}

// dQ converted by each head's last dK/dV program (kiln::dsl::arrive) rather
// than a kernel of its own: on persistent CTAs (D=128 non-causal), one-
// program CTAs (D=64) and causal grids, ragged lengths, Nq != Nk, both
// layouts. Against fp64, the workspace and gradients poisoned.
TEST(BackwardOnGpu, LastProgramOfEachHeadConvertsDq) {
  REQUIRE_GPU();
  for (BackwardCase c : {BackwardCase{2, 3, 1000, 1000, 128, false, bf16},
                         BackwardCase{1, 2, 700, 1100, 128, true, bf16},
                         BackwardCase{2, 3, 1001, 1001, 64, false, bf16},
                         BackwardCase{2, 2, 513, 257, 64, true, f16, true}}) {
    SCOPED_TRACE(c.name());
    BackwardTensors t(c);
    OnDevice dev(t);
    kernels::AttentionBackwardConfig config = c.config();
    config.convertDqLast = 1;
    kernels::AttentionBackwardKernels ks =
        kernels::attentionBackward(c.shape(), config);
    ASSERT_EQ(ks.size(), 2u); // no dq_convert
    dev.run(ks);
    t.expectGradientsMatch(c);
  }
}

// dq_convert launched to overlap the dK/dV kernel, each head converted once
// its dK/dV programs have arrived (made one program late on persistent
// CTAs): D=128 and D=64 non-causal (persistent), causal, ragged lengths,
// Nq != Nk, both layouts. Against fp64, the workspace and gradients
// poisoned, the three kernels back to back.
TEST(BackwardOnGpu, DqConvertOverlapsTheDkDvKernel) {
  REQUIRE_GPU();
  for (BackwardCase c : {BackwardCase{2, 3, 1000, 1000, 128, false, bf16},
                         BackwardCase{1, 2, 700, 1100, 128, true, bf16},
                         BackwardCase{2, 3, 1001, 1001, 64, false, bf16},
                         BackwardCase{2, 2, 513, 257, 64, true, f16, true},
                         BackwardCase{3, 4, 2048, 2048, 64, false, bf16}}) {
    SCOPED_TRACE(c.name());
    BackwardTensors t(c);
    OnDevice dev(t);
    kernels::AttentionBackwardConfig config = c.config();
    config.overlapDqConvert = 1;
    kernels::AttentionBackwardKernels ks =
        kernels::attentionBackward(c.shape(), config);
    ASSERT_EQ(ks.size(), 3u);
    dev.run(ks);
    t.expectGradientsMatch(c);
  }
}

// Run-time shapes: one compile of each kernel serves N = 1000, 1001, 1003.
TEST(BackwardOnGpu, OneCompileServesRaggedLengths) {
  REQUIRE_GPU();
  const CompileCacheStats before = compileCacheStats();
  size_t kernelCount = 0;
  for (int64_t n : {1000, 1001, 1003}) {
    BackwardCase c{1, 2, n, n, 64, true, bf16};
    SCOPED_TRACE(c.name());
    BackwardTensors t(c);
    OnDevice dev(t);
    kernels::AttentionBackwardKernels ks =
        kernels::attentionBackward(c.shape());
    kernelCount = ks.size();
    dev.run(ks);
    t.expectGradientsMatch(c);
  }
  const CompileCacheStats after = compileCacheStats();
  EXPECT_EQ((after.misses - before.misses) + (after.diskHits - before.diskHits),
            int64_t(kernelCount))
      << "one compile (or disk read) per kernel for the three lengths";
}

} // namespace
