//===- VerifierTest.cpp - the verifiers through the C++ API ---------------===//
#include "kiln/Compiler/Kernel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using ::testing::HasSubstr;

TEST(Verifier, AcceptsValidIR) {
  EXPECT_EQ(kiln::verifyModuleText(R"mlir(
    func.func @f(%a: tensor<16x32xbf16>, %b: tensor<32x8xbf16>, %c: tensor<16x8xf32>) {
      %0 = kiln.dot %a, %b, %c : tensor<16x32xbf16>, tensor<32x8xbf16> -> tensor<16x8xf32>
      return
    })mlir"),
            "");
}

TEST(Verifier, NamesTheShapes) {
  std::string d = kiln::verifyModuleText(R"mlir(
    func.func @f(%a: tensor<16x32xbf16>, %b: tensor<16x8xbf16>, %c: tensor<16x8xf32>) {
      %0 = kiln.dot %a, %b, %c : tensor<16x32xbf16>, tensor<16x8xbf16> -> tensor<16x8xf32>
      return
    })mlir");
  EXPECT_THAT(d, HasSubstr("input:3:12"));
  EXPECT_THAT(d, HasSubstr("inner dimensions differ: lhs is 16x32, rhs is 16x8 "
                           "(rhs must be 32xN)"));

  d = kiln::verifyModuleText(R"mlir(
    func.func @f(%x: tensor<16x2xf32>) {
      %0 = kiln.broadcast %x : tensor<16x2xf32> -> tensor<16x32xf32>
      return
    })mlir");
  EXPECT_THAT(d, HasSubstr("cannot broadcast 16x2 to 16x32"));

  d = kiln::verifyModuleText(R"mlir(
    func.func @f(%x: tensor<8x4xf32>) {
      %0 = kiln.reduce sum %x axis = 0 : tensor<8x4xf32> -> tensor<8xf32>
      return
    })mlir");
  EXPECT_THAT(d, HasSubstr("reducing 8x4 along axis 0 gives 4, not 8"));
}

TEST(Verifier, ReportsParseErrors) {
  std::string d = kiln::verifyModuleText("func.func @f( {");
  EXPECT_THAT(d, HasSubstr("input:1"));
}
