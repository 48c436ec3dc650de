// Tests in the style of StableHLO's interpreter tests: every test here passes.
// Run with: stablehlo-interp test tests/data/checks_pass.mlir

func.func @integer_arithmetic_wraps() {
  %a = stablehlo.constant dense<[127, -128, 5]> : tensor<3xi8>
  %b = stablehlo.constant dense<[1, -1, 3]> : tensor<3xi8>
  %sum = stablehlo.add %a, %b : tensor<3xi8>
  check.expect_eq_const %sum, dense<[-128, 127, 8]> : tensor<3xi8>
  %twice = stablehlo.add %b, %b : tensor<3xi8>
  %expected = stablehlo.constant dense<[2, -2, 6]> : tensor<3xi8>
  check.expect_eq %twice, %expected : tensor<3xi8>
  func.return
}

func.func @float_checks() {
  %x = stablehlo.constant dense<[1.0, 0.5, -2.0]> : tensor<3xf32>
  %y = stablehlo.sqrt %x : tensor<3xf32>
  check.expect_almost_eq_const %y, dense<[1.0, 0.70710677, 0x7FC00000]> : tensor<3xf32>
  check.expect_almost_eq_const %y, dense<[1.0, 0.7, 0x7FC00000]> : tensor<3xf32>, tolerance = 0.01
  %expected = stablehlo.constant dense<[1.0, 0.7071068, 0x7FC00000]> : tensor<3xf32>
  check.expect_close %y, %expected, max_ulp_difference = 1 : tensor<3xf32>, tensor<3xf32>
  check.expect_almost_eq %y, %expected, tolerance = 1.0e-6 : tensor<3xf32>
  func.return
}

// -----

// A loop: the sum 1 + 2 + ... + 10.
func.func @while_loop() {
  %zero = stablehlo.constant dense<0> : tensor<i64>
  %one = stablehlo.constant dense<1> : tensor<i64>
  %ten = stablehlo.constant dense<10> : tensor<i64>
  %i, %sum = stablehlo.while(%iv = %one, %acc = %zero) : tensor<i64>, tensor<i64>
  cond {
    %c = stablehlo.compare LE, %iv, %ten : (tensor<i64>, tensor<i64>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %next_acc = stablehlo.add %acc, %iv : tensor<i64>
    %next_iv = stablehlo.add %iv, %one : tensor<i64>
    stablehlo.return %next_iv, %next_acc : tensor<i64>, tensor<i64>
  }
  check.expect_eq_const %sum, dense<55> : tensor<i64>
  check.expect_eq_const %i,
                        dense<11> : tensor<i64>
  func.return
}

// An index past the last branch selects the last branch.
func.func @case_out_of_range() {
  %index = stablehlo.constant dense<7> : tensor<i32>
  %r = "stablehlo.case"(%index) ({
    %a = stablehlo.constant dense<[1, 1]> : tensor<2xui8>
    stablehlo.return %a : tensor<2xui8>
  }, {
    %b = stablehlo.constant dense<[2, 255]> : tensor<2xui8>
    stablehlo.return %b : tensor<2xui8>
  }) : (tensor<i32>) -> tensor<2xui8>
  check.expect_eq_const %r, dense<[2, 255]> : tensor<2xui8>
  func.return
}

// -----

// A composite runs its decomposition; helpers with arguments are not tests.
func.func @triple.impl(%x: tensor<2xf64>) -> tensor<2xf64> {
  %three = stablehlo.constant dense<3.0> : tensor<2xf64>
  %y = stablehlo.multiply %x, %three : tensor<2xf64>
  func.return %y : tensor<2xf64>
}

func.func @composite() {
  %x = stablehlo.constant dense<[0.5, -1.5]> : tensor<2xf64>
  %y = stablehlo.composite "example.triple" %x {decomposition = @triple.impl} : (tensor<2xf64>) -> tensor<2xf64>
  check.expect_eq_const %y, dense<[1.5, -4.5]> : tensor<2xf64>
  func.return
}

// -----

// The generic op syntax works too, for the model and for the checks.
"func.func"() <{function_type = () -> (), sym_name = "generic_syntax"}> ({
  %0 = "stablehlo.constant"() <{value = dense<[0.0, -0.0, 0x7F80]> : tensor<3xbf16>}> : () -> tensor<3xbf16>
  %1 = "stablehlo.negate"(%0) : (tensor<3xbf16>) -> tensor<3xbf16>
  "check.expect_eq_const"(%1) {value = dense<[-0.0, 0.0, 0xFF80]> : tensor<3xbf16>} : (tensor<3xbf16>) -> ()
  "check.expect_close"(%1, %1) {max_ulp_difference = 0 : ui64} : (tensor<3xbf16>, tensor<3xbf16>) -> ()
  "func.return"() : () -> ()
}) : () -> ()

// -----

// StableHLO's testdata style: @main calls private @inputs/@expected and checks
// with a custom call (check.eq gives a tensor<i1>; the others give nothing).
module @testdata_style {
  func.func public @main() -> tensor<i1> {
    %0 = call @inputs() : () -> tensor<2x3xf32>
    %1 = call @expected() : () -> tensor<3x2xf32>
    %2 = stablehlo.transpose %0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
    stablehlo.custom_call @check.expect_close(%2, %1) {has_side_effect = true} : (tensor<3x2xf32>, tensor<3x2xf32>) -> ()
    stablehlo.custom_call @check.expect_eq(%2, %1) {has_side_effect = true} : (tensor<3x2xf32>, tensor<3x2xf32>) -> ()
    %3 = stablehlo.custom_call @check.eq(%2, %1) : (tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<i1>
    return %3 : tensor<i1>
  }
  func.func private @inputs() -> tensor<2x3xf32> {
    %0 = stablehlo.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  }
  func.func private @expected() -> tensor<3x2xf32> {
    %0 = stablehlo.constant dense<[[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]> : tensor<3x2xf32>
    return %0 : tensor<3x2xf32>
  }
}

// -----

// A module without tests is fine.
