"""batch_norm_inference, batch_norm_training and batch_norm_grad against XLA's
CPU backend (which expands them like its batchnorm_expander), and a
batch-norm layer written with jax.numpy, trained one step with jax.grad.

Tolerance: we evaluate the spec's formulas in f64 (f32 for f16/bf16) and
round once; XLA evaluates in the element type and takes the variance as
E[x^2] - E[x]^2. Inputs have |mean| ~ std so that formula loses little.
f32/f64 results must agree within ``32 * eps * (1 + |value|)``. XLA's f16/bf16
results carry f16/bf16 rounding errors of every intermediate step, so for those
the oracle is XLA run in f32 on the same values, rounded once: results must
agree within ``eps * (2 * |value| + 0.1)`` (one rounding either side).
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from oracles import dtype_id, op_module, run_interp, run_interp_text, run_xla, run_xla_text, tensor_type
from test_linalg import ops_module

ELEMENTS = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16",
            np.dtype(ml_dtypes.bfloat16): "bf16"}
SHAPES = [((8, 3), 1), ((2, 3, 4, 5), 1), ((2, 3, 4, 5), 3), ((5, 4, 3), 0), ((1, 6), 1), ((7, 1), 1)]


def assert_norm_close(actual, expected, context=""):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, context
    eps = float(ml_dtypes.finfo(actual.dtype).eps)
    magnitude = np.abs(expected.astype(np.float64))
    bound = 32 * eps * (1 + magnitude) if actual.dtype.itemsize >= 4 else eps * (2 * magnitude + 0.1)
    error = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    assert np.all(error <= bound), f"{context}max error {error.max()}, worst at {np.argmax(error / bound)}"


def _types(shape, feature_index, element):
    return tensor_type(shape, element), tensor_type((shape[feature_index],), element)


def check_against_xla(op, types, args, dtype, seed, names):
    """``op`` on every SHAPES case in one module: ``types(shape, feature_index, element)``
    gives one case's ``(operand types, result types)`` and ``args(shape, feature_index, rng)``
    its arguments (in f64). f16/bf16 are checked against XLA run in f32."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)

    def module(element):
        return ops_module([(op, *types(shape, index, element),
                            f"epsilon = 1.0e-03 : f32, feature_index = {index} : i64") for shape, index in SHAPES])

    arguments = [a.astype(dtype) for shape, index in SHAPES for a in args(shape, index, rng)]
    actual = run_interp_text(module(ELEMENTS[dtype]), *arguments)
    if dtype.itemsize >= 4:
        expected = run_xla_text(module(ELEMENTS[dtype]), *arguments)
    else:
        f32 = [a.astype(np.float32) for a in arguments]
        expected = [r.astype(dtype) for r in run_xla_text(module("f32"), *f32)]
    cases = [(shape, index, name) for shape, index in SHAPES for name in names]
    assert len(actual) == len(expected) == len(cases)
    for (shape, index, name), got, want in zip(cases, actual, expected):
        assert_norm_close(got, want, f"{shape} feature {index} {name}: ")


def _operand(shape, rng):
    return rng.standard_normal(shape) + 0.5


def _vector(shape, index, rng, low, high):
    return rng.uniform(low, high, shape[index])


@pytest.mark.parametrize("dtype", list(ELEMENTS), ids=dtype_id)
def test_batch_norm_inference_matches_xla(dtype):
    def types(shape, index, element):
        operand, vector = _types(shape, index, element)
        return [operand] + [vector] * 4, operand

    def args(shape, index, rng):
        return [_operand(shape, rng), _vector(shape, index, rng, 0.5, 2), _vector(shape, index, rng, -1, 1),
                _vector(shape, index, rng, -1, 1), _vector(shape, index, rng, 0.1, 3)]

    check_against_xla("stablehlo.batch_norm_inference", types, args, dtype, 0, ("result",))


@pytest.mark.parametrize("dtype", list(ELEMENTS), ids=dtype_id)
def test_batch_norm_training_matches_xla(dtype):
    def types(shape, index, element):
        operand, vector = _types(shape, index, element)
        return [operand, vector, vector], [operand, vector, vector]

    def args(shape, index, rng):
        return [_operand(shape, rng), _vector(shape, index, rng, 0.5, 2), _vector(shape, index, rng, -1, 1)]

    check_against_xla("stablehlo.batch_norm_training", types, args, dtype, 1, ("output", "batch_mean", "batch_var"))


@pytest.mark.parametrize("dtype", list(ELEMENTS), ids=dtype_id)
def test_batch_norm_grad_matches_xla(dtype):
    def types(shape, index, element):
        operand, vector = _types(shape, index, element)
        return [operand, vector, vector, vector, operand], [operand, vector, vector]

    def args(shape, index, rng):
        x = _operand(shape, rng).astype(dtype).astype(np.float64)
        axes = tuple(d for d in range(len(shape)) if d != index)
        return [x, _vector(shape, index, rng, 0.5, 2), np.mean(x, axis=axes), np.var(x, axis=axes),
                rng.standard_normal(shape)]

    check_against_xla("stablehlo.batch_norm_grad", types, args, dtype, 2, ("grad_operand", "grad_scale", "grad_offset"))


