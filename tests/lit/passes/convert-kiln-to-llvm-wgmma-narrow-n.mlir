// convert-kiln-to-llvm with the wgmma schedule, a 64-row dot over two
// warpgroups (8 warps): each takes 32 of its 64 columns, an m64n32k16
// wgmma. B is N-major (its rows are K): the second warpgroup's descriptor
// starts 64 bytes into the swizzled 128-byte rows of B's one 64-wide panel,
// (column & 63) * 2 beside the panel's offset, rather than the dot falling
// back to mma.sync.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=8 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s

// CHECK: kiln.lowering_report = [
// CHECK-SAME: "convert-kiln-to-llvm-wgmma-narrow-n.mlir:{{[0-9]+}}: dot 64x64x128: wgmma m64n32k16 x8 per warpgroup (2 warpgroups), A descriptor, K-major shared memory, B descriptor, MN-major shared memory, 128-byte swizzle"
// CHECK: llvm.func @narrow_n(
// CHECK: %[[PANEL:.*]] = arith.muli %{{.*}}, %c16384_i32{{.*}} : i32
// CHECK: %[[MASK:.*]] = arith.constant 63 : i32
// CHECK-NEXT: %[[COL:.*]] = arith.andi %{{.*}}, %[[MASK]] : i32
// CHECK-NEXT: %[[BYTES:.*]] = arith.muli %[[COL]], %{{.*}} : i32
// CHECK-NEXT: arith.addi %[[PANEL]], %[[BYTES]] : i32
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-COUNT-8: nvvm.wgmma.mma_async {{.*}}<m = 64, n = 32, k = 16>
// CHECK-NOT: nvvm.mma.sync

func.func @narrow_n(%a: !kiln.ptr<bf16>, %b: !kiln.ptr<bf16>,
                    %out: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.mma = "wgmma"} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %c128 = arith.constant 128 : i32
  %x = kiln.load %a[%c0, %c0] shape[%c64, %c128] strides[%c128, %c1] : !kiln.ptr<bf16> -> tensor<64x128xbf16>
  %y = kiln.load %b[%c0, %c0] shape[%c128, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<128x64xbf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %d = kiln.dot %x, %y, %zero : tensor<64x128xbf16>, tensor<128x64xbf16> -> tensor<64x64xf32>
  kiln.store %d, %out[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}
