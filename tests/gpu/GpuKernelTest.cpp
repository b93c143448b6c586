//===- GpuKernelTest.cpp - compiled kernels on the GPU vs references ------===//
//
// GEMM, softmax, run-time arguments and grids, math, atomics, gathers and
// integer ops against fp64 host references (GpuAttentionTest.cpp:
// attention's). Fresh random inputs per case, outputs poisoned with NaN on
// the device before the launch, every element compared. Skips, saying why,
// without a GPU.
//
//===----------------------------------------------------------------------===//
#include "../unit/AtomicKernels.h"
#include "../unit/CodegenUtil.h"
#include "../unit/GatherKernels.h"
#include "../unit/IntegerKernel.h"
#include "../unit/MathKernel.h"
#include "../unit/RowSumKernel.h"
#include "../unit/TestUtil.h"
#include "DeviceTensors.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/kernels/GpuReference.h"
#include "kiln/kernels/Reference.h"
#include "kiln/runtime/Cuda.h"
#include "kiln/runtime/Launch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

using namespace kiln;
using test::DeviceTensors;
using test::runOnGpu;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

constexpr DType bf16 = DType::bf16, f16 = DType::f16;

// The epilogue (bias row, then ReLU or GELU in its tanh form on
// tanh.approx) under mma.sync and under wgmma with a producer warpgroup, on
// ragged shapes.
TEST(GpuKernels, GemmEpilogueMatchesFp64) {
  REQUIRE_GPU();
  for (auto act :
       {kernels::GemmActivation::Relu, kernels::GemmActivation::GeluTanh})
    for (bool wgmma : {false, true}) {
      if (wgmma && cuda::device().arch() != "sm_90a")
        continue;
      kernels::GemmConfig config;
      if (wgmma)
        config = {.blockM = 128,
                  .blockN = 256,
                  .blockK = 64,
                  .warps = 8,
                  .wgmma = true,
                  .warpSpecialize = true};
      const int64_t M = 513, N = 700, K = 136;
      Kernel k = kernels::gemm({M, N, K, bf16, DType::f32, true, act}, config);
      HostTensor a(bf16, {M, K}), b(bf16, {K, N}), bias(bf16, {N}),
          c(DType::f32, {M, N}), ref(DType::f32, {M, N});
      a.fillRandom(5);
      b.fillRandom(6);
      bias.fillRandom(7, -4, 4);
      DeviceTensors dt;
      dt.add("A", a, false);
      dt.add("B", b, false);
      dt.add("Bias", bias, false);
      dt.add("C", c, true);
      runOnGpu(k, dt);
      dt.download("C", c);
      kernels::gemmReference(a, b, ref, &bias, act);
      ErrorStats e = compareTensors(c, ref);
      EXPECT_EQ(e.nonFinite, 0);
      EXPECT_LE(e.relative, act == kernels::GemmActivation::Relu ? 1e-5 : 5e-3)
          << kernels::gemmActivationName(act) << (wgmma ? " wgmma" : "");
    }
}

TEST(GpuKernels, GemmMatchesFp64) {
  REQUIRE_GPU();
  for (auto [M, N, K, t] :
       {std::tuple{64, 64, 32, bf16}, std::tuple{100, 70, 33, f16},
        std::tuple{513, 257, 129, bf16}, std::tuple{2000, 1544, 136, bf16}}) {
    // mma.sync; wgmma with cp.async; with TMA; with a producer warpgroup;
    // and persistent CTAs (208 output tiles on 132 SMs at 2000x1544); wgmma
    // in groups of 3 row blocks, persistent in groups of 8; 64x64 tiles on
    // two warpgroups, 32 columns each of the N-major B (m64n32k16, the
    // second's descriptor 64 bytes into B's swizzled rows)
    for (int path : {0, 1, 2, 3, 4, 5}) {
      bool wgmma = path > 0;
      if (wgmma && cuda::device().arch() != "sm_90a")
        continue;
      kernels::GemmConfig config;
      if (wgmma)
        config = {.blockM = 128,
                  .blockN = 128,
                  .blockK = 64,
                  .warps = 8,
                  .wgmma = true,
                  .tma = path >= 2,
                  .warpSpecialize = path >= 3,
                  .persistent = path == 4,
                  .groupM = path == 4 ? 8 : 3};
      if (path == 5)
        config = {.blockM = 64,
                  .blockN = 64,
                  .blockK = 64,
                  .warps = 8,
                  .wgmma = true,
                  .tma = true};
      Kernel k = kernels::gemm({M, N, K, t, DType::f32}, config);
      HostTensor a(t, {M, K}), b(t, {K, N}), c(DType::f32, {M, N}),
          ref(DType::f32, {M, N});
      a.fillRandom(M + K);
      b.fillRandom(N + K);
      DeviceTensors dt;
      dt.add("A", a, false);
      dt.add("B", b, false);
      dt.add("C", c, true);
      CompiledKernel compiled = runOnGpu(k, dt);
      if (path == 5) {
        std::string report;
        for (const std::string &line : compiled.report)
          report += line + "\n";
        EXPECT_THAT(report, HasSubstr("wgmma m64n32k16")) << report;
      }
      dt.download("C", c);
      kernels::gemmReference(a, b, ref);
      ErrorStats e = compareTensors(c, ref);
      EXPECT_EQ(e.nonFinite, 0);
      EXPECT_LE(e.relative, 1e-5)
          << M << "x" << N << "x" << K << " path " << path;
    }
  }
}

