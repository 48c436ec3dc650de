func.func @main(%a: tensor<8x4096xf32>, %b: tensor<4096x8xf32>) -> tensor<8x8xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0], precision = [HIGHEST, HIGHEST] : (tensor<8x4096xf32>, tensor<4096x8xf32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}