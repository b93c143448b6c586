// convert-kiln-to-llvm with persistent CTAs (kiln.persistent): the body runs
// in a loop over the grid's programs, from %ctaid.x in steps of %nctaid.x up
// to the grid's 15 programs; the tile is the loop's index, mirrored within
// its round of %nctaid.x in odd full rounds; program ids come from the tile
// (x fastest: x = t mod 3, y = t / 3 mod 5) and num_programs is the grid's
// own.
// The module says kiln.persistent (the launcher sizes the grid).
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --convert-kiln-to-llvm | FileCheck %s
// With a producer warpgroup the tile loop carries the stage ring's slot and
// phase on both sides: the next tile's first loop starts where this tile's
// last loop left the ring. The 64x128 block loaded before the loops (only
// dots read it) is the producer's too: one TMA copy per tile on a full and
// an empty mbarrier of its own (phase: the tile's round mod 2), which the
// compute warps wait for where the load was and release after the second
// loop, its last reader.
// RUN: sed 's/kiln.warp_specialize}/kiln.warp_specialize, kiln.persistent}/' %S/convert-kiln-to-llvm-warp-roles.mlir | kiln-opt --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s --check-prefix=RING
// Dynamic tiles (kiln.dynamic_tiles): the producer's leader thread takes tile
// ids from a module global counter (its own id first, then nctaid.x plus the
// counter's old value; the taker of the last id, here 0, zeroes it) and
// publishes each in a two-slot ring (wait for the slot's empty mbarrier,
// store the id, arrive on its full one); the compute warps receive them
// (wait full, load, arrive empty). Both loop while the id is below the grid's
// programs, carrying id, count and the stage ring.
// RUN: sed 's/kiln.warp_specialize}/kiln.warp_specialize, kiln.persistent, kiln.dynamic_tiles}/' %S/convert-kiln-to-llvm-warp-roles.mlir | kiln-opt --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s --check-prefix=DYNAMIC
// Without a producer warpgroup there is no one to take them: fixed rounds.
// RUN: sed 's/kiln.tma}/kiln.tma, kiln.persistent, kiln.dynamic_tiles}/' %S/convert-kiln-to-llvm-tma.mlir | kiln-opt --kiln-assign-layouts="num-warps=4 aligned=true" --convert-kiln-to-llvm="wgmma=true" | FileCheck %s --check-prefix=NOPRODUCER
// TMA loops without a producer have mbarriers of their own, whose phases
// would restart on every tile: persistence is refused and the report says so.
// The file's second kernel pipelines by cp.async, which persistence keeps.
// RUN: sed 's/kiln.tma}/kiln.tma, kiln.persistent}/' %S/convert-kiln-to-llvm-tma.mlir | kiln-opt --kiln-assign-layouts="num-warps=4 aligned=true" --convert-kiln-to-llvm="wgmma=true" | FileCheck %s --check-prefix=REFUSED

// CHECK: kiln.lowering_report = ["persistent: the grid's 15 programs run on at most as many CTAs as the GPU holds at once, in rounds of n (x fastest): CTA c of n takes program c of each round, n - 1 - c of every second full one"
// CHECK-SAME: kiln.persistent
// CHECK: llvm.func @rows(
// CHECK: %[[FIRST:.*]] = nvvm.read.ptx.sreg.ctaid.x
// CHECK: %[[STEP:.*]] = nvvm.read.ptx.sreg.nctaid.x
// CHECK: scf.for %[[I:.*]] = %[[FIRST]] to %c15_i32 step %[[STEP]]
// CHECK: %[[R:.*]] = arith.divui %[[I]], %[[STEP]]
// CHECK: arith.trunci %[[R]] : i32 to i1
// CHECK: %[[T:.*]] = arith.select %{{.*}}, %{{.*}}, %[[I]]
// CHECK-DAG: arith.remui %[[T]], %c3_i32{{.*}} : i32
// CHECK-DAG: %[[Y:.*]] = arith.divui %[[T]], %c3_i32{{.*}} : i32
// CHECK-DAG: arith.remui %[[Y]], %c5_i32{{.*}} : i32
// CHECK-NOT: nvvm.read.ptx.sreg.ctaid
// CHECK-NOT: nvvm.read.ptx.sreg.nctaid
// CHECK: llvm.return

