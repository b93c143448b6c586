//===- DslErrorTest.cpp - DSL misuse names the user's line and shapes -----===//
#include "TestUtil.h"

#include "kiln/dsl/Dsl.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>

using namespace kiln;
using namespace kiln::dsl;
using kiln::test::errorOf;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(DslError, DotOfMismatchedShapes) {
  int line = 0;
  std::string msg = errorOf([&] {
    KernelBuilder k("t", {1});
    Tile a = zeros({128, 64}, bf16), b = zeros({128, 64}, bf16);
    line = __LINE__ + 1; // the next line misuses the DSL
    dot(a, b);
  });
  EXPECT_THAT(
      msg,
      AllOf(HasSubstr(KILN_FILE_LINE(line) + ": dot: inner dimensions differ"),
            HasSubstr("lhs is 128x64, rhs is 128x64 (rhs must be 64xN)")));
}

TEST(DslError, DotOfMixedDtypes) {
  int line = 0;
  std::string msg = errorOf([&] {
    KernelBuilder k("t", {1});
    Tile a = zeros({16, 16}, bf16), b = zeros({16, 16}, f16);
    line = __LINE__ + 1; // the next line misuses the DSL
    dot(a, b);
  });
  EXPECT_THAT(
      msg,
      HasSubstr(
          KILN_FILE_LINE(line) +
          ": dot: mixed dtypes without a conversion: lhs is bf16, rhs is f16"));
}

TEST(DslError, BroadcastOfIncompatibleShapes) {
  int line = 0;
  std::string msg = errorOf([&] {
    KernelBuilder k("t", {1});
    Tile a = zeros({64, 32}, f32), b = zeros({64}, f32);
    line = __LINE__ + 1; // the next line misuses the DSL
    Tile c = a + b;
  });
  EXPECT_THAT(msg, AllOf(HasSubstr(KILN_FILE_LINE(line) +
                                   ": +: broadcast of incompatible shapes"),
                         HasSubstr("lhs is 64x32, rhs is 64")));

  msg = errorOf([&] {
    KernelBuilder k("t", {1});
    Tile a = zeros({64, 32}, f32), b = zeros({64, 16}, f32);
    line = __LINE__ + 1; // the next line misuses the DSL
    Tile c = max(a, b);
  });
  EXPECT_THAT(msg, AllOf(HasSubstr(KILN_FILE_LINE(line) + ": max: broadcast"),
                         HasSubstr("lhs is 64x32, rhs is 64x16")));
}

TEST(DslError, MixedDtypesWithoutConversion) {
  int line = 0;
  std::string msg = errorOf([&] {
    KernelBuilder k("t", {1});
    Tile a = zeros({8, 8}, bf16), b = zeros({8, 8}, f32);
    line = __LINE__ + 1; // the next line misuses the DSL
    Tile c = a * b;
  });
  EXPECT_THAT(
      msg,
      HasSubstr(
          KILN_FILE_LINE(line) +
          ": *: mixed dtypes without a conversion: lhs is bf16, rhs is f32"));
  // With the conversion written out it builds.
  EXPECT_EQ(errorOf([&] {
              KernelBuilder k("t", {1});
              Tile a = zeros({8, 8}, bf16), b = zeros({8, 8}, f32);
              Tile c = a.to(f32) * b;
              k.finish();
            }),
            "<no error>");
}

TEST(DslError, StoreOfTheWrongShapeOrDtype) {
  int line = 0;
  std::string msg = errorOf([&] {
    KernelBuilder k("t", {1});
    auto O = k.tensorArg("O", f32, {128, 64});
    Tile t = zeros({64, 32}, f32);
    line = __LINE__ + 1; // the next line misuses the DSL
    store(O.block({0, 0}, {64, 64}), t);
  });
  EXPECT_THAT(msg, HasSubstr(KILN_FILE_LINE(line) +
                             ": store to O: store of the wrong shape: block is "
                             "64x64, tile is 64x32"));
  msg = errorOf([&] {
    KernelBuilder k("t", {1});
    auto O = k.tensorArg("O", bf16, {128, 64});
    Tile t = zeros({64, 64}, f32);
    line = __LINE__ + 1; // the next line misuses the DSL
    store(O.block({0, 0}), t);
  });
  EXPECT_THAT(msg,
              HasSubstr(KILN_FILE_LINE(line) +
                        ": store to O: tile is f32 but the tensor holds bf16"));
}

