//===- HopperCodegenTest.cpp - sm_90a schedules as emitted (no GPU) -------===//
//
// What the default Hopper schedule's parts leave in the PTX: wgmma, the
// producer warpgroup's copies, paths per tensor, the ragged end's loop,
// the overlapped loop, ping-pong turns, copy address forms
// (CodegenTest.cpp: the compiler's general guarantees).
//
//===----------------------------------------------------------------------===//
#include "CodegenUtil.h"
#include "TestUtil.h"

#include "kiln/Compiler/Compile.h"
#include "kiln/Compiler/Toolkit.h"
#include "kiln/dsl/Dsl.h"
#include "kiln/kernels/Attention.h"
#include "kiln/kernels/AttentionBackward.h"
#include "kiln/kernels/Gemm.h"
#include "kiln/kernels/Softmax.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <set>

using namespace kiln;
using ::testing::HasSubstr;
using ::testing::Not;

using test::countOf;
using test::reportOf;
using test::selfAttention;

// Under the wgmma schedule on sm_90a every dot is a warpgroup MMA (the
// register-A form for P·V) and the lowering report says so; on sm_80 the
// same kernel falls back to mma.sync, and the report says that too.
TEST(Codegen, WgmmaScheduleEmitsWarpgroupMma) {
  kernels::AttentionShape s = selfAttention(4096, 128, false);
  Kernel k =
      kernels::attentionForward(s, {.warps = 8, .wgmma = 1, .overlap = 0});
  CompiledKernel c = compileForGpu(k, {"sm_90a", 0});
  // Q·Kᵀ: 8 k-steps of m64n64k16 from descriptors; P·V: 4 of m64n128k16.
  EXPECT_EQ(countOf(c.ptx, "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16"),
            8u);
  EXPECT_EQ(countOf(c.ptx, "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16"),
            4u);
  EXPECT_EQ(countOf(c.ptx, "mma.sync.aligned"), 0u);
  EXPECT_EQ(countOf(c.ptx, "wgmma.fence.sync.aligned"), 2u);
  EXPECT_EQ(countOf(c.ptx, "wgmma.wait_group.sync.aligned \t0"), 2u);
  EXPECT_GE(countOf(c.ptx, "fence.proxy.async.shared::cta"), 1u);
  std::string report = reportOf(c);
  EXPECT_THAT(report, HasSubstr("Forward.cpp:"));
  EXPECT_THAT(report, HasSubstr(": dot 128x64x128: wgmma m64n64k16 x8 per "
                                "warpgroup (2 warpgroups), A descriptor, "
                                "K-major shared memory, B descriptor, K-major "
                                "shared memory"));
  EXPECT_THAT(report, HasSubstr("dot 128x128x64: wgmma m64n128k16 x4 per "
                                "warpgroup (2 warpgroups), A in registers, B "
                                "descriptor, MN-major shared memory"));
  // K and V through TMA, one 64x64 box per 64-column panel.
  EXPECT_THAT(report, HasSubstr("load 64x128: TMA (cp.async.bulk.tensor, 2 "
                                "box(es) of 64x64, 128-byte swizzle, mbarrier "
                                "completion) into shared memory, 1 "
                                "iteration(s) ahead (2 buffers)"));
  // prologue + loop
  EXPECT_EQ(countOf(c.ptx, "cp.async.bulk.tensor.4d.shared::cluster"), 8u);
  EXPECT_EQ(countOf(c.ptx, "cp.async.cg"), 0u);
  // O through TMA: each warpgroup's 64 rows, one box per panel.
  EXPECT_THAT(report, HasSubstr("store 128x128: TMA (cp.async.bulk.tensor "
                                "from a 128-byte swizzled staging tile of 32 "
                                "KB; each warpgroup copies 2 box(es) of "
                                "64x64)"));
  EXPECT_EQ(countOf(c.ptx, "cp.async.bulk.tensor.4d.global.shared::cta"), 2u);
  EXPECT_EQ(countOf(c.ptx, "cp.async.bulk.wait_group.read \t0"), 2u);
  ASSERT_EQ(c.tensorMaps.size(), 3u); // K, V and O
  // Their B, H and N are the run-time arguments 0, 1 and 3 (Nk) or 2 (Nq).
  EXPECT_EQ(c.tensorMaps[0].str(), "ptr=9 elem=2 dims=-1,-1,-1,128 "
                                   "strides=10,11,12,13 box=1,1,64,64 "
                                   "dimparams=0,1,3,-1");
  EXPECT_EQ(c.tensorMaps[2].str(), "ptr=19 elem=2 dims=-1,-1,-1,128 "
                                   "strides=20,21,22,23 box=1,1,64,64 "
                                   "dimparams=0,1,2,-1");
  // Without TMA in the schedule: cp.async, no tensor maps.
  CompiledKernel async = compileForGpu(
      kernels::attentionForward(s, {.warps = 8, .wgmma = 1, .tma = 0}),
      {"sm_90a", 0});
  EXPECT_TRUE(async.tensorMaps.empty());
  EXPECT_EQ(countOf(async.ptx, "cp.async.bulk.tensor"), 0u);
  std::string asyncReport = reportOf(async);
  EXPECT_THAT(asyncReport,
              HasSubstr("load 64x128: cp.async (16 bytes) into shared "
                        "memory, 1 iteration(s) ahead (2 buffers)"));

  CompiledKernel old = compileForGpu(k, {"sm_80", 0});
  EXPECT_EQ(countOf(old.ptx, "wgmma"), 0u);
  ASSERT_FALSE(old.report.empty());
  EXPECT_THAT(old.report[0], HasSubstr("schedule asks for wgmma; the target "
                                       "has none (sm_90a only)"));
}

