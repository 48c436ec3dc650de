func.func @main(%a: tensor<4096xbf16>) -> tensor<4096xbf16> {
  %0 = stablehlo.log %a : tensor<4096xbf16>
  return %0 : tensor<4096xbf16>
}