func.func @main(%arg0: tensor<f64>, %arg1: tensor<f64>) -> tensor<f64> {
  %0 = "stablehlo.power"(%arg0, %arg1) : (tensor<f64>, tensor<f64>) -> tensor<f64>
  %1 = "stablehlo.log"(%0) : (tensor<f64>) -> tensor<f64>
  return %1 : tensor<f64>
}
