func.func @main(%a: tensor<4096xf32>, %b: tensor<4096xf32>) -> tensor<4096xf32> {
  %0 = stablehlo.divide %a, %b : tensor<4096xf32>
  return %0 : tensor<4096xf32>
}