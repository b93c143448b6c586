// Every kiln op survives printing and parsing, in the custom and the generic
// form.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s

// CHECK-LABEL: func.func @all_ops
func.func @all_ops(%a: !kiln.ptr<bf16>, %out: !kiln.ptr<f32>, %s0: i32, %s1: i32,
                   %off: i64, %idx: !kiln.ptr<i32>) attributes {kiln.kernel, kiln.grid = array<i64: 4, 2, 1>} {
  // CHECK: kiln.program_id 0
  %pid = kiln.program_id 0
  // CHECK: kiln.num_programs 2
  %np = kiln.num_programs 2
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  // CHECK: kiln.iota : tensor<64xi32>
  %iota = kiln.iota : tensor<64xi32>
  // CHECK: kiln.splat %{{.*}} : i32 -> tensor<64xi32>
  %sp = kiln.splat %pid : i32 -> tensor<64xi32>
  // CHECK: kiln.addptr %{{.*}}, %{{.*}} : <bf16>, i64
  %p = kiln.addptr %a, %off : !kiln.ptr<bf16>, i64
  // CHECK: kiln.load %{{.*}}[%{{.*}}, %{{.*}}] shape[%{{.*}}, %{{.*}}] strides[%{{.*}}, %{{.*}}] {padding = -1.000000e+00 : f64} : !kiln.ptr<bf16> -> tensor<64x32xbf16>
  %x = kiln.load %p[%pid, %c0] shape[%c64, %c64] strides[%s0, %s1] {padding = -1.0 : f64} : !kiln.ptr<bf16> -> tensor<64x32xbf16>
  // CHECK: kiln.load %{{.*}} : !kiln.ptr<bf16> -> tensor<32x64xbf16>
  %y = kiln.load %a[%c0, %c0] shape[%c64, %c64] strides[%s0, %s1] : !kiln.ptr<bf16> -> tensor<32x64xbf16>
  %acc = arith.constant dense<0.0> : tensor<64x64xf32>
  // CHECK: kiln.dot %{{.*}}, %{{.*}}, %{{.*}} : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
  %d = kiln.dot %x, %y, %acc : tensor<64x32xbf16>, tensor<32x64xbf16> -> tensor<64x64xf32>
  // CHECK: kiln.reduce max %{{.*}} axis = 1 : tensor<64x64xf32> -> tensor<64xf32>
  %m = kiln.reduce max %d axis = 1 : tensor<64x64xf32> -> tensor<64xf32>
  // CHECK: kiln.reduce sum %{{.*}} axis = 0 : tensor<64x64xf32> -> tensor<64xf32>
  %s = kiln.reduce sum %d axis = 0 : tensor<64x64xf32> -> tensor<64xf32>
  // CHECK: kiln.reduce min
  %mn = kiln.reduce min %d axis = 0 : tensor<64x64xf32> -> tensor<64xf32>
  // CHECK: kiln.expand_dims %{{.*}} axis = 1 : tensor<64xf32> -> tensor<64x1xf32>
  %col = kiln.expand_dims %m axis = 1 : tensor<64xf32> -> tensor<64x1xf32>
  // CHECK: kiln.broadcast %{{.*}} : tensor<64x1xf32> -> tensor<64x64xf32>
  %b = kiln.broadcast %col : tensor<64x1xf32> -> tensor<64x64xf32>
  %e = arith.subf %d, %b : tensor<64x64xf32>
  %ex = math.exp2 %e : tensor<64x64xf32>
  // CHECK: kiln.trans %{{.*}} [1, 0] : tensor<64x32xbf16> -> tensor<32x64xbf16>
  %t = kiln.trans %x [1, 0] : tensor<64x32xbf16> -> tensor<32x64xbf16>
  // CHECK: kiln.convert %{{.*}} : tensor<64x64xf32> -> tensor<64x64xbf16>
  %cv = kiln.convert %ex : tensor<64x64xf32> -> tensor<64x64xbf16>
  // CHECK: kiln.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] shape[%{{.*}}, %{{.*}}] strides[%{{.*}}, %{{.*}}] : tensor<64x64xf32>, !kiln.ptr<f32>
  kiln.store %ex, %out[%c0, %c0] shape[%c64, %c64] strides[%s0, %s1] : tensor<64x64xf32>, !kiln.ptr<f32>
  // CHECK: kiln.atomic_rmw sum %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] shape[%{{.*}}, %{{.*}}] strides[%{{.*}}, %{{.*}}] : tensor<64x64xf32>, !kiln.ptr<f32>
  kiln.atomic_rmw sum %ex, %out[%c0, %c0] shape[%c64, %c64] strides[%s0, %s1] : tensor<64x64xf32>, !kiln.ptr<f32>
  // CHECK: kiln.gather %{{.*}}[%{{.*}}, %{{.*}}] shape[%{{.*}}, %{{.*}}] strides[%{{.*}}, %{{.*}}] : !kiln.ptr<f32>, tensor<64x64xi32> -> tensor<64x64xf32>
  %rows = arith.constant dense<3> : tensor<64x64xi32>
  %g = kiln.gather %out[%rows, %c0] shape[%c64, %c64] strides[%s0, %s1] : !kiln.ptr<f32>, tensor<64x64xi32> -> tensor<64x64xf32>
  // CHECK: kiln.load_index %{{.*}}[%{{.*}}] shape[%{{.*}}] strides[%{{.*}}] {padding = -1 : i64} : !kiln.ptr<i32>
  %ix = kiln.load_index %idx[%c0] shape[%c64] strides[%s1] {padding = -1 : i64} : !kiln.ptr<i32>
  // CHECK: scf.for
  %r = scf.for %i = %c0 to %c64 step %c64 iter_args(%it = %m) -> (tensor<64xf32>) : i32 {
    %n = arith.maximumf %it, %s : tensor<64xf32>
    scf.yield %n : tensor<64xf32>
  }
  return
}

