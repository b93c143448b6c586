//===- GatherKernels.h - DSL kernels that read addresses from memory -*- C++
//-*-===//
//
// Shared by the CPU and GPU tests of gather, loadIndex and arrive: an
// embedding lookup (rows chosen by token ids, a token count read from
// memory), segment sums whose loop bounds are read from memory (CSR row
// pointers), a split sum that the last program to arrive finishes, and
// group sums that a second kernel, launched to overlap the first, finishes
// group by group as each group's programs arrive.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TESTS_GATHERKERNELS_H
#define KILN_TESTS_GATHERKERNELS_H

#include "kiln/dsl/Dsl.h"
#include "kiln/runtime/HostTensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace kiln::test {

/// Out[t, :] = Table[Ids[t], :] for t < Count[0] (rows of the table outside
/// it read 0); Out rows at and past Count[0] are written with zeros. Run-time
/// V, D and T; programs of 32 tokens and 64 columns.
inline Kernel embeddingGather() {
  using namespace kiln::dsl;
  KernelBuilder k("embedding_gather");
  Index V = k.scalarArg("V"), D = k.scalarArg("D"), T = k.scalarArg("T");
  auto Table = k.tensorArg("Table", bf16, {V, D});
  auto Ids = k.tensorArg("Ids", i32, {T});
  auto Count = k.tensorArg("Count", i32, {1});
  auto Out = k.tensorArg("Out", bf16, {T, D});
  k.setGrid({cdiv(T, 32), cdiv(D, 64)});
  Index t0 = programId(0) * 32, c0 = programId(1) * 64;
  Index count = loadIndex(Count, 0);
  Tile ids = load(Ids.block({t0}, {32}), -1);
  ids = where(arange(32) + t0 < count, ids, -1);
  store(Out.block({t0, c0}), gather(Table, ids, c0, 64));
  return k.finish();
}

/// Out[p, :] = sum of X[r, :] for Offs[p] <= r < Offs[p + 1] (f32, 64
/// columns), a program per segment.
inline Kernel segmentSums() {
  using namespace kiln::dsl;
  KernelBuilder k("segment_sums");
  Index P = k.scalarArg("P"), N = k.scalarArg("N"), P1 = k.scalarArg("P1");
  auto Offs = k.tensorArg("Offs", i32, {P1});
  auto X = k.tensorArg("X", f32, {N, 64});
  auto Out = k.tensorArg("Out", f32, {P, 64});
  k.setGrid({P});
  Index p = programId(0);
  Tile acc = zeros({1, 64}, f32);
  forRange(loadIndex(Offs, p), loadIndex(Offs, p + 1), 1, carry(acc),
           [&](Index r) {
             acc = acc + load(X.block({r, 0}, {1, 64}));
           });
  store(Out.block({p, 0}), acc);
  return k.finish();
}

/// Every one of P programs adds its R x 64 slice X[p] into the fp32
/// workspace Acc (atomics, 16 rows a step), then arrives at Count[0]; the
/// last to arrive writes Out = Acc / 2 in bf16 (run-time P and R).
inline Kernel splitSum() {
  using namespace kiln::dsl;
  KernelBuilder k("split_sum");
  Index P = k.scalarArg("P"), R = k.scalarArg("R");
  auto X = k.tensorArg("X", f32, {P, R, 64});
  auto Acc = k.tensorArg("Acc", f32, {R, 64});
  auto Count = k.tensorArg("Count", i32, {1});
  auto Out = k.tensorArg("Out", bf16, {R, 64});
  k.setGrid({P});
  Index p = programId(0);
  forRange(0, R, 16, [&](Index r0) {
    atomicAdd(Acc.block({r0, 0}), load(X[p].block({r0, 0}, {16, 64})));
  });
  Index last = (arrive(Count, 0) + 1) / P;
  forRange(0, last * R, 16, [&](Index r0) {
    store(Out.block({r0, 0}),
          (load(Acc.block({r0, 0}, {16, 64})) * 0.5).to(bf16));
  });
  return k.finish();
}