TEST(GpuKernels, SoftmaxMatchesFp64) {
  REQUIRE_GPU();
  for (auto [R, C, t] :
       {std::tuple{37, 1000, DType::f32}, std::tuple{16, 128, bf16},
        std::tuple{1, 1, DType::f32}}) {
    Kernel k = kernels::softmax({R, C, t});
    HostTensor x(t, {R, C}), y(t, {R, C}), ref(DType::f32, {R, C});
    x.fillRandom(R * 7 + C, -5, 5);
    DeviceTensors dt;
    dt.add("X", x, false);
    dt.add("Y", y, true);
    runOnGpu(k, dt);
    dt.download("Y", y);
    kernels::softmaxReference(x, ref);
    ErrorStats e = compareTensors(y, ref);
    EXPECT_EQ(e.nonFinite, 0);
    EXPECT_LE(e.relative, t == DType::f32 ? 1e-5 : 1e-2) << R << "x" << C;
  }
}

// Run-time integer arguments (KernelBuilder::scalarArg): one compile, one
// loaded kernel, launched with several values; each result checked against
// the host's sum on fresh inputs, outputs poisoned before every launch.
TEST(GpuKernels, RuntimeIntegerArgumentsServeEveryValue) {
  REQUIRE_GPU();
  constexpr int64_t R = 128, C = 512;
  Kernel k = test::rowSumOfRange(R, C);
  HostTensor x(DType::f32, {R, C}), y(DType::f32, {R});
  x.fillRandom(11);
  DeviceTensors dt;
  dt.add("X", x, false);
  dt.add("Y", y, true);
  GpuKernel g(compileForGpu(k, {.arch = cuda::device().arch()}).spec());
  // A variant for `first` divisible by 16 (vector loads): it runs those
  // values and refuses others before launching.
  GpuKernel div16(
      compileForGpu(k,
                    {.arch = cuda::device().arch(),
                     .scalarClasses = {{"first", ScalarClass::DivisibleBy16}}})
          .spec());
  EXPECT_THAT(test::errorOf([&] {
                div16.launch(k.bind(dt.refs, {{"n", 3}, {"first", 5}}));
              }),
              HasSubstr("first = 5: the kernel was compiled for values of "
                        "class div16"));
  for (auto [n, first] : {std::pair<int64_t, int64_t>{1, 0},
                          {77, 5},
                          {300, 100},
                          {C, 0},
                          {200, 48}}) {
    dt.poisonOutputs();
    (first % 16 ? g : div16)
        .launch(k.bind(dt.refs, {{"n", n}, {"first", first}}));
    cuda::synchronize();
    dt.download("Y", y);
    for (int64_t r = 0; r < R; ++r) {
      double want = 0;
      for (int64_t c = first; c < first + n && c < C; ++c)
        want += x.at(std::vector<int64_t>{r, c});
      EXPECT_NEAR(y.at(std::vector<int64_t>{r}), want, 1e-3)
          << "n=" << n << " first=" << first << " row " << r;
    }
  }
}

