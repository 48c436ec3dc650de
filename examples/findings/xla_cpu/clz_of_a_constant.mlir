func.func @main() -> tensor<i32> {
  %c = stablehlo.constant dense<-5> : tensor<i32>
  %0 = "stablehlo.count_leading_zeros"(%c) : (tensor<i32>) -> tensor<i32>
  return %0 : tensor<i32>
}
