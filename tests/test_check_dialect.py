"""The check dialect of StableHLO's interpreter tests: parsing of its custom
syntax (check_dialect.py) and the semantics of each check (ops/check.py),
with hand-checked expectations."""

import ml_dtypes
import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.ir.check_dialect import to_generic_form
from stablehlo_interp.engine.numerics import ulp_difference
from stablehlo_interp.ops.check import CheckFailure


def module(body: str, args: str = "") -> str:
    return f"func.func @main({args}) {{\n{body}\n  func.return\n}}"


def passes(body: str, *args, signature: str = ""):
    si.run(module(body, signature), *args)


def fails(body: str, *args, signature: str = "") -> CheckFailure:
    with pytest.raises(CheckFailure) as error:
        si.run(module(body, signature), *args)
    return error.value


# ------------------------------------------------------------------- syntax

SYNTAX = [
    # (check line, operand types) -- every form of CheckOps.td's assembly formats
    ("check.expect_eq %a, %b : tensor<3xf32>", "f32"),
    ("check.expect_eq %a, %b {note = \"x\"} : tensor<3xf32>", "f32"),
    ("check.expect_eq_const %a, dense<[1.0, -2.0, 3.5]> : tensor<3xf32>", "f32"),
    ("check.expect_eq_const %a, dense<[1.0, -2.0, 3.5]> : tensor<3xf32> {note = 1 : i64}", "f32"),
    ("check.eq %a, dense<[1.0, -2.0, 3.5]> : tensor<3xf32>", "f32"),
    ("check.expect_almost_eq%a, %b : tensor<3xf32>", "f32"),  # no space, as StableHLO's check.mlir
    ("check.expect_almost_eq %a, %b, tolerance = 0.5 : tensor<3xf32>", "f32"),
    ("check.expect_almost_eq %a, %b, tolerance = 0.5 : f64 : tensor<3xf32>", "f32"),
    ("check.expect_almost_eq %a, %b, tolerance = 1 : tensor<3xf32>", "f32"),
    ("check.expect_almost_eq_const %a, dense<[1.0, -2.0, 3.50001]> : tensor<3xf32>", "f32"),
    ("check.expect_almost_eq_const %a, dense<[1.0, -2.0, 3.6]> : tensor<3xf32>, tolerance = 0.2", "f32"),
    ("check.expect_almost_eq_const %a, dense<[1.0, -2.0, 3.6]> : tensor<3xf32> {tolerance = 0.2 : f64}",
     "f32"),
    ("check.almost_eq %a, dense<[1.0, -2.0, 3.5]> : tensor<3xf32>", "f32"),
    ("check.expect_close %a, %b, max_ulp_difference = 0 : tensor<3xf32>, tensor<3xf32>", "f32"),
    ("check.expect_close %a, %b, max_ulp_difference = 2, min_ulp_difference = 0 : "
     "tensor<3xf32>, tensor<3xf32>", "f32"),
    ("check.expect_close %a, %b, max_ulp_difference = 2 : {note = 1 : i64} tensor<3xf32>, tensor<3xf32>",
     "f32"),
    ("check.expect_eq %a, %b : tensor<3xf32>  // a comment with check.expect_eq %a, %b", "f32"),
    ('"check.expect_close"(%a, %b) {max_ulp_difference = 0 : ui64} : (tensor<3xf32>, tensor<3xf32>) -> ()',
     "f32"),
    ("%r = stablehlo.custom_call @check.eq(%a, %b) : (tensor<3xf32>, tensor<3xf32>) -> tensor<i1>", "f32"),
    ("stablehlo.custom_call @check.expect_eq(%a, %b) {has_side_effect = true} : "
     "(tensor<3xf32>, tensor<3xf32>) -> ()", "f32"),
    ("stablehlo.custom_call @check.expect_almost_eq(%a, %b) : (tensor<3xf32>, tensor<3xf32>) -> ()", "f32"),
    ("stablehlo.custom_call @check.expect_close(%a, %b) : (tensor<3xf32>, tensor<3xf32>) -> ()", "f32"),
    ('"stablehlo.custom_call"(%a, %b) <{call_target_name = "check.expect_close", has_side_effect = true}>'
     " : (tensor<3xf32>, tensor<3xf32>) -> ()", "f32"),
]