// A run-time grid y past the device's 65535 (B·H of attention over many short
// sequences): launched folded into z (70001 = 2 x 35001 - 1), every program
// runs once with its own ids and the grid's y, and the one program past y
// writes nothing (row R keeps its poison).
TEST(GpuKernels, RunTimeGridYPastTheDeviceLimit) {
  REQUIRE_GPU();
  constexpr int64_t R = 70001, rows = 70016;
  Kernel k = test::programIdsOfARunTimeGrid(rows);
  HostTensor y(DType::i32, {rows, 32}), p(DType::i32, {rows, 32});
  DeviceTensors dt;
  dt.add("Y", y, true);
  dt.add("P", p, true);
  dt.poisonOutputs();
  std::shared_ptr<GpuKernel> g = jitKernel(k, dt.refs, {{"R", R}});
  g->launch(k.bind(dt.refs, {{"R", R}}));
  cuda::synchronize();
  EXPECT_EQ(g->launchGrid(), (std::array<unsigned, 3>{2, 35001, 2}));
  dt.download("Y", y);
  dt.download("P", p);
  const double untouched = -1; // the poison: 0xFF bytes
  int64_t wrong = 0;
  for (int64_t r = 0; r <= R; ++r)
    for (int64_t c = 0; c < 32; c += 15) {
      std::vector<int64_t> at{r, c};
      wrong += r < R ? y.at(at) != 2 * r + c / 16 || p.at(at) != R
                     : y.at(at) != untouched || p.at(at) != untouched;
    }
  EXPECT_EQ(wrong, 0) << "of " << 4 * (R + 1) << " elements checked";
}

// Blocks proven within their rows (IndexFacts.cpp) load without bounds
// checks, the loads one iteration ahead clamped to the last iteration: every
// n from none to the whole row, against the host's sums, outputs poisoned.
TEST(GpuKernels, BlocksProvenWithinTheirRowsLoadWithoutChecks) {
  REQUIRE_GPU();
  constexpr int64_t R = 100, C = 512;
  Kernel k = test::rowPrefixSums();
  HostTensor x(DType::f32, {R, C}), y(DType::f32, {R});
  x.fillRandom(17);
  DeviceTensors dt;
  dt.add("X", x, false);
  dt.add("Y", y, true);
  CompiledKernel c = compileForGpu(k, {.arch = cuda::device().arch()});
  ASSERT_THAT(test::reportOf(c), HasSubstr("no bounds checks along"));
  GpuKernel g(c.spec());
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(64), int64_t(77),
                    int64_t(448), int64_t(500), C}) {
    dt.poisonOutputs();
    g.launch(k.bind(dt.refs, {{"n", n}}));
    cuda::synchronize();
    dt.download("Y", y);
    for (int64_t r = 0; r < R; ++r) {
      double want = 0;
      for (int64_t col = 0; col < n; ++col)
        want += x.at(std::vector<int64_t>{r, col});
      EXPECT_NEAR(y.at(std::vector<int64_t>{r}), want, 1e-3)
          << "n=" << n << " row " << r;
    }
  }
}

// The specialisation for aligned rows is checked at launch, not assumed.
TEST(GpuKernels, AlignedKernelRejectsUnalignedStrides) {
  REQUIRE_GPU();
  Kernel k = kernels::gemm({64, 64, 32, bf16, DType::f32});
  HostTensor a(bf16, {64, 32}, {36, 1}), b(bf16, {32, 64}),
      c(DType::f32, {64, 64});
  DeviceTensors dt;
  dt.add("A", a, false);
  dt.add("B", b, false);
  dt.add("C", c, true);
  // 36 bf16 = 72 bytes per row
  EXPECT_EQ(unalignedTensors(k, dt.refs), std::vector<std::string>{"A"});
  GpuKernel g(
      compileForGpu(k, {.arch = cuda::device().arch(), .assumeAligned = true})
          .spec());
  EXPECT_THAT(
      test::errorOf([&] { g.launch(k.bind(dt.refs)); }),
      HasSubstr(
          "tensor A: stride 36 of dimension 0 is not a multiple of 16 bytes"));
  // The variant with A unaligned runs it, correctly, B still by vectors;
  // its launch counts as one of a fallback variant.
  const int64_t fallbacks = fallbackLaunches();
  CompiledKernel mixed = runOnGpu(k, dt);
  EXPECT_FALSE(mixed.tensors[0].aligned);
  EXPECT_TRUE(mixed.tensors[1].aligned);
  EXPECT_EQ(fallbackLaunches(), fallbacks + 1);
  EXPECT_THAT(mixed.spec().variant,
              HasSubstr("aligned rows: B, C; element accesses: A"));
  HostTensor ref(DType::f32, {64, 64});
  a.fillRandom(0); // a's device copy was uploaded zero-filled: compare to 0
  kernels::gemmReference(HostTensor(bf16, {64, 32}), b, ref);
  dt.download("C", c);
  EXPECT_EQ(compareTensors(c, ref).maxAbs, 0.0);
}

