"""Linear algebra against XLA's CPU backend: dot_general (dimension numbers,
element types, preferred result types, dot algorithms), dot, einsum,
unary_einsum, triangular_solve, cholesky, and an MLP training step.

Tolerances: integers and booleans are exact. Float dot products may sum in a
different order from XLA/Eigen, so they are compared with the usual error
bound of a K-term dot product: ``|got - xla| <= (eps(result) + K * eps(sum)) *
(|a| @ |b|)`` with the magnitudes computed in f64 (``sum`` is f32 for results
of f32 or narrower). Factorizations and solves: relative error ``64 * n *
eps`` of the matrix (well-conditioned inputs).
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import stablehlo_interp as si
from stablehlo_interp.ops import linalg
from oracles import (assert_same, dtype_id, op_module, run_interp, run_interp_text,
                     run_xla, run_xla_text, same_as_reference, tensor_type, training_step_matches_xla)

FLOAT_DOT_TYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.complex64, np.complex128]
INT_DOT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]

# (lhs shape, rhs shape, ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch)))
DOT_CASES = [
    ((3, 5), (5, 4), (((1,), (0,)), ((), ()))),                # matmul
    ((5,), (5,), (((0,), (0,)), ((), ()))),                    # inner product
    ((3,), (4,), (((), ()), ((), ()))),                        # outer product
    ((5, 3), (4, 5), (((0,), (1,)), ((), ()))),                # transposed operands
    ((2, 3, 6), (2, 6, 4), (((2,), (1,)), ((0,), (0,)))),      # batched
    ((3, 2, 4, 5), (5, 4, 2, 7), (((2, 3), (1, 0)), ((1,), (2,)))),  # two contracting, batch in the middle
    ((2, 3, 4), (4, 3, 2), (((1,), (1,)), ((0, 2), (2, 0)))),  # two batch dims, reordered
    ((0, 3), (3, 4), (((1,), (0,)), ((), ()))),                # empty free dim
    ((2, 0), (0, 4), (((1,), (0,)), ((), ()))),                # empty contraction: zeros
    ((0, 2, 3), (0, 3, 1), (((2,), (1,)), ((0,), (0,)))),      # empty batch
]


def _values(shape, dtype, rng, scale=3.0):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        wide = np.int64 if info.min < 0 else np.uint64
        return rng.integers(info.min, int(info.max) + 1, shape, dtype=wide).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype) * scale
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _eps(dtype) -> float:
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        dtype = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
    return float(ml_dtypes.finfo(dtype).eps)


def assert_dot_close(actual, expected, magnitude, contraction: int, context=""):
    """``|actual - expected| <= (eps(result) + K * eps(sum)) * magnitude`` (see module doc)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, context
    if actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected, err_msg=context)
        return
    summed = np.float64 if actual.dtype in (np.float64, np.complex128) else np.float32
    bound = (_eps(actual.dtype) + max(contraction, 1) * _eps(summed)) * magnitude
    error = np.abs(actual.astype(np.complex128) - expected.astype(np.complex128))
    bad = error > bound + np.finfo(np.float64).tiny
    assert not bad.any(), (f"{context}{bad.sum()} elements beyond the bound; worst error "
                           f"{error.max()} (bound there {bound.reshape(-1)[np.argmax(error)]})")


def _magnitude(lhs, rhs, numbers):
    return np.abs(np.asarray(lax.dot_general(np.abs(lhs.astype(np.complex128)).astype(np.float64),
                                             np.abs(rhs.astype(np.complex128)).astype(np.float64), numbers)))


def ops_module(ops) -> str:
    """One @main applying several single ops, so XLA compiles once.

    ``ops``: ``(op, operand types, result types, attributes)`` as for op_module;
    @main takes every op's operands in order and returns every op's results.
    """
    args, lines, results = [], [], []
    for index, (name, operand_types, result_types, attributes) in enumerate(ops):
        result_types = [result_types] if isinstance(result_types, str) else list(result_types)
        names = [f"%a{len(args) + i}" for i in range(len(operand_types))]
        args += [f"{n}: {t}" for n, t in zip(names, operand_types)]
        count = len(result_types)
        lhs = f"%r{index}:{count}" if count > 1 else f"%r{index}"
        attrs = f" {{{attributes}}}" if attributes else ""
        lines.append(f'  {lhs} = "{name}"({", ".join(names)}){attrs} : ({", ".join(operand_types)}) -> '
                     f'({", ".join(result_types)})')
        results += [(f"%r{index}#{i}" if count > 1 else f"%r{index}", t) for i, t in enumerate(result_types)]
    types = ", ".join(t for _, t in results)
    return (f"func.func @main({', '.join(args)}) -> ({types}) {{\n" + "\n".join(lines)
            + f"\n  return {', '.join(r for r, _ in results)} : {types}\n}}\n")


