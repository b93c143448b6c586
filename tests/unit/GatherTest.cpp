//===- GatherTest.cpp - gather and loadIndex in the DSL -------------------===//
#include "GatherKernels.h"
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using ::testing::HasSubstr;

namespace {

TEST(Gather, EmbeddingLookupOnTheCpu) {
  Kernel k = test::embeddingGather();
  for (auto [V, D, T, n] : {std::array<int64_t, 4>{50, 64, 32, 32},
                            {1000, 192, 77, 70},
                            {3, 100, 5, 0}}) {
    test::EmbeddingData d(V, D, T, n);
    runOnCpu(k, k.bind({{"Table", d.table.ref()},
                        {"Ids", d.ids.ref()},
                        {"Count", d.count.ref()},
                        {"Out", d.out.ref()}}));
    SCOPED_TRACE(std::to_string(V) + "x" + std::to_string(D));
    d.check();
  }
}

TEST(Gather, LoopBoundsFromMemoryOnTheCpu) {
  Kernel k = test::segmentSums();
  for (int64_t P : {1, 9, 40}) {
    test::SegmentData d(P);
    runOnCpu(k, k.bind({{"Offs", d.offs.ref()},
                        {"X", d.x.ref()},
                        {"Out", d.out.ref()}}));
    d.check();
  }
}

// The last of P programs (host threads run them in any order) sees every
// other's atomics and finishes the sum.
TEST(Arrive, LastProgramFinishesTheSumOnTheCpu) {
  Kernel k = test::splitSum();
  for (auto [P, R] : {std::array<int64_t, 2>{1, 16}, {7, 50}, {64, 33}}) {
    SCOPED_TRACE(std::to_string(P) + " programs, " + std::to_string(R));
    test::SplitSumData d(P, R);
    runOnCpu(k, k.bind({{"X", d.x.ref()},
                        {"Acc", d.acc.ref()},
                        {"Count", d.count.ref()},
                        {"Out", d.out.ref()}}));
    d.check();
  }
}

// Every thread waits for its own writes and fences; one thread per program
// adds to the counter with release and acquire at device scope.
TEST(Arrive, LowersToOneAtomicPerProgram) {
  CompiledKernel c = compileForGpu(test::splitSum(), {"sm_90a"});
  EXPECT_EQ(test::countOf(c.ptx, "atom.add.acq_rel.gpu.global.u32"), 1u);
  EXPECT_GT(test::countOf(c.ptx, "fence.acq_rel.gpu"), 0u);
  std::string report;
  for (const std::string &line : c.report)
    report += line + "\n";
  EXPECT_THAT(report, HasSubstr("arrive: each thread waits for its bulk "
                                "copies"));
}

// The finisher, run after the group sums, waits for counts they reached.
TEST(WaitCount, OverlappedFinisherOnTheCpu) {
  Kernel sums = test::groupSums(true), finish = test::groupFinish();
  for (auto [P, R, G] : {std::array<int64_t, 3>{1, 16, 1}, {50, 33, 7}}) {
    SCOPED_TRACE(std::to_string(P) + " programs, " + std::to_string(G));
    test::GroupSumData d(P, R, G);
    std::map<std::string, TensorRef> refs{{"X", d.x.ref()},
                                          {"Acc", d.acc.ref()},
                                          {"Count", d.count.ref()},
                                          {"Out", d.out.ref()}};
    runOnCpu(sums, sums.bind(sums.tensorsIn(refs)));
    runOnCpu(finish, finish.bind(finish.tensorsIn(refs)));
    d.check();
  }
  // A count no earlier launch reaches: an error, not a hang.
  test::GroupSumData d(4, 16, 2);
  std::map<std::string, TensorRef> refs{{"X", d.x.ref()},
                                        {"Acc", d.acc.ref()},
                                        {"Count", d.count.ref()},
                                        {"Out", d.out.ref()}};
  EXPECT_THAT(test::errorOf([&] {
                runOnCpu(finish, finish.bind(finish.tensorsIn(refs)));
              }),
              HasSubstr("to reach 2; it holds 0 and no launch before this one "
                        "raises it"));
}

// On persistent CTAs an unused count is made one program late (a release
// red, no atom); the kernel lets the next launch start at once. The waiting
// kernel polls with acquire loads and is launched to overlap (sm_90 only).
TEST(WaitCount, LowersToADeferredArrivalAndAnOverlappedLaunch) {
  CompiledKernel sums = compileForGpu(test::groupSums(true), {"sm_90a"});
  EXPECT_EQ(test::countOf(sums.ptx, "atom.add.acq_rel.gpu"), 0u);
  EXPECT_EQ(test::countOf(sums.ptx, "red.relaxed.gpu.global.add.u32"), 2u)
      << "one at each program's end (the previous one's), one at the exit";
  EXPECT_EQ(test::countOf(sums.ptx, "griddepcontrol.launch_dependents"), 1u);
  std::string report;
  for (const std::string &line : sums.report)
    report += line + "\n";
  EXPECT_THAT(report, HasSubstr("made one program late"));
  EXPECT_FALSE(sums.overlapPrevious);
  // One program per CTA: the arrival where it stands.
  CompiledKernel once = compileForGpu(test::groupSums(false), {"sm_90a"});
  EXPECT_EQ(test::countOf(once.ptx, "atom.add.acq_rel.gpu.global.u32"), 1u);

  CompiledKernel finish = compileForGpu(test::groupFinish(), {"sm_90a"});
  EXPECT_TRUE(finish.overlapPrevious);
  EXPECT_TRUE(finish.spec().overlapPrevious);
  EXPECT_EQ(test::countOf(finish.ptx, "ld.acquire.gpu.global.b32"), 1u);
  EXPECT_EQ(test::countOf(finish.ptx, "griddepcontrol.wait"), 1u);
  report.clear();
  for (const std::string &line : finish.report)
    report += line + "\n";
  EXPECT_THAT(report, HasSubstr("starts before the previous launch"));
  CompiledKernel old = compileForGpu(test::groupFinish(), {"sm_80"});
  EXPECT_FALSE(old.overlapPrevious);
  EXPECT_EQ(test::countOf(old.ptx, "griddepcontrol"), 0u);
}

TEST(Gather, LowersToVectorLoadsAndAScalarLoad) {
  GpuTarget target{"sm_90a"};
  target.scalarClasses["D"] = ScalarClass::DivisibleBy16;
  CompiledKernel c = compileForGpu(test::embeddingGather(), target);
  std::string report;
  for (const std::string &line : c.report)
    report += line + "\n";
  // 8 bf16 per thread along each row (16 bytes), the row from the ids.
  EXPECT_THAT(report, HasSubstr("gather 32x64: rows from an index tile, "
                                "vector loads of 8 elements to registers"));
  EXPECT_GT(test::countOf(c.ptx, "ld.global.v4.b32"), 0u);
  // The count: one 4-byte load, guarded by its index's range.
  EXPECT_GT(test::countOf(c.ptx, "ld.global.b32"), 0u);
  // Rows of any length: one element per load.
  CompiledKernel any = compileForGpu(test::embeddingGather(), {"sm_90a"});
  report.clear();
  for (const std::string &line : any.report)
    report += line + "\n";
  EXPECT_THAT(report, HasSubstr("gather 32x64: rows from an index tile, one "
                                "load per element to registers"));
}

TEST(Gather, MisuseNamesTheUsersLine) {
  int line = 0;
  std::string error = test::errorOf([&] {
    dsl::KernelBuilder k("bad_gather", {1});
    auto T = k.tensorArg("T", dsl::bf16, {16, 64});
    line = __LINE__ + 1;
    dsl::gather(T, dsl::arange(16).to(dsl::f32), 0, 64);
  });
  EXPECT_THAT(error, HasSubstr("GatherTest.cpp:" + std::to_string(line) +
                               ": gather from T: row indices must be a 1-D "
                               "i32 tile, got 16 f32"));
  error = test::errorOf([&] {
    dsl::KernelBuilder k("bad_gather_rank", {1});
    auto T = k.tensorArg("T", dsl::bf16, {4, 16, 64});
    line = __LINE__ + 1;
    dsl::gather(T, dsl::arange(16), 0, 64);
  });
  EXPECT_THAT(error, HasSubstr("GatherTest.cpp:" + std::to_string(line) +
                               ": gather from T: the view must be 2-D"));
  error = test::errorOf([&] {
    dsl::KernelBuilder k("bad_index", {1});
    auto T = k.tensorArg("T", dsl::f32, {16});
    line = __LINE__ + 1;
    dsl::loadIndex(T, 0);
  });
  EXPECT_THAT(error, HasSubstr("GatherTest.cpp:" + std::to_string(line) +
                               ": loadIndex from T: the tensor must hold i32, "
                               "it holds f32"));
  error = test::errorOf([&] {
    dsl::KernelBuilder k("bad_arrive", {1});
    auto T = k.tensorArg("T", dsl::f32, {16});
    line = __LINE__ + 1;
    dsl::arrive(T, 0);
  });
  EXPECT_THAT(error, HasSubstr("GatherTest.cpp:" + std::to_string(line) +
                               ": arrive at T: the counters must be i32, "
                               "they are f32"));
  error = test::errorOf([&] {
    dsl::KernelBuilder k("arrive_in_loop", {1});
    auto T = k.tensorArg("T", dsl::i32, {16});
    dsl::forRange(0, 4, 1, [&](dsl::Index) {
      line = __LINE__ + 1;
      dsl::arrive(T, 0);
    });
  });
  EXPECT_THAT(error, HasSubstr("GatherTest.cpp:" + std::to_string(line) +
                               ": arrive at T: must be at the kernel's top "
                               "level, not inside a loop"));
  error = test::errorOf([&] {
    dsl::KernelBuilder k("bad_wait", {1});
    auto T = k.tensorArg("T", dsl::f32, {16});
    line = __LINE__ + 1;
    dsl::waitCount(T, 0, 1);
  });
  EXPECT_THAT(error, HasSubstr("GatherTest.cpp:" + std::to_string(line) +
                               ": waitCount on T: the counters must be i32"));
  error = test::errorOf([&] {
    dsl::KernelBuilder k("wait_in_loop", {1});
    auto T = k.tensorArg("T", dsl::i32, {16});
    dsl::forRange(0, 4, 1, [&](dsl::Index) {
      line = __LINE__ + 1;
      dsl::waitCount(T, 0, 1);
    });
  });
  EXPECT_THAT(error, HasSubstr("GatherTest.cpp:" + std::to_string(line) +
                               ": waitCount on T: must be at the kernel's top "
                               "level, not inside a loop"));
}

} // namespace
