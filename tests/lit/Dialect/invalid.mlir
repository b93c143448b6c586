// The verifiers reject bad shapes and types with messages that name them.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @dot_inner(%a: tensor<128x64xbf16>, %b: tensor<32x64xbf16>, %c: tensor<128x64xf32>) {
  // expected-error @+1 {{inner dimensions differ: lhs is 128x64, rhs is 32x64 (rhs must be 64xN)}}
  %0 = kiln.dot %a, %b, %c : tensor<128x64xbf16>, tensor<32x64xbf16> -> tensor<128x64xf32>
  return
}

// -----

func.func @dot_mixed(%a: tensor<16x16xbf16>, %b: tensor<16x16xf16>, %c: tensor<16x16xf32>) {
  // expected-error @+1 {{operand element types differ: lhs is 'bf16', rhs is 'f16'}}
  %0 = kiln.dot %a, %b, %c : tensor<16x16xbf16>, tensor<16x16xf16> -> tensor<16x16xf32>
  return
}

// -----

func.func @dot_result(%a: tensor<16x32xbf16>, %b: tensor<32x8xbf16>, %c: tensor<16x16xf32>) {
  // expected-error @+1 {{result is 16x16 but lhs 16x32 times rhs 32x8 is 16x8}}
  %0 = kiln.dot %a, %b, %c : tensor<16x32xbf16>, tensor<32x8xbf16> -> tensor<16x16xf32>
  return
}

// -----

func.func @dot_rank(%a: tensor<2x16x16xbf16>, %b: tensor<16x16xbf16>, %c: tensor<16x16xf32>) {
  // expected-error @+1 {{lhs must be 2-D, got 2x16x16}}
  %0 = kiln.dot %a, %b, %c : tensor<2x16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xf32>
  return
}

// -----

func.func @dot_int(%a: tensor<16x16xi32>, %b: tensor<16x16xi32>, %c: tensor<16x16xf32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float or 16-bit float or bfloat16 type values}}
  %0 = kiln.dot %a, %b, %c : tensor<16x16xi32>, tensor<16x16xi32> -> tensor<16x16xf32>
  return
}

// -----

func.func @load_elem(%p: !kiln.ptr<f16>, %i: i32) {
  // expected-error @+1 {{loaded tile element type 'bf16' differs from the pointer's element type 'f16'}}
  %0 = kiln.load %p[%i, %i] shape[%i, %i] strides[%i, %i] : !kiln.ptr<f16> -> tensor<16x16xbf16>
  return
}

// -----

func.func @load_rank(%p: !kiln.ptr<f32>, %i: i32) {
  // expected-error @+1 {{block 16x16 has rank 2 but got 1 offsets, 2 shape values and 2 strides}}
  %0 = kiln.load %p[%i] shape[%i, %i] strides[%i, %i] : !kiln.ptr<f32> -> tensor<16x16xf32>
  return
}

// -----

func.func @store_elem(%p: !kiln.ptr<bf16>, %i: i32, %v: tensor<16xf32>) {
  // expected-error @+1 {{stored tile element type 'f32' differs from the pointer's element type 'bf16'}}
  kiln.store %v, %p[%i] shape[%i] strides[%i] : tensor<16xf32>, !kiln.ptr<bf16>
  return
}

// -----

func.func @reduce_axis(%x: tensor<16x32xf32>) {
  // expected-error @+1 {{axis 2 is out of range for a 16x32 tile}}
  %0 = kiln.reduce sum %x axis = 2 : tensor<16x32xf32> -> tensor<16xf32>
  return
}

// -----

func.func @reduce_shape(%x: tensor<16x32xf32>) {
  // expected-error @+1 {{reducing 16x32 along axis 1 gives 16, not 32}}
  %0 = kiln.reduce max %x axis = 1 : tensor<16x32xf32> -> tensor<32xf32>
  return
}

// -----

func.func @expand(%x: tensor<16xf32>) {
  // expected-error @+1 {{expanding 16 at axis 0 gives 1x16, not 16x1}}
  %0 = kiln.expand_dims %x axis = 0 : tensor<16xf32> -> tensor<16x1xf32>
  return
}

// -----

func.func @broadcast(%x: tensor<16x2xf32>) {
  // expected-error @+1 {{cannot broadcast 16x2 to 16x32}}
  %0 = kiln.broadcast %x : tensor<16x2xf32> -> tensor<16x32xf32>
  return
}

// -----

func.func @trans_order(%x: tensor<16x32xf32>) {
  // expected-error @+1 {{order is not a permutation of the 2 dimensions of a 16x32 tile}}
  %0 = kiln.trans %x [0, 0] : tensor<16x32xf32> -> tensor<16x32xf32>
  return
}

// -----