# ------------------------------------------------------------------ dot_general


@pytest.mark.parametrize("dtype", FLOAT_DOT_TYPES + INT_DOT_TYPES + [np.bool_], ids=dtype_id)
def test_dot_general_matches_xla(dtype):
    """Every case of DOT_CASES, in one jitted function per element type."""
    rng = np.random.default_rng(0)
    operands = [(_values(lhs_shape, dtype, rng), _values(rhs_shape, dtype, rng))
                for lhs_shape, rhs_shape, _ in DOT_CASES]
    flat = [x for pair in operands for x in pair]

    def fn(*flat):
        return [lax.dot_general(flat[2 * i], flat[2 * i + 1], numbers)
                for i, (_, _, numbers) in enumerate(DOT_CASES)]

    expected, actual = run_xla(fn, *flat), run_interp(fn, *flat)
    for (lhs, rhs), (lhs_shape, _, numbers), got, want in zip(operands, DOT_CASES, actual, expected):
        contraction = int(np.prod([lhs_shape[d] for d in numbers[0][0]]))
        assert_dot_close(got, want, _magnitude(lhs, rhs, numbers), contraction, f"{numbers}: ")


SMALL_DOTS = [  # (lhs shape, rhs shape, dimension numbers, result shape)
    ((24, 3), (3,), "contracting_dims = [1] x [0]", (24,)),
    ((24,), (24, 3), "contracting_dims = [0] x [0]", (3,)),
    ((9, 4), (3, 9), "contracting_dims = [0] x [1]", (4, 3)),
    ((16,), (16,), "contracting_dims = [0] x [0]", ()),           # one result element: a running sum
    ((3, 1), (3,), "contracting_dims = [0] x [0]", (1,)),
    ((16,), (16,), "contracting_dims = [] x []", (16, 16)),        # one product each: an outer product
    ((), (), "contracting_dims = [] x []", ()),
    ((2, 3, 5, 4), (4, 2, 5, 3), "batching_dims = [0] x [1], contracting_dims = [2, 3] x [2, 0]", (2, 3, 3)),
]


@pytest.mark.parametrize("operand, result", [(np.float32, np.float32), (np.float64, np.float64),
                                             (np.float16, np.float16), (ml_dtypes.bfloat16, ml_dtypes.bfloat16),
                                             (ml_dtypes.bfloat16, np.float32), (np.int8, np.float32)],
                         ids=lambda d: dtype_id(d))
def test_small_float_dots_fold_as_the_general_way(monkeypatch, operand, result):
    """A real float dot whose products fit one fold buffer runs its own runner
    (linalg._small_real_dot): bit for bit the general way's left fold (which
    test_accumulation checks against the C++ reference interpreter), on values whose
    sums cancel, with NaNs of several payloads, infinities and signed zeros."""
    rng = np.random.default_rng(7)

    def values(shape, payload: int):
        if np.dtype(operand).kind == "i":
            return rng.integers(-128, 128, shape).astype(operand)
        x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-12, 13, shape)).astype(operand)
        flat = x.reshape(-1)   # (a view: x itself)
        if flat.size >= 4:   # a NaN of this payload (with the sign bit for an odd one), -inf, -0.0
            bits = np.dtype(f"u{np.dtype(operand).itemsize}")
            nan = np.array(np.nan, operand).view(bits) | bits.type(payload)
            if payload % 2:
                nan |= bits.type(1 << (8 * bits.itemsize - 1))
            flat[0], flat[1], flat[2] = nan.view(operand), -np.inf, -0.0
        return x

    element, result_element = dtype_id(operand), dtype_id(result)
    for lhs_shape, rhs_shape, dims, result_shape in SMALL_DOTS:
        lt, rt = tensor_type(lhs_shape, element), tensor_type(rhs_shape, element)
        ot = tensor_type(result_shape, result_element)
        text = (f"func.func @main(%a: {lt}, %b: {rt}) -> {ot} {{\n  %0 = stablehlo.dot_general %a, %b, {dims} : "
                f"({lt}, {rt}) -> {ot}\n  return %0 : {ot}\n}}")
        fast = si.load(text)
        assert fast.function("main").region.steps[0].run.__qualname__.startswith("_small_real_dot")
        with monkeypatch.context() as patched:
            patched.setattr(linalg, "FOLD_BUFFER_ELEMENTS", 0)   # (the general way, staged a product at a time)
            general = si.load(text)
        for _ in range(3):
            lhs, rhs = values(lhs_shape, 5), values(rhs_shape, 10)   # (NaN times NaN where both are 4 long)
            ours, theirs = fast.run(lhs, rhs)[0], general.run(lhs, rhs)[0]
            assert ours.dtype == theirs.dtype == np.dtype(result) and ours.shape == theirs.shape == result_shape
            assert ours.tobytes() == theirs.tobytes(), (text, lhs, rhs, ours, theirs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.int32, np.int8], ids=dtype_id)
