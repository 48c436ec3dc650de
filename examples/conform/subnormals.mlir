// Subnormal numbers are numbers of the spec's floating-point types (IEEE 754):
// 1e-39 * 1.5 is 1.5e-39 in f32, and ceil(1e-39) is 1.
func.func @multiply_keeps_subnormals() {
  %x = stablehlo.constant dense<[1.0e-39, 3.0]> : tensor<2xf32>
  %y = stablehlo.constant dense<[1.5, 1.0]> : tensor<2xf32>
  // The barrier keeps a compiler from computing the product at compile time.
  %b:2 = stablehlo.optimization_barrier %x, %y : tensor<2xf32>, tensor<2xf32>
  %product = stablehlo.multiply %b#0, %b#1 : tensor<2xf32>
  check.expect_eq_const %product, dense<[1.5e-39, 3.0]> : tensor<2xf32>
  func.return
}

func.func @ceil_of_a_subnormal() {
  %x = stablehlo.constant dense<[1.0e-39, -1.0e-39, 0.5]> : tensor<3xf32>
  %b = stablehlo.optimization_barrier %x : tensor<3xf32>
  %c = stablehlo.ceil %b : tensor<3xf32>
  check.expect_eq_const %c, dense<[1.0, -0.0, 1.0]> : tensor<3xf32>
  func.return
}
