func.func @main(%a: tensor<4096xf32>) -> tensor<4096xf32> {
  %0 = "chlo.erf_inv"(%a) : (tensor<4096xf32>) -> tensor<4096xf32>
  return %0 : tensor<4096xf32>
}