def test_matrix_products_on_blas_match_xla(dtype):
    """128x128 by 128x128 (2**21 products: BLAS, not the ordered fold), contracting
    each side's either dimension: the runner of a plain matrix product calls matmul on
    the operands or their transposes, with no reshapes."""
    rng = np.random.default_rng(1)
    lhs, rhs = _values((128, 128), dtype, rng), _values((128, 128), dtype, rng)
    contractions = [((1,), (0,)), ((0,), (0,)), ((1,), (1,)), ((0,), (1,))]

    def fn(lhs, rhs):
        return [lax.dot_general(lhs, rhs, (contracting, ((), ()))) for contracting in contractions]

    for contracting, got, want in zip(contractions, run_interp(fn, lhs, rhs), run_xla(fn, lhs, rhs)):
        numbers = (contracting, ((), ()))
        assert_dot_close(got, want, _magnitude(lhs, rhs, numbers), 128, f"{numbers}: ")


@pytest.mark.parametrize("dtype", [np.int64, np.float32], ids=dtype_id)
def test_two_matrices_without_contraction_make_an_outer_product(dtype):
    """2-D by 2-D with no contracting dimension is no matrix product: a 4-D outer product."""
    rng = np.random.default_rng(2)
    lhs, rhs = _values((2, 3), dtype, rng), _values((4, 2), dtype, rng)

    def fn(lhs, rhs):
        return lax.dot_general(lhs, rhs, (((), ()), ((), ())))

    (got,), (want,) = run_interp(fn, lhs, rhs), run_xla(fn, lhs, rhs)
    assert got.shape == (2, 3, 4, 2)
    assert_same(got, want)
    assert_same(got, np.multiply.outer(lhs, rhs))


@pytest.mark.parametrize("operand, result", [
    (np.int8, np.int32), (np.uint8, np.uint32), (np.int16, np.int64), (np.int8, np.float32),
    (ml_dtypes.bfloat16, np.float32), (np.float16, np.float32), (np.float32, np.float64),
], ids=lambda d: dtype_id(d))
def test_dot_general_preferred_element_type(operand, result):
    """Operands convert to the result type before multiplying: 100 * 100 does not wrap in i8."""
    rng = np.random.default_rng(1)
    lhs, rhs = _values((4, 300), operand, rng), _values((300, 3), operand, rng)
    if np.dtype(operand).kind in "iu":
        lhs[0, :], rhs[:, 0] = 100, 100
    fn = lambda x, y: lax.dot(x, y, preferred_element_type=result)  # noqa: E731 - a lambda reads as the expression it names
    (expected,), (actual,) = run_xla(fn, lhs, rhs), run_interp(fn, lhs, rhs)
    assert actual.dtype == np.dtype(result)
    assert_dot_close(actual, expected, _magnitude(lhs, rhs, (((1,), (0,)), ((), ()))), 300)


@pytest.mark.parametrize("lhs_element, rhs_element, result_element", [
    ("i8", "f32", "f32"), ("bf16", "f32", "f32"), ("i8", "i16", "i32"), ("f16", "bf16", "f32")])
