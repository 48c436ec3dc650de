// What IREE (llvm-cpu, 3.13) does otherwise than the StableHLO spec: one test per
// cause, in StableHLO's test format (docs/findings.md). The barriers keep IREE from
// computing the results at compile time.

// Spec, gather: each start index is clamped so that the slice lies inside the operand
// (clamp(0, index, 3 - 1) = 2 here). IREE reads zeros.
func.func @gather_clamps_its_start_index() {
  %operand = stablehlo.constant dense<[[1, 2], [3, 4], [5, 6]]> : tensor<3x2xi8>
  %index = stablehlo.constant dense<[[5]]> : tensor<1x1xi32>
  %b:2 = stablehlo.optimization_barrier %operand, %index : tensor<3x2xi8>, tensor<1x1xi32>
  %row = "stablehlo.gather"(%b#0, %b#1) {
      dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0],
                                            index_vector_dim = 1>,
      slice_sizes = array<i64: 1, 2>} : (tensor<3x2xi8>, tensor<1x1xi32>) -> tensor<1x2xi8>
  check.expect_eq_const %row, dense<[[5, 6]]> : tensor<1x2xi8>
  func.return
}

// Spec, sort: with is_stable, equal keys keep their order. IREE swaps the two 8s.
func.func @stable_sort_keeps_equal_keys_in_order() {
  %keys = stablehlo.constant dense<[5, 7, 5, 8, 8, 5]> : tensor<6xi32>
  %b = stablehlo.optimization_barrier %keys : tensor<6xi32>
  %positions = stablehlo.iota dim = 0 : tensor<6xi32>
  %sorted:2 = "stablehlo.sort"(%b, %positions) ({
  ^bb0(%x: tensor<i32>, %y: tensor<i32>, %i: tensor<i32>, %j: tensor<i32>):
    %greater = stablehlo.compare GT, %x, %y, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %greater : tensor<i1>
  }) {dimension = 0 : i64, is_stable = true} : (tensor<6xi32>, tensor<6xi32>) -> (tensor<6xi32>, tensor<6xi32>)
  check.expect_eq_const %sorted#1, dense<[3, 4, 1, 0, 2, 5]> : tensor<6xi32>
  func.return
}

// The iota a sort takes, and the sort's result, both checked: IREE returns the sorted
// positions as the iota's value and zeros as the sort's (its sort works in place on
// the iota's buffer). Each alone is right.
func.func @an_iota_and_its_sort() {
  %keys = stablehlo.constant dense<[1, 3, 2]> : tensor<3xi32>
  %b = stablehlo.optimization_barrier %keys : tensor<3xi32>
  %positions = stablehlo.iota dim = 0 : tensor<3xi32>
  %sorted:2 = "stablehlo.sort"(%b, %positions) ({
  ^bb0(%x: tensor<i32>, %y: tensor<i32>, %i: tensor<i32>, %j: tensor<i32>):
    %greater = stablehlo.compare GT, %x, %y, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %greater : tensor<i1>
  }) {dimension = 0 : i64, is_stable = true} : (tensor<3xi32>, tensor<3xi32>) -> (tensor<3xi32>, tensor<3xi32>)
  check.expect_eq_const %positions, dense<[0, 1, 2]> : tensor<3xi32>
  check.expect_eq_const %sorted#1, dense<[1, 2, 0]> : tensor<3xi32>
  func.return
}