@pytest.mark.parametrize("line", [line for line, _ in SYNTAX], ids=range(len(SYNTAX)))
def test_syntax_forms_parse_and_pass(line):
    value = np.array([1.0, -2.0, 3.5], np.float32)
    passes(f"  {line}", value, value.copy(), signature="%a: tensor<3xf32>, %b: tensor<3xf32>")


def test_syntax_forms_fail_on_different_values():
    a = np.array([1.0, -2.0, 3.5], np.float32)
    b = np.array([1.0, -2.0, 9.0], np.float32)
    for line, _ in SYNTAX:
        if "dense<" in line or "// a comment" in line:
            continue
        error = fails(f"  {line}", a, b, signature="%a: tensor<3xf32>, %b: tensor<3xf32>")
        assert "at index [2]" in str(error), line


def test_op_spanning_lines_keeps_later_line_numbers():
    text = """func.func @main(%a: tensor<2xi32>) {
  check.expect_eq %a,
      %a : tensor<2xi32>
  check.expect_eq_const %a, dense<[
      1, 2]> : tensor<2xi32>  // multi-line value
  check.expect_eq_const %a, dense<[1, 3]> : tensor<2xi32>
  func.return
}"""
    generic = to_generic_form(text)
    assert generic.count("\n") == text.count("\n")
    with pytest.raises(CheckFailure) as error:
        si.run(text, np.array([1, 2], np.int32))
    assert error.value.location.frame.line == 6
    assert "3 (expected)" in str(error.value) and "at index [1]" in str(error.value)


def test_check_in_generic_syntax_and_text_without_checks_are_left_alone():
    text = '"check.expect_eq"(%a, %b) : (tensor<2xi32>, tensor<2xi32>) -> ()\n  %c = stablehlo.add %a, %b'
    assert to_generic_form(text) == text


@pytest.mark.parametrize("line, match", [
    ("check.expect_nothing %a : tensor<2xi32>", "unknown check op"),
    ("check.expect_eq %a, %a", "missing ': type'"),
    ("check.expect_eq_const %a, dense<[1, 2]>", "expected ', dense"),
    ("check.expect_eq %a, %a, bogus = 3 : tensor<2xi32>", "unexpected"),
    ("check.expect_eq dense<1> : tensor<2xi32>", "expected an operand"),
])
def test_malformed_checks_name_the_line(line, match):
    with pytest.raises(si.ModuleError, match=rf"line 2: cannot parse check\.\w+: .*{match}"):
        si.load(module(f"  {line}", "%a: tensor<2xi32>"))


def test_mismatched_types_are_a_load_error():
    with pytest.raises(si.OpError, match=r"compares tensor<2xf32> with tensor<3xf32>"):
        si.load(module('  "check.expect_eq"(%a, %b) : (tensor<2xf32>, tensor<3xf32>) -> ()',
                       "%a: tensor<2xf32>, %b: tensor<3xf32>"))
    with pytest.raises(si.OpError, match=r"compares tensor<2xf32> with tensor<2xf64>"):
        si.load(module('  "check.expect_eq_const"(%a) {value = dense<1.0> : tensor<2xf64>}'
                       " : (tensor<2xf32>) -> ()", "%a: tensor<2xf32>"))


def test_dynamic_shapes_are_compared_at_run_time():
    text = """func.func @main(%a: tensor<?xi32>, %b: tensor<2xi32>) {
  "check.expect_eq"(%a, %b) : (tensor<?xi32>, tensor<2xi32>) -> ()
  func.return
}"""
    si.run(text, np.array([1, 2], np.int32), np.array([1, 2], np.int32))
    with pytest.raises(CheckFailure, match=r"shape \(3,\) \(actual\) vs \(2,\) \(expected\)"):
        si.run(text, np.array([1, 2, 3], np.int32), np.array([1, 2], np.int32))