def test_dot_general_mixed_operand_types_match_xla(lhs_element, rhs_element, result_element):
    text = op_module("stablehlo.dot_general", [f"tensor<3x40x{lhs_element}>", f"tensor<40x2x{rhs_element}>"],
                     f"tensor<3x2x{result_element}>",
                     "dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], "
                     "rhs_contracting_dimensions = [0]>")
    rng = np.random.default_rng(2)
    lhs = (rng.standard_normal((3, 40)) * 30).astype(si.TensorType.of((), lhs_element).dtype)
    rhs = (rng.standard_normal((40, 2)) * 30).astype(si.TensorType.of((), rhs_element).dtype)
    magnitude = np.abs(lhs.astype(np.float64)) @ np.abs(rhs.astype(np.float64))
    assert_dot_close(run_interp_text(text, lhs, rhs)[0], run_xla_text(text, lhs, rhs)[0], magnitude, 40)


def test_dot_general_bool_is_or_of_ands():
    """i1: OR over AND; 256 true products must not wrap to false."""
    text = op_module("stablehlo.dot_general", ["tensor<2x300xi1>", "tensor<300x3xi1>"], "tensor<2x3xi1>",
                     "dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], "
                     "rhs_contracting_dimensions = [0]>")
    lhs = np.ones((2, 300), bool)
    lhs[1, :] = False
    lhs[1, 7] = True
    rhs = np.zeros((300, 3), bool)
    rhs[:256, 0] = True
    rhs[7, 2] = True
    assert_same(run_interp_text(text, lhs, rhs)[0], run_xla_text(text, lhs, rhs)[0])


def test_dot_general_wraps_integers():
    lhs = np.full((2, 1000), 2 ** 30, np.int32)
    rhs = np.full((1000, 2), 3, np.int32)
    fn = lambda x, y: x @ y  # noqa: E731 - a lambda reads as the expression it names
    assert_same(run_interp(fn, lhs, rhs)[0], run_xla(fn, lhs, rhs)[0])


def test_dot_general_sub_byte_integers_match_reference(reference):
    text = op_module("stablehlo.dot_general", ["tensor<3x40xi4>", "tensor<40x2xi4>"], "tensor<3x2xi4>",
                     "dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], "
                     "rhs_contracting_dimensions = [0]>")
    rng = np.random.default_rng(3)
    lhs = rng.integers(-8, 8, (3, 40)).astype(ml_dtypes.int4)
    rhs = rng.integers(-8, 8, (40, 2)).astype(ml_dtypes.int4)
    assert_same(run_interp_text(text, lhs, rhs)[0], reference.evaluate(text, [lhs, rhs])[0])


def test_dot_general_batched_integers_match_reference(reference):
    text = op_module("stablehlo.dot_general", ["tensor<2x3x4xi32>", "tensor<4x2x5xi32>"], "tensor<2x3x5xi32>",
                     "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], "
                     "rhs_batching_dimensions = [1], lhs_contracting_dimensions = [2], "
                     "rhs_contracting_dimensions = [0]>")
    rng = np.random.default_rng(4)
    lhs = rng.integers(-100, 100, (2, 3, 4)).astype(np.int32)
    rhs = rng.integers(-100, 100, (4, 2, 5)).astype(np.int32)
    assert_same(run_interp_text(text, lhs, rhs)[0], reference.evaluate(text, [lhs, rhs])[0])


@pytest.mark.parametrize("lhs_shape, rhs_shape", [((5,), (5,)), ((3, 5), (5,)), ((5,), (5, 4)), ((3, 5), (5, 4))])
def test_dot_matches_xla(lhs_shape, rhs_shape):
    result_shape = lhs_shape[:-1] + rhs_shape[1:]
    text = op_module("stablehlo.dot", [tensor_type(lhs_shape, "f64"), tensor_type(rhs_shape, "f64")],
                     tensor_type(result_shape, "f64"))
    rng = np.random.default_rng(5)
    lhs, rhs = rng.standard_normal(lhs_shape), rng.standard_normal(rhs_shape)
    expected = run_xla_text(text, lhs, rhs)[0]
    magnitude = np.abs(np.tensordot(np.abs(lhs), np.abs(rhs), 1))
    assert_dot_close(run_interp_text(text, lhs, rhs)[0], expected, magnitude, 5)


# ------------------------------------------------------------- dot algorithms


