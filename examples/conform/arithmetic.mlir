// Tests in StableHLO's format: each public function without arguments is a test.
func.func @add_and_compare() {
  %x = stablehlo.constant dense<[1.5, -2.0, 3.25]> : tensor<3xf32>
  %y = stablehlo.constant dense<[0.5, 0.5, 0.5]> : tensor<3xf32>
  %sum = stablehlo.add %x, %y : tensor<3xf32>
  check.expect_eq_const %sum, dense<[2.0, -1.5, 3.75]> : tensor<3xf32>
  %gt = stablehlo.compare GT, %x, %y : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
  check.expect_eq_const %gt, dense<[true, false, true]> : tensor<3xi1>
  func.return
}

func.func @exp_is_close() {
  %x = stablehlo.constant dense<[0.0, 1.0, -1.0]> : tensor<3xf32>
  %e = stablehlo.exponential %x : tensor<3xf32>
  %expected = stablehlo.constant dense<[1.0, 2.71828175, 0.36787945]> : tensor<3xf32>
  check.expect_close %e, %expected, max_ulp_difference = 3 : tensor<3xf32>, tensor<3xf32>
  func.return
}
