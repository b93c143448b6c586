//===- GroupedRowsTest.cpp - the C API's packing of grouped heads' rows ---===//
//
// python/capi/AttentionArgs.h: non-causal grouped heads with few queries run
// as the Hk-head problem of G·Nq rows on views of the caller's q, O and LSE.
// Here on the CPU executor: that problem on those views gives the grouped
// problem's O and LSE; the cases it leaves alone; the backward workspace of
// the caller's shape holding the packed problem's.
//
//===----------------------------------------------------------------------===//
#include "AttentionArgs.h"

#include "kiln/Reference/CpuExecutor.h"
#include "kiln/kernels/AttentionBackward.h"
#include "kiln/kernels/Reference.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

using namespace kiln;

namespace {

/// The tensors of q's rows packedGroup checks beside q and LSE.
using Rows = std::vector<const kiln_c_tensor *>;

/// The C API's view of a contiguous (B, H, N, ...) host tensor; `rowStride`
/// other than 0 replaces the row stride (a (B, N, H, D) tensor's view has
/// H·D there).
kiln_c_tensor viewOf(HostTensor &t, int64_t rowStride = 0) {
  kiln_c_tensor v{t.data(), {0, 0, 0, 0}, {0, 0, 0, 0}};
  for (size_t i = 0; i < t.shape().size(); ++i) {
    v.sizes[i] = t.shape()[i];
    v.strides[i] = t.strides()[i];
  }
  if (rowStride)
    v.strides[2] = rowStride;
  return v;
}

kiln_c_attention_options bf16Options(bool causal = false) {
  kiln_c_attention_options o{};
  o.dtype = KILN_C_BF16;
  o.causal = causal;
  return o;
}

} // namespace

// q of 6 heads over 2 K/V heads with 1 or 5 queries (bhsd), and 1 query as
// a (B, N, H, D) tensor's view: the Hk-head problem of 3·Nq rows, bound to
// the packed views, writes the grouped problem's O and LSE (fp64 reference,
// outputs poisoned).
TEST(GroupedRows, PackedProblemOnTheViewsIsTheGroupedOne) {
  const int64_t b = 2, h = 6, hk = 2, nk = 70, d = 64;
  for (auto [nq, bshd] :
       {std::pair<int64_t, bool>{1, false}, {5, false}, {1, true}}) {
    const kernels::AttentionShape s{b, h, nq, nk, d, false, DType::bf16, 0, hk};
    HostTensor q(DType::bf16, {b, h, nq, d}), k(DType::bf16, {b, hk, nk, d}),
        v(DType::bf16, {b, hk, nk, d}), o(DType::bf16, {b, h, nq, d}),
        lse(DType::f32, {b, h, nq});
    q.fillRandom(nq + 1, -2, 2);
    k.fillRandom(nq + 2, -2, 2);
    v.fillRandom(nq + 3);
    o.poison();
    lse.poison();
    const kiln_c_attention_options opt = bf16Options();
    kiln_c_tensor tq = viewOf(q, bshd ? h * d : 0), tk = viewOf(k),
                  tv = viewOf(v), to = viewOf(o, bshd ? h * d : 0),
                  tl = viewOf(lse);
    ASSERT_EQ(capi::packedGroup(&opt, &tq, &tk, Rows{&to}, &tl), 3);
    const std::array<kiln_c_tensor, 3> rows = {capi::packedRows(tq, 3),
                                               capi::packedRows(to, 3),
                                               capi::packedRows(tl, 3)};
    const std::optional<kernels::AttentionShape> p =
        kernels::groupedRowsShape(s);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->heads, hk);
    EXPECT_EQ(p->seqQ, 3 * nq);
    EXPECT_EQ(p->kvHeads, 0);
    Kernel kern =
        kernels::attentionForward(*p, {.blockM = 64, .blockN = 64, .warps = 4});
    runOnCpu(kern,
             kern.bind({{"Q", capi::refOf(&rows[0], DType::bf16, 4, "q")},
                        {"K", capi::refOf(&tk, DType::bf16, 4, "k")},
                        {"V", capi::refOf(&tv, DType::bf16, 4, "v")},
                        {"O", capi::refOf(&rows[1], DType::bf16, 4, "o")},
                        {"LSE", capi::refOf(&rows[2], DType::f32, 3, "lse")}}));
    HostTensor oRef(DType::f32, o.shape()), lseRef(DType::f32, lse.shape());
    kernels::attentionReference(s, q, k, v, oRef, lseRef);
    EXPECT_LE(compareTensors(o, oRef).relative, 1e-2) << "Nq=" << nq;
    EXPECT_LE(compareTensors(lse, lseRef).relative, 1e-5) << "Nq=" << nq;
  }
}