def _algorithm_module(lhs_type, rhs_type, acc, ops, result="f32", m=8, k=64, n=5):
    algorithm = (f"algorithm = #stablehlo.dot_algorithm<lhs_precision_type = {lhs_type}, "
                 f"rhs_precision_type = {rhs_type}, accumulation_type = {acc}, lhs_component_count = 1, "
                 f"rhs_component_count = 1, num_primitive_operations = {ops}, "
                 f"allow_imprecise_accumulation = false>")
    return op_module("stablehlo.dot_general", [f"tensor<{m}x{k}xf32>", f"tensor<{k}x{n}xf32>"],
                     f"tensor<{m}x{n}x{result}>",
                     "dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], "
                     f"rhs_contracting_dimensions = [0]>, {algorithm}")


def _f32_operands(seed=6):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal((64, 5)).astype(np.float32)


def test_dot_algorithm_f32_matches_xla():
    lhs, rhs = _f32_operands()
    text = _algorithm_module("f32", "f32", "f32", 1)
    magnitude = np.abs(lhs.astype(np.float64)) @ np.abs(rhs.astype(np.float64))
    assert_dot_close(run_interp_text(text, lhs, rhs)[0], run_xla_text(text, lhs, rhs)[0], magnitude, 64)


@pytest.mark.parametrize("precision, rounding", [
    ("bf16", lambda x: x.astype(ml_dtypes.bfloat16)),
    ("f16", lambda x: x.astype(np.float16)),
    ("f8E5M2", lambda x: x.astype(ml_dtypes.float8_e5m2)),
])
def test_dot_algorithm_rounds_operands_to_precision_type(precision, rounding):
    """Operands are rounded to the precision type, products summed in f32.

    XLA CPU ignores the algorithm (it computes the f32 dot), so the oracle is the
    product of the rounded operands computed in f64.
    """
    lhs, rhs = _f32_operands()
    expected = rounding(lhs).astype(np.float64) @ rounding(rhs).astype(np.float64)
    actual = run_interp_text(_algorithm_module(precision, precision, "f32", 1), lhs, rhs)[0]
    magnitude = np.abs(rounding(lhs).astype(np.float64)) @ np.abs(rounding(rhs).astype(np.float64))
    assert_dot_close(actual, expected.astype(np.float32), magnitude, 64)
    exact = lhs.astype(np.float64) @ rhs.astype(np.float64)
    assert np.abs(actual - exact).max() > 1e-4  # the rounding really happened


def test_dot_algorithm_tf32_rounds_to_ten_mantissa_bits():
    lhs, rhs = _f32_operands()

    def tf32(x):  # independent rounding: through float64 arithmetic
        exponent = np.floor(np.log2(np.abs(x.astype(np.float64))))
        quantum = 2.0 ** (exponent - 10)
        return (np.round(x / quantum) * quantum).astype(np.float64)

    expected = tf32(lhs) @ tf32(rhs)
    actual = run_interp_text(_algorithm_module("tf32", "tf32", "f32", 1), lhs, rhs)[0]
    assert_dot_close(actual, expected.astype(np.float32), np.abs(tf32(lhs)) @ np.abs(tf32(rhs)), 64)


@pytest.mark.parametrize("precision, ops, relative_error", [
    ("bf16", 1, 2 ** -7), ("bf16", 3, 2 ** -15), ("bf16", 6, 2 ** -20), ("bf16", 9, 2 ** -20),
    ("tf32", 1, 2 ** -10), ("tf32", 3, 2 ** -19),
])
def test_dot_algorithm_split_precision_accuracy(precision, ops, relative_error):
    """bf16_3x/6x/9x and tf32_3x recover (close to) f32 accuracy from narrow products."""
    lhs, rhs = _f32_operands()
    actual = run_interp_text(_algorithm_module(precision, precision, "f32", ops), lhs, rhs)[0]
    exact = lhs.astype(np.float64) @ rhs.astype(np.float64)
    magnitude = np.abs(lhs.astype(np.float64)) @ np.abs(rhs.astype(np.float64))
    worst = np.max(np.abs(actual - exact) / magnitude)
    assert worst <= relative_error
    if ops > 1:  # and more passes are more accurate than one
        single = run_interp_text(_algorithm_module(precision, precision, "f32", 1), lhs, rhs)[0]
        assert worst < np.max(np.abs(single - exact) / magnitude) / 8