TEST(DslError, ReductionsAndShapes) {
  int line = 0;
  std::string msg = errorOf([&] {
    KernelBuilder k("t", {1});
    Tile a = zeros({8, 4}, f32);
    line = __LINE__ + 1; // the next line misuses the DSL
    reduceMax(a, 2);
  });
  EXPECT_THAT(msg,
              HasSubstr(KILN_FILE_LINE(line) +
                        ": reduceMax: axis 2 is out of range for a 8x4 tile"));
  msg = errorOf([&] {
    KernelBuilder k("t", {1});
    Tile a = zeros({8, 4}, f32);
    line = __LINE__ + 1; // the next line misuses the DSL
    transpose(reduceSum(a, 0));
  });
  EXPECT_THAT(msg, HasSubstr(KILN_FILE_LINE(line) +
                             ": transpose: needs a 2-D tile, got 4"));
  msg = errorOf([&] {
    KernelBuilder k("t", {1});
    Tile a = zeros({8, 4}, f32);
    line = __LINE__ + 1; // the next line misuses the DSL
    where(a, a, 0.0);
  });
  EXPECT_THAT(msg, HasSubstr(KILN_FILE_LINE(line) +
                             ": where: the condition is f32, not i1"));
  msg = errorOf([&] {
    KernelBuilder k("t", {1});
    Tile a = arange(8);
    line = __LINE__ + 1; // the next line misuses the DSL
    exp(a);
  });
  EXPECT_THAT(msg, HasSubstr(KILN_FILE_LINE(line) +
                             ": exp: needs a float tile, got i32"));
}

TEST(DslError, LoopCarryMustKeepItsType) {
  int line = 0;
  std::string msg = errorOf([&] {
    KernelBuilder k("t", {1});
    Tile acc = zeros({16}, f32);
    line = __LINE__ + 1; // the next line misuses the DSL
    forRange(0, 64, 16, carry(acc), [&](Index) { acc = zeros({32}, f32); });
  });
  EXPECT_THAT(msg, AllOf(HasSubstr(KILN_FILE_LINE(line) +
                                   ": forRange: carried tile #0"),
                         HasSubstr("enters the loop as tensor<16xf32> and "
                                   "leaves the body as tensor<32xf32>")));
}

TEST(DslError, BadArgumentsAndState) {
  int line = 0;
  std::string msg = errorOf([&] {
    line = __LINE__ + 1; // the next line misuses the DSL
    Tile t = zeros({4}, f32);
  });
  EXPECT_THAT(msg, HasSubstr(KILN_FILE_LINE(line) +
                             ": kiln DSL call outside a KernelBuilder"));
  msg = errorOf([&] {
    KernelBuilder k("t", {1});
    line = __LINE__ + 1; // the next line misuses the DSL
    k.tensorArg("X", f32, {4, 0});
  });
  EXPECT_THAT(msg, HasSubstr(KILN_FILE_LINE(line) +
                             ": tensorArg X: dimension 0 of shape 4x0"));
  msg = errorOf([&] {
    KernelBuilder k("t", {1});
    auto X = k.tensorArg("X", f32, {4, 4});
    line = __LINE__ + 1; // the next line misuses the DSL
    load(X.block({0}, {4}));
  });
  EXPECT_THAT(msg, HasSubstr(KILN_FILE_LINE(line) +
                             ": block of X: 1 offsets for a 4x4 view"));
  msg = errorOf([&] {
    line = __LINE__ + 1; // the next line misuses the DSL
    KernelBuilder k("t", {0});
  });
  EXPECT_THAT(msg, HasSubstr(KILN_FILE_LINE(line) +
                             ": KernelBuilder: grid dimension 0"));
  // After errors the thread can build kernels again.
  EXPECT_EQ(errorOf([&] {
              KernelBuilder k("t", {1});
              k.finish();
            }),
            "<no error>");
}

TEST(DslError, OneBuilderPerThread) {
  int line = 0;
  std::string msg = errorOf([&] {
    KernelBuilder a("a", {1});
    line = __LINE__ + 1; // the next line misuses the DSL
    KernelBuilder b("b", {1});
  });
  EXPECT_THAT(msg, HasSubstr(KILN_FILE_LINE(line) +
                             ": KernelBuilder: another kernel is being built"));
}

// A Tile or Index kept past its KernelBuilder and used in the next kernel
// (its IR died with the builder): an error at the user's line, not a read
// of freed memory. A constant Index serves any kernel.
TEST(DslError, TilesAndIndexesOfAnotherKernel) {
  Tile stale;
  Index staleN = Index(0), constant = Index(7);
  std::optional<TensorView> staleX;
  {
    KernelBuilder first("first", {1});
    stale = zeros({16}, f32);
    staleN = first.scalarArg("N");
    staleX = first.tensorArg("X", f32, {16, 16});
  }
  int line = 0;
  std::string msg = errorOf([&] {
    KernelBuilder k("second", {1});
    line = __LINE__ + 1; // the next line misuses the DSL
    (void)(stale + 1.0);
  });
  EXPECT_THAT(msg, AllOf(HasSubstr(KILN_FILE_LINE(line) + ": "),
                         HasSubstr("was made while building another kernel"),
                         HasSubstr("in kernel 'second'")));
  msg = errorOf([&] {
    KernelBuilder k("third", {1});
    line = __LINE__ + 1; // the next line misuses the DSL
    (void)(staleN * 2);
  });
  EXPECT_THAT(msg, AllOf(HasSubstr(KILN_FILE_LINE(line) +
                                   ": an Index was made while building another "
                                   "kernel"),
                         HasSubstr("in kernel 'third'")));
  msg = errorOf([&] {
    KernelBuilder k("views", {1});
    line = __LINE__ + 1; // the next line misuses the DSL
    (void)load(staleX->block({0, 0}, {16, 16}));
  });
  EXPECT_THAT(msg, AllOf(HasSubstr(KILN_FILE_LINE(line) +
                                   ": block of X: the view was made while "
                                   "building another kernel"),
                         HasSubstr("in kernel 'views'")));
  msg = errorOf([&] {
    KernelBuilder k("fourth", {1});
    (void)stale.shape(); // no builder is current for `stale`: refused, not read
  });
  EXPECT_THAT(msg, HasSubstr("a tile made while building another kernel"));
  EXPECT_EQ(errorOf([&] {
              KernelBuilder k("fifth", {1});
              auto X = k.tensorArg("X", i32, {16});
              store(X.block({0}), arange(16) + constant);
              k.finish();
            }),
            "<no error>");
}