/// Program p of P adds its R x 64 slice X[p] into Acc[p % G] (atomics, 16
/// rows a step) and arrives at Count[p % G], its count unused: on persistent
/// CTAs (`persistent`) the arrival is made one program late.
inline Kernel groupSums(bool persistent) {
  using namespace kiln::dsl;
  KernelBuilder k(persistent ? "group_sums_persistent" : "group_sums");
  Index P = k.scalarArg("P"), R = k.scalarArg("R"), G = k.scalarArg("G");
  auto X = k.tensorArg("X", f32, {P, R, 64});
  auto Acc = k.tensorArg("Acc", f32, {G, R, 64});
  auto Count = k.tensorArg("Count", i32, {G});
  k.setGrid({P});
  k.setPersistent(persistent);
  Index p = programId(0), g = p % G;
  forRange(0, R, 16, [&](Index r0) {
    atomicAdd(Acc[g].block({r0, 0}), load(X[p].block({r0, 0}, {16, 64})));
  });
  arrive(Count, g);
  return k.finish();
}

/// Launched to overlap groupSums: program g waits for group g's programs
/// (those p < P with p % G = g), then writes Out[g] = Acc[g] / 2 in bf16.
inline Kernel groupFinish() {
  using namespace kiln::dsl;
  KernelBuilder k("group_finish");
  Index P = k.scalarArg("P"), R = k.scalarArg("R"), G = k.scalarArg("G");
  auto X = k.tensorArg("X", f32, {P, R, 64}); // for P: not read
  (void)X;
  auto Acc = k.tensorArg("Acc", f32, {G, R, 64});
  auto Count = k.tensorArg("Count", i32, {G});
  auto Out = k.tensorArg("Out", bf16, {G, R, 64});
  k.setGrid({G});
  k.overlapPreviousLaunch();
  Index g = programId(0);
  waitCount(Count, g, (P - g + G - 1) / G);
  forRange(0, R, 16, [&](Index r0) {
    store(Out[g].block({r0, 0}),
          (load(Acc[g].block({r0, 0}, {16, 64})) * 0.5).to(bf16));
  });
  return k.finish();
}

/// The group sums' tensors: random slices, the workspace and counts zeroed,
/// the output poisoned.
struct GroupSumData {
  HostTensor x, acc, count, out;
  GroupSumData(int64_t P, int64_t R, int64_t G)
      : x(DType::f32, {P, R, 64}), acc(DType::f32, {G, R, 64}),
        count(DType::i32, {G}), out(DType::bf16, {G, R, 64}) {
    x.fillRandom(uint64_t(P * 1000 + R * 10 + G));
    for (int64_t i = 0; i < acc.numel(); ++i)
      acc.flatSet(i, 0.0);
    for (int64_t g = 0; g < G; ++g)
      count.flatSet(g, 0.0);
    out.poison();
  }
  /// Every group's half sum within bf16's rounding; every program counted.
  void check() const {
    const int64_t P = x.shape()[0], R = x.shape()[1], G = acc.shape()[0];
    int64_t bad = 0;
    for (int64_t g = 0; g < G; ++g) {
      EXPECT_EQ(int64_t(count.flatAt(g)), (P - g + G - 1) / G)
          << "group " << g;
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < 64; ++c) {
          double want = 0;
          for (int64_t p = g; p < P; p += G)
            want += x.flatAt((p * R + r) * 64 + c);
          want *= 0.5;
          double got = out.flatAt((g * R + r) * 64 + c);
          if (!(std::abs(got - want) <= 1e-2 * std::abs(want) + 1e-3) &&
              bad++ < 5)
            ADD_FAILURE() << "Out[" << g << ", " << r << ", " << c
                          << "] = " << got << ", want " << want;
        }
    }
    EXPECT_EQ(bad, 0);
  }
};

