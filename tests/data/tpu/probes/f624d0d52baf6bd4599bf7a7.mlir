func.func @main(%a: tensor<4096xf64>, %b: tensor<4096xf64>) -> tensor<4096xf64> {
  %0 = stablehlo.add %a, %b : tensor<4096xf64>
  return %0 : tensor<4096xf64>
}