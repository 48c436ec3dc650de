func.func @main(%a: tensor<10x64xf32>) -> (tensor<64x10xf32>, tensor<64x10xf32>) {
  %0 = stablehlo.transpose %a, dims = [1, 0] : (tensor<10x64xf32>) -> tensor<64x10xf32>
  %1 = stablehlo.add %0, %0 : tensor<64x10xf32>
  return %0, %1 : tensor<64x10xf32>, tensor<64x10xf32>
}