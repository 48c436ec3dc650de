// A test file in the style of StableHLO's interpreter tests:
//   stablehlo-interp test examples/cli/suite.mlir --verbose
// `// -----` separates independent modules; each public function without
// arguments is a test; check ops decide whether it passes.

func.func @pad_with_interior_and_negative_edges() {
  %x = stablehlo.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi32>
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %y = stablehlo.pad %x, %zero, low = [1, -1], high = [0, 1], interior = [0, 1]
      : (tensor<2x3xi32>, tensor<i32>) -> tensor<3x5xi32>
  check.expect_eq_const %y, dense<[[0, 0, 0, 0, 0],
                                   [0, 2, 0, 3, 0],
                                   [0, 5, 0, 6, 0]]> : tensor<3x5xi32>
  func.return
}

func.func @dynamic_slice_clamps_its_start() {
  %x = stablehlo.constant dense<[0, 1, 2, 3, 4]> : tensor<5xi32>
  %start = stablehlo.constant dense<4> : tensor<i64>
  %y = stablehlo.dynamic_slice %x, %start, sizes = [2] : (tensor<5xi32>, tensor<i64>) -> tensor<2xi32>
  check.expect_eq_const %y, dense<[3, 4]> : tensor<2xi32>
  func.return
}

// -----

func.func @exp_is_close_to_the_correctly_rounded_value() {
  %x = stablehlo.constant dense<[0.0, 1.0, -2.5]> : tensor<3xf32>
  %y = stablehlo.exponential %x : tensor<3xf32>
  %expected = stablehlo.constant dense<[1.0, 2.71828175, 0.0820849985]> : tensor<3xf32>
  check.expect_close %y, %expected, max_ulp_difference = 1 : tensor<3xf32>, tensor<3xf32>
  check.expect_almost_eq %y, %expected, tolerance = 1.0e-6 : tensor<3xf32>
  func.return
}

// -----

// StableHLO's testdata style: a public @main, private helpers, a custom-call check.
func.func public @main() {
  %0 = call @inputs() : () -> tensor<2x2xf32>
  %1 = call @expected() : () -> tensor<2x2xf32>
  %2 = stablehlo.transpose %0, dims = [1, 0] : (tensor<2x2xf32>) -> tensor<2x2xf32>
  stablehlo.custom_call @check.expect_eq(%2, %1) {has_side_effect = true} : (tensor<2x2xf32>, tensor<2x2xf32>) -> ()
  return
}
func.func private @inputs() -> tensor<2x2xf32> {
  %0 = stablehlo.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}
func.func private @expected() -> tensor<2x2xf32> {
  %0 = stablehlo.constant dense<[[1.0, 3.0], [2.0, 4.0]]> : tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}
