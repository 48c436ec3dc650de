func.func @main(%a: tensor<64x512xf32>, %b: tensor<512x64xf32>) -> tensor<64x64xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0], precision = [HIGH, HIGH] : (tensor<64x512xf32>, tensor<512x64xf32>) -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}