// A tile or Index made inside a loop body and used after the loop (not
// carried out): an error at the use, not invalid IR at finish().
TEST(DslError, LoopValuesUsedAfterTheLoop) {
  int line = 0;
  std::string msg = errorOf([&] {
    KernelBuilder k("t", {1});
    auto X = k.tensorArg("X", f32, {64});
    Tile acc = zeros({16}, f32), inner;
    forRange(0, 4, 1, carry(acc), [&](Index) {
      inner = acc * 2.0;
      acc = acc + 1.0;
    });
    line = __LINE__ + 1; // the next line misuses the DSL
    store(X.block({0}), inner);
  });
  EXPECT_THAT(msg, HasSubstr(KILN_FILE_LINE(line) +
                             ": store: the tile was made inside a loop body "
                             "(forRange) and is used outside it: a value "
                             "leaves a loop through carry()"));
  msg = errorOf([&] {
    KernelBuilder k("t", {1});
    auto X = k.tensorArg("X", f32, {64});
    Tile acc = zeros({16}, f32);
    Index last = Index(0);
    forRange(0, 4, 1, carry(acc), [&](Index i) {
      last = i * 16;
      acc = acc + 1.0;
    });
    line = __LINE__ + 1; // the next line misuses the DSL
    store(X.block({last}), acc);
  });
  EXPECT_THAT(msg, HasSubstr(KILN_FILE_LINE(line) +
                             ": block of X: an offset was made inside a loop"));
  msg = errorOf([&] {
    KernelBuilder k("t", {1});
    Index last = Index(0);
    forRange(0, 4, 1, [&](Index i) { last = i + 1; });
    line = __LINE__ + 1; // the next line misuses the DSL
    forRange(0, last, 1, [&](Index) {});
  });
  EXPECT_THAT(msg, HasSubstr(KILN_FILE_LINE(line) +
                             ": forRange: a bound was made inside a loop"));
}

TEST(DslError, ExceptionOutOfALoopBody) {
  // A user's exception, or a DSL error the user catches, leaves a forRange
  // body half built: the carried tiles are what they were before the loop,
  // and finish() names the loop instead of failing on invalid IR.
  int loopLine = 0, finishLine = 0;
  std::string msg = errorOf([&] {
    KernelBuilder k("t", {1});
    auto X = k.tensorArg("X", f32, {16});
    Tile acc = zeros({16}, f32);
    try {
      loopLine = __LINE__ + 1;
      forRange(0, 4, 1, carry(acc), [&](Index) {
        forRange(0, 2, 1, carry(acc), [&](Index) {
          acc = acc + 1.0;
          throw std::runtime_error("the user's own");
        });
      });
    } catch (const std::runtime_error &) {
    }
    store(X.block({0}), acc); // the tile from before the loop: no error
    finishLine = __LINE__ + 1;
    (void)k.finish();
  });
  EXPECT_THAT(msg, AllOf(HasSubstr(KILN_FILE_LINE(finishLine) +
                                   ": finish: kernel t: the body of the "
                                   "forRange at " +
                                   KILN_FILE_LINE(loopLine + 1) +
                                   " was left by an exception"),
                         HasSubstr("build the kernel again")));
  msg = errorOf([&] {
    KernelBuilder k("t", {1});
    Tile acc = zeros({16}, f32);
    std::string caught;
    try {
      loopLine = __LINE__ + 1;
      forRange(0, 4, 1, carry(acc), [&](Index) {
        acc = acc + zeros({32}, f32); // a DSL error, caught below
      });
    } catch (const Error &e) {
      caught = e.what();
    }
    EXPECT_THAT(caught, HasSubstr("+"));
    (void)k.finish();
  });
  EXPECT_THAT(msg, HasSubstr("the body of the forRange at " +
                             KILN_FILE_LINE(loopLine)));
}