// Warp roles: the default causal D=128 schedule adds a producer warpgroup
// that issues the TMA copies; the compute warps take its registers and sync
// among themselves on a named barrier. Without TMA the request falls back,
// and the report says why.
TEST(Codegen, ProducerWarpgroupIssuesTheCopies) {
  kernels::AttentionShape s = selfAttention(4096, 128, true);
  CompiledKernel c =
      compileForGpu(kernels::attentionForward(s, {.overlap = 0}), {"sm_90a"});
  EXPECT_EQ(c.threads, 384); // 8 compute warps + 4
  EXPECT_EQ(countOf(c.ptx, "setmaxnreg.dec.sync.aligned.u32 \t24"), 1u);
  EXPECT_EQ(countOf(c.ptx, "setmaxnreg.inc.sync.aligned.u32 \t240"), 1u);
  // The compute warps release the stages of both loops, and Q.
  EXPECT_GE(countOf(c.ptx, "mbarrier.arrive.shared.b64"), 3u);
  // Only the producer issues copies: one per panel per load per loop, and
  // Q's two panels once per tile.
  EXPECT_EQ(countOf(c.ptx, "cp.async.bulk.tensor.4d.shared::cluster"), 10u);
  // Without the dots after the loops' V buffers O's staging tile fits.
  EXPECT_EQ(countOf(c.ptx, "cp.async.bulk.tensor.4d.global.shared::cta"), 2u);
  std::string report = reportOf(c);
  EXPECT_THAT(report, HasSubstr("warp roles: warps 8-11 a producer warpgroup "
                                "(one thread issues the TMA copies; "
                                "setmaxnreg 24), warps 0-7 compute "
                                "(setmaxnreg 240)"));
  EXPECT_THAT(report, HasSubstr("load 128x128: TMA (cp.async.bulk.tensor, 2 "
                                "box(es) of 128x64, 128-byte swizzle, mbarrier "
                                "completion) into shared memory, by the "
                                "producer warpgroup, up to 2 iteration(s) "
                                "ahead (2 buffers)"));
  EXPECT_THAT(report, HasSubstr("by the producer warpgroup once per tile (a "
                                "full and an empty mbarrier of its own), "
                                "released after its last reader"));

  kernels::AttentionConfig noTma;
  noTma.tma = 0;
  noTma.warpSpecialize = 1;
  CompiledKernel f =
      compileForGpu(kernels::attentionForward(s, noTma), {"sm_90a"});
  EXPECT_EQ(f.threads, 256);
  EXPECT_EQ(countOf(f.ptx, "setmaxnreg"), 0u);
  report = reportOf(f);
  EXPECT_THAT(report, HasSubstr("warp roles: none (the schedule asks for a "
                                "producer warpgroup; not possible: no loop "
                                "fetches through TMA)"));
}

