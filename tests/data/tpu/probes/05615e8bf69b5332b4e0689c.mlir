func.func @main(%a: tensor<64x512xbf16>, %b: tensor<512x64xbf16>) -> tensor<64x64xbf16> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xbf16>, tensor<512x64xbf16>) -> tensor<64x64xbf16>
  return %0 : tensor<64x64xbf16>
}