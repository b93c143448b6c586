//===- AttentionBackwardTest.cpp - the backward on the CPU executor -------===//
//
// The three backward kernels run by the CPU executor against the fp64
// reference: causal and not, ragged N, Nq != Nk, both layouts, one
// run-time-shape build serving several shapes, the static build; dQ by its
// own kernel and by the dK/dV kernel's atomics.
//
//===----------------------------------------------------------------------===//
#include "AttentionBackwardCase.h"
#include "TestUtil.h"

#include "kiln/Reference/CpuExecutor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using test::BackwardCase;
using test::BackwardTensors;

namespace {

void runBackwardOnCpu(const kernels::AttentionBackwardKernels &kernels,
                      BackwardTensors &t) {
  const std::map<std::string, TensorRef> refs = t.refs();
  for (const Kernel &k : kernels)
    runOnCpu(k, k.bind(k.tensorsIn(refs)));
}

// Small blocks keep the executor quick; the GPU tests take the defaults.
const kernels::AttentionBackwardConfig kSmallBlocks{
    .blockM = 32, .blockN = 64, .dqBlockM = 64, .dqBlockN = 32, .warps = 4};

class BackwardOnCpu : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(BackwardOnCpu, MatchesFp64Reference) {
  const BackwardCase &c = GetParam();
  kernels::AttentionBackwardConfig config = kSmallBlocks;
  config.staticShapes = c.staticShapes;
  config.deterministic = c.deterministic;
  config.scoresByQueries = c.scoresByQueries;
  BackwardTensors t(c);
  runBackwardOnCpu(kernels::attentionBackward(c.shape(), config), t);
  t.expectGradientsMatch(c);
}

constexpr DType bf16 = DType::bf16, f16 = DType::f16;

INSTANTIATE_TEST_SUITE_P(
    Shapes, BackwardOnCpu,
    ::testing::Values(
        BackwardCase{1, 2, 1, 1, 64, false, bf16},
        BackwardCase{1, 2, 1, 1, 64, true, bf16},
        BackwardCase{1, 2, 130, 130, 64, false, bf16},
        BackwardCase{1, 2, 130, 130, 64, true, f16},
        BackwardCase{2, 1, 77, 190, 64, true, bf16},
        BackwardCase{1, 2, 200, 129, 64, false, f16, true},
        BackwardCase{1, 1, 96, 96, 128, true, bf16, true},
        BackwardCase{1, 2, 100, 70, 64, true, bf16, false, 1},
        BackwardCase{1, 2, 130, 130, 64, true, bf16, false, -1, 0},
        BackwardCase{2, 1, 77, 190, 64, false, f16, true, -1, 0},
        BackwardCase{1, 2, 100, 70, 64, true, bf16, false, 1, 0},
        BackwardCase{1, 2, 130, 130, 64, false, bf16, false, -1, 1},
        // The scores as S = Q·Kᵀ (P and dS staged for dV's and dK's dots),
        // with atomics and without.
        BackwardCase{2, 1, 77, 190, 64, true, bf16, false, -1, 0, -1, -1, 0, 1},
        BackwardCase{1, 2, 200, 129, 64, false, f16, true, -1, 0, -1, -1, 0, 1},
        BackwardCase{1, 2, 100, 70, 128, true, bf16, false, -1, 1, -1, -1, 0,
                     1},
        // Ten heads at D=128, causal: key blocks longest first in the
        // default's groups of 8 and 2.
        BackwardCase{2, 5, 70, 70, 128, true, bf16},
        // Grouped heads: dK and dV summed over each K/V head's query heads
        // (4 per K/V head; 3 sharing one), causal or not, atomic dQ or the
        // deterministic dQ kernel, scores either way, bshd.
        BackwardCase{2, 4, 130, 100, 64, true, bf16, false, -1, -1, -1, -1, 0,
                     -1, 1},
        BackwardCase{1, 4, 77, 190, 64, false, f16, true, -1, -1, -1, -1, 0, -1,
                     2},
        BackwardCase{1, 3, 100, 70, 64, true, bf16, false, -1, 1, -1, -1, 0, -1,
                     1},
        BackwardCase{1, 4, 100, 130, 128, false, bf16, false, -1, 0, -1, -1, 0,
                     1, 2},
        // 18 (batch, K/V head) pairs, causal: longest first in 2 groups of
        // 9 (the largest divisor of 18 up to headGroupFor's 16).
        BackwardCase{.B = 9,
                     .H = 4,
                     .Nq = 70,
                     .Nk = 70,
                     .D = 64,
                     .causal = true,
                     .dtype = bf16,
                     .kvHeads = 2}),
    [](const auto &info) { return info.param.name(); });

// One run-time-shape build serves other batch, heads and lengths.
TEST(BackwardOnCpu, OneBuildServesEveryShape) {
  for (bool causal : {false, true}) {
    BackwardCase built{1, 1, 64, 64, 64, causal, bf16};
    auto kernels = kernels::attentionBackward(built.shape(), kSmallBlocks);
    for (auto [b, h, nq, nk] : {std::array<int64_t, 4>{2, 3, 33, 33},
                                {1, 1, 160, 100},
                                {1, 2, 65, 257}}) {
      BackwardCase c{b, h, nq, nk, 64, causal, bf16};
      SCOPED_TRACE(c.name());
      BackwardTensors t(c);
      runBackwardOnCpu(kernels, t);
      t.expectGradientsMatch(c);
    }
  }
}

} // namespace

