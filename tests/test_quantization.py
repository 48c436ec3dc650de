"""Quantized types and ops: uniform_quantize / uniform_dequantize, and ops on
quantized tensors (stored integers, or dequantize -> op -> quantize).

Oracles: hand-checked values (the spec's examples) and the C++ reference
interpreter, which lowers quantized programs to integer and float math first
(stablehlo-legalize-quant-to-math); JAX does not emit quantized types.
"""

from __future__ import annotations

import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.ir.types import Quantization

QA = "!quant.uniform<i8:f32, 0.05:-3>"
QB = "!quant.uniform<i8:f32, 0.2:5>"
QR = "!quant.uniform<i8:f32, 0.1:2>"

RNG = np.random.default_rng(0)
A = RNG.integers(-128, 128, 12).astype(np.int8).reshape(3, 4)
B = RNG.integers(-128, 128, 12).astype(np.int8).reshape(3, 4)


def tensor(element: str, shape: str = "3x4") -> str:
    return f"tensor<{shape}x{element}>"


def module(body: str, arg_types, result_type: str) -> str:
    args = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(arg_types))
    return f"func.func @main({args}) -> {result_type} {{\n  %0 = {body}\n  return %0 : {result_type}\n}}"


def run_both(reference, text, *args):
    (ours,) = si.run(text, *args)
    (theirs,) = reference.evaluate(text, list(args))
    return ours, theirs


# ------------------------------------------------------------------ the types


def test_decodes_per_tensor_and_per_axis_types():
    per_axis = "tensor<2x3x!quant.uniform<i8<-100:120>:f32:1, {0.1:3, 0.2, 5.0e-1:-4}>>"
    program = si.load(module(f"stablehlo.uniform_dequantize %arg0 : ({per_axis}) -> tensor<2x3xf32>", [per_axis],
                             "tensor<2x3xf32>"))
    (ttype,) = program.function("main").arg_types
    assert ttype.is_quantized and ttype.shape == (2, 3) and ttype.dtype == np.int8
    assert ttype.quantization == Quantization("i8", -100, 120, "f32", (0.1, 0.2, 0.5), (3, 0, -4), 1)
    assert ttype.expressed() == si.TensorType.of((2, 3), "f32")
    assert ttype.storage() == si.TensorType.of((2, 3), "i8")

    program = si.load(module("stablehlo.uniform_quantize %arg0 : (tensor<f32>) -> tensor<!quant.uniform<i16:f32, 2.5>>",
                             ["tensor<f32>"], "tensor<!quant.uniform<i16:f32, 2.5>>"))
    (result,) = program.function("main").result_types
    assert result.quantization == Quantization("i16", -32768, 32767, "f32", (2.5,), (0,), None)
    assert str(result) == "tensor<!quant.uniform<i16:f32, 2.500000e+00>>"


# ------------------------------------------------------ uniform_(de)quantize


PER_AXIS = "!quant.uniform<i8:f32:0, {0.1:-30,0.5:-20}>"


def test_spec_examples():
    """The examples of the spec's uniform_quantize and uniform_dequantize."""
    (dequantized,) = si.run(module(f"stablehlo.uniform_dequantize %arg0 : ({tensor(PER_AXIS, '2')}) -> tensor<2xf32>",
                                   [tensor(PER_AXIS, "2")], "tensor<2xf32>"), np.array([10, 10], np.int8))
    np.testing.assert_array_equal(dequantized, [4.0, 15.0])
    (quantized,) = si.run(module(f"stablehlo.uniform_quantize %arg0 : (tensor<2xf32>) -> {tensor(PER_AXIS, '2')}",
                                 ["tensor<2xf32>"], tensor(PER_AXIS, "2")), np.array([4.0, 15.0], np.float32))
    np.testing.assert_array_equal(quantized, [10, 10])
    target = "!quant.uniform<i8:f32:0, {0.1:-20,0.2:-30}>"
    (requantized,) = si.run(module(f"stablehlo.uniform_quantize %arg0 : ({tensor(PER_AXIS, '2')}) -> {tensor(target, '2')}",
                                   [tensor(PER_AXIS, "2")], tensor(target, "2")), np.array([10, 10], np.int8))
    np.testing.assert_array_equal(requantized, [20, 45])


def test_quantize_rounds_half_to_even_and_clamps_to_storage_range():
    q = "!quant.uniform<i8<-100:100>:f32, 0.5:10>"
    text = module(f"stablehlo.uniform_quantize %arg0 : (tensor<7xf32>) -> {tensor(q, '7')}", ["tensor<7xf32>"],
                  tensor(q, "7"))
    x = np.array([0.25, 0.75, -0.25, 1.0, 100.0, -100.0, -5.0], np.float32)
    (result,) = si.run(text, x)
    # x / 0.5 + 10 = 10.5, 11.5, 9.5, 12, 210, -190, 0 -> even rounding, clamp to [-100, 100]
    np.testing.assert_array_equal(result, [10, 12, 10, 12, 100, -100, 0])
    assert result.dtype == np.int8


