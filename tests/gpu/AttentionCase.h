//===- AttentionCase.h - attention's GPU test problems ----------*- C++ -*-===//
//
// One forward problem of the attention GPU tests (AttnCase: shape, dtype,
// layout and schedule options), its names, the parameterized fixture whose
// TEST_P is in GpuAttentionTest.cpp (instantiated there and in
// GpuAttentionSchedulesTest.cpp), and its tensors on the device.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_TESTS_GPU_ATTENTIONCASE_H
#define KILN_TESTS_GPU_ATTENTIONCASE_H

#include "DeviceTensors.h"

#include "kiln/Compiler/Kernel.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>

namespace kiln::test {

/// Attention's tensors on the device: Q, K, V as inputs, O and LSE poisoned.
inline DeviceTensors attentionOnDevice(HostTensor &q, HostTensor &k,
                                       HostTensor &v, HostTensor &o,
                                       HostTensor &lse) {
  DeviceTensors dt;
  dt.add("Q", q, false);
  dt.add("K", k, false);
  dt.add("V", v, false);
  dt.add("O", o, true);
  dt.add("LSE", lse, true);
  return dt;
}

struct AttnCase {
  int64_t B, H, N, D;
  bool causal;
  DType dtype;
  bool bshd;
  bool wgmma = false; ///< the Hopper schedule: wgmma, 8 warps
  int tma = -1;       ///< under wgmma: 0 K/V by cp.async, -1 the default (TMA)
  int warpSpecialize = -1; ///< 1: a producer warpgroup issues the TMA copies
  int pingpong = -1;       ///< 1: the compute warpgroups take turns on Q·Kᵀ
  int overlap = -1;        ///< 1: P·V one iteration behind, after Q·Kᵀ
  int persistent = -1;     ///< 1: CTAs loop over the row blocks
  int dynamicTiles = -1;   ///< 1: row blocks handed out as CTAs free up
  int64_t headGroup = 0;   ///< causal: heads per longest-first group
  int tmaStore = -1;       ///< 0: O by st.global, not staged for TMA
  int staticShapes = -1;   ///< 1: B, H and N compiled in
  int narrowInDiagonal = -1; ///< 0: rows aligned to the end, narrow step apart
  int alignRowsToEnd = -1;   ///< 1: causal rows aligned to the end
  int maskedFirst = -1;  ///< 0: the masked key block after the others; 1: first
  int oneShotLoads = -1; ///< 1: Q by TMA once (no producer warpgroup)
  int64_t kvHeads = 0;   ///< K and V's heads (grouped-query); 0: H
};

inline void PrintTo(const AttnCase &c, std::ostream *os) {
  *os << c.B << "x" << c.H << " N=" << c.N << " D=" << c.D
      << (c.causal ? " causal " : " full ") << dtypeName(c.dtype)
      << (c.bshd ? " bshd" : "") << (c.wgmma ? " wgmma" : "")
      << (c.tma == 0 ? " cp.async" : "")
      << (c.warpSpecialize > 0 ? " producer warpgroup" : "")
      << (c.pingpong > 0 ? " ping-pong" : "")
      << (c.overlap > 0 ? " overlap" : "")
      << (c.persistent > 0 ? " persistent" : "")
      << (c.dynamicTiles > 0 ? " dynamic" : "")
      << (c.headGroup > 0 ? " groups of " + std::to_string(c.headGroup) : "")
      << (c.tmaStore == 0 ? " st.global" : "")
      << (c.staticShapes > 0 ? " static" : "")
      << (c.narrowInDiagonal == 0 ? " narrow step apart" : "")
      << (c.alignRowsToEnd > 0 ? " rows to end" : "")
      << (c.maskedFirst == 0  ? " masked block last"
          : c.maskedFirst > 0 ? " masked block first"
                              : "")
      << (c.oneShotLoads > 0 ? " one-shot loads" : "")
      << (c.kvHeads > 0 ? " kv-heads " + std::to_string(c.kvHeads) : "");
}

inline std::string caseName(const AttnCase &c) {
  return std::to_string(c.B) + "x" + std::to_string(c.H) + "_n" +
         std::to_string(c.N) + "_d" + std::to_string(c.D) +
         (c.causal ? "_causal_" : "_full_") + dtypeName(c.dtype) +
         (c.bshd ? "_bshd" : "") + (c.tma == 0 ? "_cpasync" : "") +
         (c.warpSpecialize > 0 ? "_producer" : "") +
         (c.pingpong > 0 ? "_pingpong" : "") +
         (c.overlap > 0 ? "_overlap" : "") +
         (c.persistent > 0 ? "_persistent" : "") +
         (c.dynamicTiles > 0 ? "_dynamic" : "") +
         (c.headGroup > 0 ? "_group" + std::to_string(c.headGroup) : "") +
         (c.tmaStore == 0 ? "_stglobal" : "") +
         (c.staticShapes > 0 ? "_static" : "") +
         (c.narrowInDiagonal == 0 ? "_narrowapart" : "") +
         (c.alignRowsToEnd > 0 ? "_rowstoend" : "") +
         (c.maskedFirst == 0  ? "_maskedlast"
          : c.maskedFirst > 0 ? "_maskedfirst"
                              : "") +
         (c.oneShotLoads > 0 ? "_oneshot" : "") +
         (c.kvHeads > 0 ? "_kv" + std::to_string(c.kvHeads) : "");
}

class AttentionOnGpu : public ::testing::TestWithParam<AttnCase> {};

constexpr DType bf16 = DType::bf16, f16 = DType::f16;

} // namespace kiln::test

#endif // KILN_TESTS_GPU_ATTENTIONCASE_H
