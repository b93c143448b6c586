// Each pointer argument is specialised on its own: kiln.aligned on A and C
// (what compileForGpu sets for tensors with 16-byte aligned rows), none on B.
// A's load takes 16-byte vectors, B's element loads, and the report names B
// as the reason; C's store keeps its vectors. Their blocks lie within the
// tensors (constant offsets and dimensions): no bounds checks.
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm | FileCheck %s
// RUN: kiln-opt %s --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm | FileCheck %s --check-prefix=ALL

// CHECK: kiln.lowering_report = [
// CHECK-SAME: "aligned-per-tensor.mlir:33: load 64x64: 16-byte vector loads to registers, stored to shared memory
// CHECK-SAME: "aligned-per-tensor.mlir:34: load 64x64: element loads to registers, stored to shared memory (not pipelined); within its tensor (no bounds checks); tensor B is not specialised as aligned (16-byte aligned base, contiguous rows, other strides multiples of 16 bytes)"
// CHECK-SAME: "aligned-per-tensor.mlir:37: store 64x64: st.global from registers, 8-byte vector stores; within its tensor (no bounds checks)"
// CHECK: llvm.func @two_tensors(
// CHECK: llvm.load {{.*}} -> vector<8xbf16>
// CHECK: llvm.load {{.*}} -> bf16
// CHECK-NOT: llvm.load {{.*}} -> vector<8xbf16>
// CHECK: llvm.store {{.*}} : vector<2xf32>

// ALL-NOT: element loads
// ALL: llvm.func @two_tensors(
// ALL: llvm.load {{.*}} -> vector<8xbf16>
// ALL-NOT: llvm.load {{.*}} -> bf16
// ALL: llvm.store {{.*}} : vector<2xf32>

func.func @two_tensors(%a: !kiln.ptr<bf16> {kiln.aligned, kiln.name = "A"},
                       %b: !kiln.ptr<bf16> {kiln.name = "B"},
                       %out: !kiln.ptr<f32> {kiln.aligned, kiln.name = "C"},
                       %s: i32)
    attributes {kiln.kernel, kiln.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %x = kiln.load %a[%c0, %c0] shape[%c64, %c64] strides[%s, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %y = kiln.load %b[%c0, %c0] shape[%c64, %c64] strides[%s, %c1] : !kiln.ptr<bf16> -> tensor<64x64xbf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %d = kiln.dot %x, %y, %zero : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  kiln.store %d, %out[%c0, %c0] shape[%c64, %c64] strides[%c64, %c1] : tensor<64x64xf32>, !kiln.ptr<f32>
  return
}