@pytest.mark.parametrize("storage, expressed", [("i8", "f32"), ("ui8", "f32"), ("i16", "f32"), ("i4", "f32")])
def test_quantize_dequantize_against_reference(reference, storage, expressed):
    q = f"!quant.uniform<{storage}:{expressed}, 0.375:{'3' if storage.startswith('u') else '-1'}>"
    text = (f"func.func @main(%arg0: tensor<16x{expressed}>) -> ({tensor(q, '16')}, tensor<16x{expressed}>) {{\n"
            f"  %0 = stablehlo.uniform_quantize %arg0 : (tensor<16x{expressed}>) -> {tensor(q, '16')}\n"
            f"  %1 = stablehlo.uniform_dequantize %0 : ({tensor(q, '16')}) -> tensor<16x{expressed}>\n"
            f"  return %0, %1 : {tensor(q, '16')}, tensor<16x{expressed}>\n}}")
    dtype = si.TensorType.of((), expressed).dtype
    x = np.concatenate([np.linspace(-30, 30, 13), [0.1875, -0.1875, 1e9]]).astype(dtype)
    ours = si.run(text, x)
    theirs = reference.evaluate(text, [x])
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("expressed", ["f16", "bf16", "f64"])
def test_quantize_dequantize_in_the_expressed_type(expressed):
    """(The reference interpreter does not lower these.) Values chosen so that each
    step is exact: x / 0.25 + 3, rounded to even, clamped to i8."""
    q = f"!quant.uniform<i8:{expressed}, 0.25:3>"
    text = (f"func.func @main(%arg0: tensor<6x{expressed}>) -> ({tensor(q, '6')}, tensor<6x{expressed}>) {{\n"
            f"  %0 = stablehlo.uniform_quantize %arg0 : (tensor<6x{expressed}>) -> {tensor(q, '6')}\n"
            f"  %1 = stablehlo.uniform_dequantize %0 : ({tensor(q, '6')}) -> tensor<6x{expressed}>\n"
            f"  return %0, %1 : {tensor(q, '6')}, tensor<6x{expressed}>\n}}")
    dtype = si.TensorType.of((), expressed).dtype
    quantized, dequantized = si.run(text, np.array([0.125, 0.375, -1.0, 2.5, 100.0, -100.0], dtype))
    np.testing.assert_array_equal(quantized, [4, 4, -1, 13, 127, -128])
    assert dequantized.dtype == dtype
    np.testing.assert_array_equal(dequantized.astype(np.float64), [0.25, 0.25, -1.0, 2.5, 31.0, -32.75])


def test_per_axis_quantize_against_reference(reference):
    q = "!quant.uniform<i8<-100:100>:f32:1, {0.1:3, 0.2:-4, 0.5}>"
    text = module(f"stablehlo.uniform_quantize %arg0 : (tensor<2x3xf32>) -> {tensor(q, '2x3')}", ["tensor<2x3xf32>"],
                  tensor(q, "2x3"))
    x = np.array([[0.05, 0.15, 0.25], [-30, 30, 1000]], np.float32)
    ours, theirs = run_both(reference, text, x)
    np.testing.assert_array_equal(ours, theirs)
    # 0.5 + 3 -> 4 (even), 0.75 - 4 -> -3, 0.5 -> 0 (even), then clamped to [-100, 100]
    np.testing.assert_array_equal(ours, [[4, -3, 0], [-100, 100, 100]])


def test_requantize_against_reference(reference):
    source, target = "!quant.uniform<i8:f32, 0.3:7>", "!quant.uniform<i16:f32, 0.07:-100>"
    text = module(f"stablehlo.uniform_quantize %arg0 : ({tensor(source)}) -> {tensor(target)}", [tensor(source)],
                  tensor(target))
    ours, theirs = run_both(reference, text, A)
    np.testing.assert_array_equal(ours, theirs)


# ------------------------------------------------- ops on quantized tensors

BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "atan2", "remainder"]
UNARY = ["abs", "negate", "sign", "floor", "ceil", "round_nearest_even", "round_nearest_afz", "sqrt", "rsqrt",
         "cbrt", "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "sine", "cosine",
         "tan", "tanh"]


@pytest.mark.parametrize("name", BINARY)
def test_binary_ops_dequantize_op_quantize(reference, name):
    text = module(f"stablehlo.{name} %arg0, %arg1 : ({tensor(QA)}, {tensor(QB)}) -> {tensor(QR)}",
                  [tensor(QA), tensor(QB)], tensor(QR))
    ours, theirs = run_both(reference, text, A, B)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("name", UNARY)
