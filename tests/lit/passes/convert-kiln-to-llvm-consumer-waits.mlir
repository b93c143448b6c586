// convert-kiln-to-llvm under warp roles: the compute warps wait for each dot
// of a pipelined loop only where its result is read or when the next dot has
// been issued (wgmma.wait_group 1: the older group only, the newer one keeps
// running), and for every group (wait_group 0) before they release the
// iteration's stage to the producer. Two accumulators, two dots per step.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s

// CHECK: llvm.func @two_dots(
// CHECK: } else {
// CHECK: scf.for
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: nvvm.wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NOT: nvvm.wgmma.wait.group.sync.aligned
// CHECK: nvvm.wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: nvvm.mbarrier.arrive
// CHECK: scf.yield

func.func @two_dots(%out: !kiln.ptr<f32>,
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
  %r:2 = scf.for %k = %c0 to %c512 step %c128 iter_args(%p = %zero, %q = %zero) -> (tensor<64x128xf32>, tensor<64x128xf32>) : i32 {
    %y = kiln.load %a1[%k, %c0] shape[%c512, %c128] strides[%as1, %as2] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
    %d = kiln.dot %x, %y, %p : tensor<64x128xbf16>, tensor<128x128xbf16> -> tensor<64x128xf32>
    %e = kiln.dot %x, %y, %q : tensor<64x128xbf16>, tensor<128x128xbf16> -> tensor<64x128xf32>
    scf.yield %d, %e : tensor<64x128xf32>, tensor<64x128xf32>
  }
  %sum = arith.addf %r#0, %r#1 : tensor<64x128xf32>
  kiln.store %sum, %out[%c0, %c0] shape[%c64, %c128] strides[%c128, %c1] : tensor<64x128xf32>, !kiln.ptr<f32>
  return
}
