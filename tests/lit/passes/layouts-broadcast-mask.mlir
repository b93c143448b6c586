// kiln-assign-layouts + kiln-remove-layout-conversions on a row of logits
// and a mask comparing its column indices with a per-row label (a
// cross-entropy step): the loaded tile keeps its layout (a broadcast is a
// weaker claim than a load) and the mask is made in it, the label converted
// at its own size, one element; nothing of the 1x4096 tile moves. A
// conversion of a tile the loop does not change (here the loaded row the
// loop reads in another layout) runs once, before the loop.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=8 aligned=true" --kiln-remove-layout-conversions --cse | FileCheck %s

// CHECK-LABEL: func.func @label_mask
// CHECK-NOT: kiln.convert_layout {{.*}}tensor<1x4096
// CHECK: scf.for
// CHECK-NOT: kiln.convert_layout {{.*}}tensor<1x4096
// CHECK: return
func.func @label_mask(%x: !kiln.ptr<bf16>, %labels: !kiln.ptr<i32>,
                      %out: !kiln.ptr<f32>, %v: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4096 = arith.constant 4096 : i32
  %lab = kiln.load %labels[%c0] shape[%c1] strides[%c1] : !kiln.ptr<i32> -> tensor<1xi32>
  %labc = kiln.expand_dims %lab axis = 1 : tensor<1xi32> -> tensor<1x1xi32>
  %labb = kiln.broadcast %labc : tensor<1x1xi32> -> tensor<1x4096xi32>
  %init = arith.constant dense<0.0> : tensor<1xf32>
  %r = scf.for %v0 = %c0 to %v step %c4096 iter_args(%acc = %init) -> (tensor<1xf32>) : i32 {
    %t = kiln.load %x[%c0, %v0] shape[%c1, %v] strides[%v, %c1] : !kiln.ptr<bf16> -> tensor<1x4096xbf16>
    %f = kiln.convert %t : tensor<1x4096xbf16> -> tensor<1x4096xf32>
    %cols = kiln.iota : tensor<4096xi32>
    %row = kiln.expand_dims %cols axis = 0 : tensor<4096xi32> -> tensor<1x4096xi32>
    %off = kiln.splat %v0 : i32 -> tensor<1x4096xi32>
    %idx = arith.addi %row, %off : tensor<1x4096xi32>
    %hit = arith.cmpi eq, %idx, %labb : tensor<1x4096xi32>
    %zero = arith.constant dense<0.0> : tensor<1x4096xf32>
    %picked = arith.select %hit, %f, %zero : tensor<1x4096xi1>, tensor<1x4096xf32>
    %s = kiln.reduce sum %picked axis = 1 : tensor<1x4096xf32> -> tensor<1xf32>
    %n = arith.addf %acc, %s : tensor<1xf32>
    scf.yield %n : tensor<1xf32>
  }
  kiln.store %r, %out[%c0] shape[%c1] strides[%c1] : tensor<1xf32>, !kiln.ptr<f32>
  return
}

// CHECK-LABEL: func.func @invariant_conversion
// CHECK: kiln.convert_layout {{.*}} : tensor<32x64xf32
// CHECK-NEXT: scf.for
// CHECK-NOT: kiln.convert_layout
// CHECK: return
func.func @invariant_conversion(%c: !kiln.ptr<f32>, %x: !kiln.ptr<bf16>,
                                %y: !kiln.ptr<bf16>, %h: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %cs = kiln.load %c[%c0, %c0] shape[%c32, %c64] strides[%c64, %c1] : !kiln.ptr<f32> -> tensor<32x64xf32>
  // A second reader: loading it again in the loop's layout would load twice.
  kiln.store %cs, %c[%c0, %c0] shape[%c32, %c64] strides[%c64, %c1] : tensor<32x64xf32>, !kiln.ptr<f32>
  scf.for %i = %c0 to %h step %c1 : i32 {
    %row = arith.muli %i, %c32 : i32
    %t = kiln.load %x[%row, %c0] shape[%h, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
    %f = kiln.convert %t : tensor<32x64xbf16> -> tensor<32x64xf32>
    %p = arith.mulf %f, %cs : tensor<32x64xf32>
    %o = kiln.convert %p : tensor<32x64xf32> -> tensor<32x64xbf16>
    kiln.store %o, %y[%row, %c0] shape[%h, %c64] strides[%c64, %c1] : tensor<32x64xbf16>, !kiln.ptr<bf16>
  }
  return
}

// A tile added to a dot's result (a residual) is loaded again in the dot's
// layout, pairs of columns a thread, rather than converted through shared
// memory; only the dot operands' conversions are left.
// CHECK-LABEL: func.func @residual
// CHECK-COUNT-2: kiln.convert_layout {{.*}}#dot_operand
// CHECK-NOT: kiln.convert_layout
// CHECK: kiln.load {{.*}} -> tensor<64x64xbf16, #mma>
// CHECK-NOT: kiln.convert_layout
// CHECK: return
func.func @residual(%a: !kiln.ptr<bf16>, %b: !kiln.ptr<bf16>,
                    %r: !kiln.ptr<bf16>, %out: !kiln.ptr<f32>)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %x = kiln.load %a[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %y = kiln.load %b[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %d = kiln.dot %x, %y, %zero : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  %rt = kiln.load %r[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %rf = kiln.convert %rt : tensor<64x64xbf16> -> tensor<64x64xf32>
  %s = arith.addf %d, %rf : tensor<64x64xf32>
  kiln.store %s, %out[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}
