func.func @main(%arg0: tensor<complex<f64>>) -> tensor<complex<f64>> {
  %0 = "stablehlo.sign"(%arg0) : (tensor<complex<f64>>) -> tensor<complex<f64>>
  return %0 : tensor<complex<f64>>
}
