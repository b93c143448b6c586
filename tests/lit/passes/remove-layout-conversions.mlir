// kiln-remove-layout-conversions: round trips fold, chains collapse, cheap
// tiles are recomputed in the layout their user reads, conversions of loaded
// (or loop-carried) data stay.
// RUN: kiln-opt %s --kiln-remove-layout-conversions | FileCheck %s

#a = #kiln.layout<blocked, [128], reg = [], lane = [[1], [2], [4], [8], [16]], warp = [[32], [64]]>
#b = #kiln.layout<blocked, [128], reg = [], lane = [[2], [4], [8], [16], [32]], warp = [[64], [1]]>
#bacc = #kiln.layout<mma, [16, 8], reg = [[0, 1], [8, 0]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []>
#bblk = #kiln.layout<blocked, [16, 8], reg = [[0, 1], [0, 2]], lane = [[0, 4], [1, 0], [2, 0], [4, 0], [8, 0]], warp = []>
#brow = #kiln.layout<blocked, [16], reg = [], lane = [[1], [2], [4], [8], [0]], warp = []>
#be1 = #kiln.layout<blocked, [16, 1], reg = [], lane = [[1, 0], [2, 0], [4, 0], [8, 0], [0, 0]], warp = []>
#be2 = #kiln.layout<blocked, [16, 1], reg = [], lane = [[0, 0], [1, 0], [2, 0], [4, 0], [8, 0]], warp = []>

// CHECK-DAG: #[[A:blocked[0-9]*]] = #kiln.layout<blocked, [128], reg = [], lane = {{\[}}[1],
// CHECK-DAG: #[[B:blocked[0-9]*]] = #kiln.layout<blocked, [128], reg = [], lane = {{\[}}[2],

// CHECK-LABEL: func.func @round_trip
// CHECK: %[[X:.*]] = kiln.load
// CHECK-NEXT: %[[Y:.*]] = kiln.convert_layout %[[X]] : tensor<128xf32, #[[A]]> -> tensor<128xf32, #[[B]]>
// CHECK-NEXT: kiln.store %[[X]], {{.*}} : tensor<128xf32, #[[A]]>
// CHECK-NEXT: kiln.store %[[Y]], {{.*}} : tensor<128xf32, #[[B]]>
func.func @round_trip(%p: !kiln.ptr<f32>, %n: i32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %x = kiln.load %p[%c0] shape[%n] strides[%c1] : !kiln.ptr<f32> -> tensor<128xf32, #a>
  %y = kiln.convert_layout %x : tensor<128xf32, #a> -> tensor<128xf32, #b>
  %z = kiln.convert_layout %y : tensor<128xf32, #b> -> tensor<128xf32, #a>
  kiln.store %z, %p[%c0] shape[%n] strides[%c1] : tensor<128xf32, #a>, !kiln.ptr<f32>
  kiln.store %y, %p[%c0] shape[%n] strides[%c1] : tensor<128xf32, #b>, !kiln.ptr<f32>
  return
}

// CHECK-LABEL: func.func @recompute
// CHECK-NEXT: arith.constant 0
// CHECK-NEXT: arith.constant 1
// CHECK-NEXT: %[[I:.*]] = kiln.iota : tensor<128xi32, #[[B]]>
// CHECK-NEXT: %[[S:.*]] = kiln.splat %{{.*}} : i32 -> tensor<128xi32, #[[B]]>
// CHECK-NEXT: %[[O:.*]] = arith.addi %[[I]], %[[S]] : tensor<128xi32, #[[B]]>
// CHECK-NEXT: kiln.store %[[O]]
// CHECK-NEXT: return
func.func @recompute(%q: !kiln.ptr<i32>, %n: i32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %i = kiln.iota : tensor<128xi32, #a>
  %s = kiln.splat %n : i32 -> tensor<128xi32, #a>
  %o = arith.addi %i, %s : tensor<128xi32, #a>
  %ob = kiln.convert_layout %o : tensor<128xi32, #a> -> tensor<128xi32, #b>
  kiln.store %ob, %q[%c0] shape[%n] strides[%c1] : tensor<128xi32, #b>, !kiln.ptr<i32>
  return
}

// A loop's initial value is recomputed; its carried value is converted.
// CHECK-LABEL: func.func @carried
// CHECK: %[[INIT:.*]] = arith.constant dense<0.000000e+00> : tensor<128xf32, #[[B]]>
// CHECK: scf.for {{.*}} iter_args(%[[IT:.*]] = %[[INIT]]) -> (tensor<128xf32, #[[B]]>)
// CHECK: %[[C:.*]] = kiln.convert_layout %[[IT]] : tensor<128xf32, #[[B]]> -> tensor<128xf32, #[[A]]>
// CHECK: arith.addf %[[C]]
func.func @carried(%p: !kiln.ptr<f32>, %n: i32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %zero = arith.constant dense<0.0> : tensor<128xf32, #a>
  %init = kiln.convert_layout %zero : tensor<128xf32, #a> -> tensor<128xf32, #b>
  %r = scf.for %k = %c0 to %c4 step %c1 iter_args(%it = %init) -> (tensor<128xf32, #b>) : i32 {
    %x = kiln.load %p[%k] shape[%n] strides[%c1] : !kiln.ptr<f32> -> tensor<128xf32, #a>
    %ita = kiln.convert_layout %it : tensor<128xf32, #b> -> tensor<128xf32, #a>
    %sum = arith.addf %ita, %x : tensor<128xf32, #a>
    %next = kiln.convert_layout %sum : tensor<128xf32, #a> -> tensor<128xf32, #b>
    scf.yield %next : tensor<128xf32, #b>
  }
  kiln.store %r, %p[%c0] shape[%n] strides[%c1] : tensor<128xf32, #b>, !kiln.ptr<f32>
  return
}

