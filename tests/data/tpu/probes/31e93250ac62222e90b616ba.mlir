func.func @main(%a: tensor<4096xf64>) -> tensor<4096xf64> {
  %0 = stablehlo.exponential %a : tensor<4096xf64>
  return %0 : tensor<4096xf64>
}