def test_unary_ops_dequantize_op_quantize(reference, name):
    text = module(f"stablehlo.{name} %arg0 : ({tensor(QA)}) -> {tensor(QR)}", [tensor(QA)], tensor(QR))
    ours, theirs = run_both(reference, text, A)
    np.testing.assert_array_equal(ours, theirs)


def test_add_by_hand():
    text = module(f"stablehlo.add %arg0, %arg1 : ({tensor(QA, '2')}, {tensor(QB, '2')}) -> {tensor(QR, '2')}",
                  [tensor(QA, "2"), tensor(QB, "2")], tensor(QR, "2"))
    (result,) = si.run(text, np.array([7, -3], np.int8), np.array([10, 0], np.int8))
    # (7 + 3) * 0.05 + (10 - 5) * 0.2 = 1.5 -> 1.5 / 0.1 + 2 = 17; 0 + -1 = -1 -> -10 + 2 = -8
    np.testing.assert_array_equal(result, [17, -8])


def test_compare_and_select(reference):
    compare = module(f"stablehlo.compare LT, %arg0, %arg1 : ({tensor(QA)}, {tensor(QB)}) -> tensor<3x4xi1>",
                     [tensor(QA), tensor(QB)], "tensor<3x4xi1>")
    ours, theirs = run_both(reference, compare, A, B)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, (A + 3.0) * 0.05 < (B - 5.0) * 0.2)
    select = (f"func.func @main(%arg0: {tensor(QA)}, %arg1: {tensor(QB)}) -> {tensor(QR)} {{\n"
              f"  %0 = stablehlo.compare GT, %arg0, %arg1 : ({tensor(QA)}, {tensor(QB)}) -> tensor<3x4xi1>\n"
              f"  %1 = stablehlo.select %0, %arg0, %arg0 : (tensor<3x4xi1>, {tensor(QA)}, {tensor(QA)}) -> {tensor(QR)}\n"
              f"  return %1 : {tensor(QR)}\n}}")
    (ours,) = si.run(select, A, B)
    # dequantize_select_quantize: (a + 3) * 0.05 / 0.1 + 2, rounded half to even
    np.testing.assert_array_equal(ours, np.rint((A + 3.0) / 2 + 2))  # (the reference keeps the stored a)


def test_clamp(reference):
    text = module(f"stablehlo.clamp %arg0, %arg1, %arg2 : ({tensor(QA)}, {tensor(QA)}, {tensor(QA)}) -> {tensor(QA)}",
                  [tensor(QA)] * 3, tensor(QA))
    low = np.full((3, 4), -20, np.int8)
    ours, theirs = run_both(reference, text, low, A, np.full((3, 4), 40, np.int8))
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, np.clip(A, -20, 40))


@pytest.mark.parametrize("body, result_shape", [
    ("stablehlo.reshape %arg0 : ({t}) -> {r}", "4x3"),
    ("stablehlo.transpose %arg0, dims = [1, 0] : ({t}) -> {r}", "4x3"),
    ("stablehlo.slice %arg0 [1:3, 0:4:2] : ({t}) -> {r}", "2x2"),
    ("stablehlo.broadcast_in_dim %arg0, dims = [1, 2] : ({t}) -> {r}", "2x3x4"),
    ("stablehlo.concatenate %arg0, %arg0, dim = 0 : ({t}, {t}) -> {r}", "6x4"),
])
def test_element_moving_ops_keep_stored_integers(reference, body, result_shape):
    text = module(body.format(t=tensor(QA), r=tensor(QA, result_shape)), [tensor(QA)], tensor(QA, result_shape))
    ours, theirs = run_both(reference, text, A)
    np.testing.assert_array_equal(ours, theirs)


def test_per_axis_transpose_moves_the_quantization_dimension():
    source = "!quant.uniform<i8:f32:0, {0.5:1, 2.0:-1}>"
    target = "!quant.uniform<i8:f32:1, {0.5:1, 2.0:-1}>"
    text = module(f"stablehlo.transpose %arg0, dims = [1, 0] : ({tensor(source, '2x3')}) -> {tensor(target, '3x2')}",
                  [tensor(source, "2x3")], tensor(target, "3x2"))
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int8)
    (result,) = si.run(text, x)
    np.testing.assert_array_equal(result, x.T)


