// convert-kiln-to-llvm with run-time tensor dimensions and grid: a tensor's
// dimension may be an i32 argument (kiln.tensor_dims on its pointer names the
// argument, kiln.tensor_shape holds -1 there) and a grid axis a formula of
// the arguments (kiln.grid -1, kiln.grid_extents its GridExtent text).
// A TMA load over a run-time dimension keeps TMA: the tensor map's dimension
// is read from the argument at launch (dimparams).
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm="wgmma=true" | FileCheck %s
// CHECK: runtime-dims.mlir:{{[0-9]+}}: load 128x128: TMA (cp.async.bulk.tensor
// CHECK-SAME: kiln.tensor_maps = ["ptr=2 elem=2 dims=4,-1,128 strides=3,4,5 box=1,128,64 dimparams=-1,0,-1"]
func.func @tma_runtime_rows(%n: i32, %out: !kiln.ptr<f32>,
                    %a: !kiln.ptr<bf16> {kiln.tensor_shape = array<i64: 4, -1, 128>, kiln.tensor_dims = array<i32: -1, 0, -1>},
                    %as0: i32, %as1: i32, %as2: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 4, 1, 1>, kiln.mma = "wgmma", kiln.tma} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %c128 = arith.constant 128 : i32
  %batch = kiln.program_id 0
  %bi = arith.extsi %batch : i32 to i64
  %s0 = arith.extsi %as0 : i32 to i64
  %off = arith.muli %bi, %s0 : i64
  %a1 = kiln.addptr %a, %off : <bf16>, i64
  %x = kiln.load %a1[%c0, %c0] shape[%n, %c128] strides[%as1, %as2] : !kiln.ptr<bf16> -> tensor<64x128xbf16>
  %zero = arith.constant dense<0.0> : tensor<64x128xf32>
  %r = scf.for %k = %c0 to %n step %c128 iter_args(%acc = %zero) -> (tensor<64x128xf32>) : i32 {
    %y = kiln.load %a1[%k, %c0] shape[%n, %c128] strides[%as1, %as2] : !kiln.ptr<bf16> -> tensor<128x128xbf16>
    %d = kiln.dot %x, %y, %acc : tensor<64x128xbf16>, tensor<128x128xbf16> -> tensor<64x128xf32>
    scf.yield %d : tensor<64x128xf32>
  }
  kiln.store %r, %out[%c0, %c0] shape[%c64, %c128] strides[%c128, %c1] : tensor<64x128xf32>, !kiln.ptr<f32>
  return
}

// Persistent CTAs over a run-time grid of cdiv(n, 16) x 4 programs: the
// kernel evaluates the extents from the argument at entry ((n + 15) / 16,
// then the product) and loops to it. Rows of a run-time length take element
// loads unless the argument's class says they are whole vectors
// (kiln.divisibility).
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --convert-kiln-to-llvm | FileCheck %s --check-prefix=GRID
// GRID: "persistent: the grid's x=cdiv(#0,16) y=4 z=1 programs run on at most
// GRID-LABEL: llvm.func @rows_runtime(
// GRID-SAME: %[[N:[a-z0-9]+]]: i32
// GRID: %[[UP:.*]] = arith.addi %[[N]], %c15_i32
// GRID: %[[X:.*]] = arith.divui %[[UP]], %c16_i32
// GRID: %[[XY:.*]] = arith.muli %[[X]], %c4_i32
// GRID: %[[TILES:.*]] = arith.muli %[[XY]], %c1_i32
// GRID: scf.for %{{.*}} = %{{.*}} to %[[TILES]] step
// GRID-NOT: ld.global.v4
// GRID: llvm.return
// GRID-LABEL: llvm.func @rows_div16(
// GRID: llvm.load {{.*}} -> vector<4xf32>
func.func @rows_runtime(%n: i32, %x: !kiln.ptr<f32> {kiln.tensor_shape = array<i64: -1, -1>, kiln.tensor_dims = array<i32: 0, 0>},
                        %xs0: i32, %xs1: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: -1, 4, 1>, kiln.grid_extents = ["cdiv(#0,16)", "4", "1"], kiln.persistent} {
  %c0 = arith.constant 0 : i32
  %c16 = arith.constant 16 : i32
  %p = kiln.program_id 0
  %r0 = arith.muli %p, %c16 : i32
  %t = kiln.load %x[%r0, %c0] shape[%n, %n] strides[%xs0, %xs1] : !kiln.ptr<f32> -> tensor<16x64xf32>
  %u = arith.addf %t, %t : tensor<16x64xf32>
  kiln.store %u, %x[%r0, %c0] shape[%n, %n] strides[%xs0, %xs1] : tensor<16x64xf32>, !kiln.ptr<f32>
  return
}

func.func @rows_div16(%n: i32 {kiln.divisibility = 16 : i32}, %x: !kiln.ptr<f32> {kiln.tensor_shape = array<i64: -1, -1>, kiln.tensor_dims = array<i32: 0, 0>},
                      %xs0: i32, %xs1: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 4, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c16 = arith.constant 16 : i32
  %p = kiln.program_id 0
  %r0 = arith.muli %p, %c16 : i32
  %t = kiln.load %x[%r0, %c0] shape[%n, %n] strides[%xs0, %xs1] : !kiln.ptr<f32> -> tensor<16x64xf32>
  kiln.store %t, %x[%r0, %c0] shape[%n, %n] strides[%xs0, %xs1] : tensor<16x64xf32>, !kiln.ptr<f32>
  return
}
