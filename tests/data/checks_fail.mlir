// Tests in the style of StableHLO's interpreter tests that fail, one way each.

func.func @passes() {
  %a = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
  check.expect_eq_const %a, dense<[1, 2]> : tensor<2xi32>
  func.return
}

func.func @wrong_value() {
  %a = stablehlo.constant dense<[1, 2, 3]> : tensor<3xi32>
  %b = stablehlo.multiply %a, %a : tensor<3xi32>
  check.expect_eq_const %b, dense<[1, 4, 10]> : tensor<3xi32>
  func.return
}

func.func @too_far_apart() {
  %a = stablehlo.constant dense<1.0> : tensor<f32>
  %b = stablehlo.constant dense<1.001> : tensor<f32>
  check.expect_almost_eq %a, %b, tolerance = 1.0e-4 : tensor<f32>
  func.return
}

// -----

func.func @fails_in_iteration_two() {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %r = stablehlo.while(%i = %zero) : tensor<i32>
  cond {
    %four = stablehlo.constant dense<4> : tensor<i32>
    %c = stablehlo.compare LT, %i, %four : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %two = stablehlo.constant dense<2> : tensor<i32>
    %small = stablehlo.compare LT, %i, %two : (tensor<i32>, tensor<i32>) -> tensor<i1>
    check.expect_eq_const %small, dense<true> : tensor<i1>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %next = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %next : tensor<i32>
  }
  func.return
}

// -----

// Does not parse: the next module still runs.
func.func @syntax_error() {
  %a = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
  %b = stablehlo.add %a, : tensor<2xi32>
  func.return
}

// -----

func.func @unsupported_custom_call() {
  %a = stablehlo.constant dense<1.0> : tensor<f32>
  %b = stablehlo.custom_call @no_such_target(%a) : (tensor<f32>) -> tensor<f32>
  func.return
}

// -----

func.func @bad_check_syntax() {
  %a = stablehlo.constant dense<1> : tensor<i32>
  check.expect_eq %a, %a
  func.return
}

// -----

func.func @custom_call_check_eq_fails() -> tensor<i1> {
  %a = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %b = stablehlo.constant dense<[1.0, 2.5]> : tensor<2xf32>
  %r = stablehlo.custom_call @check.eq(%a, %b) : (tensor<2xf32>, tensor<2xf32>) -> tensor<i1>
  func.return %r : tensor<i1>
}

func.func @passes_after_failures() {
  func.return
}