// The DSL's math functions on the GPU, each mode against the fp64 host
// reference on fresh random inputs, outputs poisoned (MathKernel.h has the
// tolerances: the fast instructions' documented accuracy).
TEST(GpuKernels, MathFunctionsMatchTheirReferences) {
  REQUIRE_GPU();
  for (const test::MathCase &c : test::mathCases())
    for (dsl::MathMode mode : {dsl::MathMode::Fast, dsl::MathMode::Precise}) {
      const bool fast = mode == dsl::MathMode::Fast;
      SCOPED_TRACE(c.name + (fast ? " fast" : " precise"));
      Kernel k = test::mathKernel(c, mode);
      HostTensor x(DType::f32, {64, 128}), y(DType::f32, {64, 128});
      x.fillRandom(uint64_t(c.name.size() * 31 + fast), c.lo, c.hi);
      DeviceTensors dt;
      dt.add("X", x, false);
      dt.add("Y", y, true);
      runOnGpu(k, dt);
      dt.download("Y", y);
      double worst = 0;
      for (int64_t i = 0; i < 64; ++i)
        for (int64_t j = 0; j < 128; ++j) {
          std::vector<int64_t> at{i, j};
          double err = std::fabs(y.at(at) - c.reference(x.at(at)));
          worst = std::isnan(err) ? INFINITY : std::max(worst, err);
        }
      EXPECT_LE(worst, fast ? c.fastTolerance : c.preciseTolerance);
    }
}

// Every program combines into the same outputs: column sums (f32 adds in
// any order), maxima and minima (i32), on run-time shapes with ragged edges,
// against the host's; outputs start from values the combine must keep.
TEST(GpuKernels, AtomicsCombineEveryProgram) {
  REQUIRE_GPU();
  Kernel k = test::columnReductions();
  for (auto [R, C] : {std::pair<int64_t, int64_t>{100, 45}, {1000, 300}}) {
    test::ColumnReductionsData d(R, C);
    DeviceTensors dt;
    dt.add("X", d.x, false);
    dt.add("I", d.i, false);
    dt.add("Y", d.y, false); // the initial values are part of the result
    dt.add("Hi", d.hi, false);
    dt.add("Lo", d.lo, false);
    runOnGpu(k, dt);
    dt.download("Y", d.y);
    dt.download("Hi", d.hi);
    dt.download("Lo", d.lo);
    d.check();
  }
}

// Rows chosen by token ids (some outside the table), a token count read
// from memory; segment sums whose loop bounds are read from memory. Against
// the host's; outputs poisoned.
TEST(GpuKernels, GathersAndIndicesFromMemory) {
  REQUIRE_GPU();
  Kernel k = test::embeddingGather();
  for (auto [V, D, T, n] : {std::array<int64_t, 4>{50000, 256, 1000, 1000},
                            {1000, 100, 77, 70},
                            {3, 64, 5, 0}}) {
    SCOPED_TRACE(std::to_string(V) + "x" + std::to_string(D));
    test::EmbeddingData d(V, D, T, n);
    DeviceTensors dt;
    dt.add("Table", d.table, false);
    dt.add("Ids", d.ids, false);
    dt.add("Count", d.count, false);
    dt.add("Out", d.out, true);
    runOnGpu(k, dt);
    dt.download("Out", d.out);
    d.check();
  }
  Kernel sums = test::segmentSums();
  for (int64_t P : {1, 40, 1000}) {
    test::SegmentData d(P);
    DeviceTensors dt;
    dt.add("Offs", d.offs, false);
    dt.add("X", d.x, false);
    dt.add("Out", d.out, true);
    runOnGpu(sums, dt);
    dt.download("Out", d.out);
    d.check();
  }
}