// A scatter whose indices are one index vector (no batch dimension) with a window
// dimension: IREE's verifier rejects it ("expected indices to be equal to batch rank
// or batch rank + 1"), as it does 166 of the 498 scatter tests of StableHLO's files.
func.func @scatter_of_one_index_vector() {
  %operand = stablehlo.constant dense<0.0> : tensor<4x2x3xf32>
  %index = stablehlo.constant dense<[3, 2]> : tensor<2xi64>
  %update = stablehlo.constant dense<[1.5, 2.5]> : tensor<2xf32>
  %b:3 = stablehlo.optimization_barrier %operand, %index, %update : tensor<4x2x3xf32>, tensor<2xi64>, tensor<2xf32>
  %result = "stablehlo.scatter"(%b#0, %b#1, %b#2) ({
  ^bb0(%old: tensor<f32>, %new: tensor<f32>):
    %sum = stablehlo.add %old, %new : tensor<f32>
    stablehlo.return %sum : tensor<f32>
  }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0], inserted_window_dims = [0, 2],
                                                     scatter_dims_to_operand_dims = [0, 2]>}
      : (tensor<4x2x3xf32>, tensor<2xi64>, tensor<2xf32>) -> tensor<4x2x3xf32>
  %column = stablehlo.slice %result [3:4, 0:2, 2:3] : (tensor<4x2x3xf32>) -> tensor<1x2x1xf32>
  check.expect_eq_const %column, dense<[[[1.5], [2.5]]]> : tensor<1x2x1xf32>
  func.return
}

// sin(3.14159274) = -8.74227766e-08 (correctly rounded; the f32 nearest pi is not pi).
// IREE's approximation gives -0.0: the spec does not bound the error of sine.
func.func @sine_next_to_pi() {
  %x = stablehlo.constant dense<3.14159274> : tensor<f32>
  %b = stablehlo.optimization_barrier %x : tensor<f32>
  %y = stablehlo.sine %b : tensor<f32>
  %expected = stablehlo.constant dense<-8.74227766e-08> : tensor<f32>
  check.expect_close %y, %expected, max_ulp_difference = 3 : tensor<f32>, tensor<f32>
  func.return
}

// Out-of-range float -> integer conversions: the spec has not decided yet (#180).
// The interpreter and XLA saturate (NaN gives 0); IREE gives INT_MIN (x86's cvttss2si).
func.func @convert_out_of_range() {
  %x = stablehlo.constant dense<[3.0e9, -3.0e9, 0x7FC00000, -2.5]> : tensor<4xf32>
  %b = stablehlo.optimization_barrier %x : tensor<4xf32>
  %i = stablehlo.convert %b : (tensor<4xf32>) -> tensor<4xi32>
  check.expect_eq_const %i, dense<[2147483647, -2147483648, 0, -2]> : tensor<4xi32>
  func.return
}

// A complex<f64> constant that is not a splat: iree-compile dies of SIGFPE.
func.func @complex_f64_constant() {
  %c = stablehlo.constant dense<[(1.0, 2.0), (3.0, -4.0)]> : tensor<2xcomplex<f64>>
  %b = stablehlo.optimization_barrier %c : tensor<2xcomplex<f64>>
  check.expect_eq_const %b, dense<[(1.0, 2.0), (3.0, -4.0)]> : tensor<2xcomplex<f64>>
  func.return
}

// f64 transcendental functions do not link: "undefined symbol: sin" (f32 ones do).
func.func @sine_of_f64() {
  %x = stablehlo.constant dense<1.0> : tensor<f64>
  %b = stablehlo.optimization_barrier %x : tensor<f64>
  %y = stablehlo.sine %b : tensor<f64>
  %expected = stablehlo.constant dense<0.8414709848078965> : tensor<f64>
  check.expect_close %y, %expected, max_ulp_difference = 3 : tensor<f64>, tensor<f64>
  func.return
}

// f64 as written: 1e300 + 1e300 = 2e300. Under IREE's default f64 demotion
// (--iree-input-demote-f64-to-f32=true) it is computed in f32: inf.
func.func @f64_as_written() {
  %x = stablehlo.constant dense<1.0e300> : tensor<f64>
  %b = stablehlo.optimization_barrier %x : tensor<f64>
  %y = stablehlo.add %b, %b : tensor<f64>
  check.expect_eq_const %y, dense<2.0e300> : tensor<f64>
  func.return
}
