"""fft (FFT, IFFT, RFFT, IRFFT over 1-3 trailing dims) and jnp.fft functions
against XLA's CPU backend.

Tolerance: transforms are computed in f64 and rounded, XLA computes in the
element type; an FFT's error grows like log2(N), so results must agree within
``8 * log2(N + 1) * eps * max|result|`` (absolute, per transform).
"""

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from oracles import op_module, run_interp, run_interp_text, run_xla, run_xla_text, tensor_type


def _complex(shape, dtype, rng):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def assert_fft_close(actual, expected, size, context=""):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, context
    assert actual.size > 0, f"{context}a comparison of zero elements (empty cases: test_fft_of_empty_operand)"
    real = np.float32 if actual.dtype in (np.float32, np.complex64) else np.float64
    bound = 8 * np.log2(size + 1) * np.finfo(real).eps * max(np.abs(expected).max(), 1.0)
    error = np.abs(actual.astype(np.complex128) - expected.astype(np.complex128)).max()
    assert error <= bound, f"{context}max error {error} > {bound}"


# (fft_type, operand shape, fft_length)
CASES = [
    ("FFT", (8,), (8,)), ("FFT", (3, 7), (7,)), ("FFT", (2, 4, 6), (4, 6)), ("FFT", (2, 3, 4, 5), (3, 4, 5)),
    ("FFT", (1,), (1,)), ("FFT", (5, 1024), (1024,)),
    ("IFFT", (8,), (8,)), ("IFFT", (3, 12), (12,)), ("IFFT", (2, 4, 6), (4, 6)), ("IFFT", (2, 3, 4, 5), (3, 4, 5)),
    ("RFFT", (8,), (8,)), ("RFFT", (3, 7), (7,)), ("RFFT", (2, 4, 6), (4, 6)), ("RFFT", (2, 3, 4, 5), (3, 4, 5)),
    ("RFFT", (1,), (1,)), ("RFFT", (4, 1000), (1000,)),
    ("IRFFT", (5,), (8,)), ("IRFFT", (3, 4), (7,)), ("IRFFT", (2, 4, 4), (4, 6)), ("IRFFT", (2, 3, 4, 3), (3, 4, 5)),
    ("IRFFT", (1,), (1,)),
]

# (fft_type, operand shape, fft_length, the result's shape by the spec's shape rules, hand-derived)
EMPTY_CASES = [
    ("FFT", (0, 4), (4,), (0, 4)), ("RFFT", (0, 6), (6,), (0, 4)), ("IRFFT", (2, 0, 3), (0, 4), (2, 0, 4)),
    ("IRFFT", (0, 3), (4,), (0, 4)), ("RFFT", (0, 3, 6), (3, 6), (0, 3, 4)),
    ("IRFFT", (0, 2, 5, 3), (2, 5, 4), (0, 2, 5, 4)),
]


