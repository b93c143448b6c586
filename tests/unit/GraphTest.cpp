//===- GraphTest.cpp - the attention graph's three lowerings --------------===//
#include "TestUtil.h"

#include "kiln/dsl/Graph.h"
#include "kiln/kernels/AttentionGraph.h"
#include "kiln/kernels/GpuReference.h"
#include "kiln/kernels/Reference.h"
#include "kiln/runtime/Cuda.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace kiln;
using graph::Fusion;
using ::testing::HasSubstr;

static std::vector<std::string> names(const graph::Lowered &p) {
  std::vector<std::string> n;
  for (const graph::Step &s : p.steps)
    n.push_back(s.kernel.name());
  return n;
}

// Kernel counts and every byte each kernel reads and writes, from the sizes
// of Q, K, V, O (B·H·N·D·2 bytes each) and of S (B·H·N²·2 bytes).
TEST(Graph, KernelsAndBytesPerLowering) {
  kernels::AttentionShape s{1, 16, 4096, 4096, 128, true, DType::bf16, 0};
  graph::Graph g = kernels::attentionGraph(s);
  const int64_t x = 1 * 16 * 4096 * 128 * 2, S = int64_t(16) * 4096 * 4096 * 2;

  graph::Lowered u = graph::lower(g, Fusion::None);
  EXPECT_EQ(names(u),
            (std::vector<std::string>{"matmul", "scale", "causal_mask",
                                      "softmax", "matmul"}));
  std::vector<std::pair<int64_t, int64_t>> want{
      {2 * x, S}, {S, S}, {S, S}, {S, S}, {S + x, x}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(u.steps[i].bytesRead, want[i].first) << i;
    EXPECT_EQ(u.steps[i].bytesWritten, want[i].second) << i;
  }
  EXPECT_EQ(u.bytesMoved(), 2 * x + S + 3 * 2 * S + S + x + x);
  // At most two N x N intermediates alive at once: the arena reuses space.
  EXPECT_EQ(u.arenaBytes, 2 * S);
  EXPECT_EQ(u.peakBytes(), 4 * x + 2 * S);

  graph::Lowered e = graph::lower(g, Fusion::Elementwise);
  EXPECT_EQ(names(e), (std::vector<std::string>{"matmul_scale_causal_mask",
                                                "softmax", "matmul"}));
  EXPECT_EQ(e.bytesMoved(), (2 * x + S) + 2 * S + (S + 2 * x));

  graph::Lowered f = graph::lower(g, Fusion::Flash);
  EXPECT_EQ(names(f),
            (std::vector<std::string>{"flash_attention_scale_causal_mask"}));
  EXPECT_EQ(f.steps[0].bytesRead, 3 * x);
  EXPECT_EQ(f.steps[0].bytesWritten, x);
  EXPECT_EQ(f.arenaBytes, 0);
  EXPECT_EQ(f.peakBytes(), 4 * x);
  EXPECT_THAT(f.json(),
              HasSubstr("{\"bytes_read\":50331648,\"bytes_written\":16777216,"
                        "\"name\":\"flash_attention_scale_causal_mask\"}"));
}

// The fusion passes decide from the graph: when S is also an output, the
// scores must reach memory, so no flash kernel is formed (and the log says
// why); the scale still joins the first matmul.
TEST(Graph, FusionNeedsPrivateIntermediates) {
  graph::Graph g;
  auto Q = g.input("Q", DType::bf16, {2, 64, 64});
  auto K = g.input("K", DType::bf16, {2, 64, 64});
  auto V = g.input("V", DType::bf16, {2, 64, 64});
  auto S = graph::scale(graph::matmul(Q, graph::transpose(K)), 0.125);
  g.output("O", graph::matmul(graph::softmax(S), V));
  g.output("S", S);
  graph::Lowered f = graph::lower(g, Fusion::Flash);
  EXPECT_EQ(names(f),
            (std::vector<std::string>{"matmul_scale", "softmax", "matmul"}));
  EXPECT_THAT(f.str(), HasSubstr("the scores are read elsewhere or are an "
                                 "output"));
}