// Paths per tensor: at N % 4 != 0 LSE's rows (N fp32) are not 16-byte
// aligned. Only LSE's store takes element accesses; Q, K and V keep TMA and
// the producer warpgroup, O its TMA store, and the kernel is the aligned
// one's but for LSE's stores. (Shapes compiled in: with run-time shapes the
// kernel keeps LSE unspecialised.)
TEST(Codegen, UnalignedTensorKeepsOthersOnTheirPaths) {
  for (bool causal : {false, true}) {
    kernels::AttentionShape s = selfAttention(4097, 128, causal);
    s.batch = 2;
    s.heads = 3;
    Kernel k = kernels::attentionForward(s, {.staticShapes = 1});
    CompiledKernel c =
        compileForGpu(k, {.arch = "sm_90a", .unalignedTensors = {"LSE"}});
    std::string report = reportOf(c);
    SCOPED_TRACE(report);
    EXPECT_THAT(report, HasSubstr("warp roles: warps 8-11 a producer"));
    EXPECT_GE(countOf(report, ": TMA (cp.async.bulk.tensor"), 2u);
    EXPECT_THAT(report, Not(HasSubstr("element loads")));
    EXPECT_THAT(report, HasSubstr("store 128: st.global from registers, one "
                                  "element each; tensor LSE is not "
                                  "specialised as aligned"));
    EXPECT_EQ(countOf(report, "is not specialised as aligned"), 1u);
    EXPECT_GT(countOf(c.ptx, "cp.async.bulk.tensor"), 0u);
    EXPECT_EQ(tensorSpecialisation(c),
              "aligned rows: Q, K, V, O; element accesses: LSE");
    for (const TensorParamInfo &t : c.tensors)
      EXPECT_EQ(t.aligned, t.name != "LSE") << t.name;
    // What the launched object (and KILN_LOG=launch) says of the variant.
    std::string summary = variantSummary(c);
    EXPECT_THAT(summary, HasSubstr("attention_fwd sm_90a (aligned rows: Q, K, "
                                   "V, O; element accesses: LSE; persistent)"));
    EXPECT_THAT(summary, HasSubstr("load 128x128: TMA | "));
    EXPECT_THAT(summary, HasSubstr("store 128: st.global from registers"));
    EXPECT_THAT(summary, HasSubstr("dot 128x128x128: wgmma"));
    EXPECT_THAT(summary, Not(HasSubstr("warp roles")));
    EXPECT_EQ(c.spec().variant, summary);
    EXPECT_EQ(c.spec().report, c.report);
    // Without the specialisation the same kernel compiles differently, and
    // every tensor is named.
    CompiledKernel none =
        compileForGpu(k, {.arch = "sm_90a", .assumeAligned = false});
    EXPECT_GE(countOf(reportOf(none), "is not specialised as aligned"), 5u);
    EXPECT_EQ(countOf(none.ptx, "cp.async.bulk.tensor"), 0u);
  }
  EXPECT_THAT(test::errorOf([] {
                compileForGpu(
                    kernels::attentionForward(selfAttention(64, 64, false)),
                    {.unalignedTensors = {"X"}});
              }),
              HasSubstr("unalignedTensors names X, which is not a tensor"));
}