namespace {

// Folded statistics live in the transposed scores' dots: asking for them
// and for scores by queries is a clear error, before any kernel is built.
TEST(BackwardOnCpu, FoldedStatisticsNeedTransposedScores) {
  kernels::AttentionBackwardConfig c;
  c.foldStatistics = 1;
  c.scoresByQueries = 1;
  BackwardCase bc{1, 2, 200, 200, 64, false, bf16};
  EXPECT_THAT(test::errorOf([&] { kernels::attentionBackward(bc.shape(), c); }),
              ::testing::HasSubstr("foldStatistics adds LSE and Delta in the "
                                   "transposed scores' dots"));
}

// The workspace must have a row for every query: bind refuses a shorter one
// (its missing rows would read as padding and the gradients be wrong), and
// one whose rows are not whole blocks of 128 queries (the kernels read its
// blocks without bounds checks).
TEST(BackwardOnCpu, ShortWorkspaceIsRefused) {
  BackwardCase c{1, 2, 200, 100, 64, false, bf16};
  BackwardTensors t(c);
  HostTensor shortStats(DType::f32, {1, 2, 2, 128}),
      ragged(DType::f32, {1, 2, 2, 200}),
      shortFolded(DType::bf16, {1, 2, kernels::kFoldedStatsRows, 128}),
      raggedFolded(DType::bf16, {1, 2, kernels::kFoldedStatsRows, 200});
  std::map<std::string, TensorRef> refs = t.refs();
  for (const Kernel &k : kernels::attentionBackward(c.shape(), kSmallBlocks)) {
    refs["Stats"] = shortStats.ref();
    refs["FoldedStats"] = shortFolded.ref();
    if (!k.tensorsIn(refs).count("Stats")) // dq_convert
      continue;
    // (Named after whichever of Stats and FoldedStats binds it.)
    const std::string error = test::errorOf([&] { k.bind(k.tensorsIn(refs)); });
    EXPECT_THAT(error, ::testing::HasSubstr("StatsRow = 128 (from tensor "))
        << k.name();
    EXPECT_THAT(error, ::testing::HasSubstr("must be at least Nq = 200"))
        << k.name();
    refs["Stats"] = ragged.ref();
    refs["FoldedStats"] = raggedFolded.ref();
    EXPECT_THAT(test::errorOf([&] { k.bind(k.tensorsIn(refs)); }),
                ::testing::HasSubstr("(StatsRow) = 200 is not a multiple of "
                                     "128"))
        << k.name();
  }
}

} // namespace

// The workspace's one description: its tensors in order, each contiguous and
// 16-byte aligned right after the one before, within `elements` (what the C
// API tells the PyTorch op to allocate); a ragged Nq rounds the statistics'
// rows up to whole blocks.
TEST(BackwardWorkspace, TensorsFollowEachOtherAligned) {
  const int64_t B = 2, H = 3, Nq = 1001, D = 64, row = 1024;
  const kernels::BackwardWorkspace w(B, H, Nq, D);
  ASSERT_EQ(w.tensors.size(), 4u);
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected{
      {"Stats", {B, H, 2, row}},
      {"dQaccum", {B, H, Nq, D}},
      {"dQarrivals", {B, H, kernels::kArrivalStride}},
      {"FoldedStats", {B, H, kernels::kFoldedStatsRows, row}}};
  int64_t end = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const kernels::WorkspaceTensor &t = w.tensors[i];
    EXPECT_EQ(t.name, expected[i].first);
    EXPECT_EQ(t.shape, expected[i].second);
    EXPECT_EQ(t.offset, (end + 3) / 4 * 4) << t.name;
    int64_t bytes = int64_t(dtypeSize(t.dtype));
    for (int64_t d : t.shape)
      bytes *= d;
    end = t.offset + (bytes + 3) / 4;
  }
  EXPECT_EQ(w.elements, (end + 3) / 4 * 4);
  std::vector<float> storage(size_t(w.elements));
  auto refs = w.refs(storage.data());
  const TensorRef &acc = refs.at("dQaccum");
  EXPECT_EQ(acc.data, storage.data() + w.tensors[1].offset);
  EXPECT_EQ(acc.strides, (std::vector<int64_t>{H * Nq * D, Nq * D, D, 1}));
  EXPECT_EQ(refs.at("FoldedStats").dtype, DType::bf16);
}