def test_dot_algorithm_narrow_accumulation():
    lhs, rhs = _f32_operands()
    text = _algorithm_module("bf16", "bf16", "bf16", 1, result="bf16")
    actual = run_interp_text(text, lhs, rhs)[0]
    rounded = lambda x: x.astype(ml_dtypes.bfloat16).astype(np.float64)  # noqa: E731 - a lambda reads as the expression it names
    expected = (rounded(lhs) @ rounded(rhs)).astype(ml_dtypes.bfloat16)
    assert_dot_close(actual, expected, np.abs(rounded(lhs)) @ np.abs(rounded(rhs)), 64)
    # A bf16 result cannot tell a bf16 accumulation from an f32 one rounded at the end:
    # an f32 result can. Hand-checked: 1 + 0.375 * 2**-8 and 256 + 2**-8 are f32 values,
    # and the nearest bf16 values (8 significant bits) are 1 and 256.
    lhs = np.array([[1.0, 0.375], [256.0, 1.0]], np.float32)
    rhs = np.array([[1.0], [2.0 ** -8]], np.float32)
    text = _algorithm_module("bf16", "bf16", "bf16", 1, result="f32", m=2, k=2, n=1)
    np.testing.assert_array_equal(run_interp_text(text, lhs, rhs)[0], [[1.0], [256.0]])


def test_dot_algorithm_on_integers_is_exact_as_in_the_reference(reference):
    """i64 x i64 -> i64 with a tf32 algorithm: nothing to round, the product is exact (it wraps)."""
    text = op_module("stablehlo.dot_general", ["tensor<2x3xi64>", "tensor<3x2xi64>"], "tensor<2x2xi64>",
                     "dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], "
                     "rhs_contracting_dimensions = [0]>, algorithm = #stablehlo.dot_algorithm<"
                     "lhs_precision_type = tf32, rhs_precision_type = tf32, accumulation_type = f32, "
                     "lhs_component_count = 1, rhs_component_count = 1, num_primitive_operations = 1, "
                     "allow_imprecise_accumulation = false>")
    lhs = np.array([[2**40 + 1, 3, -5], [7, 2**62, 1]], np.int64)  # 2**40 + 1 is no tf32 value
    rhs = np.array([[1, 2], [3, 4], [5, 6]], np.int64)
    (ours,) = same_as_reference(reference, text, lhs, rhs)
    assert ours[0, 0] == 2**40 + 1 + 9 - 25
    assert ours[1, 1] == 20  # 7 * 2 + 2**62 * 4 (wraps to 0) + 1 * 6


# ------------------------------------------------------------------ einsum


@pytest.mark.parametrize("config, lhs_shape, rhs_shape, result_shape", [
    ("ab,bc->ac", (3, 4), (4, 5), (3, 5)),
    ("abc,acd->abd", (2, 3, 4), (2, 4, 5), (2, 3, 5)),
    ("ab,cb->ca", (3, 4), (5, 4), (5, 3)),
    ("a,b->ab", (3,), (4,), (3, 4)),
])
@pytest.mark.parametrize("element", ["f32", "i32"])
def test_einsum_matches_xla(config, lhs_shape, rhs_shape, result_shape, element):
    text = op_module("stablehlo.einsum", [tensor_type(lhs_shape, element), tensor_type(rhs_shape, element)],
                     tensor_type(result_shape, element), f'einsum_config = "{config}"')
    rng = np.random.default_rng(7)
    dtype = np.float32 if element == "f32" else np.int32
    lhs, rhs = _values(lhs_shape, dtype, rng), _values(rhs_shape, dtype, rng)
    expected = run_xla_text(text, lhs, rhs)[0]
    magnitude = np.einsum(config, np.abs(lhs.astype(np.float64)), np.abs(rhs.astype(np.float64)))
    assert_dot_close(run_interp_text(text, lhs, rhs)[0], expected, magnitude, 5)


