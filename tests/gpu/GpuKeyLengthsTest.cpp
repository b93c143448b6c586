//===- GpuKeyLengthsTest.cpp - keys per batch on the GPU ------------------===//
//
// AttentionShape::keyLengths under the default schedule (TMA for the whole
// key blocks, the ragged end through views that end at each length; split
// keys for decoding) against the fp64 host reference, NaN in every K/V slot
// past a length, O, LSE and the workspace poisoned before the launches.
// Skips, saying why, without an sm_90a GPU.
//
//===----------------------------------------------------------------------===//
#include "../unit/KeyLengthsCase.h"
#include "../unit/TestUtil.h"
#include "DeviceTensors.h"

#include "kiln/runtime/Cuda.h"

#include <gtest/gtest.h>

using namespace kiln;
using test::DeviceTensors;
using test::KeyLengthsCase;

namespace {

class KeyLengthsOnGpu : public ::testing::TestWithParam<KeyLengthsCase> {};

TEST_P(KeyLengthsOnGpu, MatchesFp64ReferenceReadingNoSlotPastALength) {
  REQUIRE_GPU();
  if (cuda::device().arch() != "sm_90a")
    GTEST_SKIP() << "SKIPPED: the default schedule needs sm_90a";
  const KeyLengthsCase &c = GetParam();
  test::KeyLengthsTensors t(c);
  DeviceTensors dt;
  for (auto [name, tensor] : t.named())
    dt.add(name, *tensor,
           name == "O" || name == "LSE" || name == "OSplit" ||
               name == "LSESplit");
  for (const Kernel &kernel : kernels::attentionForwardKernels(
           c.shape(), {.splitKeys = int(c.ranges)}))
    test::runOnGpu(kernel, dt);
  dt.download("O", t.o);
  dt.download("LSE", t.lse);
  t.check(c);
}

INSTANTIATE_TEST_SUITE_P(Shapes, KeyLengthsOnGpu,
                         ::testing::ValuesIn(test::keyLengthsCases()),
                         [](const auto &info) { return info.param.name(); });

} // namespace