/// The split sum's tensors: random slices, the workspace and the count
/// zeroed, the output poisoned.
struct SplitSumData {
  HostTensor x, acc, count, out;
  SplitSumData(int64_t P, int64_t R)
      : x(DType::f32, {P, R, 64}), acc(DType::f32, {R, 64}),
        count(DType::i32, {1}), out(DType::bf16, {R, 64}) {
    x.fillRandom(uint64_t(P * 1000 + R));
    for (int64_t i = 0; i < acc.numel(); ++i)
      acc.flatSet(i, 0.0);
    count.flatSet(0, 0.0);
    out.poison();
  }
  /// Out within bf16's rounding of half the sum, and every program counted.
  void check() const {
    const int64_t P = x.shape()[0], R = x.shape()[1];
    EXPECT_EQ(int64_t(count.flatAt(0)), P);
    int64_t bad = 0;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < 64; ++c) {
        double want = 0;
        for (int64_t p = 0; p < P; ++p)
          want += x.flatAt((p * R + r) * 64 + c);
        want *= 0.5;
        double got = out.flatAt(r * 64 + c);
        if (!(std::abs(got - want) <= 1e-2 * std::abs(want) + 1e-3) &&
            bad++ < 5)
          ADD_FAILURE() << "Out[" << r << ", " << c << "] = " << got
                        << ", want " << want;
      }
    EXPECT_EQ(bad, 0);
  }
};

/// The embedding lookup's tensors: a V x D table, T ids (some outside the
/// table), a count below T, the output poisoned.
struct EmbeddingData {
  HostTensor table, ids, count, out;
  EmbeddingData(int64_t V, int64_t D, int64_t T, int64_t n)
      : table(DType::bf16, {V, D}), ids(DType::i32, {T}),
        count(DType::i32, {1}), out(DType::bf16, {T, D}) {
    table.fillRandom(uint64_t(V * 7 + D));
    for (int64_t t = 0; t < T; ++t) // every 7th id outside the table
      ids.flatSet(t, t % 7 == 3 ? double(V + t)
                                : double((uint64_t(t) * 2654435761u) % V));
    count.flatSet(0, double(n));
    out.poison();
  }
  void check() const {
    const int64_t V = table.shape()[0], D = table.shape()[1],
                  T = ids.shape()[0], n = int64_t(count.flatAt(0));
    int64_t bad = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        int64_t id = int64_t(ids.flatAt(t));
        double want =
            t < n && id >= 0 && id < V ? table.flatAt(id * D + d) : 0.0;
        double got = out.flatAt(t * D + d);
        if (got != want && bad++ < 5)
          ADD_FAILURE() << "Out[" << t << ", " << d << "] = " << got
                        << ", want " << want << " (id " << id << ")";
      }
    EXPECT_EQ(bad, 0);
  }
};

/// The segment sums' tensors: P segments of 0..9 rows over N = their total.
struct SegmentData {
  HostTensor offs, x, out;
  static int64_t total(int64_t P) {
    int64_t n = 0;
    for (int64_t p = 0; p < P; ++p)
      n += (p * 5) % 10;
    return n;
  }
  explicit SegmentData(int64_t P)
      : offs(DType::i32, {P + 1}),
        x(DType::f32, {std::max<int64_t>(1, total(P)), 64}),
        out(DType::f32, {P, 64}) {
    int64_t at = 0;
    for (int64_t p = 0; p <= P; ++p) {
      offs.flatSet(p, double(at));
      at += (p * 5) % 10;
    }
    x.fillRandom(uint64_t(P));
    out.poison();
  }
  void check() const {
    const int64_t P = out.shape()[0];
    for (int64_t p = 0; p < P; ++p)
      for (int64_t c = 0; c < 64; ++c) {
        double want = 0;
        for (int64_t r = int64_t(offs.flatAt(p)); r < offs.flatAt(p + 1); ++r)
          want += x.flatAt(r * 64 + c);
        EXPECT_NEAR(out.flatAt(p * 64 + c), want, 1e-4)
            << "segment " << p << " column " << c;
      }
  }
};

} // namespace kiln::test

#endif // KILN_TESTS_GATHERKERNELS_H