TEST(Graph, MisuseNamesTheLine) {
  graph::Graph g;
  auto Q = g.input("Q", DType::bf16, {2, 64, 32});
  auto K = g.input("K", DType::bf16, {2, 64, 32});
  int line = __LINE__ + 1;
  EXPECT_THAT(test::errorOf([&] { graph::matmul(Q, K); }),
              HasSubstr(KILN_FILE_LINE(line) + ": matmul of 2x64x32 and "
                                               "2x64x32"));
  EXPECT_THAT(test::errorOf([&] { graph::parseFusion("flash"); }),
              HasSubstr("'flash' is not one of unfused, elementwise, fused"));
  EXPECT_THAT(
      test::errorOf([&] { graph::lower(graph::Graph{}, Fusion::None); }),
      HasSubstr("the graph has no outputs"));
}

struct Inputs {
  HostTensor q, k, v;
};
static Inputs randomInputs(const kernels::AttentionShape &s, uint64_t seed) {
  std::vector<int64_t> shape{s.batch, s.heads, s.seqQ, s.headDim};
  Inputs in{HostTensor(s.dtype, shape), HostTensor(s.dtype, shape),
            HostTensor(s.dtype, shape)};
  in.q.fillRandom(seed);
  in.k.fillRandom(seed + 1);
  in.v.fillRandom(seed + 2);
  return in;
}

// Every lowering, run by the CPU executor, against the fp64 reference; N=80
// is ragged for every tile size.
TEST(Graph, LoweringsAgreeWithReferenceOnCpu) {
  for (bool causal : {false, true}) {
    kernels::AttentionShape s{1, 2, 80, 80, 64, causal, DType::bf16, 0};
    Inputs in = randomInputs(s, 7 + causal);
    HostTensor ref(DType::f32, {1, 2, 80, 64}), lse(DType::f32, {1, 2, 80});
    kernels::attentionReference(s, in.q, in.k, in.v, ref, lse);
    for (Fusion m : {Fusion::None, Fusion::Elementwise, Fusion::Flash}) {
      std::map<std::string, HostTensor> t{
          {"Q", in.q}, {"K", in.k}, {"V", in.v}};
      graph::runOnCpu(graph::lower(kernels::attentionGraph(s), m), t);
      ErrorStats e = compareTensors(t.at("O"), ref);
      EXPECT_EQ(e.nonFinite, 0) << graph::fusionName(m);
      EXPECT_LT(e.relative, 1e-2)
          << graph::fusionName(m) << " causal " << causal;
    }
  }
}

// On the GPU against the NVRTC reference, fresh inputs, O poisoned first.
TEST(GraphGpu, LoweringsAgreeWithNvrtcReference) {
  REQUIRE_GPU();
  for (bool causal : {false, true}) {
    kernels::AttentionShape s{1, 4, 1000, 1000, 128, causal, DType::bf16, 0};
    Inputs in = randomInputs(s, 40 + causal);
    std::vector<int64_t> shape{1, 4, 1000, 128};
    std::vector<int64_t> st = contiguousStrides(shape);
    size_t bytes = size_t(in.q.storageBytes());
    cuda::Buffer q(bytes), k(bytes), v(bytes), o(bytes), ro(bytes * 2),
        rl(size_t(4 * 1000 * 4));
    q.upload(in.q.data(), bytes);
    k.upload(in.k.data(), bytes);
    v.upload(in.v.data(), bytes);
    TensorRef tq{q.data(), s.dtype, shape, st},
        tk{k.data(), s.dtype, shape, st}, tv{v.data(), s.dtype, shape, st};
    kernels::attentionReferenceGpu(s, tq, tk, tv, ro.data(), rl.data());
    HostTensor ref(DType::f32, shape);
    ro.download(ref.data(), bytes * 2);
    for (Fusion m : {Fusion::None, Fusion::Elementwise, Fusion::Flash}) {
      graph::Lowered plan = graph::lower(kernels::attentionGraph(s), m);
      graph::GpuGraph gpu(plan);
      o.fill(0xFF);
      gpu.launch({{"Q", tq},
                  {"K", tk},
                  {"V", tv},
                  {"O", {o.data(), s.dtype, shape, st}}});
      cuda::synchronize();
      HostTensor out(s.dtype, shape);
      o.download(out.data(), bytes);
      ErrorStats e = compareTensors(out, ref);
      EXPECT_EQ(e.nonFinite, 0) << graph::fusionName(m);
      EXPECT_LT(e.relative, 1e-2)
          << graph::fusionName(m) << " causal " << causal;
      EXPECT_EQ(gpu.launches(), plan.steps.size());
    }
  }
}