// Non-causal with a ragged end: from 16 key blocks on, the unmasked blocks in
// one loop and the end in a masked one (64-key blocks at D=64, where the
// kernel asks ptxas for two CTAs per SM); below that, one masked loop.
// With run-time shapes every ragged Nk takes those loops (at D=128 the
// ragged block first, in a loop of its own before the whole blocks, by
// default; asked not to, a masked end loop per width, 128 or 32 keys, one
// of which runs once; at D=64 the main loop's last step, masked).
TEST(Codegen, RaggedEndHasALoopOfItsOwn) {
  auto loops = [](const Kernel &k) { return countOf(k.ir(), "scf.for"); };
  const kernels::AttentionConfig exact{.staticShapes = 1};
  for (int64_t d : {64, 128}) {
    SCOPED_TRACE(d);
    Kernel ragged =
        kernels::attentionForward(selfAttention(2049, d, false), exact);
    EXPECT_EQ(loops(ragged), 2u);
    EXPECT_EQ(
        loops(kernels::attentionForward(selfAttention(2048, d, false), exact)),
        1u);
    EXPECT_EQ(
        loops(kernels::attentionForward(selfAttention(1023, d, false), exact)),
        1u);
    EXPECT_EQ(loops(kernels::attentionForward(selfAttention(1023, d, false))),
              d == 64 ? 1u : 2u);
    EXPECT_EQ(loops(kernels::attentionForward(selfAttention(1023, d, false),
                                              {.maskedBlockFirst = 0})),
              d == 64 ? 1u : 3u);
    EXPECT_EQ(loops(kernels::attentionForward(selfAttention(2048, d, false))),
              1u);
    CompiledKernel c = compileForGpu(ragged, {.unalignedTensors = {"LSE"}});
    EXPECT_EQ(countOf(c.ptx, ".minnctapersm 2"), d == 64 ? 1u : 0u);
    // K and V pipelined in both loops.
    EXPECT_EQ(countOf(reportOf(c), "iteration(s) ahead"), 4u) << reportOf(c);
  }
}

// The default at D=128, N=4k: P·V one iteration behind Q·Kᵀ. Each loop
// iteration issues Q·Kᵀ, then the previous P·V, and waits for the first only
// (one group left in flight) before the softmax; one P·V after the loop.
TEST(Codegen, OverlappedLoopLeavesPVInFlight) {
  kernels::AttentionShape s = selfAttention(4096, 128, false);
  CompiledKernel c = compileForGpu(kernels::attentionForward(s), {"sm_90a"});
  EXPECT_EQ(c.threads, 384);
  EXPECT_GE(countOf(c.ptx, "wgmma.wait_group.sync.aligned \t1;"), 1u);
  EXPECT_GE(countOf(c.ptx, "setmaxnreg.inc.sync.aligned.u32"), 1u);
  std::string report = reportOf(c);
  EXPECT_THAT(report, HasSubstr("loop: its last dot runs one iteration "
                                "behind, issued after the next iteration's "
                                "first dot (kiln-overlap-dots)"));
  // Two P·V dots, both with P in registers: the loop's and the one after it.
  EXPECT_EQ(countOf(report, "A in registers"), 2u);
  // So does V for the dot after the loop, by the producer warpgroup.
  EXPECT_EQ(countOf(report, "by the producer warpgroup once per tile"), 2u);
  // A ragged Nk: the ragged key block first (maskedBlockFirst), its P·V in
  // the first iteration of the loop over the whole blocks; no step after.
  s.seqQ = s.seqK = 1000;
  std::string ragged = reportOf(compileForGpu(kernels::attentionForward(s),
                                              {.unalignedTensors = {"LSE"}}));
  EXPECT_EQ(countOf(ragged, "loop: the next loop's first iteration"), 1u)
      << ragged;
  EXPECT_EQ(countOf(ragged, "loop: its last dot runs one iteration behind"),
            1u);
  EXPECT_EQ(countOf(ragged, "dots not overlapped"), 0u);
  EXPECT_EQ(countOf(ragged, "A in registers"), 2u);
  // Causal: the diagonal block first, likewise, at every N.
  s.seqQ = s.seqK = 512;
  s.causal = true;
  std::string diagonal =
      reportOf(compileForGpu(kernels::attentionForward(s), {"sm_90a"}));
  EXPECT_EQ(countOf(diagonal, "loop: the next loop's first iteration"), 1u)
      << diagonal;
  EXPECT_EQ(countOf(diagonal, "loop: its last dot runs one iteration behind"),
            1u);
  // Without it, causal attention over shorter keys keeps the schedule
  // without overlap (its two loops' V buffers cost O's TMA staging).
  CompiledKernel short_ = compileForGpu(
      kernels::attentionForward(s, {.maskedBlockFirst = 0}), {"sm_90a"});
  EXPECT_EQ(countOf(reportOf(short_), "kiln-overlap-dots"), 0u);
  EXPECT_EQ(countOf(short_.ptx, "wgmma.wait_group.sync.aligned \t1;"), 0u);
}

