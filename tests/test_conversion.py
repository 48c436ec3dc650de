"""convert, bitcast_convert and reduce_precision against XLA CPU, for every pair
of element types (a sample by default; all with --run-slow).

XLA CPU departs from the spec in two places, checked by hand below: it flushes
denormals (f32 1e-45 -> i1 is false there, true here) and it saturates the
largest f4E2M1FN value 6.0 when converting to integers (6.0 -> i8 is 127)."""

import numpy as np
import pytest

from oracles import (ALL_TYPES, XLA_CRASHING_TYPES, element_values, op_module, run_interp_text,
                     run_xla_text, same_as_reference, tensor_type)
from test_elementwise import assert_close, is_subnormal
from stablehlo_interp.ir.types import dtype_of

FAST = {"i1", "i4", "ui8", "i64", "f8E5M2", "f8E8M0FNU", "bf16", "f32", "f64", "complex<f32>"}


def _pairs():
    for source in ALL_TYPES:
        for target in ALL_TYPES:
            slow = not (source in FAST and target in FAST)
            yield pytest.param(source, target, id=f"{source}-{target}", marks=(pytest.mark.slow,) if slow else ())


@pytest.mark.parametrize("source, target", list(_pairs()))
def test_convert_matches_xla(source, target):
    values = element_values(source, 300)
    n = len(values)
    text = op_module("stablehlo.convert", [tensor_type((n,), source)], tensor_type((n,), target))
    if {source, target} & set(XLA_CRASHING_TYPES):
        pytest.skip(f"XLA CPU has no f6 types ({source} -> {target})")
    (ours,) = run_interp_text(text, values)
    (xla,) = run_xla_text(text, values)
    keep = ~is_subnormal(values)   # XLA reads them as zeros; it flushes subnormal results (flushes_subnormals)
    if "f8E8M0FNU" in (source, target):  # 2^-127 is an f32 denormal, which XLA flushes
        smallest = np.array(2.0 ** -127)
        real = values.real if values.dtype.kind == "c" else values
        with np.errstate(invalid="ignore", over="ignore"):   # NaN compares unequal; large values overflow
            keep &= ~(real.astype(np.float64) == smallest)
            if target == "f8E8M0FNU":   # inputs that round to 2^-127 there (ml_dtypes' rounding)
                keep &= ~(real.astype(np.float64).astype(dtype_of(target)).astype(np.float64) == smallest)
    if source == "f4E2M1FN" and target[0] in "iu" and target != "i1":
        keep &= np.abs(values.astype(np.float32)) != 6  # XLA saturates 6.0 (see below)
    assert_close(ours[keep], xla[keep], 0, f"convert {source} -> {target}", flushes_subnormals=True)


def run_convert(source, target, values):
    values = np.asarray(values, dtype_of(source))
    text = op_module("stablehlo.convert", [tensor_type(values.shape, source)], tensor_type(values.shape, target))
    return run_interp_text(text, values)[0]


def test_float_to_integer_saturates_and_nan_is_zero():
    x = [np.nan, np.inf, -np.inf, 1e10, -1e10, 2.9, -2.9, -0.5, 127.9, -128.9]
    np.testing.assert_array_equal(run_convert("f32", "i8", x), [0, 127, -128, 127, -128, 2, -2, 0, 127, -128])
    np.testing.assert_array_equal(run_convert("f64", "ui8", x), [0, 255, 0, 255, 0, 2, 0, 0, 127, 0])
    np.testing.assert_array_equal(run_convert("f32", "i4", x), [0, 7, -8, 7, -8, 2, -2, 0, 7, -8])
    np.testing.assert_array_equal(run_convert("f64", "i64", [2.0**63, -2.0**63, 2.0**62]),
                                  [2**63 - 1, -2**63, 2**62])
    np.testing.assert_array_equal(run_convert("f4E2M1FN", "i8", [6.0, -6.0]), [6, -6])


def test_to_and_from_i1_and_complex():
    assert list(run_convert("f32", "i1", [0.0, -0.0, 1e-45, np.nan])) == [False, False, True, True]
    assert list(run_convert("complex<f32>", "i1", [0j, 1j, 1 + 0j])) == [False, False, True]  # real part
    np.testing.assert_array_equal(run_convert("i1", "f8E4M3FN", [True, False]).astype(np.float32), [1, 0])
    np.testing.assert_array_equal(run_convert("complex<f64>", "f32", [1.5 + 2j]), [1.5])
    np.testing.assert_array_equal(run_convert("complex<f64>", "i32", [-7.9 + 2j]), [-7])
    np.testing.assert_array_equal(run_convert("f64", "complex<f32>", [np.inf]), [complex(np.inf, 0)])


def test_integers_wrap():
    np.testing.assert_array_equal(run_convert("i32", "i4", [7, 8, -9, 255]), [7, -8, 7, -1])
    np.testing.assert_array_equal(run_convert("i8", "ui2", [-1, 5]), [3, 1])
    np.testing.assert_array_equal(run_convert("ui64", "i8", [2**64 - 1, 128]), [-1, -128])