// RING: "persistent: the grid's 1 programs {{.*}}; the stage ring runs on across them"
// RING-SAME: load 64x128: TMA (cp.async.bulk.tensor, 2 box(es) of 64x64, 128-byte swizzle, mbarrier completion) into shared memory, by the producer warpgroup once per tile (a full and an empty mbarrier of its own), released after its last reader
// RING-COUNT-6: nvvm.mbarrier.init
// RING: nvvm.setmaxregister decrease 24
// RING: scf.for
// RING: %[[PROUND:.*]] = arith.divui
// RING: %[[PPHASE:.*]] = arith.andi %[[PROUND]], %c1_i32
// RING: %[[PWANT:.*]] = arith.xori %[[PPHASE]], %c1_i32
// RING: nvvm.mbarrier.try_wait.parity %{{.*}}, %[[PWANT]]
// RING: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c16384_i32
// RING-COUNT-2: nvvm.cp.async.bulk.tensor.shared.cluster.global
// RING: } else {
// RING: %[[TILES:.*]]:2 = scf.for {{.*}} iter_args(%[[S:.*]] = %{{.*}}, %[[P:.*]] = %{{.*}}) -> (i32, i32)
// RING: %[[ROUND:.*]] = arith.divui
// RING: %[[PHASE:.*]] = arith.andi %[[ROUND]], %c1_i32
// RING: nvvm.mbarrier.try_wait.parity %{{.*}}, %[[PHASE]]
// RING: scf.for {{.*}} iter_args({{.*}}%[[S]], %{{.*}} = %[[P]])
// RING: scf.for
// RING: scf.yield
// RING-NEXT: }
// RING-NEXT: arith.constant
// RING: nvvm.mbarrier.arrive

// REFUSED: "persistent: no (the schedule asks for it; not possible: its TMA loops have no producer warpgroup (their mbarrier phases would restart on every tile)): one CTA per program"
// REFUSED-SAME: "persistent: the grid's 1 programs run on at most as many CTAs as the GPU holds at once, in rounds of n (x fastest): CTA c of n takes program c of each round, n - 1 - c of every second full one"

// DYNAMIC: "persistent: the grid's 1 programs run on at most as many CTAs as the GPU holds at once, handed out in grid order (x fastest) as CTAs become free: the producer takes the next from a global counter and passes it on through shared memory; the stage ring runs on across them"
// The tile counter is the last parameter, after the tensor maps.
// DYNAMIC-SAME: kiln.tile_counter
// DYNAMIC: llvm.func @producer_gemm({{.*}}nvvm.grid_constant}, %[[COUNTER:.*]]: !llvm.ptr<1>)
// DYNAMIC-NOT: llvm.mlir.global
// DYNAMIC-COUNT-10: nvvm.mbarrier.init
// DYNAMIC: nvvm.setmaxregister decrease 24
// DYNAMIC: %[[FIRST:.*]] = nvvm.read.ptx.sreg.ctaid.x
// DYNAMIC: nvvm.mbarrier.try_wait.parity
// DYNAMIC: llvm.store %[[FIRST]], %{{.*}} : i32, !llvm.ptr<3>
// DYNAMIC: nvvm.mbarrier.arrive
// DYNAMIC: scf.while (%[[ID:.*]] = %[[FIRST]], %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) : (i32, i32, i32, i32)
// DYNAMIC: arith.cmpi ult, %[[ID]], %c1_i32
// DYNAMIC: } do {
// DYNAMIC: nvvm.cp.async.bulk.tensor.shared.cluster.global
// DYNAMIC: %[[OLD:.*]] = llvm.atomicrmw add %[[COUNTER]], %{{.*}} monotonic
// DYNAMIC: %[[LAST:.*]] = arith.cmpi eq, %[[OLD]], %c0_i32
// DYNAMIC: scf.if %[[LAST]] {
// DYNAMIC: llvm.store %{{.*}}, %[[COUNTER]] : i32, !llvm.ptr<1>
// DYNAMIC: %[[N:.*]] = nvvm.read.ptx.sreg.nctaid.x
// DYNAMIC: %[[NEXT:.*]] = arith.addi %[[N]], %[[OLD]]
// DYNAMIC: nvvm.mbarrier.try_wait.parity
// DYNAMIC: llvm.store %[[NEXT]], %{{.*}} : i32, !llvm.ptr<3>
// DYNAMIC: nvvm.mbarrier.arrive
// DYNAMIC: } else {
// DYNAMIC: nvvm.mbarrier.try_wait.parity
// DYNAMIC: %[[GOT:.*]] = llvm.load %{{.*}} : !llvm.ptr<3> -> i32
// DYNAMIC: nvvm.mbarrier.arrive
// DYNAMIC: scf.while (%{{.*}} = %[[GOT]],
// DYNAMIC: } do {
// DYNAMIC: nvvm.mbarrier.try_wait.parity
// DYNAMIC: llvm.load %{{.*}} : !llvm.ptr<3> -> i32
// DYNAMIC: nvvm.mbarrier.arrive
// DYNAMIC: scf.yield

// NOPRODUCER: "dynamic tiles: no (the schedule asks for them; no producer warpgroup to take them): fixed rounds"

func.func @rows(%out: !kiln.ptr<f32>) attributes {kiln.kernel, kiln.grid = array<i64: 3, 5, 1>, kiln.persistent} {
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  %c64 = arith.constant 64 : i32
  %x = kiln.program_id 0
  %y = kiln.program_id 1
  %nx = kiln.num_programs 0
  %row = arith.muli %y, %nx : i32
  %i = arith.addi %row, %x : i32
  %v = arith.sitofp %i : i32 to f32
  %t = kiln.splat %v : f32 -> tensor<64xf32>
  %at = arith.muli %i, %c64 : i32
  kiln.store %t, %out[%at] shape[%c64] strides[%c1] : tensor<64xf32>, !kiln.ptr<f32>
  return
}
