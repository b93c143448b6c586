// kiln-remove-layout-conversions: round trips fold, chains collapse, cheap
// tiles are recomputed in the layout their user reads, conversions of loaded
// (or loop-carried) data stay.
// RUN: kiln-opt %s --kiln-remove-layout-conversions | FileCheck %s

#a = #kiln.layout<blocked, [128], reg = [], lane = [[1], [2], [4], [8], [16]], warp = [[32], [64]]>
#b = #kiln.layout<blocked, [128], reg = [], lane = [[2], [4], [8], [16], [32]], warp = [[64], [1]]>

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
