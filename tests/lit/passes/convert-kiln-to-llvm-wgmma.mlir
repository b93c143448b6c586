// convert-kiln-to-llvm with the wgmma schedule (kiln.mma = "wgmma"): the dot
// becomes wgmma.mma_async with shared-memory descriptors, fenced and waited
// for; without an sm_90a target, or with too few warps, it stays on mma.sync
// and the lowering report says why.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --convert-kiln-to-llvm | FileCheck %s --check-prefix=NOTARGET
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=2 aligned=true" --convert-kiln-to-llvm="wgmma=true" | FileCheck %s --check-prefix=WARPS

// CHECK: kiln.lowering_report = [
// CHECK-SAME: "convert-kiln-to-llvm-wgmma.mlir:{{[0-9]+}}: dot 64x128x128: wgmma m64n128k16 x8 per warpgroup (1 warpgroups), A descriptor, K-major shared memory, B descriptor, MN-major shared memory, 128-byte swizzle"
// CHECK: llvm.func @gemm_tile(
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT: nvvm.barrier0
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-COUNT-8: nvvm.wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NOT: nvvm.mma.sync

// NOTARGET: "schedule asks for wgmma; the target has none (sm_90a only): dots use mma.sync"
// NOTARGET-NOT: wgmma.mma_async
// NOTARGET: nvvm.mma.sync

// WARPS: mma.sync m16n8k16, A ldmatrix from shared memory, B ldmatrix from shared memory; not wgmma: needs groups of 4 warps over 64 rows each (M=64, 2 warps)
// WARPS: nvvm.mma.sync

func.func @gemm_tile(%a: !kiln.ptr<bf16>, %b: !kiln.ptr<bf16>,
                     %out: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>, kiln.mma = "wgmma"} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %c128 = arith.constant 128 : i32
  %x = kiln.load %a[%c0, %c0] shape[%c64, %c128] strides[%c128, %c1] : !kiln.ptr<bf16> -> tensor<64x128xbf16>
  %y = kiln.load %b[%c0, %c0] shape[%c128, %c128] strides[%c128, %c1] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
  %zero = arith.constant dense<0.0> : tensor<64x128xf32>
  %d = kiln.dot %x, %y, %zero : tensor<64x128xbf16>, tensor<128x128xbf16> -> tensor<64x128xf32>
  kiln.store %d, %out[%c0, %c0] shape[%c64, %c128] strides[%c128, %c1] : tensor<64x128xf32>, !kiln.ptr<f32>
  return
}
