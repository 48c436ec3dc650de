// A small module for `stablehlo-interp run`:
//   stablehlo-interp run examples/cli/scale_add.mlir --input "[1, 2, 3]" --input 0.5
func.func @main(%x: tensor<3xf32>, %scale: tensor<f32>) -> (tensor<3xf32>, tensor<f32>) {
  %s = stablehlo.broadcast_in_dim %scale, dims = [] : (tensor<f32>) -> tensor<3xf32>
  %y = stablehlo.multiply %x, %s : tensor<3xf32>
  %one = stablehlo.constant dense<1.0> : tensor<3xf32>
  %z = stablehlo.add %y, %one : tensor<3xf32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %total = stablehlo.reduce(%z init: %zero) applies stablehlo.add across dimensions = [0]
      : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
  return %z, %total : tensor<3xf32>, tensor<f32>
}

// A second function, run with --function: integer arithmetic wraps around.
func.func @wrap(%x: tensor<4xi8>) -> tensor<4xi8> {
  %c = stablehlo.constant dense<100> : tensor<4xi8>
  %y = stablehlo.add %x, %c : tensor<4xi8>
  return %y : tensor<4xi8>
}