// What packs: non-causal, fewer K/V heads than query heads, under 128
// queries a head, and every tensor of q's rows a view of one head's rows.
TEST(GroupedRows, PacksOnlyWhereExactAndAView) {
  using kernels::AttentionShape;
  const AttentionShape grouped{2, 8, 127, 300, 64, false, DType::bf16, 0, 2};
  EXPECT_TRUE(kernels::groupedRowsShape(grouped));
  AttentionShape s = grouped;
  s.causal = true; // rows of other heads would see other keys
  EXPECT_FALSE(kernels::groupedRowsShape(s));
  s = grouped;
  s.seqQ = 128; // a whole row block a head: no gain measured
  EXPECT_FALSE(kernels::groupedRowsShape(s));
  s = grouped;
  s.kvHeads = 0; // one K/V head a query head
  EXPECT_FALSE(kernels::groupedRowsShape(s));

  HostTensor q(DType::bf16, {1, 4, 3, 64}), k(DType::bf16, {1, 2, 50, 64}),
      o(DType::bf16, {1, 4, 3, 64}), lse(DType::f32, {1, 4, 3}),
      shorter(DType::bf16, {1, 4, 2, 64});
  const kiln_c_attention_options opt = bf16Options();
  kiln_c_tensor tq = viewOf(q), tk = viewOf(k), to = viewOf(o),
                tl = viewOf(lse);
  EXPECT_EQ(capi::packedGroup(&opt, &tq, &tk, Rows{&to}, &tl), 2);
  // (B, N, H, D) with 3 queries: a head's rows are not next to the last's.
  kiln_c_tensor bshd = viewOf(q, 4 * 64);
  bshd.strides[1] = 64;
  EXPECT_FALSE(capi::rowsEvenlySpaced(bshd));
  EXPECT_EQ(capi::packedGroup(&opt, &bshd, &tk, Rows{&to}, &tl), 1);
  EXPECT_EQ(capi::packedGroup(&opt, &tq, &tk, Rows{&bshd}, &tl), 1);
  kiln_c_tensor ts = viewOf(shorter);
  EXPECT_EQ(capi::packedGroup(&opt, &tq, &tk, Rows{&ts}, &tl), 1);
  kiln_c_tensor noData = to;
  noData.data = nullptr;
  EXPECT_EQ(capi::packedGroup(&opt, &tq, &tk, Rows{&noData}, &tl), 1);
  EXPECT_EQ(capi::packedGroup(&opt, &tq, &tk, Rows{nullptr}, &tl), 1);
  const kiln_c_attention_options causal = bf16Options(true);
  EXPECT_EQ(capi::packedGroup(&causal, &tq, &tk, Rows{&to}, &tl), 1);
  kiln_c_attention_options f32 = bf16Options();
  f32.dtype = KILN_C_F32; // refused later, with the usual message
  EXPECT_EQ(capi::packedGroup(&f32, &tq, &tk, Rows{&to}, &tl), 1);
}

// The backward packs into the workspace the caller sized for its own shape
// (kiln_c_attention_backward_workspace(B, H, Nq, D)).
TEST(GroupedRows, BackwardWorkspaceOfTheCallersShapeHoldsThePackedOnes) {
  for (auto [b, h, hk, nq, d] : {std::array<int64_t, 5>{1, 32, 8, 1, 128},
                                 {3, 6, 2, 5, 64},
                                 {2, 16, 1, 127, 128},
                                 {4, 12, 4, 33, 64},
                                 {1, 64, 32, 7, 128}}) {
    const kernels::AttentionShape s{b,     h,           nq, 512, d,
                                    false, DType::bf16, 0,  hk};
    const std::optional<kernels::AttentionShape> p =
        kernels::groupedRowsShape(s);
    ASSERT_TRUE(p);
    EXPECT_LE(
        kernels::BackwardWorkspace(p->batch, p->heads, p->seqQ, d).elements,
        kernels::BackwardWorkspace(b, h, nq, d).elements)
        << b << "x" << h << "/" << hk << " Nq=" << nq;
  }
}