@pytest.mark.parametrize("config, shape, result_shape", [
    ("ab->a", (3, 4), (3,)), ("ab->ba", (3, 4), (4, 3)), ("aa->a", (4, 4), (4,)), ("abc->", (2, 3, 4), ()),
])
def test_unary_einsum(config, shape, result_shape):
    """XLA cannot translate unary_einsum: the oracle is the definition, summed in f64."""
    text = op_module("stablehlo.unary_einsum", [tensor_type(shape, "f64")], tensor_type(result_shape, "f64"),
                     f'einsum_config = "{config}"')
    operand = np.random.default_rng(8).standard_normal(shape)
    expected = np.einsum(config, operand)
    assert_dot_close(run_interp_text(text, operand)[0], np.asarray(expected), np.einsum(config, np.abs(operand)), 24)


# ---------------------------------------------------------- triangular_solve


def _triangular(a_shape, b_shape, element, left_side, lower, unit_diagonal, transpose):
    """triangular_solve as an ops_module entry."""
    attributes = (f"left_side = {str(left_side).lower()}, lower = {str(lower).lower()}, "
                  f"unit_diagonal = {str(unit_diagonal).lower()}, transpose_a = #stablehlo<transpose {transpose}>")
    return ("stablehlo.triangular_solve", [tensor_type(a_shape, element), tensor_type(b_shape, element)],
            tensor_type(b_shape, element), attributes)


def _triangular_op(*options):
    return ops_module([_triangular(*options)])


def _well_conditioned(shape, dtype, rng):
    """Random matrices with a dominant diagonal (the other triangle is garbage too)."""
    n = shape[-1]
    a = _values(shape, dtype, rng, scale=1.0) + np.eye(n, dtype=dtype) * (2 * n)
    return a.astype(dtype)


def _assert_solution_close(actual, expected, dtype, n, context=""):
    scale = np.max(np.abs(expected)) if expected.size else 1.0
    tolerance = 64 * max(n, 1) * _eps(dtype) * scale
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, context
    np.testing.assert_allclose(actual, expected, rtol=0, atol=tolerance, err_msg=context)


