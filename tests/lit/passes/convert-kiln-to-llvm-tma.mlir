// convert-kiln-to-llvm with the TMA schedule (kiln.tma under wgmma): a load
// pipelined in a loop, a 2-D block of a tensor argument (kiln.tensor_shape on
// its pointer, strides in the arguments after it), becomes
// cp.async.bulk.tensor copies into the stage's buffer, one per 64-column
// panel, issued by thread 0 after arming the stage's mbarrier; the loop waits
// on the mbarrier's phase. Under kiln.one_shot_loads a dot operand loaded
// outside the loop (no producer warpgroup, not persistent) is copied once,
// issued where it stands on an mbarrier of its own and waited for only after
// the loop's prologue has issued its copies; without it (@fallback) through
// registers. The tensor maps become 128-byte grid-constant
// parameters after the kernel's own, listed in kiln.tensor_maps. A load TMA
// cannot copy (here: a pointer offset that is not index x stride) falls back
// to cp.async, and the report says why.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --convert-kiln-to-llvm | FileCheck %s --check-prefix=NOTARGET

// CHECK: kiln.lowering_report = [
// CHECK-SAME: "convert-kiln-to-llvm-tma.mlir:{{[0-9]+}}: load 64x128: TMA (cp.async.bulk.tensor, 2 box(es) of 64x64, 128-byte swizzle, mbarrier completion) into shared memory, once, issued where it stands by one thread (an mbarrier of its own), waited for before its first reader (in a pipelined loop, after the loop's first copies are issued)"
// CHECK-SAME: "convert-kiln-to-llvm-tma.mlir:{{[0-9]+}}: load 128x128: TMA (cp.async.bulk.tensor, 2 box(es) of 128x64, 128-byte swizzle, mbarrier completion) into shared memory, 1 iteration(s) ahead (2 buffers)"
// CHECK-SAME: "convert-kiln-to-llvm-tma.mlir:{{[0-9]+}}: load 64x128: 16-byte vector loads to registers, stored to shared memory (not pipelined: outside a loop or not prefetchable)
// CHECK-SAME: "convert-kiln-to-llvm-tma.mlir:{{[0-9]+}}: load 128x128: cp.async (16 bytes) into shared memory, 1 iteration(s) ahead (2 buffers); not TMA: its pointer offset is not index x stride of a tensor dimension"
// CHECK-SAME: kiln.tensor_maps = ["ptr=1 elem=2 dims=4,512,128 strides=2,3,4 box=1,128,64", "ptr=1 elem=2 dims=4,512,128 strides=2,3,4 box=1,64,64"]
// CHECK: llvm.func @tma_gemm({{.*}}, %{{.*}}: !llvm.ptr {llvm.align = 64 : i32, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant})
// The stages' mbarriers and the one-shot load's, initialised by thread 0
// and fenced.
// CHECK: nvvm.mbarrier.init
// CHECK: nvvm.fence.mbarrier.init
// CHECK: nvvm.barrier0
// The one-shot load: 64x128 bf16, two 64x64 boxes, not waited for here.
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %{{.*}} : !llvm.ptr<3>, i32
// CHECK-COUNT-2: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %{{.*}}, %{{.*}}, box[%{{.*}}, %{{.*}}, %{{.*}}]
// CHECK-NOT: nvvm.mbarrier.try_wait.parity
// The prologue: 128x128 bf16 = 32768 bytes expected, two 128x64 boxes at
// coordinates (column, row, batch); then the one-shot load's wait.
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %{{.*}} : !llvm.ptr<3>, i32
// CHECK-COUNT-2: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %{{.*}}, %{{.*}}, box[%{{.*}}, %{{.*}}, %{{.*}}]
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: scf.for
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: nvvm.wgmma.mma_async

// NOTARGET: "schedule asks for TMA, which comes with wgmma only here: loads use cp.async"
// NOTARGET-NOT: cp.async.bulk.tensor

func.func @tma_gemm(%out: !kiln.ptr<f32>,
                    %a: !kiln.ptr<bf16> {kiln.tensor_shape = array<i64: 4, 512, 128>},
                    %as0: i32, %as1: i32, %as2: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.mma = "wgmma", kiln.one_shot_loads, kiln.tma} {
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
  kiln.store %r, %out[%c0, %c0] shape[%c64, %c128] strides[%c128, %c1] : tensor<64x128xf32>, !kiln.ptr<f32>
  return
}

// A 2-D tensor indexed by a third, foreign stride: not a block TMA can name.
func.func @fallback(%out: !kiln.ptr<f32>,
                    %b: !kiln.ptr<bf16> {kiln.tensor_shape = array<i64: 512, 128>},
                    %bs0: i32, %bs1: i32, %skip: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.mma = "wgmma", kiln.tma} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %c128 = arith.constant 128 : i32
  %c512 = arith.constant 512 : i32
  %batch = kiln.program_id 0
  %bi = arith.extsi %batch : i32 to i64
  %s = arith.extsi %skip : i32 to i64
  %off = arith.muli %bi, %s : i64
  %b1 = kiln.addptr %b, %off : <bf16>, i64
  %x = kiln.load %b[%c0, %c0] shape[%c512, %c128] strides[%bs0, %bs1] : !kiln.ptr<bf16> -> tensor<64x128xbf16>
  %zero = arith.constant dense<0.0> : tensor<64x128xf32>
  %r = scf.for %k = %c0 to %c512 step %c128 iter_args(%acc = %zero) -> (tensor<64x128xf32>) : i32 {
    %z = kiln.load %b1[%k, %c0] shape[%c512, %c128] strides[%bs0, %bs1] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
    %d = kiln.dot %x, %z, %acc : tensor<64x128xbf16>, tensor<128x128xbf16> -> tensor<64x128xf32>
    scf.yield %d : tensor<64x128xf32>
  }
  kiln.store %r, %out[%c0, %c0] shape[%c64, %c128] strides[%c128, %c1] : tensor<64x128xf32>, !kiln.ptr<f32>
  return
}
