// convert-kiln-to-llvm under warp roles: a register tile that a dot reads
// from shared memory (here the transpose of a dot's bf16 result) is staged
// in a copy per stage of the producer's ring when the loop's blocks come
// from that ring. Every compute warp finishes an iteration's MMAs before it
// releases the stage, and passes the barrier after the next iteration's
// staging only once every warp has: an iteration writes its stage's copy
// with no barrier before it, one after (fenced for wgmma). Without the ring
// (no producer warpgroup) there is one copy, with a barrier on each side.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s
// RUN: sed -e 's/, kiln.warp_specialize//' %s | kiln-opt --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s --check-prefix=ONE

// CHECK: "shared memory: {{.*}}; staged operand convert-kiln-to-llvm-staged-copies.mlir:[[LINE:[0-9]+]] [{{[0-9]+}}, {{[0-9]+}}) until {{[^;]*}}; staged operand convert-kiln-to-llvm-staged-copies.mlir:[[LINE]] (copies for stages 1-1) [{{[0-9]+}}, {{[0-9]+}}) until
// CHECK: llvm.func @staged(
// CHECK: } else {
// CHECK: scf.for
// CHECK: nvvm.mbarrier.try_wait.parity
// CHECK: nvvm.wgmma.mma_async
// CHECK: nvvm.wgmma.wait.group.sync.aligned
// The stage's copy: stage 0 at the first buffer, the others in the second.
// CHECK: arith.select
// CHECK-NOT: nvvm.barrier
// CHECK: llvm.store {{.*}} : vector<{{[0-9]+}}xbf16>, !llvm.ptr<3>
// CHECK: nvvm.fence.proxy
// CHECK-NOT: llvm.store
// CHECK: nvvm.barrier id
// CHECK: nvvm.wgmma.mma_async
// CHECK: nvvm.mbarrier.arrive
// CHECK: scf.yield

// ONE-NOT: copies for stages
// ONE: llvm.func @staged(
// ONE: scf.for
// ONE: nvvm.wgmma.wait.group.sync.aligned
// ONE: nvvm.barrier0
// ONE: llvm.store {{.*}} : vector<{{[0-9]+}}xbf16>, !llvm.ptr<3>
// ONE: nvvm.barrier0
// ONE: scf.yield

func.func @staged(%out: !kiln.ptr<f32>,
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
  %zero = arith.constant dense<0.0> : tensor<128x128xf32>
  %zs = arith.constant dense<0.0> : tensor<64x128xf32>
  %r = scf.for %k = %c0 to %c512 step %c128 iter_args(%p = %zero) -> (tensor<128x128xf32>) : i32 {
    %y = kiln.load %a1[%k, %c0] shape[%c512, %c128] strides[%as1, %as2] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
    %s = kiln.dot %x, %y, %zs : tensor<64x128xbf16>, tensor<128x128xbf16> -> tensor<64x128xf32>
    %sb = kiln.convert %s : tensor<64x128xf32> -> tensor<64x128xbf16>
    %t = kiln.trans %sb [1, 0] : tensor<64x128xbf16> -> tensor<128x64xbf16>
    %d = kiln.dot %t, %x, %p : tensor<128x64xbf16>, tensor<64x128xbf16> -> tensor<128x128xf32>
    scf.yield %d : tensor<128x128xf32>
  }
  kiln.store %r, %out[%c0, %c0] shape[%c128, %c128] strides[%c128, %c1] : tensor<128x128xf32>, !kiln.ptr<f32>
  return
}
