func.func @main(%arg0: tensor<f32>) -> tensor<f32> {
  %0 = "stablehlo.atan2"(%arg0, %arg0) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