// Hundreds of CTAs add into one workspace and arrive at a counter; the
// last finishes the sum: every other's atomics visible to it, each CTA
// counted once. Against the host's sum; the output poisoned.
TEST(GpuKernels, LastToArriveFinishesTheSum) {
  REQUIRE_GPU();
  Kernel k = test::splitSum();
  for (auto [P, R] : {std::array<int64_t, 2>{1, 16}, {300, 50}, {1000, 8}}) {
    SCOPED_TRACE(std::to_string(P) + " programs, " + std::to_string(R));
    test::SplitSumData d(P, R);
    DeviceTensors dt;
    dt.add("X", d.x, false);
    dt.add("Acc", d.acc, false);
    dt.add("Count", d.count, false);
    dt.add("Out", d.out, true);
    runOnGpu(k, dt);
    dt.download("Out", d.out);
    dt.download("Count", d.count);
    d.check();
  }
}

// A finisher launched to overlap the group sums (programmatic dependent
// launch) converts each group once its programs have arrived, the arrivals
// made one program late on persistent CTAs (1000 programs on at most as many
// CTAs as fit) or where they stand (one program a CTA). Back to back on one
// stream, no synchronisation between; against the host's sums, the output
// poisoned.
TEST(GpuKernels, OverlappedLaunchFinishesEachGroup) {
  REQUIRE_GPU();
  Kernel finish = test::groupFinish();
  for (bool persistent : {true, false})
    for (auto [P, R, G] :
         {std::array<int64_t, 3>{1, 16, 1}, {1000, 32, 37}, {3000, 16, 300}}) {
      SCOPED_TRACE(std::to_string(P) + " programs, " + std::to_string(G) +
                   (persistent ? " groups, persistent" : " groups"));
      Kernel sums = test::groupSums(persistent);
      test::GroupSumData d(P, R, G);
      DeviceTensors dt;
      dt.add("X", d.x, false);
      dt.add("Acc", d.acc, false);
      dt.add("Count", d.count, false);
      dt.add("Out", d.out, true);
      for (const Kernel *k : {&sums, &finish}) {
        auto mine = k->tensorsIn(dt.refs);
        jitKernel(*k, mine)->launch(k->bind(mine));
      }
      cuda::synchronize();
      dt.download("Out", d.out);
      dt.download("Count", d.count);
      d.check();
    }
}

TEST(GpuKernels, IntegerOpsAndCasts) {
  REQUIRE_GPU();
  test::IntegerData d(1000);
  DeviceTensors dt;
  dt.add("X", d.x, false);
  dt.add("F", d.f, false);
  dt.add("Out", d.out, true);
  dt.add("G", d.g, true);
  runOnGpu(test::integerOps(), dt);
  dt.download("Out", d.out);
  dt.download("G", d.g);
  d.check();
}

TEST(GpuKernels, BadArgumentsAreRejectedBeforeLaunch) {
  REQUIRE_GPU();
  // Shapes compiled in: A is the first parameter.
  Kernel k =
      kernels::gemm({64, 64, 32, bf16, DType::f32}, {.staticShapes = true});
  CompiledKernel c = compileForGpu(k, {cuda::device().arch(), 0});
  GpuKernel g(c.spec());
  std::vector<ArgValue> args(c.params.size(), int64_t(1));
  EXPECT_THAT(test::errorOf([&] { g.launch(args); }),
              HasSubstr("argument A must be a pointer"));
  args[0] = static_cast<void *>(nullptr);
  EXPECT_THAT(test::errorOf([&] { g.launch(args); }),
              HasSubstr("argument A is a null pointer"));
  cuda::Buffer buf(4096);
  for (size_t i = 0; i < c.params.size(); ++i)
    if (c.params[i].kind == ParamInfo::Kind::Pointer)
      args[i] = buf.data();
  args[0] = static_cast<void *>(static_cast<char *>(buf.data()) + 2);
  EXPECT_THAT(test::errorOf([&] { g.launch(args); }),
              HasSubstr("not 16-byte aligned"));
  EXPECT_THAT(test::errorOf([&] { g.launch({}); }),
              HasSubstr("takes 9 arguments, got 0"));
}

} // namespace