def _fft_module(fft_type, shape, lengths, real):
    complex_ = "complex<f64>" if real == "f64" else "complex<f32>"
    if fft_type == "RFFT":
        operand, result = tensor_type(shape, real), tensor_type(shape[:-1] + (lengths[-1] // 2 + 1,), complex_)
    elif fft_type == "IRFFT":
        operand, result = tensor_type(shape, complex_), tensor_type(shape[:-1] + (lengths[-1],), real)
    else:
        operand = result = tensor_type(shape, complex_)
    return op_module("stablehlo.fft", [operand], result,
                     f"fft_type = #stablehlo<fft_type {fft_type}>, "
                     f"fft_length = array<i64: {', '.join(map(str, lengths))}>")


@pytest.mark.parametrize("real", ["f32", "f64"])
@pytest.mark.parametrize("fft_type, shape, lengths", CASES, ids=lambda v: str(v).replace(" ", ""))
def test_fft_matches_xla(fft_type, shape, lengths, real):
    rng = np.random.default_rng(len(shape) + sum(shape))
    real_dtype = np.float32 if real == "f32" else np.float64
    complex_dtype = np.complex64 if real == "f32" else np.complex128
    operand = (rng.standard_normal(shape).astype(real_dtype) if fft_type == "RFFT"
               else _complex(shape, complex_dtype, rng))
    text = _fft_module(fft_type, shape, lengths, real)
    expected = run_xla_text(text, operand)[0]
    assert_fft_close(run_interp_text(text, operand)[0], expected, int(np.prod(lengths)))


@pytest.mark.parametrize("fft_type, shape, lengths, result_shape", EMPTY_CASES, ids=lambda v: str(v).replace(" ", ""))
def test_fft_of_empty_operand(fft_type, shape, lengths, result_shape):
    """An empty operand has an empty result: its shape and element type are all there is to check."""
    operand = np.zeros(shape, np.float32 if fft_type == "RFFT" else np.complex64)
    text = _fft_module(fft_type, shape, lengths, "f32")
    ours, xla = run_interp_text(text, operand)[0], run_xla_text(text, operand)[0]
    expected_dtype = np.float32 if fft_type == "IRFFT" else np.complex64
    assert (ours.shape, ours.dtype) == (xla.shape, xla.dtype) == (result_shape, expected_dtype)


def test_irfft_ignores_imaginary_parts_of_real_bins():
    """The DC and Nyquist bins of a real signal are real: their imaginary parts are dropped, as in XLA."""
    operand = np.array([1 + 5j, 2 - 1j, 3 + 2j, -1 + 7j], np.complex64)
    text = _fft_module("IRFFT", (4,), (6,), "f32")
    assert_fft_close(run_interp_text(text, operand)[0], run_xla_text(text, operand)[0], 6)


JNP_FUNCTIONS = {
    "fft": lambda x: jnp.fft.fft(x),
    "fft-n-padded": lambda x: jnp.fft.fft(x, n=20),
    "fft-n-truncated": lambda x: jnp.fft.fft(x, n=5, axis=0),
    "ifft": lambda x: jnp.fft.ifft(x),
    "fft2": lambda x: jnp.fft.fft2(x),
    "ifftn": lambda x: jnp.fft.ifftn(x, axes=(0, 1)),
    "rfft": lambda x: jnp.fft.rfft(x.real),
    "irfft": lambda x: jnp.fft.irfft(x),
    "irfft-n": lambda x: jnp.fft.irfft(x, n=9),
    "rfftn": lambda x: jnp.fft.rfftn(x.real, s=(6, 8)),
    "irfftn": lambda x: jnp.fft.irfftn(x, axes=(0, 1)),
    "hfft": lambda x: jnp.fft.hfft(x),
    "ortho": lambda x: jnp.fft.fft2(x, norm="ortho"),
    "fftshift": lambda x: jnp.fft.fftshift(jnp.fft.fft(x), axes=-1),
    "fftfreq-power": lambda x: jnp.abs(jnp.fft.rfft(x.real)) ** 2 * jnp.fft.rfftfreq(16, dtype=jnp.float32)[None],
}


@pytest.mark.parametrize("name", list(JNP_FUNCTIONS))
def test_jnp_fft_functions_match_xla(name):
    rng = np.random.default_rng(1)
    x = _complex((6, 16), np.complex64, rng)
    fn = JNP_FUNCTIONS[name]
    (expected,), (actual,) = run_xla(fn, x), run_interp(fn, x)
    assert_fft_close(actual, expected, 96, name + ": ")


def test_lax_fft_f64_round_trip():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 10, 12))
    fn = lambda x: lax.fft(lax.fft(x, "RFFT", (10, 12)), "IRFFT", (10, 12))  # noqa: E731 - a lambda reads as the expression it names
    (expected,), (actual,) = run_xla(fn, x), run_interp(fn, x)
    assert_fft_close(actual, expected, 120)
    np.testing.assert_allclose(actual, x, atol=1e-13)
