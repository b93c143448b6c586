// convert-kiln-to-llvm with warp roles (kiln.warp_specialize, with TMA): a
// producer warpgroup after the kernel's 4 warps runs the scalar code and a
// copy of the pipelined loop that waits for a released stage ("empty"
// mbarrier), arms its "full" mbarrier and issues the copies. The two loops
// draw their stages from one ring: one set of mbarriers (2 stages, a full and
// an empty one each), the second loop's slot and phase start where the
// first's ended, on both sides, and the producer does not wait for the
// consumers between the loops. The compute warps wait for "full", compute,
// and arrive on "empty";
// their barriers are named barrier 1 over their 128 threads. setmaxnreg takes
// registers from the producer; one compute warpgroup keeps its launch count
// (248 at 256 threads: more than the 240 setmaxnreg would raise it to).
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s
// Two CTAs per SM (kiln.min_blocks_per_sm = 2): 128 registers a thread at
// launch, so the compute warpgroup is raised to (128 * 256 - 24 * 128) / 128
// = 232 and the producer lowered to 24.
// RUN: sed 's/kiln.warp_specialize}/kiln.warp_specialize, kiln.min_blocks_per_sm = 2 : i64}/' %s | kiln-opt --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s --check-prefix=TWO

// TWO: "warp roles: warps 4-7 a producer warpgroup (one thread issues the TMA copies; setmaxnreg 24), warps 0-3 compute (setmaxnreg 232)
// TWO: llvm.func @producer_gemm(
// TWO-SAME: nvvm.minctasm = 2
// TWO: nvvm.setmaxregister decrease 24
// TWO: nvvm.setmaxregister increase 232

// CHECK: kiln.lowering_report = [
// CHECK-SAME: "warp roles: warps 4-7 a producer warpgroup (one thread issues the TMA copies; setmaxnreg 24), warps 0-3 compute (registers as launched), per stage a full and an empty mbarrier, one ring of 2 stages for all 2 loop(s)"
// CHECK-SAME: load 128x128: TMA (cp.async.bulk.tensor, 2 box(es) of 128x64, 128-byte swizzle, mbarrier completion) into shared memory, by the producer warpgroup, up to 2 iteration(s) ahead (2 buffers)
// CHECK-SAME: kiln.producer_warps = 4
// CHECK: llvm.func @producer_gemm(
// CHECK-SAME: nvvm.maxntid = array<i32: 256, 1, 1>
// CHECK-COUNT-4: nvvm.mbarrier.init
// CHECK-NOT: nvvm.mbarrier.init
// CHECK: nvvm.barrier0
// CHECK: scf.if
// CHECK: nvvm.setmaxregister decrease 24
// CHECK: %[[PSLOT:.*]]:2 = scf.for
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: nvvm.mbarrier.arrive.expect_tx
// CHECK-COUNT-2: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: scf.yield
// CHECK-NOT: nvvm.mbarrier.try_wait.parity
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[PSLOT]]#0, %{{.*}} = %[[PSLOT]]#1)
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: scf.yield
// CHECK-NOT: nvvm.mbarrier.try_wait.parity
// CHECK: } else {
// CHECK-NOT: nvvm.setmaxregister increase
// CHECK: nvvm.barrier id = %{{.*}} number_of_threads = %{{.*}}
// CHECK: %[[CSLOT:.*]]:66 = scf.for
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK-NOT: nvvm.cp.async.bulk.tensor
// CHECK: nvvm.wgmma.mma_async
// CHECK: nvvm.mbarrier.arrive %{{.*}} : !llvm.ptr<3>
// CHECK: scf.yield
// CHECK: scf.for {{.*}} iter_args({{.*}}%[[CSLOT]]#64, %{{.*}} = %[[CSLOT]]#65)
// CHECK: llvm.return

func.func @producer_gemm(%out: !kiln.ptr<f32>,
                    %a: !kiln.ptr<bf16> {kiln.tensor_shape = array<i64: 4, 512, 128>},
                    %as0: i32, %as1: i32, %as2: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.mma = "wgmma", kiln.tma, kiln.warp_specialize} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %c128 = arith.constant 128 : i32
  %c512 = arith.constant 512 : i32
  %batch = kiln.program_id 0
  %bi = arith.extsi %batch : i32 to i64
  %s0 = arith.extsi %as0 : i32 to i64
  %off = arith.muli %bi, %s0 : i64
  %a1 = kiln.addptr %a, %off : <bf16>, i64
  %x = kiln.load %a1[%c0, %c0] shape[%c512, %c128] strides[%as1, %as2] : !kiln.ptr<bf16> -> tensor<64x128xbf16>
  %zero = arith.constant dense<0.0> : tensor<64x128xf32>
  %r = scf.for %k = %c0 to %c512 step %c128 iter_args(%acc = %zero) -> (tensor<64x128xf32>) : i32 {
    %y = kiln.load %a1[%k, %c0] shape[%c512, %c128] strides[%as1, %as2] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
    %d = kiln.dot %x, %y, %acc : tensor<64x128xbf16>, tensor<128x128xbf16> -> tensor<64x128xf32>
    scf.yield %d : tensor<64x128xf32>
  }
  %r2 = scf.for %k = %c0 to %c512 step %c128 iter_args(%acc = %r) -> (tensor<64x128xf32>) : i32 {
    %y = kiln.load %a1[%k, %c0] shape[%c512, %c128] strides[%as1, %as2] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
    %d = kiln.dot %x, %y, %acc : tensor<64x128xbf16>, tensor<128x128xbf16> -> tensor<64x128xf32>
    scf.yield %d : tensor<64x128xf32>
  }
  kiln.store %r2, %out[%c0, %c0] shape[%c64, %c128] strides[%c128, %c1] : tensor<64x128xf32>, !kiln.ptr<f32>
  return
}