def test_serialized_eq_needs_a_probe_directory():
    """Outside the test runner no probe directory is set: a clear error, not a crash."""
    with pytest.raises(si.OpError, match="check.expect_serialized_eq.*no probe directory.*--probe-output-dir"):
        si.run(module('  check.expect_serialized_eq %a, probe_id = "p", iter = 2 : tensor<2xi32>',
                      "%a: tensor<2xi32>"), np.array([1, 2], np.int32))


# ---------------------------------------------------------------- semantics

F32 = "%a: tensor<4xf32>, %b: tensor<4xf32>"


def test_expect_eq_on_floats_matches_nan_with_nan_and_zero_with_negative_zero():
    a = np.array([np.nan, 0.0, -np.inf, 1.0], np.float32)
    b = np.array([np.nan, -0.0, -np.inf, 1.0], np.float32)
    passes("  check.expect_eq %a, %b : tensor<4xf32>", a, b, signature=F32)
    error = fails("  check.expect_eq %a, %b : tensor<4xf32>", a, np.ones(4, np.float32), signature=F32)
    assert "3 of 4 elements differ; first at index [0]: nan (actual) vs 1.0 (expected)" in str(error)


def test_expect_eq_on_integers_and_booleans():
    passes("  check.expect_eq_const %a, dense<[true, false]> : tensor<2xi1>", np.array([True, False]),
           signature="%a: tensor<2xi1>")
    error = fails("  check.expect_eq_const %a, dense<[-128, 127, 0]> : tensor<3xi8>",
                  np.array([-128, 127, 1], np.int8), signature="%a: tensor<3xi8>")
    assert "1 of 3 elements differ; first at index [2]: 1 (actual) vs 0 (expected)" in str(error)


@pytest.mark.parametrize("a, b, ok", [
    (5.0, 5.0001, True),          # the default tolerance is 1e-4
    (5.0, 5.0002, False),
    (1e-5, -1e-5, False),         # finite values of different signs never match
    (0.0, 5e-5, True),
    (-0.0, 5e-5, False),          # -0.0 is negative
    (np.inf, np.inf, True),
    (np.inf, 3e38, False),
    (np.nan, np.nan, True),
    (np.nan, 1.0, False),
])
def test_expect_almost_eq_rules(a, b, ok):
    body = "  check.expect_almost_eq %a, %b : tensor<f64>"
    args = (np.float64(a), np.float64(b))
    if ok:
        passes(body, *args, signature="%a: tensor<f64>, %b: tensor<f64>")
    else:
        assert "tolerance 0.0001" in str(fails(body, *args, signature="%a: tensor<f64>, %b: tensor<f64>"))


def test_expect_almost_eq_tolerance_and_complex_parts():
    signature = "%a: tensor<2xcomplex<f32>>, %b: tensor<2xcomplex<f32>>"
    a = np.array([1 + 1j, -2 + 0.5j], np.complex64)
    b = np.array([1.05 + 0.96j, -2 + 0.5j], np.complex64)
    passes("  check.expect_almost_eq %a, %b, tolerance = 0.1 : tensor<2xcomplex<f32>>", a, b,
           signature=signature)
    error = fails("  check.expect_almost_eq %a, %b, tolerance = 0.045 : tensor<2xcomplex<f32>>", a, b,
                  signature=signature)
    assert "tolerance 0.045" in str(error) and "at index [0]" in str(error)


def _f16_bits_apart(x: float, steps: int) -> np.float16:
    return (np.array(x, np.float16).view(np.uint16) + np.uint16(steps)).view(np.float16)


@pytest.mark.parametrize("steps, low, high, ok", [(3, 0, 3, True), (3, 0, 2, False), (3, 4, 9, False),
                                                  (0, 0, 0, True), (1, 0, 1, True)])
def test_expect_close_bounds(steps, low, high, ok):
    a = np.float16(5.0)
    b = _f16_bits_apart(5.0, steps)
    body = (f"  check.expect_close %a, %b, max_ulp_difference = {high}, min_ulp_difference = {low}"
            " : tensor<f16>, tensor<f16>")
    signature = "%a: tensor<f16>, %b: tensor<f16>"
    if ok:
        passes(body, a, b, signature=signature)
    else:
        message = str(fails(body, a, b, signature=signature))
        assert f"outside [{low}, {high}]" in message and f"({steps} ULP)" in message


