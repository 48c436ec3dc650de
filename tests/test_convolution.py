"""convolution and dynamic_conv against XLA's CPU backend (jax.lax.conv_general_dilated
and MLIR text), the C++ reference interpreter for integers, and a small CNN
trained one step with jax.grad.

Tolerances: integers exact; floats within the error bound of a K-term dot
product, ``(eps(result) + K * eps(sum)) * conv(|lhs|, |rhs|)`` (see test_linalg),
where K is the number of products per output element.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from jax import lax

from oracles import (assert_same, dtype_id, op_module, run_interp, run_interp_text, run_xla, run_xla_text,
                     tensor_type, training_step_matches_xla)
from test_linalg import _values, assert_dot_close


def _conv(dimension_numbers=None, **options):
    return lambda x, w: lax.conv_general_dilated(x, w, dimension_numbers=dimension_numbers, **options)


def _magnitude(lhs, rhs, dimension_numbers=None, **options):
    options.pop("preferred_element_type", None)
    absolute = lambda a: np.abs(a.astype(np.complex128)).astype(np.float64)  # noqa: E731 - a lambda reads as the expression it names
    return np.asarray(lax.conv_general_dilated(absolute(lhs), absolute(rhs), dimension_numbers=dimension_numbers,
                                               **options))


def _contraction(rhs_shape, dimension_numbers):
    """Products per output element: kernel input features x kernel window."""
    if dimension_numbers is None:
        return int(np.prod(rhs_shape[1:]))
    rhs_spec = lax.conv_dimension_numbers((1,) * len(rhs_shape), rhs_shape, dimension_numbers).rhs_spec
    return int(np.prod([rhs_shape[d] for d in rhs_spec[1:]]))


def check_against_xla(lhs, rhs, dimension_numbers=None, **options):
    fn = _conv(dimension_numbers, **options)
    (expected,), (actual,) = run_xla(fn, lhs, rhs), run_interp(fn, lhs, rhs)
    magnitude = _magnitude(lhs, rhs, dimension_numbers, **options)
    assert_dot_close(actual, expected, magnitude, _contraction(rhs.shape, dimension_numbers))


# ---------------------------------------------------------------- fixed cases

CASES = {
    "same": ((2, 3, 9, 9), (4, 3, 3, 3), dict(window_strides=(1, 1), padding="SAME")),
    "strided-dilated-negative-pad": ((2, 3, 9, 9), (4, 3, 3, 3), dict(
        window_strides=(2, 1), padding=((1, 2), (-1, 0)), lhs_dilation=(2, 1), rhs_dilation=(1, 2))),
    "feature-groups": ((2, 6, 9, 8), (4, 3, 3, 2), dict(window_strides=(1, 1), padding="VALID",
                                                        feature_group_count=2)),
    "depthwise": ((2, 4, 7, 7), (8, 1, 3, 3), dict(window_strides=(1, 1), padding="SAME", feature_group_count=4)),
    "batch-groups": ((4, 3, 9, 8), (4, 3, 3, 2), dict(window_strides=(1, 1), padding="VALID",
                                                      batch_group_count=2)),
    "nhwc-hwio": ((2, 9, 9, 3), (3, 3, 3, 4), dict(window_strides=(1, 1), padding="SAME",
                                                   dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    "1d-crop-lhs-dilation": ((2, 3, 10), (4, 3, 3), dict(window_strides=(3,), padding=((-2, -3),),
                                                          lhs_dilation=(3,))),
    "3d": ((2, 3, 4, 5, 6), (4, 3, 2, 2, 2), dict(window_strides=(1, 2, 1), padding="SAME",
                                                  rhs_dilation=(2, 1, 1))),
    "1x1-window": ((2, 5, 4, 4), (3, 5, 1, 1), dict(window_strides=(1, 1), padding="VALID")),
    "window-larger-than-input": ((2, 3, 2), (4, 3, 3), dict(window_strides=(1,), padding="VALID")),
    "empty-batch": ((0, 3, 5), (4, 3, 3), dict(window_strides=(1,), padding="VALID")),
    "empty-features": ((2, 0, 5), (4, 0, 3), dict(window_strides=(1,), padding="VALID")),
    "empty-output-features": ((2, 3, 5), (0, 3, 3), dict(window_strides=(1,), padding="VALID")),
    "all-cropped": ((1, 2, 4), (1, 2, 1), dict(window_strides=(1,), padding=((-2, -2),))),
    "cropped-high-only": ((2, 3, 7, 6), (4, 3, 2, 2), dict(window_strides=(1, 1), padding=((0, -2), (0, 0)))),
    "0d-spatial": ((3, 4), (5, 4), dict(window_strides=(), padding=())),
}


@pytest.mark.parametrize("name", list(CASES))
def test_convolution_cases_match_xla(name):
    lhs_shape, rhs_shape, options = CASES[name]
    options = dict(options)
    dimension_numbers = options.pop("dimension_numbers", None)
    rng = np.random.default_rng(len(name))
    check_against_xla(_values(lhs_shape, np.float32, rng), _values(rhs_shape, np.float32, rng),
                      dimension_numbers, **options)


CONV_DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.complex64, np.complex128,
               np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32]


@pytest.mark.parametrize("dtype", CONV_DTYPES, ids=dtype_id)
def test_convolution_element_types_match_xla(dtype):
    rng = np.random.default_rng(1)
    lhs, rhs = _values((2, 4, 7, 6), dtype, rng), _values((6, 2, 3, 2), dtype, rng)
    check_against_xla(lhs, rhs, window_strides=(2, 1), padding=((1, 1), (0, 1)), rhs_dilation=(1, 2),
                      feature_group_count=2)


@pytest.mark.parametrize("operand, result", [(np.int8, np.int32), (np.uint8, np.uint32),
                                             (ml_dtypes.bfloat16, np.float32), (np.float16, np.float32)],
                         ids=dtype_id)
def test_convolution_preferred_element_type(operand, result):
    """Operands convert to the result type first: i8 products of 100 * 100 do not wrap."""
    rng = np.random.default_rng(2)
    lhs, rhs = _values((2, 8, 6), operand, rng), _values((3, 8, 3), operand, rng)
    if np.dtype(operand).kind in "iu":
        lhs[0], rhs[0] = 100, 100
    check_against_xla(lhs, rhs, window_strides=(1,), padding="SAME", preferred_element_type=result)


def test_convolution_bool():
    """i1: OR over AND of the window products."""
    text = op_module("stablehlo.convolution", [tensor_type((1, 3, 6), "i1"), tensor_type((2, 3, 2), "i1")],
                     tensor_type((1, 2, 5), "i1"),
                     "dimension_numbers = #stablehlo.conv<[b, f, 0]x[o, i, 0]->[b, f, 0]>, "
                     "feature_group_count = 1 : i64, batch_group_count = 1 : i64")
    rng = np.random.default_rng(3)
    lhs, rhs = rng.integers(0, 2, (1, 3, 6)).astype(bool), rng.integers(0, 2, (2, 3, 2)).astype(bool)
    rhs[1] = False
    assert_same(run_interp_text(text, lhs, rhs)[0], run_xla_text(text, lhs, rhs)[0])


# -------------------------------------------------- attributes JAX never emits


NCHW = "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]"


def _conv_text(lhs_type, rhs_type, result_type, attributes, dimension_numbers=NCHW):
    return op_module("stablehlo.convolution", [lhs_type, rhs_type], result_type,
                     f"dimension_numbers = #stablehlo.conv<{dimension_numbers}>, "
                     f"feature_group_count = 1 : i64, batch_group_count = 1 : i64, {attributes}")


@pytest.mark.parametrize("reversal", ["true, false", "false, true", "true, true"])
def test_window_reversal_matches_xla(reversal):
    text = _conv_text("tensor<2x3x6x7xf32>", "tensor<4x3x3x2xf32>", "tensor<2x4x4x7xf32>",
                      f"window_strides = array<i64: 1, 1>, padding = dense<[[0, 0], [0, 1]]> : tensor<2x2xi64>, "
                      f"window_reversal = array<i1: {reversal}>")
    rng = np.random.default_rng(4)
    lhs, rhs = _values((2, 3, 6, 7), np.float32, rng), _values((4, 3, 3, 2), np.float32, rng)
    expected = run_xla_text(text, lhs, rhs)[0]
    flip = tuple(2 + i for i, r in enumerate(reversal.split(", ")) if r == "true")
    magnitude = _magnitude(lhs, np.flip(rhs, flip), window_strides=(1, 1), padding=((0, 0), (0, 1)))
    assert_dot_close(run_interp_text(text, lhs, rhs)[0], expected, magnitude, 18)


def test_window_reversal_integers_match_reference(reference):
    text = _conv_text("tensor<1x2x5x4xi32>", "tensor<3x2x3x2xi32>", "tensor<1x3x2x3xi32>",
                      "window_strides = array<i64: 2, 1>, padding = dense<[[1, 0], [0, 1]]> : tensor<2x2xi64>, "
                      "rhs_dilation = array<i64: 1, 2>, window_reversal = array<i1: true, false>")
    rng = np.random.default_rng(8)
    lhs = rng.integers(-9, 9, (1, 2, 5, 4)).astype(np.int32)
    rhs = rng.integers(-9, 9, (3, 2, 3, 2)).astype(np.int32)
    actual = run_interp_text(text, lhs, rhs)[0]
    assert_same(actual, reference.evaluate(text, [lhs, rhs])[0])
    assert_same(actual, run_xla_text(text, lhs, rhs)[0])


def test_integer_convolution_matches_reference(reference):
    text = _conv_text("tensor<1x4x4x1xi32>", "tensor<3x3x1x1xi32>", "tensor<1x2x2x1xi32>",
                      "window_strides = array<i64: 4, 4>, padding = dense<0> : tensor<2x2xi64>, "
                      "lhs_dilation = array<i64: 2, 2>, rhs_dilation = array<i64: 1, 1>",
                      "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]")
    lhs = np.array([1, 2, 5, 6, 3, 4, 7, 8, 10, 11, 14, 15, 12, 13, 16, 17], np.int32).reshape(1, 4, 4, 1)
    rhs = np.ones((3, 3, 1, 1), np.int32)
    actual = run_interp_text(text, lhs, rhs)[0]
    assert_same(actual, reference.evaluate(text, [lhs, rhs])[0])
    assert_same(actual, run_xla_text(text, lhs, rhs)[0])


@pytest.mark.parametrize("feature_groups, batch_groups, rhs_shape, result_shape", [
    (2, 1, (6, 3, 2), (4, 6, 4)), (1, 2, (6, 6, 2), (2, 6, 4))])
def test_grouped_integer_convolution_matches_reference(reference, feature_groups, batch_groups, rhs_shape,
                                                       result_shape):
    text = op_module("stablehlo.convolution", ["tensor<4x6x5xi16>", tensor_type(rhs_shape, "i16")],
                     tensor_type(result_shape, "i16"),
                     "dimension_numbers = #stablehlo.conv<[b, f, 0]x[o, i, 0]->[b, f, 0]>, "
                     "window_strides = array<i64: 2>, padding = dense<[[1, -1]]> : tensor<1x2xi64>, "
                     "lhs_dilation = array<i64: 2>, rhs_dilation = array<i64: 2>, "
                     f"feature_group_count = {feature_groups} : i64, batch_group_count = {batch_groups} : i64")
    rng = np.random.default_rng(5)
    lhs = rng.integers(-300, 300, (4, 6, 5)).astype(np.int16)
    rhs = rng.integers(-300, 300, rhs_shape).astype(np.int16)
    actual = run_interp_text(text, lhs, rhs)[0]
    assert_same(actual, reference.evaluate(text, [lhs, rhs])[0])
    assert_same(actual, run_xla_text(text, lhs, rhs)[0])


def test_dynamic_conv_matches_static_convolution_on_xla():
    """dynamic_conv (padding as an operand) against XLA's convolution with that padding."""
    attributes = ("window_strides = array<i64: 2, 1>, lhs_dilation = array<i64: 1, 2>, "
                  f"rhs_dilation = array<i64: 1, 1>, dimension_numbers = #stablehlo.conv<{NCHW}>, "
                  "feature_group_count = 1 : i64, batch_group_count = 1 : i64")
    dynamic = op_module("stablehlo.dynamic_conv",
                        ["tensor<2x3x7x5xf32>", "tensor<4x3x3x3xf32>", "tensor<2x2xi64>"],
                        "tensor<2x4x4x9xf32>", attributes)
    static = op_module("stablehlo.convolution", ["tensor<2x3x7x5xf32>", "tensor<4x3x3x3xf32>"],
                       "tensor<2x4x4x9xf32>", attributes + ", padding = dense<[[1, 1], [2, 0]]> : tensor<2x2xi64>")
    rng = np.random.default_rng(6)
    lhs, rhs = _values((2, 3, 7, 5), np.float32, rng), _values((4, 3, 3, 3), np.float32, rng)
    padding = np.array([[1, 1], [2, 0]], np.int64)
    expected = run_xla_text(static, lhs, rhs)[0]
    magnitude = _magnitude(lhs, rhs, window_strides=(2, 1), padding=((1, 1), (2, 0)), lhs_dilation=(1, 2))
    assert_dot_close(run_interp_text(dynamic, lhs, rhs, padding)[0], expected, magnitude, 27)