def test_constant_and_pad_of_quantized_type(reference):
    text = (f"func.func @main(%arg0: {tensor(QA, '2x2')}) -> {tensor(QA, '3x4')} {{\n"
            f"  %c = stablehlo.constant() {{value = dense<-3> : tensor<i8>}} : () -> tensor<{QA}>\n"
            f"  %0 = stablehlo.pad %arg0, %c, low = [1, 0], high = [0, 1], interior = [0, 1] : "
            f"({tensor(QA, '2x2')}, tensor<{QA}>) -> {tensor(QA, '3x4')}\n"
            f"  return %0 : {tensor(QA, '3x4')}\n}}")
    x = np.array([[1, 2], [3, 4]], np.int8)
    ours, theirs = run_both(reference, text, x)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, [[-3, -3, -3, -3], [1, -3, 2, -3], [3, -3, 4, -3]])


def test_dot_general_quantized(reference):
    """Small values: the reference's integer lowering wraps where the spec's quantize saturates."""
    rhs_q = "!quant.uniform<i8:f32, 0.2>"
    text = module(f"stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [1] : "
                  f"({tensor(QA)}, {tensor(rhs_q)}) -> {tensor(QR, '3x3')}", [tensor(QA), tensor(rhs_q)],
                  tensor(QR, "3x3"))
    lhs, rhs = A // 16, B // 16
    ours, theirs = run_both(reference, text, lhs, rhs)
    expected = np.round(((lhs + 3.0) * 0.05) @ (rhs * 0.2).T / 0.1 + 2)
    np.testing.assert_array_equal(ours, expected)
    np.testing.assert_allclose(ours, theirs, atol=1)  # the reference rounds its integer requantization


def test_hybrid_dot_general_dequantizes_the_weights(reference):
    rhs_q = "!quant.uniform<i8:f32:1, {0.2, 0.1, 0.5}>"
    text = module(f"stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : "
                  f"(tensor<2x4xf32>, {tensor(rhs_q, '4x3')}) -> tensor<2x3xf32>", ["tensor<2x4xf32>", tensor(rhs_q, "4x3")],
                  "tensor<2x3xf32>")
    lhs = np.arange(8, dtype=np.float32).reshape(2, 4) / 4
    rhs = A.reshape(4, 3)
    (ours,) = si.run(text, lhs, rhs)
    weights = rhs * np.array([0.2, 0.1, 0.5], np.float32)
    expected = np.zeros((2, 3), np.float32)
    for k in range(4):  # the spec's dot product: rounded products summed in order (docs/semantics.md)
        expected = expected + lhs[:, k, None] * weights[k]
    np.testing.assert_array_equal(ours, expected)


def test_reduce_with_quantized_body(reference):
    q = "!quant.uniform<i8:f32, 0.5:1>"
    text = (f"func.func @main(%arg0: {tensor(q, '2x3')}) -> {tensor(q, '2')} {{\n"
            f"  %init = stablehlo.constant() {{value = dense<1> : tensor<i8>}} : () -> tensor<{q}>\n"
            f"  %0 = stablehlo.reduce(%arg0 init: %init) applies stablehlo.add across dimensions = [1] : "
            f"({tensor(q, '2x3')}, tensor<{q}>) -> {tensor(q, '2')}\n"
            f"  return %0 : {tensor(q, '2')}\n}}")
    x = np.array([[3, 5, -1], [1, 1, 100]], np.int8)
    (ours,) = si.run(text, x)
    # the body adds dequantized values: (2 + 4 - 2) * 0.5 = 2.0 -> 5; (0 + 0 + 99) * 0.5 -> 100
    np.testing.assert_array_equal(ours, [5, 100])


def test_quantized_arguments_take_stored_integers():
    text = module(f"stablehlo.uniform_dequantize %arg0 : ({tensor(QA, '2')}) -> tensor<2xf32>", [tensor(QA, "2")],
                  "tensor<2xf32>")
    with pytest.raises(si.ArgumentError, match="int8"):
        si.run(text, np.array([1.0, 2.0], np.float32))
    (result,) = si.run(text, np.array([17, -3], np.int8))
    np.testing.assert_allclose(result, [1.0, 0.0])


def test_bitcast_convert_of_quantized_reads_the_stored_integers():
    text = ("func.func @main(%arg0: tensor<2x!quant.uniform<i8:f32:0, {0.1:1, 0.2:2}>>) -> tensor<2xf32> {\n"
            "  %0 = stablehlo.bitcast_convert %arg0 : (tensor<2x!quant.uniform<i8:f32:0, {0.1:1, 0.2:2}>>) "
            "-> tensor<2xi8>\n"
            "  %1 = stablehlo.convert %0 : (tensor<2xi8>) -> tensor<2xf32>\n"
            "  return %1 : tensor<2xf32>\n}")
    (result,) = si.run(text, np.array([5, 6], np.int8))  # bitcast of a quantized tensor reads its storage
    np.testing.assert_array_equal(result, [5, 6])
