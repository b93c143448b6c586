//===- main.cpp - kiln used from a project of its own ---------------------===//
//
// Builds a DSL kernel of its own and kiln's attention, runs both on the CPU
// executor (on the GPU too when there is one) and checks them against plain
// references; exits 1 on a mismatch.
//
//===----------------------------------------------------------------------===//
#include "kiln/Compiler/Compile.h"
#include "kiln/Reference/CpuExecutor.h"
#include "kiln/dsl/Dsl.h"
#include "kiln/kernels/Attention.h"
#include "kiln/kernels/Reference.h"
#include "kiln/runtime/Cuda.h"

#include <cmath>
#include <cstdio>

using namespace kiln;
using namespace kiln::dsl;

/// y = 2x + 1 over a vector, 128 elements a program.
static Kernel axpb(int64_t n) {
  KernelBuilder k("axpb", {cdiv(n, 128)});
  auto X = k.tensorArg("X", f32, {n});
  auto Y = k.tensorArg("Y", f32, {n});
  Index i0 = programId(0) * 128;
  store(Y.block({i0}), load(X.block({i0}, {128})) * 2.0 + 1.0);
  return k.finish();
}

int main() try {
  HostTensor x(DType::f32, {1000}), y(DType::f32, {1000});
  x.fillRandom(1);
  y.poison();
  Kernel k = axpb(1000);
  runOnCpu(k, k.bind({{"X", x.ref()}, {"Y", y.ref()}}));
  double worst = 0;
  for (int64_t i = 0; i < 1000; ++i)
    worst = std::max(worst, std::abs(y.flatAt(i) - (2 * x.flatAt(i) + 1)));

  kernels::AttentionShape s{1, 2, 100, 100, 64, true, DType::bf16, 0};
  HostTensor q(s.dtype, {1, 2, 100, 64}), kk(s.dtype, q.shape()),
      v(s.dtype, q.shape()), o(s.dtype, q.shape()), lse(DType::f32, {1, 2, 100}),
      oRef(DType::f32, q.shape()), lseRef(DType::f32, lse.shape());
  q.fillRandom(2);
  kk.fillRandom(3);
  v.fillRandom(4);
  o.poison();
  Kernel attention = kernels::attentionForward(s);
  runOnCpu(attention, attention.bind({{"Q", q.ref()},
                                      {"K", kk.ref()},
                                      {"V", v.ref()},
                                      {"O", o.ref()},
                                      {"LSE", lse.ref()}}));
  kernels::attentionReference(s, q, kk, v, oRef, lseRef);
  ErrorStats e = compareTensors(o, oRef);
  std::printf("consumer: axpb max error %.1e; attention on the CPU relative "
              "error %.1e; GPU: %s\n",
              worst, e.relative,
              cuda::available() ? cuda::device().name.c_str() : "none");
  return worst < 1e-6 && e.relative < 1e-2 && e.nonFinite == 0 ? 0 : 1;
} catch (const kiln::Error &e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}