// A broadcast tile read in another layout (a per-row statistic added to an
// mma tile): the row is loaded in the slice of the reader's layout, outside
// the loop, and nothing is converted.
// CHECK-LABEL: func.func @broadcast_row
// CHECK-NOT: kiln.convert_layout
// CHECK: kiln.load {{.*}} -> tensor<16xf32, #[[SLICE:mma[0-9]*]]>
// CHECK-NEXT: arith.constant dense<2.0{{.*}}> : tensor<16xf32, #[[SLICE]]>
// CHECK-NEXT: arith.mulf {{.*}} : tensor<16xf32, #[[SLICE]]>
// CHECK-NEXT: scf.for
// CHECK-NEXT: kiln.expand_dims
// CHECK-NEXT: kiln.broadcast
// CHECK-NEXT: arith.addf
// CHECK-NOT: kiln.convert_layout
func.func @broadcast_row(%p: !kiln.ptr<f32>, %n: i32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %cst = arith.constant dense<2.0> : tensor<16xf32, #brow>
  %zero = arith.constant dense<0.0> : tensor<16x8xf32, #bacc>
  %x = kiln.load %p[%c0] shape[%n] strides[%c1] : !kiln.ptr<f32> -> tensor<16xf32, #brow>
  %s = arith.mulf %x, %cst : tensor<16xf32, #brow>
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%a = %zero) -> (tensor<16x8xf32, #bacc>) : i32 {
    %e = kiln.expand_dims %s axis = 1 : tensor<16xf32, #brow> -> tensor<16x1xf32, #be1>
    %e2 = kiln.convert_layout %e : tensor<16x1xf32, #be1> -> tensor<16x1xf32, #be2>
    %b = kiln.broadcast %e2 : tensor<16x1xf32, #be2> -> tensor<16x8xf32, #bblk>
    %bc = kiln.convert_layout %b : tensor<16x8xf32, #bblk> -> tensor<16x8xf32, #bacc>
    %y = arith.addf %a, %bc : tensor<16x8xf32, #bacc>
    scf.yield %y : tensor<16x8xf32, #bacc>
  }
  kiln.store %r, %p[%c0, %c0] shape[%n, %n] strides[%c4, %c1] : tensor<16x8xf32, #bacc>, !kiln.ptr<f32>
  return
}

// A bias row of 256 columns added to a 128x256 accumulator on 8 warps: in
// the slice of the accumulator's layout each thread would hold 64 of its
// elements and each element would sit in 64 threads, so the row stays loaded
// blocked (each element once) and is converted; the accumulator is not.
#wblk = #kiln.layout<blocked, [128, 256], reg = [[1, 0], [2, 0], [4, 0], [8, 0], [16, 0], [32, 0], [64, 0]], lane = [[0, 1], [0, 2], [0, 4], [0, 8], [0, 16]], warp = [[0, 32], [0, 64], [0, 128]]>
#wrow = #kiln.layout<blocked, [256], reg = [[1], [2], [4]], lane = [[8], [16], [32], [64], [128]], warp = [[0], [0], [0]]>
#we1 = #kiln.layout<blocked, [1, 256], reg = [[0, 1], [0, 2], [0, 4]], lane = [[0, 8], [0, 16], [0, 32], [0, 64], [0, 128]], warp = [[0, 0], [0, 0], [0, 0]]>
#we2 = #kiln.layout<blocked, [1, 256], reg = [], lane = [[0, 1], [0, 2], [0, 4], [0, 8], [0, 16]], warp = [[0, 32], [0, 64], [0, 128]]>
#wacc = #kiln.layout<mma, [128, 256], reg = [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32], [0, 64], [0, 128]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = [[16, 0], [32, 0], [64, 0]]>

// CHECK-LABEL: func.func @broadcast_wide_row
// CHECK: %[[R:.*]] = kiln.load {{.*}} -> tensor<256xbf16, #[[ROW:blocked[0-9]*]]>
// CHECK-NEXT: kiln.convert_layout %[[R]] : tensor<256xbf16, #[[ROW]]> -> tensor<256xbf16, #[[SLICE:mma[0-9]*]]>
// CHECK-NEXT: kiln.convert {{.*}} -> tensor<256xf32, #[[SLICE]]>
// CHECK-NEXT: kiln.expand_dims
// CHECK-NEXT: kiln.broadcast
// CHECK-NEXT: arith.addf
// CHECK-NOT: kiln.convert_layout
func.func @broadcast_wide_row(%p: !kiln.ptr<bf16>, %q: !kiln.ptr<f32>, %n: i32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %acc = arith.constant dense<1.0> : tensor<128x256xf32, #wacc>
  %x = kiln.load %p[%c0] shape[%n] strides[%c1] : !kiln.ptr<bf16> -> tensor<256xbf16, #wrow>
  %f = kiln.convert %x : tensor<256xbf16, #wrow> -> tensor<256xf32, #wrow>
  %e = kiln.expand_dims %f axis = 0 : tensor<256xf32, #wrow> -> tensor<1x256xf32, #we1>
  %e2 = kiln.convert_layout %e : tensor<1x256xf32, #we1> -> tensor<1x256xf32, #we2>
  %b = kiln.broadcast %e2 : tensor<1x256xf32, #we2> -> tensor<128x256xf32, #wblk>
  %bc = kiln.convert_layout %b : tensor<128x256xf32, #wblk> -> tensor<128x256xf32, #wacc>
  %y = arith.addf %acc, %bc : tensor<128x256xf32, #wacc>
  kiln.store %y, %q[%c0, %c0] shape[%n, %n] strides[%n, %c1] : tensor<128x256xf32, #wacc>, !kiln.ptr<f32>
  return
}
