//===- DTypeTest.cpp - narrow float conversions and host tensors ----------===//
#include "kiln/runtime/DType.h"
#include "kiln/runtime/Error.h"
#include "kiln/runtime/HostTensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace kiln;

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3F80);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties to the even 1.
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3·2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_EQ(bf16ToFloat(floatToBf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(NAN))));
  EXPECT_TRUE(std::isinf(bf16ToFloat(floatToBf16(INFINITY))));
}

TEST(DType, HalfConversions) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(halfToFloat(0x7BFF), 65504.0f); // largest finite half
  EXPECT_EQ(floatToHalf(65520.0f), 0x7C00); // rounds up to infinity
  EXPECT_EQ(floatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24)); // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000); // tie to even: 0
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002); // tie to even: 2
  EXPECT_EQ(halfToFloat(floatToHalf(0.1f)), 0.0999755859375f);
  // 1 + 2^-11 ties between 1 and 1 + 2^-10: even is 1.
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(NAN))));
  // Every half round-trips.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = halfToFloat(uint16_t(h));
    if (!std::isnan(f))
      ASSERT_EQ(floatToHalf(f), h) << h;
  }
}

TEST(DType, Names) {
  EXPECT_EQ(parseDType("fp16"), DType::f16);
  EXPECT_EQ(parseDType("bf16"), DType::bf16);
  EXPECT_EQ(parseDType("f32"), DType::f32);
  EXPECT_FALSE(parseDType("f8").has_value());
  EXPECT_STREQ(dtypeName(DType::bf16), "bf16");
}

TEST(HostTensor, StridedViewsAndRounding) {
  // A 2x3 view with a row stride of 5: storage covers 1*5 + 2 + 1 elements.
  HostTensor t(DType::bf16, {2, 3}, {5, 1});
  EXPECT_EQ(t.storageBytes(), 8u * 2);
  t.set(std::vector<int64_t>{1, 2}, 1.0 + 1.0 / 512); // rounds to 1 in bf16
  EXPECT_EQ(t.at(std::vector<int64_t>{1, 2}), 1.0);
  EXPECT_EQ(t.flatAt(5), 1.0);
  EXPECT_THROW(t.at(std::vector<int64_t>{2, 0}), Error);
  EXPECT_THROW(HostTensor(DType::f32, {2, 2}, {1}), Error);
}

TEST(HostTensor, CompareFlagsNaN) {
  HostTensor a(DType::f32, {4}), b(DType::f32, {4});
  a.fillRandom(1);
  for (int i = 0; i < 4; ++i)
    b.flatSet(i, a.flatAt(i));
  EXPECT_EQ(compareTensors(a, b).maxAbs, 0.0);
  a.poison();
  ErrorStats e = compareTensors(a, b);
  EXPECT_EQ(e.nonFinite, 4);
  EXPECT_TRUE(std::isinf(e.relative));
}