def test_spec_examples():
    """The examples of the spec (batch_norm_inference, _training, _grad)."""
    operand = np.array([[[1.0, 2.0], [3.0, 4.0]], [[3.0, 4.0], [1.0, 2.0]]], np.float32)
    ones = np.ones(2, np.float32)
    types = ["tensor<2x2x2xf32>", "tensor<2xf32>"]
    attributes = "epsilon = 0.0 : f32, feature_index = 2 : i64"
    inference = op_module("stablehlo.batch_norm_inference", [types[0]] + [types[1]] * 4, types[0], attributes)
    training = op_module("stablehlo.batch_norm_training", [types[0], types[1], types[1]],
                         [types[0], types[1], types[1]], attributes)
    grad = op_module("stablehlo.batch_norm_grad", [types[0]] + [types[1]] * 3 + [types[0]],
                     [types[0], types[1], types[1]], attributes)
    mean, variance = np.array([2.0, 3.0], np.float32), ones
    for text, args in [(inference, [operand, ones, ones, mean, variance]), (training, [operand, ones, ones]),
                       (grad, [operand, ones, mean, variance, np.full((2, 2, 2), 0.1, np.float32)])]:
        for got, want in zip(run_interp_text(text, *args), run_xla_text(text, *args)):
            assert_norm_close(got, want)


def test_batch_norm_training_variance_is_two_pass():
    """The spec's variance is mean((x - mean)^2). XLA CPU computes E[x^2] - E[x]^2, which
    cancels catastrophically for a large mean (here it even returns a negative variance);
    we follow the spec: the oracle is NumPy's two-pass variance in f64."""
    text = op_module("stablehlo.batch_norm_training", ["tensor<1000x2xf32>", "tensor<2xf32>", "tensor<2xf32>"],
                     ["tensor<1000x2xf32>", "tensor<2xf32>", "tensor<2xf32>"],
                     "epsilon = 0.0 : f32, feature_index = 1 : i64")
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((1000, 2)) * [0.01, 1.0] + [3000.0, 0.0]).astype(np.float32)
    _, mean, variance = run_interp_text(text, x, np.ones(2, np.float32), np.zeros(2, np.float32))
    np.testing.assert_allclose(mean, np.mean(x.astype(np.float64), axis=0), rtol=1e-7)
    np.testing.assert_allclose(variance, np.var(x.astype(np.float64), axis=0), rtol=1e-6)


def test_f64_batch_norm_training_overflows_in_f64():
    """The spec's ops run in f64 for f64 operands: a square of 1.8e308 is inf, so the
    variance is inf and the output is the offset (found by fuzz against IREE, which
    gives that; the interpreter computed in long double and gave 7.2391). Oracle:
    NumPy's f64, step by step as the spec decomposes it."""
    text = op_module("stablehlo.batch_norm_training", ["tensor<1x4xf64>", "tensor<1xf64>", "tensor<1xf64>"],
                     ["tensor<1x4xf64>", "tensor<1xf64>", "tensor<1xf64>"],
                     "epsilon = 1.0e-3 : f32, feature_index = 0 : i64")
    x = np.array([[0.0070982, 1.7976931348623157e308, -0.25226, -0.25036]])
    scale, offset = np.array([0.10917]), np.array([7.1761])
    output, mean, variance = run_interp_text(text, x, scale, offset)
    with np.errstate(over="ignore"):
        expected_mean = np.sum(x, axis=1) / 4
        expected_variance = np.sum((x - expected_mean[:, None]) ** 2, axis=1) / 4
    assert np.isinf(expected_variance).all() and np.array_equal(variance, expected_variance)
    assert np.array_equal(mean, expected_mean)
    assert np.array_equal(output, np.full((1, 4), 7.1761))


def batch_norm_layer(x, scale, offset, grad_seed):
    """A batch-norm layer as jax.nn code writes it (no batch_norm ops), with its gradient."""

    def forward(x, scale, offset):
        mean = jnp.mean(x, axis=(0, 2, 3), keepdims=True)
        variance = jnp.var(x, axis=(0, 2, 3), keepdims=True)
        normalized = (x - mean) * jax.lax.rsqrt(variance + 1e-5)
        return normalized * scale[None, :, None, None] + offset[None, :, None, None]

    out, vjp = jax.vjp(forward, x, scale, offset)
    return (out, *vjp(jnp.sin(out * grad_seed)))


def test_batch_norm_layer_with_grad_matches_xla():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 3, 5, 5)) + 0.5).astype(np.float32)
    scale, offset = rng.uniform(0.5, 2, 3).astype(np.float32), rng.uniform(-1, 1, 3).astype(np.float32)
    args = (x, scale, offset, np.float32(1.5))
    for got, want in zip(run_interp(batch_norm_layer, *args), run_xla(batch_norm_layer, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