def test_ulp_difference_by_hand():
    """StableHLO's rule (CheckOps.cpp): the distance of the magnitudes' bits, summed across signs."""
    f32 = np.float32
    tiny = np.finfo(f32).smallest_normal
    subnormal = np.finfo(f32).smallest_subnormal
    one_bits = int(np.array(1.0, f32).view(np.uint32))
    cases = [
        (f32(1.0), np.nextafter(f32(1.0), f32(2.0)), 1),
        (f32(1.0), f32(-1.0), 2 * one_bits),
        (f32(0.0), f32(-0.0), 0),
        (f32(0.0), subnormal, 1),       # every subnormal is a step
        (-subnormal, subnormal, 2),
        (f32(0.0), tiny, 2**23),
        (tiny, np.nextafter(tiny, f32(1)), 1),
        (f32(np.inf), f32(np.inf), 0),
        (f32(np.nan), -f32(np.nan), 0),
    ]
    for a, b, expected in cases:
        assert int(ulp_difference(np.array(a), np.array(b))) == expected, (a, b)
    assert int(ulp_difference(np.array(f32(np.inf)), np.array(np.finfo(f32).max))) == 2**64 - 1
    both = ulp_difference(np.array([1 + 2j], np.complex64), np.array([1 + 2.0000005j], np.complex64))
    assert int(both[0]) == 2
    largest = np.finfo(np.float64).max  # -max to +max: 2 * 0x7FEFFFFFFFFFFFFF, more than int64 holds
    assert int(ulp_difference(np.array(-largest), np.array(largest))) == 2 * 0x7FEFFFFFFFFFFFFF


def test_ulp_difference_with_subnormals_as_one_step():
    """For comparing with XLA CPU, which flushes subnormals: the subnormal range is one step."""
    f32 = np.float32
    tiny = np.finfo(f32).smallest_normal
    subnormal = np.finfo(f32).smallest_subnormal
    cases = [
        (f32(1.0), f32(-1.0), 2 * (int(np.array(1.0, f32).view(np.uint32)) - int(np.array(tiny, f32).view(
            np.uint32)) + 1)),
        (f32(0.0), subnormal, 0),       # a subnormal below half the smallest normal counts as 0
        (f32(0.0), f32(0.3) * tiny, 0),
        (f32(0.0), np.nextafter(tiny / f32(2), f32(0)), 0),
        (f32(0.0), tiny / f32(2), 1),   # half of it (exact in f32) counts as the step
        (f32(0.0), tiny, 1),
        (tiny, np.nextafter(tiny, f32(1)), 1),
        (0.30910525376096126, 0.3091052537609613, 1),   # f64: one step, not 512 (float64 arithmetic)
        (np.float64(1.0), np.nextafter(1.0, 2.0), 1),
    ]
    for a, b, expected in cases:
        assert int(ulp_difference(np.array(a), np.array(b), subnormals_as_one_step=True)) == expected, (a, b)


