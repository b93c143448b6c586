// convert-kiln-to-llvm with kiln.invariant_a_in_registers: a dot in a loop
// whose A operand is a loop-invariant tile in shared memory (here X, loaded
// before the loop, the left operand of both dots) reads it into registers
// once, with ldmatrix before the loop (8 k-slices: 128 columns), and the
// loop's MMAs take wgmma's register form (inline PTX: A in four b32
// registers, B by descriptor). Without the attribute, both operands by
// descriptor.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s
// RUN: sed -e 's/, kiln.invariant_a_in_registers//' %s | kiln-opt --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s --check-prefix=DESC

// CHECK: convert-kiln-to-llvm-invariant-a.mlir:{{[0-9]+}}: dot 64x128x128: wgmma m64n128k16 x8 per warpgroup (1 warpgroups), A in registers, B descriptor
// CHECK: llvm.func @two_dots(
// CHECK: } else {
// CHECK-COUNT-8: nvvm.ldmatrix
// CHECK-NOT: nvvm.ldmatrix
// CHECK: scf.for
// CHECK-NOT: nvvm.ldmatrix
// CHECK-NOT: nvvm.wgmma.mma_async
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16
// CHECK: scf.yield

// DESC: <stdin>:{{[0-9]+}}: dot 64x128x128: wgmma m64n128k16 x8 per warpgroup (1 warpgroups), A descriptor
// DESC-NOT: nvvm.ldmatrix
// DESC: nvvm.wgmma.mma_async

func.func @two_dots(%out: !kiln.ptr<f32>,
                   %a: !kiln.ptr<bf16> {kiln.tensor_shape = array<i64: 4, 512, 128>},
                   %as0: i32, %as1: i32, %as2: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.mma = "wgmma", kiln.tma, kiln.warp_specialize, kiln.invariant_a_in_registers} {
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
