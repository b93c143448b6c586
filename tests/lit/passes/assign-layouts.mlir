// kiln-assign-layouts: every tile gets a #kiln.layout; a kiln.convert_layout
// goes wherever a user reads another layout. With the cleanup after it, only
// the conversions that move data (here, the two dot operands) are left.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" | FileCheck %s
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse | FileCheck %s --check-prefix=CLEAN
// RUN: not kiln-opt %s --kiln-assign-layouts="num-warps=3" 2>&1 | FileCheck %s --check-prefix=WARPS
// RUN: not kiln-opt %s --kiln-assign-layouts --kiln-assign-layouts 2>&1 | FileCheck %s --check-prefix=TWICE

// Loads: blocked, 8 bf16 (16 bytes) per thread along the rows.
// CHECK-DAG: #[[BLK:blocked[0-9]*]] = #kiln.layout<blocked, [64, 64], reg = {{\[}}[0, 1], [0, 2], [0, 4],
// CHECK-DAG: #[[MMA:mma[0-9]*]] = #kiln.layout<mma, [64, 64], reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[16, 0], [32, 0]]>
// CHECK-DAG: #[[ROW:mma[0-9]*]] = #kiln.layout<mma, [64], reg = {{\[}}[8]], lane = {{\[}}[0], [0], [1], [2], [4]], warp = {{\[}}[16], [32]]>
// CHECK-LABEL: func.func @masked_rows
// CHECK-SAME: kiln.aligned
// CHECK-SAME: kiln.num_warps = 4 : i32
// CHECK: %[[X:.*]] = kiln.load {{.*}} -> tensor<64x64xbf16, #[[BLK]]>
// CHECK: %[[XA:.*]] = kiln.convert_layout %[[X]] : tensor<64x64xbf16, #[[BLK]]> -> tensor<64x64xbf16, #dot_operand{{[0-9]*}}>
// CHECK: %[[YB:.*]] = kiln.convert_layout %{{.*}} -> tensor<64x64xbf16, #dot_operand{{[0-9]*}}>
// CHECK: kiln.dot %[[XA]], %[[YB]], %{{.*}} -> tensor<64x64xf32, #[[MMA]]>
// Index tiles take a provisional blocked layout and are converted where read.
// CHECK: kiln.iota : tensor<64xi32, #blocked
// CHECK: %[[OK:.*]] = arith.cmpi slt, {{.*}} : tensor<64x64xi32, #blocked
// CHECK: %[[OKM:.*]] = kiln.convert_layout %[[OK]] : tensor<64x64xi1, #blocked{{[0-9]*}}> -> tensor<64x64xi1, #[[MMA]]>
// CHECK: arith.select %[[OKM]], {{.*}} : tensor<64x64xi1, #[[MMA]]>, tensor<64x64xf32, #[[MMA]]>
// Reductions slice their operand's layout; a broadcast reads the projection.
// CHECK: kiln.reduce max {{.*}} -> tensor<64xf32, #[[ROW]]>

// CLEAN-LABEL: func.func @masked_rows
// CLEAN: kiln.load
// CLEAN: kiln.load
// CLEAN-COUNT-2: kiln.convert_layout {{.*}} -> tensor<64x64xbf16, #dot_operand
// CLEAN-NOT: kiln.convert_layout
// CLEAN: kiln.iota : tensor<64xi32, #mma
// CLEAN: arith.cmpi slt, {{.*}} : tensor<64x64xi32, #[[MMA:mma[0-9]*]]>
// CLEAN-NOT: kiln.convert_layout
// CLEAN: return

// WARPS: num-warps must be a power of two in [1, 32], got 3
// TWICE: the kernel already has layouts

func.func @masked_rows(%a: !kiln.ptr<bf16>, %b: !kiln.ptr<bf16>,
                       %out: !kiln.ptr<f32>, %s: i32, %n: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %x = kiln.load %a[%c0, %c0] shape[%c64, %c64] strides[%s, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %y = kiln.load %b[%c0, %c0] shape[%c64, %c64] strides[%s, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %yt = kiln.trans %y [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %d = kiln.dot %x, %yt, %zero : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  // Columns at or past n are masked out.
  %cols = kiln.iota : tensor<64xi32>
  %row = kiln.expand_dims %cols axis = 0 : tensor<64xi32> -> tensor<1x64xi32>
  %colsb = kiln.broadcast %row : tensor<1x64xi32> -> tensor<64x64xi32>
  %nn = kiln.splat %n : i32 -> tensor<64x64xi32>
  %ok = arith.cmpi slt, %colsb, %nn : tensor<64x64xi32>
  %ninf = arith.constant dense<0xFF800000> : tensor<64x64xf32>
  %masked = arith.select %ok, %d, %ninf : tensor<64x64xi1>, tensor<64x64xf32>
  %m = kiln.reduce max %masked axis = 1 : tensor<64x64xf32> -> tensor<64xf32>
  %mc = kiln.expand_dims %m axis = 1 : tensor<64xf32> -> tensor<64x1xf32>
  %mb = kiln.broadcast %mc : tensor<64x1xf32> -> tensor<64x64xf32>
  %e = arith.subf %masked, %mb : tensor<64x64xf32>
  kiln.store %e, %out[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}
