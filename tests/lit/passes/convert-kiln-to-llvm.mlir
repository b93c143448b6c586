// convert-kiln-to-llvm: a laid-out kernel becomes one thread's LLVM + NVVM
// code: ldmatrix for the dot operands staged in shared memory, mma.sync,
// shuffles for the row reduction.
// RUN: kiln-opt %S/assign-layouts.mlir --kiln-assign-layouts="num-warps=4 aligned=true" --kiln-remove-layout-conversions --cse --convert-kiln-to-llvm | FileCheck %s
// RUN: not kiln-opt %S/assign-layouts.mlir --convert-kiln-to-llvm 2>&1 | FileCheck %s --check-prefix=UNLAID
// RUN: not kiln-opt %S/assign-layouts.mlir --kiln-assign-layouts --convert-kiln-to-llvm="num-stages=9" 2>&1 | FileCheck %s --check-prefix=STAGES

// CHECK: module attributes {kiln.lowering_report = [
// CHECK-SAME: "assign-layouts.mlir:47: load 64x64: 16-byte vector loads to registers, stored to shared memory
// CHECK-SAME: "assign-layouts.mlir:51: dot 64x64x64: mma.sync m16n8k16, A ldmatrix from shared memory, B ldmatrix from shared memory"
// CHECK-SAME: "shared memory: {{[0-9]+}} bytes, placed by liveness: {{.*}}"]
// CHECK-SAME: kiln.shared_bytes = {{[1-9][0-9]*}} : i64, kiln.smem_conversions = 0 : i64}
// CHECK: llvm.mlir.global external @kiln_smem() {addr_space = 3 : i32, alignment = 1024 : i64}
// CHECK: llvm.func @masked_rows(
// CHECK-SAME: nvvm.kernel
// CHECK-DAG: nvvm.ldmatrix
// CHECK-DAG: nvvm.mma.sync
// CHECK-DAG: nvvm.shfl.sync bfly
// CHECK-NOT: func.func

// UNLAID: run kiln-assign-layouts first
// STAGES: num-stages must be in [2, 8], got 9
