func.func @main(%arg0: tensor<1x1x2xf32>, %arg1: tensor<1x1x1xf32>) -> tensor<1x1x4xf32> {
  %0 = "stablehlo.convolution"(%arg0, %arg1) {dimension_numbers = #stablehlo.conv<[b, f, 0]x[o, i, 0]->[b, f, 0]>,
      window_strides = array<i64: 1>, padding = dense<[[0, 1]]> : tensor<1x2xi64>, lhs_dilation = array<i64: 2>,
      rhs_dilation = array<i64: 1>, feature_group_count = 1 : i64, batch_group_count = 1 : i64}
      : (tensor<1x1x2xf32>, tensor<1x1x1xf32>) -> tensor<1x1x4xf32>
  return %0 : tensor<1x1x4xf32>
}