TRIANGULAR_OPTIONS = [(left, lower, unit, transpose) for left in (True, False) for lower in (True, False)
                      for unit in (True, False) for transpose in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")]


@pytest.mark.parametrize("element, dtype", [("f32", np.float32), ("f64", np.float64), ("complex<f32>", np.complex64)])
@pytest.mark.parametrize("unit_garbage", [False, True])
def test_triangular_solve_matches_xla(element, dtype, unit_garbage):
    """left/right side x lower/upper x unit diagonal x no/transpose/adjoint, batched."""
    rng = np.random.default_rng(9)
    n, batch = 5, (2, 3)
    a = _well_conditioned(batch + (n, n), dtype, rng)
    if unit_garbage:  # with unit_diagonal the diagonal must not be read; the others then see a big one
        a[..., np.arange(n), np.arange(n)] = 1000
    b_left, b_right = _values(batch + (n, 4), dtype, rng), _values(batch + (4, n), dtype, rng)
    text = ops_module([_triangular(a.shape, (b_left if o[0] else b_right).shape, element, *o)
                       for o in TRIANGULAR_OPTIONS])
    args = [x for o in TRIANGULAR_OPTIONS for x in (a, b_left if o[0] else b_right)]
    actual, expected = run_interp_text(text, *args), run_xla_text(text, *args)
    for options, got, want in zip(TRIANGULAR_OPTIONS, actual, expected):
        _assert_solution_close(got, want, dtype, n, f"{options}: ")


@pytest.mark.parametrize("options", [o for o in TRIANGULAR_OPTIONS if o[2] and o[3] != "ADJOINT"],
                         ids=lambda o: "-".join(map(str, o)))
def test_triangular_solve_matches_reference(reference, options):
    """The reference interpreter implements unit_diagonal = true without ADJOINT only."""
    left_side, lower, unit_diagonal, transpose = options
    rng = np.random.default_rng(10)
    a = _well_conditioned((2, 4, 4), np.float64, rng)
    b = _values((2, 4, 3) if left_side else (2, 3, 4), np.float64, rng)
    text = _triangular_op(a.shape, b.shape, "f64", *options)
    _assert_solution_close(run_interp_text(text, a, b)[0], reference.evaluate(text, [a, b])[0], np.float64, 4)


@pytest.mark.parametrize("a_shape, b_shape", [((0, 0), (0, 3)), ((3, 3), (3, 0)), ((0, 2, 2), (0, 2, 3))])
def test_triangular_solve_empty(a_shape, b_shape):
    text = _triangular_op(a_shape, b_shape, "f32", True, True, False, "NO_TRANSPOSE")
    a, b = np.ones(a_shape, np.float32), np.ones(b_shape, np.float32)
    assert_same(run_interp_text(text, a, b)[0], run_xla_text(text, a, b)[0], empty_ok=True)


def test_triangular_solve_f16_goes_through_f32():
    rng = np.random.default_rng(10)
    a = _well_conditioned((4, 4), np.float16, rng)
    b = _values((4, 2), np.float16, rng)
    text = _triangular_op((4, 4), (4, 2), "f16", True, True, False, "NO_TRANSPOSE")
    _assert_solution_close(run_interp_text(text, a, b)[0], run_xla_text(text, a, b)[0], np.float16, 1)


# ------------------------------------------------------------------ cholesky


def _cholesky(shape, element, lower):
    return ("stablehlo.cholesky", [tensor_type(shape, element)], tensor_type(shape, element),
            f"lower = {str(lower).lower()}")


def _cholesky_module(shape, element, lower):
    return ops_module([_cholesky(shape, element, lower)])


def _positive_definite(shape, dtype, rng):
    n = shape[-1]
    m = _values(shape, dtype, rng, scale=1.0)
    a = m @ np.conj(np.swapaxes(m, -1, -2)) + n * np.eye(n)
    return a.astype(dtype)


CHOLESKY_CASES = [(shape, lower) for shape in [(4, 4), (2, 3, 6, 6), (1, 1)] for lower in (True, False)]


@pytest.mark.parametrize("element, dtype", [("f32", np.float32), ("f64", np.float64),
                                            ("complex<f32>", np.complex64), ("complex<f64>", np.complex128)])
def test_cholesky_matches_xla(element, dtype):
    """Lower and upper, batched; only one triangle may be read, so the other one is spoiled."""
    rng = np.random.default_rng(11)
    args = []
    for shape, lower in CHOLESKY_CASES:
        spoiled = np.triu(np.ones(shape[-2:]), 1) if lower else np.tril(np.ones(shape[-2:]), -1)
        args.append(np.where(spoiled.astype(bool), dtype(77), _positive_definite(shape, dtype, rng)).astype(dtype))
    text = ops_module([_cholesky(shape, element, lower) for shape, lower in CHOLESKY_CASES])
    for (shape, lower), got, want in zip(CHOLESKY_CASES, run_interp_text(text, *args), run_xla_text(text, *args)):
        _assert_solution_close(got, want, dtype, shape[-1], f"{shape} lower={lower}: ")


def test_cholesky_not_positive_definite_gives_nan_like_xla():
    """The spec leaves this undefined; XLA CPU returns the whole matrix as NaN, so do we."""
    rng = np.random.default_rng(12)
    a = _positive_definite((3, 4, 4), np.float32, rng)
    a[1] = -a[1]
    text = _cholesky_module((3, 4, 4), "f32", True)
    actual, expected = run_interp_text(text, a)[0], run_xla_text(text, a)[0]
    assert np.isnan(actual[1]).all() and np.isnan(expected[1]).all()
    _assert_solution_close(actual[[0, 2]], expected[[0, 2]], np.float32, 4)


@pytest.mark.parametrize("shape", [(0, 0), (0, 3, 3)])
def test_cholesky_empty(shape):
    text = _cholesky_module(shape, "f32", True)
    a = np.ones(shape, np.float32)
    assert_same(run_interp_text(text, a)[0], run_xla_text(text, a)[0], empty_ok=True)


# ------------------------------------------------------------- whole programs


def _mlp_params(rng, sizes=(32, 64, 64, 10)):
    return [((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32), np.zeros(n, np.float32))
            for m, n in zip(sizes[:-1], sizes[1:])]


def mlp_step(params, x, y):
    def loss(params):
        h = x
        for w, b in params[:-1]:
            h = jnp.tanh(h @ w + b)
        w, b = params[-1]
        logits = h @ w + b
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    value, grads = jax.value_and_grad(loss)(params)
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return value, new_params


def test_mlp_training_step_matches_xla():
    rng = np.random.default_rng(13)
    params = _mlp_params(rng)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 16)]
    training_step_matches_xla(mlp_step, params, x, y, rtol=2e-5, atol=2e-6)