func.func @trans_shape(%x: tensor<16x32xf32>) {
  // expected-error @+1 {{transposing 16x32 gives 32x16, not 16x32}}
  %0 = kiln.trans %x [1, 0] : tensor<16x32xf32> -> tensor<16x32xf32>
  return
}

// -----

func.func @convert_shape(%x: tensor<16x32xf32>) {
  // expected-error @+1 {{conversion changes the shape from 16x32 to 32x16}}
  %0 = kiln.convert %x : tensor<16x32xf32> -> tensor<32x16xbf16>
  return
}

// -----

func.func @iota_rank() {
  // expected-error @+1 {{result must be a static 1-D tile, got 4x4}}
  %0 = kiln.iota : tensor<4x4xi32>
  return
}

// -----

func.func @splat_type(%s: f32) {
  // expected-error @+1 {{scalar type 'f32' differs from the tile's element type 'bf16'}}
  %0 = kiln.splat %s : f32 -> tensor<4xbf16>
  return
}

// -----

func.func @program_id_axis() {
  // expected-error @+1 {{attribute 'axis' failed to satisfy constraint}}
  %0 = kiln.program_id 3
  return
}

// -----

func.func @dynamic(%p: !kiln.ptr<f32>, %i: i32) {
  // expected-error @+1 {{loaded tile must have a static shape, got ?x16}}
  %0 = kiln.load %p[%i, %i] shape[%i, %i] strides[%i, %i] : !kiln.ptr<f32> -> tensor<?x16xf32>
  return
}

// -----

// expected-error @+1 {{layout kind must be blocked, mma or dot_operand, got swizzled}}
func.func @layout_kind(%a: tensor<32xf32, #kiln.layout<swizzled, [32], reg = [], lane = [[1], [2], [4], [8], [16]], warp = []>>) {
  return
}

// -----

// expected-error @+1 {{a layout has 5 lane bases (32 lanes), got 4}}
func.func @layout_lanes(%a: tensor<32xf32, #kiln.layout<blocked, [32], reg = [[16]], lane = [[1], [2], [4], [8]], warp = []>>) {
  return
}

// -----

// expected-error @+1 {{reg basis coordinate 64 is outside dimension 0 of size 32}}
func.func @layout_outside(%a: tensor<32xf32, #kiln.layout<blocked, [32], reg = [[64]], lane = [[1], [2], [4], [8], [16]], warp = []>>) {
  return
}

// -----

// expected-error @+1 {{lane basis must have 2 coordinates}}
func.func @layout_rank(%a: tensor<32x1xf32, #kiln.layout<blocked, [32, 1], reg = [], lane = [[1], [2], [4], [8], [16]], warp = []>>) {
  return
}

// -----

#l = #kiln.layout<blocked, [32], reg = [], lane = [[1], [2], [4], [8], [16]], warp = []>
func.func @convert_layout_shape(%a: tensor<32xf32, #l>) {
  // expected-error @+1 {{requires the same shape for all operands and results}}
  %0 = kiln.convert_layout %a : tensor<32xf32, #l> -> tensor<64xf32>
  return
}

// -----

func.func @atomic_max_float(%p: !kiln.ptr<f32>, %i: i32, %v: tensor<16xf32>) {
  // expected-error @+1 {{max combines i32 elements, not 'f32'}}
  kiln.atomic_rmw max %v, %p[%i] shape[%i] strides[%i] : tensor<16xf32>, !kiln.ptr<f32>
  return
}

// -----

func.func @atomic_elem(%p: !kiln.ptr<bf16>, %i: i32, %v: tensor<16xf32>) {
  // expected-error @+1 {{combined tile element type 'f32' differs from the pointer's element type 'bf16'}}
  kiln.atomic_rmw sum %v, %p[%i] shape[%i] strides[%i] : tensor<16xf32>, !kiln.ptr<bf16>
  return
}

// -----

func.func @gather_rows(%p: !kiln.ptr<bf16>, %i: i32, %r: tensor<16xi32>) {
  // expected-error @+1 {{gathered tile must be 2-D, got 16}}
  %0 = kiln.gather %p[%r, %i] shape[%i] strides[%i] : !kiln.ptr<bf16>, tensor<16xi32> -> tensor<16xbf16>
  return
}

// -----

func.func @gather_index_type(%p: !kiln.ptr<bf16>, %i: i32, %r: tensor<16x64xf32>) {
  // expected-error @+1 {{row indices must be an i32 tile of the result's shape 16x64}}
  %0 = kiln.gather %p[%r, %i] shape[%i, %i] strides[%i, %i] : !kiln.ptr<bf16>, tensor<16x64xf32> -> tensor<16x64xbf16>
  return
}

// -----

func.func @load_index_type(%p: !kiln.ptr<f32>, %i: i32) {
  // expected-error @+1 {{reads an i32 tensor, not 'f32'}}
  %0 = kiln.load_index %p[%i] shape[%i] strides[%i] : !kiln.ptr<f32>
  return
}
