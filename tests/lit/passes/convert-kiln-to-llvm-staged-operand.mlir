// convert-kiln-to-llvm on sm_90a: a dot operand that is a register tile the
// dot's warps cannot read from their own registers (here a transposed dot
// result: its rows are spread over both warpgroups, the dot needs all of
// them in each) is staged once in a shared-memory region of its own, in
// wgmma's 128-byte swizzle, and read through a descriptor (A MN-major): no
// conversion through the scratch area and back to registers. The previous
// readers are waited for and every warp passes a barrier before the tile is
// written; the writes are fenced for the async proxy before the dot. Without
// wgmma the conversion goes to registers (ldmatrix) as before.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=8 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=8 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm | FileCheck %s --check-prefix=MMA

// CHECK: kiln.lowering_report = [
// CHECK-SAME: "convert-kiln-to-llvm-staged-operand.mlir:{{[0-9]+}}: dot 64x128x128: wgmma m64n64k16 x8 per warpgroup (2 warpgroups), A descriptor, MN-major shared memory, B descriptor, MN-major shared memory, 128-byte swizzle"
// CHECK-SAME: kiln.smem_conversions = 0
// CHECK: llvm.func @transposed_operand(
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>
// CHECK-NEXT: nvvm.barrier0
// CHECK-COUNT-16: llvm.store {{.*}} : vector<2xbf16>, !llvm.ptr<3>
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>
// CHECK-NEXT: nvvm.barrier0
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-COUNT-8: nvvm.wgmma.mma_async {{.*}} A[<bf16>, <one>, <col>]

// MMA: "convert-kiln-to-llvm-staged-operand.mlir:{{[0-9]+}}: dot 64x128x128: mma.sync m16n8k16, A in registers

func.func @transposed_operand(%x: !kiln.ptr<bf16>, %w: !kiln.ptr<bf16>,
                              %y: !kiln.ptr<bf16>, %o: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.mma = "wgmma"} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %c128 = arith.constant 128 : i32
  %a = kiln.load %x[%c0, %c0] shape[%c128, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<128x64xbf16>
  %b = kiln.load %w[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %zero = arith.constant dense<0.0> : tensor<128x64xf32>
  %d = kiln.dot %a, %b, %zero : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
  %h = kiln.convert %d : tensor<128x64xf32> -> tensor<128x64xbf16>
  %t = kiln.trans %h [1, 0] : tensor<128x64xbf16> -> tensor<64x128xbf16>
  %k = kiln.load %y[%c0, %c0] shape[%c128, %c128] strides[%c128, %c1] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
  %zero2 = arith.constant dense<0.0> : tensor<64x128xf32>
  %e = kiln.dot %t, %k, %zero2 : tensor<64x128xbf16>, tensor<128x128xbf16> -> tensor<64x128xf32>
  kiln.store %e, %o[%c0, %c0] shape[%c64, %c128] strides[%c128, %c1] : tensor<64x128xf32>, !kiln.ptr<f32>
  return
}