// Ping-pong: warpgroup 0 takes the first turn (an arrival on its barrier),
// each loop's Q·Kᵀ is bracketed by a sync on the warpgroup's own barrier and
// an arrival on the other's after the commit, and warpgroup 0 takes the last
// hand-back at the end. (Without the dead-row skip, whose pipeline takes
// turns too: DeadRowsCodegenTest.)
TEST(Codegen, PingpongTakesTurnsOnTheFirstDot) {
  kernels::AttentionShape s = selfAttention(4096, 128, true);
  kernels::AttentionConfig pp;
  pp.pingpong = 1;
  pp.skipDeadRows = 0;
  CompiledKernel c =
      compileForGpu(kernels::attentionForward(s, pp), {"sm_90a"});
  EXPECT_EQ(countOf(c.ptx, "bar.arrive 2, 256"), 1u);
  EXPECT_EQ(countOf(c.ptx, "bar.sync \t2, 256"), 1u);
  EXPECT_EQ(countOf(c.ptx, "bar.sync \t%r"), 2u); // 2 loops, id 2 + wg
  EXPECT_EQ(countOf(c.ptx, "bar.arrive %r"), 2u); // id 3 - wg
  // The sync comes before the loop's first MMA, the arrival after its commit.
  size_t sync = c.ptx.find("bar.sync \t%r"),
         arrive = c.ptx.find("bar.arrive %r");
  ASSERT_NE(sync, std::string::npos);
  size_t mma = c.ptx.find("wgmma.mma_async", sync),
         commit = c.ptx.find("wgmma.commit_group", sync);
  EXPECT_LT(mma, arrive);
  EXPECT_LT(commit, arrive);
  EXPECT_THAT(reportOf(c), HasSubstr("ping-pong: compute warpgroups 0 and 1 "
                                     "take turns issuing the first dot of "
                                     "each pipelined loop (2 loop(s)"));
  // Without the producer warpgroup there is no ping-pong, and the report says
  // why.
  pp.warpSpecialize = 0;
  CompiledKernel none =
      compileForGpu(kernels::attentionForward(s, pp), {"sm_90a"});
  EXPECT_EQ(countOf(none.ptx, "bar.arrive"), 0u);
  EXPECT_THAT(reportOf(none),
              HasSubstr("ping-pong: none (the schedule asks for it; not "
                        "possible: no producer warpgroup)"));
}

// The K/V copy-address knob changes only how cp.async destinations are
// computed: both forms copy into the same shared memory and assemble.
TEST(Codegen, CopyAddressFormsDifferOnlyInAddressing) {
  kernels::AttentionShape s = selfAttention(1024, 128, true);
  kernels::AttentionConfig base, perRegister;
  base.tma = perRegister.tma = 0; // TMA copies have no per-thread addresses
  base.copyAddressesPerRegister = 0;
  perRegister.copyAddressesPerRegister = 1;
  Kernel a = kernels::attentionForward(s, base),
         b = kernels::attentionForward(s, perRegister);
  EXPECT_THAT(b.ir(), HasSubstr("kiln.copy_addresses_per_register"));
  EXPECT_THAT(a.ir(), Not(HasSubstr("kiln.copy_addresses_per_register")));
  CompiledKernel ca = compileForGpu(a), cb = compileForGpu(b);
  EXPECT_NE(ca.ptx, cb.ptx);
  EXPECT_EQ(ca.sharedBytes, cb.sharedBytes);
  // The same copies and tensor-core work either way.
  EXPECT_EQ(countOf(ca.ptx, "cp.async.cg.shared.global"),
            countOf(cb.ptx, "cp.async.cg.shared.global"));
  EXPECT_GT(countOf(ca.ptx, "cp.async.cg.shared.global"), 0u);
  EXPECT_EQ(countOf(ca.ptx, "mma.sync"), countOf(cb.ptx, "mma.sync"));
}
