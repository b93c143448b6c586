//===- KeyLengthsTest.cpp - keys per batch on the CPU executor ------------===//
//
// AttentionShape::keyLengths: each batch attends to its first KLengths[b]
// keys. On the CPU executor under the default schedule's IR (and the split
// keys' two kernels): O and LSE against the fp64 reference with NaN in every
// slot past a length (causal: queries the last of each length); the
// lowering keeps TMA for the whole key blocks; what is refused (static
// shapes, the backward, a firstRows view past its tensor).
//
//===----------------------------------------------------------------------===//
#include "CodegenUtil.h"
#include "KeyLengthsCase.h"
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/dsl/Dsl.h"
#include "kiln/kernels/AttentionBackward.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

using namespace kiln;
using test::errorOf;
using test::KeyLengthsCase;
using ::testing::HasSubstr;

namespace {

class KeyLengthsOnCpu : public ::testing::TestWithParam<KeyLengthsCase> {};

TEST_P(KeyLengthsOnCpu, MatchesFp64ReferenceReadingNoSlotPastALength) {
  const KeyLengthsCase &c = GetParam();
  test::KeyLengthsTensors t(c);
  std::map<std::string, TensorRef> refs;
  for (auto [name, tensor] : t.named())
    refs[name] = tensor->ref();
  std::vector<Kernel> ks =
      kernels::attentionForwardKernels(c.shape(), {.splitKeys = int(c.ranges)});
  ASSERT_EQ(ks.size(), c.ranges > 1 ? 2u : 1u);
  for (const Kernel &kernel : ks)
    runOnCpu(kernel, kernel.bind(kernel.tensorsIn(refs)));
  t.check(c);
}

INSTANTIATE_TEST_SUITE_P(Shapes, KeyLengthsOnCpu,
                         ::testing::ValuesIn(test::keyLengthsCases()),
                         [](const auto &info) { return info.param.name(); });

// The whole key blocks below a length keep TMA; the ragged end's loads,
// through views that end at the length, take cp.async, and the report
// says why.
TEST(KeyLengths, WholeBlocksKeepTmaAndTheEndSaysWhyNot) {
  kernels::AttentionShape s{4, 32, 4096, 4096, 64, false, DType::bf16};
  s.keyLengths = true;
  const Kernel k = kernels::attentionForward(s, {});
  const std::string report = test::reportOf(compileForGpu(k, {"sm_90a", 0}));
  EXPECT_THAT(report, HasSubstr("load 128x64: TMA"));
  EXPECT_THAT(report,
              HasSubstr("cp.async (16 bytes) into shared memory, 1 "
                        "iteration(s) ahead (2 buffers); not TMA: its block "
                        "is not over the tensor's own dimensions"));
}

TEST(KeyLengths, RefusedWhereTheyDoNotApply) {
  kernels::AttentionShape s{2, 2, 64, 64, 64, false, DType::bf16};
  s.keyLengths = true;
  EXPECT_THAT(
      errorOf([&] { kernels::attentionForward(s, {.staticShapes = 1}); }),
      HasSubstr("key lengths per batch need run-time shapes"));
  s.headDim = 128;
  EXPECT_THAT(errorOf([&] {
                kernels::attentionForward(
                    s, {.maskedBlockFirst = 0, .overlap = 1});
              }),
              HasSubstr("under overlap take the masked block first"));
  EXPECT_THAT(errorOf([&] { kernels::attentionBackward(s, {}); }),
              HasSubstr("key lengths per batch are the forward's"));
}

TEST(KeyLengths, FirstRowsPastTheTensorNamesTheLine) {
  dsl::KernelBuilder k("first_rows");
  auto x = k.tensorArg("X", DType::f32, {8, 16});
  const int line = __LINE__ + 1;
  EXPECT_THAT(errorOf([&] { x.firstRows(9); }),
              HasSubstr(KILN_FILE_LINE(line)));
  EXPECT_THAT(errorOf([&] { x.firstRows(9); }),
              HasSubstr("9 rows is out of range for dimension 0 of 8x16"));
  EXPECT_THAT(errorOf([&] { x.firstRows(-1); }),
              HasSubstr("-1 rows is out of range"));
}

} // namespace

namespace {

// With key lengths, the keys split into at least as many ranges as make 1.5
// waves of programs: H200 (132 SMs), 32 query heads over 8 K/V heads
// (decoding's rows packed: B * 8 programs).
TEST(KeyLengths, SplitToOneAndAHalfWavesOfPrograms) {
  for (auto [batch, queries, keys, dim, expected] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{
            16, 1, 8192, 128, 2}, // 128 programs: 256
        {4, 1, 8192, 128, 8},     // 32: 256
        {8, 16, 8192, 128, 4},    // 64: 256
        {64, 1, 8192, 128, 1},    // 512 programs fill 3.9 waves
        {16, 1, 4097, 64, 4},     // 2 CTAs an SM at D=64: 512 of 264 slots
        {16, 1, 300, 128, 1}}) {  // 5 key blocks: no range of under 4
    // As the library runs it: grouped rows packed.
    kernels::AttentionShape s =
        kernels::groupedRowsShape(
            {batch, 32, queries, keys, dim, false, DType::bf16, 0, 8})
            .value();
    const int64_t plain = kernels::launchConfig(s, {}, 132, 4.8e12).splitKeys;
    s.keyLengths = true;
    const kernels::AttentionConfig c =
        kernels::launchConfig(s, {}, 132, 4.8e12);
    EXPECT_EQ(c.splitKeys, std::max(plain, expected))
        << "B=" << batch << " Nq=" << queries << " Nk=" << keys;
    if (c.splitKeys > 1)
      EXPECT_LE(c.smallTiles, 0) << "B=" << batch << " Nk=" << keys;
  }
}

} // namespace