def test_custom_call_checks_use_the_bounds_of_stablehlo_translate():
    """@check.expect_close allows 3 ULP and @check.expect_almost_eq 1e-3 unless told otherwise, as
    stablehlo-translate does (the check dialect's own ops keep their defaults: 1 ULP and 1e-4)."""
    close = """func.func @main(%a: tensor<f16>, %b: tensor<f16>) {
  stablehlo.custom_call @check.expect_close(%a, %b) {has_side_effect = true} : (tensor<f16>, tensor<f16>) -> ()
  return
}"""
    si.run(close, np.float16(5.0), _f16_bits_apart(5.0, 3))
    with pytest.raises(CheckFailure, match=r"outside \[0, 3\].*\(4 ULP\)"):
        si.run(close, np.float16(5.0), _f16_bits_apart(5.0, 4))
    fails("  check.expect_close %a, %b : tensor<f16>, tensor<f16>", np.float16(5.0), _f16_bits_apart(5.0, 2),
          signature="%a: tensor<f16>, %b: tensor<f16>")
    strict = close.replace("{has_side_effect = true}", "{has_side_effect = true, max_ulp_difference = 0 : ui64}")
    with pytest.raises(CheckFailure, match=r"outside \[0, 0\]"):  # a bound given on the call is taken
        si.run(strict, np.float16(5.0), _f16_bits_apart(5.0, 1))
    almost = close.replace("check.expect_close", "check.expect_almost_eq").replace("f16", "f64")
    si.run(almost, 5.0, 5.0009)
    with pytest.raises(CheckFailure, match="tolerance 0.001"):
        si.run(almost, 5.0, 5.0011)
    assert "tolerance 0.0001" in str(fails("  check.expect_almost_eq %a, %b : tensor<f64>", 5.0, 5.0009,
                                           signature="%a: tensor<f64>, %b: tensor<f64>"))


def test_generic_check_ops_with_properties():
    """``<{value = ...}>``: the properties of an unregistered op, read as its attributes."""
    text = """func.func @main(%a: tensor<2xcomplex<f32>>, %b: tensor<2xbf16>) {
  "check.expect_almost_eq_const"(%a) <{value = dense<[(1.0,2.0), (3.0,-4.0)]> : tensor<2xcomplex<f32>>}> : (tensor<2xcomplex<f32>>) -> ()
  "check.expect_eq_const"(%b) <{value = dense<[1.5, -2.0]> : tensor<2xbf16>}> {note = "{x}"} : (tensor<2xbf16>) -> ()
  return
}"""
    b = np.array([1.5, -2.0], ml_dtypes.bfloat16)
    si.run(text, np.array([1 + 2j, 3 - 4j], np.complex64), b)
    with pytest.raises(CheckFailure, match=r"check.expect_almost_eq_const at -:2: .*first at index \[1\]"):
        si.run(text, np.array([1 + 2j, 3 - 4.5j], np.complex64), b)
    with pytest.raises(CheckFailure, match=r"check.expect_eq_const at -:3"):
        si.run(text, np.array([1 + 2j, 3 - 4j], np.complex64), -b)


def test_custom_call_check_eq_returns_true_and_uses_tolerance_for_floats():
    text = """func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32>, %i: tensor<2xi32>) -> (tensor<i1>, tensor<i1>) {
  %0 = stablehlo.custom_call @check.eq(%a, %b) : (tensor<2xf32>, tensor<2xf32>) -> tensor<i1>
  %1 = stablehlo.custom_call @check.eq(%i, %i) : (tensor<2xi32>, tensor<2xi32>) -> tensor<i1>
  return %0, %1 : tensor<i1>, tensor<i1>
}"""
    a = np.array([1.0, 2.0], np.float32)
    out = si.run(text, a, a + np.float32(5e-5), np.array([1, 2], np.int32),
                 listeners=[si.validation.ResultTypeChecker()])
    assert [bool(v) for v in out] == [True, True]
    with pytest.raises(CheckFailure, match=r"stablehlo.custom_call @check.eq at -:2: tolerance 0.0001"):
        si.run(text, a, a + np.float32(5e-4), np.array([1, 2], np.int32))


def test_failure_inside_a_loop_names_the_enclosing_op_and_iteration():
    text = """func.func @main() {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %0 = stablehlo.while(%i = %zero) : tensor<i32>
  cond {
    %five = stablehlo.constant dense<5> : tensor<i32>
    %c = stablehlo.compare LT, %i, %five : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %three = stablehlo.constant dense<3> : tensor<i32>
    %less = stablehlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
    check.expect_eq_const %less, dense<true> : tensor<i1>
    %next = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %next : tensor<i32>
  }
  func.return
}"""
    with pytest.raises(CheckFailure) as error:
        si.run(text)
    message = str(error.value)
    assert message.startswith("check.expect_eq_const at -:12:")
    assert "inside stablehlo.while at -:3" in message and "call 3" in message