# ------------------------------------------------------------ random configs


@st.composite
def conv_configs(draw):
    """A random valid convolution: rank, layouts, groups, strides, dilations, padding (negative too)."""
    n = draw(st.integers(0, 3))
    grouping = draw(st.sampled_from(["none", "feature", "batch"]))
    groups = draw(st.integers(2, 3)) if grouping != "none" else 1
    feature_groups = groups if grouping == "feature" else 1
    batch_groups = groups if grouping == "batch" else 1
    in_features = draw(st.integers(1, 3)) * feature_groups
    out_features = draw(st.integers(1, 3)) * groups
    batch = draw(st.integers(0 if grouping != "batch" else 1, 2)) * batch_groups
    spatial = draw(st.lists(st.integers(1, 7), min_size=n, max_size=n))
    kernel = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    strides = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    lhs_dilation = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    rhs_dilation = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    padding = draw(st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3)), min_size=n, max_size=n))
    for size, dilation, (low, high) in zip(spatial, lhs_dilation, padding):
        assume((size - 1) * dilation + 1 + low + high >= 0)
    lhs_spec, rhs_spec, out_spec = (tuple(draw(st.permutations(range(n + 2)))) for _ in range(3))
    lhs_shape, rhs_shape = [0] * (n + 2), [0] * (n + 2)
    for dims, shape, values in ((lhs_spec, lhs_shape, [batch, in_features] + spatial),
                                (rhs_spec, rhs_shape, [out_features, in_features // feature_groups] + kernel)):
        for d, v in zip(dims, values):
            shape[d] = v
    dtype = draw(st.sampled_from([np.float32, np.int32]))
    options = dict(window_strides=tuple(strides), padding=tuple(padding), lhs_dilation=tuple(lhs_dilation),
                   rhs_dilation=tuple(rhs_dilation), feature_group_count=feature_groups,
                   batch_group_count=batch_groups,
                   dimension_numbers=lax.ConvDimensionNumbers(lhs_spec, rhs_spec, out_spec))
    return tuple(lhs_shape), tuple(rhs_shape), dtype, options


@given(conv_configs(), st.integers(0, 2 ** 32 - 1))
def test_random_convolutions_match_xla(config, seed):
    lhs_shape, rhs_shape, dtype, options = config
    rng = np.random.default_rng(seed)
    scale = 3.0 if dtype == np.float32 else None
    lhs = _values(lhs_shape, dtype, rng, scale) if scale else rng.integers(-50, 50, lhs_shape).astype(dtype)
    rhs = _values(rhs_shape, dtype, rng, scale) if scale else rng.integers(-50, 50, rhs_shape).astype(dtype)
    dimension_numbers = options.pop("dimension_numbers")
    fn = _conv(dimension_numbers, **options)
    (expected,), (actual,) = run_xla(fn, lhs, rhs), run_interp(fn, lhs, rhs)
    contraction = int(np.prod([rhs_shape[d] for d in dimension_numbers.rhs_spec[1:]]))
    assert_dot_close(actual, expected, _magnitude(lhs, rhs, dimension_numbers, **options), contraction)


# ------------------------------------------------------------- whole programs


def cnn_step(params, images, labels):
    """conv(stride 2) -> relu -> conv -> relu -> global mean -> dense, one SGD step."""

    def loss(params):
        (w1, b1), (w2, b2), (w3, b3) = params
        h = lax.conv_general_dilated(images, w1, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = jax.nn.relu(h + b1)
        h = lax.conv_general_dilated(h, w2, (1, 1), ((1, 1), (0, 2)), rhs_dilation=(1, 2),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=2)
        h = jax.nn.relu(h + b2)
        logits = jnp.mean(h, axis=(1, 2)) @ w3 + b3
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * labels, axis=-1))

    value, grads = jax.value_and_grad(loss)(params)
    return value, jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grads)


def test_cnn_training_step_matches_xla():
    rng = np.random.default_rng(7)
    f32 = lambda *shape: (rng.standard_normal(shape) / np.sqrt(np.prod(shape[:-1]))).astype(np.float32)  # noqa: E731 - a lambda reads as the expression it names
    params = [(f32(3, 3, 3, 8), np.zeros(8, np.float32)), (f32(3, 3, 4, 8), np.zeros(8, np.float32)),
              (f32(8, 5), np.zeros(5, np.float32))]
    images = rng.standard_normal((4, 12, 12, 3)).astype(np.float32)
    labels = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 4)]
    training_step_matches_xla(cnn_step, params, images, labels, rtol=1e-4, atol=1e-5)