@pytest.mark.parametrize("source, target, shape, result_shape", [
    ("f32", "i32", (3,), (3,)), ("f64", "f16", (2,), (2, 4)), ("ui8", "f32", (2, 4), (2,)),
    ("i4", "ui4", (5,), (5,)), ("complex<f32>", "complex<f32>", (2,), (2,)), ("bf16", "f8E5M2", (3,), (3, 2)),
    ("f8E4M3FN", "i8", (3,), (3,)), ("i64", "f64", (2,), (2,)),
    ("ui4", "ui8", (3, 2), (3,)), ("i2", "i8", (2, 4), (2,)), ("i4", "i16", (2, 4), (2,)),  # packs sub-byte values
    ("i8", "i4", (3,), (3, 2)), ("i16", "ui4", (2,), (2, 4)), ("ui8", "i2", (3,), (3, 4)),  # and unpacks them
])
def test_bitcast_convert_matches_xla(source, target, shape, result_shape):
    count = int(np.prod(shape))
    values = element_values(source, 40)[:count]
    values = np.resize(values, count).reshape(shape)
    text = op_module("stablehlo.bitcast_convert", [tensor_type(shape, source)], tensor_type(result_shape, target))
    (ours,) = run_interp_text(text, values)
    (xla,) = run_xla_text(text, values)
    assert ours.shape == xla.shape and ours.dtype == xla.dtype
    np.testing.assert_array_equal(ours.view(f"u{ours.dtype.itemsize}") if ours.dtype != np.bool_ else ours,
                                  xla.view(f"u{xla.dtype.itemsize}") if xla.dtype != np.bool_ else xla)


def test_bitcast_convert_complex_f64_to_f32_by_hand():
    """A complex number's bits: the real part's, then the imaginary part's, least significant first
    (StableHLO's interpret/bitcast_convert.mlir; XLA CPU refuses the op, jaxlib's C++ interpreter aborts)."""
    value = np.array([0x0123456789ABCDEF, 0x0000000011111111], np.uint64).view(np.complex128).reshape(())
    text = op_module("stablehlo.bitcast_convert", ["tensor<complex<f64>>"], "tensor<2xcomplex<f32>>")
    (ours,) = run_interp_text(text, value)
    assert [hex(w) for w in ours.view(np.uint32)] == ["0x89abcdef", "0x1234567", "0x11111111", "0x0"]
    back = op_module("stablehlo.bitcast_convert", ["tensor<2xcomplex<f32>>"], "tensor<complex<f64>>")
    assert run_interp_text(back, ours)[0].reshape(1).view(np.uint64).tolist() == [0x0123456789ABCDEF, 0x11111111]


@pytest.mark.parametrize("element_type", ["bf16", "f16", "f32", "f64"])
@pytest.mark.parametrize("exponent_bits, mantissa_bits", [(5, 10), (8, 7), (4, 3), (5, 2), (8, 23), (2, 1), (11, 0)])
def test_reduce_precision_matches_xla(element_type, exponent_bits, mantissa_bits, reference):
    """Against XLA CPU (which flushes subnormals) and, subnormals kept, against the
    C++ reference interpreter."""
    values = element_values(element_type, 400)
    n = len(values)
    t = tensor_type((n,), element_type)
    text = op_module("stablehlo.reduce_precision", [t], t,
                     f"exponent_bits = {exponent_bits} : i32, mantissa_bits = {mantissa_bits} : i32")
    (ours,) = run_interp_text(text, values)
    (xla,) = run_xla_text(text, values)
    keep = ~is_subnormal(values)   # XLA reads them as zeros
    if mantissa_bits == 0:  # NaN: XLA CPU keeps it, the reference and we give +inf (checked below)
        keep &= ~np.isnan(values)
    context = f"reduce_precision {element_type} e{exponent_bits}m{mantissa_bits}"
    assert_close(ours[keep], xla[keep], 0, context, flushes_subnormals=True)
    assert_close(ours, reference.evaluate(text, [values])[0], 0, context + " vs reference")


@pytest.mark.parametrize("mantissa_bits", [0, 2])
@pytest.mark.parametrize("element_type", ["f16", "f32", "f64"])
def test_reduce_precision_of_nan_matches_the_reference(reference, element_type, mantissa_bits):
    """A format without mantissa bits cannot hold NaN: NaN (of either sign) becomes +inf."""
    dtype = dtype_of(element_type)
    values = np.array([np.nan, -np.nan, np.inf, -np.inf, 1.0, -3.0], dtype)
    unsigned = np.dtype(f"u{dtype.itemsize}")
    values[:1].view(unsigned)[0] = np.iinfo(unsigned).max >> 1  # the NaN with every mantissa bit set
    t = tensor_type((6,), element_type)
    text = op_module("stablehlo.reduce_precision", [t], t,
                     f"exponent_bits = 5 : i32, mantissa_bits = {mantissa_bits} : i32")
    (ours,) = same_as_reference(reference, text, values)
    if mantissa_bits == 0:
        assert ours[:2].tolist() == [np.inf, np.inf]
    else:
        assert np.isnan(ours[:2]).all()
