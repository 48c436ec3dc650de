"""Element-wise ops against XLA CPU and the C++ reference interpreter, for every
element type each op allows, on every value of the types of at most 8 bits and
on edge values (NaN, +-inf, +-0, denormals, min/max) plus random bit patterns
of the wider ones.

XLA CPU flushes denormals to zero (inputs and results); the spec does not, so
elements with a denormal operand or result are checked against the reference
interpreter instead. Other places where XLA departs from the spec are listed in
``XLA_DEPARTURES`` and checked the same way (or by hand below).
"""

import decimal
import functools
import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, strategies as st

from oracles import (
    ALL_TYPES, COMPLEX_TYPES, FLOAT_TYPES, F8_TYPES, SIGNED_TYPES, UNSIGNED_TYPES, XlaLacksType, XlaUnsupported, assert_same,
    element_values, flush_subnormals, op_module, run_interp_text, run_xla_text, tensor_type,
)
from stablehlo_interp.engine.numerics import ulp_difference
from stablehlo_interp.ir.types import dtype_of

INTEGER_TYPES = SIGNED_TYPES + UNSIGNED_TYPES
REAL_TYPES = FLOAT_TYPES  # floating-point element types
FLOAT_OR_COMPLEX = FLOAT_TYPES + COMPLEX_TYPES

# op -> (arity, element types the spec allows)
OPS = {
    "abs": (1, SIGNED_TYPES + FLOAT_OR_COMPLEX),
    "add": (2, ALL_TYPES),
    "and": (2, ["i1"] + INTEGER_TYPES),
    "atan2": (2, FLOAT_OR_COMPLEX),
    "cbrt": (1, FLOAT_OR_COMPLEX),
    "ceil": (1, FLOAT_TYPES),
    "cosine": (1, FLOAT_OR_COMPLEX),
    "count_leading_zeros": (1, INTEGER_TYPES),
    "divide": (2, INTEGER_TYPES + FLOAT_OR_COMPLEX),
    "exponential": (1, FLOAT_OR_COMPLEX),
    "exponential_minus_one": (1, FLOAT_OR_COMPLEX),
    "floor": (1, FLOAT_TYPES),
    "imag": (1, FLOAT_OR_COMPLEX),
    "is_finite": (1, FLOAT_TYPES),
    "log": (1, FLOAT_OR_COMPLEX),
    "log_plus_one": (1, FLOAT_OR_COMPLEX),
    "logistic": (1, FLOAT_OR_COMPLEX),
    "maximum": (2, ALL_TYPES),
    "minimum": (2, ALL_TYPES),
    "multiply": (2, ALL_TYPES),
    "negate": (1, INTEGER_TYPES + FLOAT_OR_COMPLEX),
    "not": (1, ["i1"] + INTEGER_TYPES),
    "or": (2, ["i1"] + INTEGER_TYPES),
    "popcnt": (1, INTEGER_TYPES),
    "power": (2, INTEGER_TYPES + FLOAT_OR_COMPLEX),
    "real": (1, FLOAT_OR_COMPLEX),
    "remainder": (2, INTEGER_TYPES + FLOAT_TYPES),
    "round_nearest_afz": (1, FLOAT_TYPES),
    "round_nearest_even": (1, FLOAT_TYPES),
    "rsqrt": (1, FLOAT_OR_COMPLEX),
    "shift_left": (2, INTEGER_TYPES),
    "shift_right_arithmetic": (2, INTEGER_TYPES),
    "shift_right_logical": (2, INTEGER_TYPES),
    "sign": (1, SIGNED_TYPES + FLOAT_OR_COMPLEX),
    "sine": (1, FLOAT_OR_COMPLEX),
    "sqrt": (1, FLOAT_OR_COMPLEX),
    "subtract": (2, INTEGER_TYPES + FLOAT_OR_COMPLEX),
    "tan": (1, FLOAT_OR_COMPLEX),
    "tanh": (1, FLOAT_OR_COMPLEX),
    "xor": (2, ["i1"] + INTEGER_TYPES),
}

TRANSCENDENTAL = {"atan2", "cbrt", "cosine", "exponential", "exponential_minus_one", "log",
                  "log_plus_one", "logistic", "power", "rsqrt", "sine", "sqrt", "tan", "tanh"}

# ULP bound of our results against XLA CPU's (denormals aside). XLA computes
# f8 types in f16/f32 and rounds twice, so it can be 1 ULP off there; its own
# approximations are off by the amounts below. Every other op is bit-exact.
XLA_ULP = {
    "exponential_minus_one": {"f16": 2, "f32": 4, "f64": 4},
    "log_plus_one": {"f32": 2, "f64": 128},
    "logistic": {"f16": 2, "f32": 2, "f64": 2},
    "tanh": {"f32": 3, "f64": 3},
    "cbrt": {"f32": 1, "f64": 4},
}
XLA_ULP_DEFAULT = {"f32": 1, "f64": 1}


def xla_ulp(op, element_type):
    if op == "abs" and element_type in COMPLEX_TYPES:
        return 1  # a hypot: XLA's is not always correctly rounded
    if op not in TRANSCENDENTAL:
        return 0
    if op == "sqrt" and element_type in ("f16", "f32", "f64", "bf16"):
        return 0
    if element_type in F8_TYPES + ["bf16", "f16"]:
        return max(1, XLA_ULP.get(op, {}).get(element_type, 0))  # XLA rounds twice (via f32)
    return XLA_ULP.get(op, {}).get(element_type, XLA_ULP_DEFAULT.get(element_type, 0))


# Run on every push; the other element types run with --run-slow.
SAMPLE_TYPES = {"i1", "i4", "i32", "ui64", "f8E4M3FN", "f6E3M2FN", "f32", "complex<f64>"}


def cases(types_of=lambda name: OPS[name][1]):
    for name in OPS:
        for element_type in types_of(name):
            marks = () if element_type in SAMPLE_TYPES else (pytest.mark.slow,)
            yield pytest.param(name, element_type, id=f"{name}-{element_type}", marks=marks)


def result_type(op, element_type):
    if op in ("abs", "real", "imag") and element_type.startswith("complex"):
        return element_type[8:-1]
    if op == "is_finite":
        return "i1"
    return element_type


def operands(element_type, arity, seed=0):
    """Every pair of values for small types; edge values x edge values plus random pairs else."""
    values = element_values(element_type, 300, seed)
    rng = np.random.default_rng(seed)
    if arity == 1:
        return [values]
    if len(values) ** 2 <= 70000:
        i, j = np.meshgrid(np.arange(len(values)), np.arange(len(values)), indexing="ij")
        return [values[i.ravel()], values[j.ravel()]]
    head = 40
    i, j = np.meshgrid(np.arange(head), np.arange(head), indexing="ij")
    i = np.concatenate([i.ravel(), rng.integers(0, len(values), 1500)])
    j = np.concatenate([j.ravel(), rng.integers(0, len(values), 1500)])
    return [values[i], values[j]]


def is_subnormal(x):
    x = np.asarray(x)
    if x.dtype.kind == "c":
        return is_subnormal(x.real) | is_subnormal(x.imag)
    if x.dtype.kind in "biu" or x.dtype in map(np.dtype, (ml_dtypes.int2, ml_dtypes.int4, ml_dtypes.uint2,
                                                          ml_dtypes.uint4)):
        return np.zeros(x.shape, bool)
    with np.errstate(invalid="ignore"):
        magnitude = np.abs(x.astype(np.float64))
    return (magnitude > 0) & (magnitude < float(ml_dtypes.finfo(x.dtype).smallest_normal))


def is_nonfinite(x):
    x = np.asarray(x)
    if x.dtype.kind == "c":
        return ~(np.isfinite(x.real) & np.isfinite(x.imag))
    if x.dtype.kind in "biu" or x.dtype.itemsize == 1 and x.dtype in map(np.dtype, (
            ml_dtypes.int2, ml_dtypes.int4, ml_dtypes.uint2, ml_dtypes.uint4)):
        return np.zeros(x.shape, bool)
    with np.errstate(invalid="ignore"):   # widening a signaling NaN
        return ~np.isfinite(x.astype(np.float64))


def xla_departures(op, element_type, args, xla):
    """Elements where XLA CPU is known to depart from the spec (see module doc),
    decided from the inputs and XLA's results."""
    dtype = dtype_of(element_type)
    departs = np.zeros(len(args[0]), bool)
    # XLA reads subnormal inputs as zeros (not in f8 types, which it computes in
    # wider types); the subnormal results it flushes, assert_close(flushes_subnormals=True)
    # flushes on our side too.
    if element_type not in F8_TYPES:
        for a in args:
            departs |= is_subnormal(a)
    if element_type == "f8E8M0FNU":
        # No zero in f8E8M0FNU: XLA computes in f32, where 2^-127 is a denormal it
        # flushes, to NaN here: XLA's NaNs from inputs without NaN.
        smallest = np.array(2.0 ** -127).astype(dtype)
        departs |= np.any([a == smallest for a in args], 0)
        departs |= np.isnan(xla.astype(np.float32)) & ~np.any([np.isnan(a.astype(np.float32)) for a in args], 0)
    if op == "power" and element_type in INTEGER_TYPES:
        # XLA CPU uses the low 6 bits of the exponent only (0 ** 64 = 1).
        departs |= args[1].astype(np.float64) >= 64
    if op == "popcnt" and element_type in ("i2", "i4"):
        # XLA counts the sign-extension bits of negative sub-byte values.
        departs |= args[0].astype(np.int64) < 0
    if element_type in COMPLEX_TYPES and (op in TRANSCENDENTAL or op in ("maximum", "minimum", "sign",
                                                                           "abs", "divide", "multiply")):
        # Special values of complex functions: XLA does not follow C99 Annex G
        # (e.g. sqrt(-inf - 0i) = +inf i there, -inf i in C99 and NumPy).
        # Extreme or zero parts: branch cuts (sqrt(-1 - 0i) = -i in C99, +i in
        # XLA), overflow and underflow inside XLA's formulas.
        low, high = (1e-6, 1e6) if element_type == "complex<f32>" else (1e-30, 1e30)
        for a in args:
            departs |= is_nonfinite(a)
            for part in (a.real, a.imag):
                departs |= (np.abs(part) < low) | (np.abs(part) > high)
        departs |= is_nonfinite(xla)
        if op == "atan2":  # on the branch cut: -pi and pi
            departs |= np.abs(np.abs(xla.real) - np.pi) < 1e-3
        if op in ("maximum", "minimum"):
            departs |= args[0].real == args[1].real  # ties: XLA orders -0 and +0 (see hand test)
    return departs


@functools.lru_cache(maxsize=None)
def _reference_module(op, element_type, n, arity):
    """A module whose outputs the reference interpreter can print (real and imag
    parts of complex results)."""
    rtype = result_type(op, element_type)
    operand_types = [tensor_type((n,), element_type)] * arity
    body = op_module(f"stablehlo.{op}", operand_types, tensor_type((n,), rtype))
    if not rtype.startswith("complex"):
        return body, False
    part = tensor_type((n,), rtype[8:-1])
    body = body.replace(f"  return %r : {tensor_type((n,), rtype)}\n",
                        f"  %re = stablehlo.real %r : ({tensor_type((n,), rtype)}) -> {part}\n"
                        f"  %im = stablehlo.imag %r : ({tensor_type((n,), rtype)}) -> {part}\n"
                        f"  return %re, %im : {part}, {part}\n")
    body = body.replace(f"-> ({tensor_type((n,), rtype)}) {{", f"-> ({part}, {part}) {{")
    return body, True


def run_reference(reference, op, element_type, args):
    n = len(args[0])
    text, split = _reference_module(op, element_type, n, len(args))
    out = reference.evaluate(text, args)
    if not split:
        return out[0]
    result = np.empty(n, dtype_of(result_type(op, element_type)))
    result.real, result.imag = out
    return result


def assert_close(actual, expected, max_ulp, context, *, flushes_subnormals=False, empty_ok=False):
    """assert_same, zeros of either sign matching: ``flushes_subnormals`` when the
    oracle is XLA CPU."""
    return assert_same(actual, expected, max_ulp=max_ulp, context=f"{context}: ", zero_signs=False,
                       flushes_subnormals=flushes_subnormals, empty_ok=empty_ok)


def assert_close_complex(actual, expected, rtol, context):
    """|actual - expected| <= rtol * |expected| (complex functions near zero
    parts: a per-part ULP bound would be meaningless)."""
    a, e = actual.astype(np.complex128), expected.astype(np.complex128)
    bad = ~(np.abs(a - e) <= rtol * np.abs(e) + np.finfo(np.float64).tiny)
    if bad.any():
        i = int(np.argmax(bad))
        raise AssertionError(f"{context}: {int(bad.sum())} of {bad.size} differ (rtol={rtol}); "
                             f"first at {i}: got {actual[i]!r}, expected {expected[i]!r}")


@pytest.mark.parametrize("op, element_type", list(cases()))
def test_op_matches_xla_and_reference(op, element_type, reference):
    arity = OPS[op][0]
    args = operands(element_type, arity)
    n = len(args[0])
    text = op_module(f"stablehlo.{op}", [tensor_type((n,), element_type)] * arity,
                     tensor_type((n,), result_type(op, element_type)))
    (ours,) = run_interp_text(text, *args)
    context = f"{op} {element_type}"
    try:
        (xla,) = run_xla_text(text, *args)
    except XlaUnsupported as e:   # XLA CPU has no complex cbrt, and no f6 types
        assert (op == "cbrt" and element_type in COMPLEX_TYPES) or isinstance(e, XlaLacksType), f"{context}: {e}"
        xla = None
    if xla is None and element_type in COMPLEX_TYPES:
        # XLA has no complex cbrt and the reference interpreter reads no complex
        # tensors: check the defining property (principal cube root).
        assert op == "cbrt", context
        finite = ~is_nonfinite(args[0]) & (np.abs(args[0]) < 1e30) & (np.abs(args[0]) > 1e-30)
        z, root = args[0][finite].astype(np.complex128), ours[finite].astype(np.complex128)
        assert_close_complex(root ** 3, z, 1e-5, context + " cubed")
        assert (np.angle(root) <= np.pi / 3 + 1e-6).all() and (np.angle(root) > -np.pi / 3 - 1e-6).all()
        return
    if xla is None:
        # f6 types: XLA does not support them and the reference interpreter gets
        # most ops wrong (ceil(0.625) = 0). XLA on the same values in f32, rounded
        # to the f6 type by ml_dtypes, is the oracle (it may round twice: 1 ULP).
        assert_close(ours, xla_in_f32(op, element_type, args), 1 if op in TRANSCENDENTAL else 0,
                     context + " vs XLA in f32")
        return
    departs = xla_departures(op, element_type, args, xla)
    keep = ~departs
    if element_type in COMPLEX_TYPES and op in TRANSCENDENTAL | {"divide", "multiply", "sign"}:
        # Complex results are compared by norm: XLA's complex formulas (no FMA
        # for multiply, its own division) round differently from NumPy's.
        finite = keep & ~is_nonfinite(xla)
        eps = float(np.finfo(np.float32 if element_type == "complex<f32>" else np.float64).eps)
        # XLA's complex formulas lose digits to cancellation (its sin(x + iy) with
        # small y computes sinh y as (e^y - e^-y) / 2): 1e-6 / 1e-3 relative.
        rtol = 1e-6 if element_type == "complex<f64>" else 1e-3
        rtol = (100 * rtol if op == "atan2" else rtol) if op in TRANSCENDENTAL else 64 * eps
        assert_close_complex(flush_subnormals(ours[finite]), xla[finite], rtol, context + " vs XLA (ours flushed)")
    else:
        assert_close(ours[keep], xla[keep], xla_ulp(op, element_type), context + " vs XLA",
                     flushes_subnormals=True)
    if element_type in COMPLEX_TYPES and op in C99_IN_NUMPY:
        # Where XLA departs (non-finite or extreme parts), the non-finite parts of
        # C99's functions (NumPy calls libm's, in the same type; the reference cannot
        # read complex tensors). test_complex_special_values_follow_c99: by hand.
        assert departs.any(), context
        with np.errstate(all="ignore"):
            expected = C99_IN_NUMPY[op](*[a[departs] for a in args])
        np.testing.assert_array_equal(nonfinite_parts(ours[departs]), nonfinite_parts(expected),
                                      err_msg=f"{context}: non-finite parts vs C99 (NumPy)")
    # A zero from XLA may be a subnormal it flushed: the reference keeps subnormals.
    # (Not for the transcendental functions: the reference's logistic overflows in
    # e**-x, 0 for f32 -93.28659 where 3.063e-41 is right; test_transcendental_ulp_bounds
    # checks our subnormal results of those against long double.)
    maybe_flushed = (xla == 0) if op not in TRANSCENDENTAL and (xla.dtype.kind == "f" or
                                                                xla.dtype == ml_dtypes.bfloat16) else False
    checked_by_reference = (departs | maybe_flushed) & _reference_can_check(op, element_type, args)
    if checked_by_reference.any():
        sample = [a[checked_by_reference][:2000] for a in args]
        try:
            expected = run_reference(reference, op, element_type, sample)
        except Exception as e:  # noqa: BLE001 - any failure of the reference is this test's failure, with its context
            pytest.fail(f"reference interpreter failed on {context}: {e}")
        if element_type in COMPLEX_TYPES and op in TRANSCENDENTAL:
            return  # complex special values: C99 (NumPy) vs libstdc++ differ in NaN signs; see hand tests
        assert_close(ours[checked_by_reference][:2000], expected, 1 if op in TRANSCENDENTAL else 0,
                     context + " vs reference (where XLA departs from the spec)")


# Complex ops whose special values NumPy computes as C99 Annex G says (its divide,
# log1p, expm1 and power overflow or give NaN inside their formulas: 0 / 1e-45 is NaN).
C99_IN_NUMPY = {"sqrt": np.sqrt, "exponential": np.exp, "log": np.log, "tanh": np.tanh, "sine": np.sin,
                "cosine": np.cos, "tan": np.tan, "negate": np.negative, "add": np.add,
                "subtract": np.subtract, "multiply": np.multiply}


def nonfinite_parts(z):
    """Per element: which part is NaN, +inf or -inf."""
    return np.stack([np.isnan(z.real), np.isnan(z.imag), np.isposinf(z.real), np.isneginf(z.real),
                     np.isposinf(z.imag), np.isneginf(z.imag)], -1)


def xla_in_f32(op, element_type, args):
    n = len(args[0])
    rtype = result_type(op, element_type)
    wide_result = "f32" if rtype == element_type else rtype
    text = op_module(f"stablehlo.{op}", [tensor_type((n,), "f32")] * len(args), tensor_type((n,), wide_result))
    (wide,) = run_xla_text(text, *[a.astype(np.float32) for a in args])
    return wide.astype(dtype_of(rtype))


def _reference_can_check(op, element_type, args):
    """Elements the reference interpreter evaluates as the spec says."""
    ok = np.ones(len(args[0]), bool)
    if element_type == "f8E8M0FNU" or element_type in COMPLEX_TYPES:
        # Its APFloat rounds 0 to 2^-127 in f8E8M0FNU where XLA and ml_dtypes give
        # NaN; it cannot read or print complex tensors through the Python bindings.
        return ~ok
    if op in ("divide", "remainder") and element_type in INTEGER_TYPES:
        ok &= args[1] != 0  # the reference interpreter aborts on x / 0
    if op in ("maximum", "minimum") and element_type in COMPLEX_TYPES:
        return ~ok  # checked by hand below
    return ok


# ------------------------------------------------------------------- shapes


SHAPE_CASES = [(op, "f32" if "f32" in types else "i32" if "i32" in types else "i1")
               for op, (_, types) in OPS.items()]


@pytest.mark.parametrize("op, element_type", SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (2, 3)], ids=str)
def test_shapes(op, element_type, shape):
    arity = OPS[op][0]
    flat = operands(element_type, arity, seed=1)
    size = int(np.prod(shape))
    args = [a[5:5 + size].reshape(shape) for a in flat]
    text = op_module(f"stablehlo.{op}", [tensor_type(shape, element_type)] * arity,
                     tensor_type(shape, result_type(op, element_type)))
    (ours,) = run_interp_text(text, *args)
    (xla,) = run_xla_text(text, *args)
    assert ours.shape == shape
    assert_close(ours, xla, xla_ulp(op, element_type), f"{op} {shape}", flushes_subnormals=True, empty_ok=True)


# --------------------------------------------------------- accuracy (ULP bounds)


def _extended(fn):
    return lambda *xs: fn(*[np.asarray(x, np.float64).astype(np.longdouble) for x in xs])


# Reference values in the x87 extended type (64-bit significand), rounded once:
# far more precise than f32/f16/bf16, so they stand in for the exact values.
HIGH_PRECISION = {
    "exponential": np.exp, "exponential_minus_one": np.expm1, "log": np.log, "log_plus_one": np.log1p,
    "logistic": lambda x: 1 / (1 + np.exp(-x)), "sine": np.sin, "cosine": np.cos, "tan": np.tan,
    "tanh": np.tanh, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "cbrt": np.cbrt,
    "atan2": np.arctan2, "power": np.power,
}
# ULP bounds against the high-precision values. StableHLO's own math tests use
# check.expect_close with max_ulp_difference = 1 by default: we meet it.
# XLA CPU's bounds (measured on the same inputs, denormals aside) are stated here.
XLA_ACCURACY = {"exponential_minus_one": {"f16": 2, "f32": 4}, "log_plus_one": {"f32": 2},
                "logistic": {"f16": 2, "f32": 2}, "tanh": {"f32": 3}}


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 63, reason="needs the x87 extended type")
@pytest.mark.parametrize("element_type", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("op", sorted(HIGH_PRECISION))
def test_transcendental_ulp_bounds(op, element_type):
    arity = OPS[op][0]
    args = operands(element_type, arity, seed=2)
    n = len(args[0])
    text = op_module(f"stablehlo.{op}", [tensor_type((n,), element_type)] * arity, tensor_type((n,), element_type))
    (ours,) = run_interp_text(text, *args)
    (xla,) = run_xla_text(text, *args)
    with np.errstate(all="ignore"):
        exact = _extended(HIGH_PRECISION[op])(*args).astype(np.float64).astype(dtype_of(element_type))
    assert_close(ours, exact, 1, f"{op} {element_type} vs high precision")
    keep = ~xla_departures(op, element_type, args, xla)
    bound = XLA_ACCURACY.get(op, {}).get(element_type, 1)
    assert_close(flush_subnormals(xla[keep]), flush_subnormals(exact[keep]), bound,
                 f"XLA {op} {element_type} vs high precision (both flushed as XLA flushes)")


def expm1_decimal(z: complex) -> complex:
    """e**z - 1 in 100-digit decimal arithmetic, for |im z| below ~20: e**x by
    Decimal.exp, cos(y) and sin(y) by 200 terms of their Taylor series (no range
    reduction: the largest term, ~e**|y|, costs a few of the 100 digits)."""
    with decimal.localcontext() as context:
        context.prec = 100
        x, y = decimal.Decimal(z.real), decimal.Decimal(z.imag)
        cosine, sine, term, n = decimal.Decimal(0), decimal.Decimal(0), decimal.Decimal(1), 0
        while n < 200:  # |y|**200 / 200! < 1e-250
            if n % 2 == 0:
                cosine += term if n % 4 == 0 else -term
            else:
                sine += term if n % 4 == 1 else -term
            n += 1
            term = term * y / n
        return complex(float(x.exp() * cosine - 1), float(x.exp() * sine))


def test_expm1_decimal_reference():
    """The test's reference at closed forms: e**(i pi/3) - 1 = -1/2 + i sqrt(3)/2, e - 1."""
    third_pi = 3.141592653589793 / 3
    assert expm1_decimal(complex(0, third_pi)) == pytest.approx(complex(-0.5, 3**0.5 / 2), rel=1e-15)
    assert expm1_decimal(complex(1, 0)) == complex(np.expm1(np.longdouble(1)).astype(np.float64), 0)


@pytest.mark.parametrize("element_type", COMPLEX_TYPES)
def test_complex_expm1_where_its_real_part_cancels(element_type):
    """exponential_minus_one of x + iy is within 1 ULP per part of the decimal
    reference where e**x * cos(y) is near 1 (x = -log(cos(y)) and its neighbours):
    its real part expm1(x) * cos(y) - 2 * sin(y / 2)**2 cancels, which long
    double cannot hold for complex128 (it was 3.9e13 ULP off at 0.105 + 0.451i)
    and f64 not for complex64 (12 ULP). Also StableHLO's testdata points
    -9.813122 + 1.8663971i (complex64; its expected imaginary part, XLA's, is
    3066 ULP off) and -9.351185564321082 - 9.073611458725484i (complex128, 798)."""
    dtype = dtype_of(element_type)
    part = dtype.type(0).real.dtype
    y = np.geomspace(1e-6, 1.5, 300).astype(part)
    x = -np.log(np.cos(y.astype(np.float64))).astype(part)
    x = np.concatenate([np.nextafter(x, -np.inf), x, np.nextafter(x, np.inf)])
    z = (x + 1j * np.tile(y, 3)).astype(dtype)
    z = np.append(z, np.asarray([-9.813122 + 1.8663971j, -9.351185564321082 - 9.073611458725484j], dtype))
    ours = run1("exponential_minus_one", element_type, z)
    expected = np.array([expm1_decimal(complex(v)) for v in z]).astype(dtype)
    for name in ("real", "imag"):
        assert_close(getattr(ours, name), getattr(expected, name), 1, f"expm1 {element_type} {name} part")


# ------------------------------------------------------ semantics, checked by hand


def run1(op, element_type, *args, rtype=None, attrs=""):
    args = [np.asarray(a, dtype_of(element_type)) for a in args]
    n = args[0].shape
    text = op_module(f"stablehlo.{op}", [tensor_type(n, element_type)] * len(args),
                     tensor_type(n, rtype or element_type), attrs)
    return run_interp_text(text, *args)[0]


def bits(x):
    return np.asarray(x).view(f"u{np.asarray(x).dtype.itemsize}")


def test_integer_division_by_zero_and_overflow():
    np.testing.assert_array_equal(run1("divide", "i32", [7, -7, 0, -2**31, -2**31, 7],
                                       [0, 0, 0, -1, 1, -2]), [-1, -1, -1, -2**31, -2**31, -3])
    np.testing.assert_array_equal(run1("divide", "ui8", [7, 0, 255], [0, 0, 2]), [255, 255, 127])
    np.testing.assert_array_equal(run1("divide", "i4", [7, -8, -8], [0, -1, 3]), [-1, -8, -2])
    np.testing.assert_array_equal(run1("divide", "ui4", [7, 15], [0, 4]), [15, 3])
    np.testing.assert_array_equal(run1("remainder", "i32", [7, -7, -2**31, -7, 7], [0, 0, -1, 3, -3]),
                                  [7, -7, 0, -1, 1])
    np.testing.assert_array_equal(run1("remainder", "i2", [-2, 1, -2], [-1, 0, 0]), [0, 1, -2])


def test_wrap_around_at_own_width():
    np.testing.assert_array_equal(run1("add", "i4", [7, -8], [1, -1]), [-8, 7])
    np.testing.assert_array_equal(run1("multiply", "ui2", [3, 2], [3, 2]), [1, 0])
    np.testing.assert_array_equal(run1("negate", "i2", [-2, 1]), [-2, -1])
    np.testing.assert_array_equal(run1("abs", "i8", [-128, -5]), [-128, 5])
    np.testing.assert_array_equal(run1("negate", "ui8", [1, 0]), [255, 0])


def test_integer_power():
    np.testing.assert_array_equal(run1("power", "i32", [2, -1, -1, 1, 3, 0, 0, 3], [-1, -3, -4, -5, 2, 0, 64, 64]),
                                  [0, -1, 1, 1, 9, 1, 0, pow(3, 64, 2**32) - 2**32 * (pow(3, 64, 2**32) >= 2**31)])
    np.testing.assert_array_equal(run1("power", "ui8", [2, 3], [8, 255]), [0, pow(3, 255, 256)])


def test_shifts_out_of_range():
    np.testing.assert_array_equal(run1("shift_left", "i8", [1, 1, 1, 1], [7, 8, -1, 100]), [-128, 0, 0, 0])
    np.testing.assert_array_equal(run1("shift_right_arithmetic", "i8", [-128, -128, 64, 64], [7, 8, -1, 100]),
                                  [-1, -1, 0, 0])
    np.testing.assert_array_equal(run1("shift_right_logical", "i8", [-128, -1, -1], [7, 8, -1]), [1, 0, 0])
    # Arithmetic shifts copy the top bit for unsigned types too.
    np.testing.assert_array_equal(run1("shift_right_arithmetic", "ui8", [128, 255, 64], [1, 9, 1]), [192, 255, 32])
    np.testing.assert_array_equal(run1("shift_right_arithmetic", "ui4", [8, 8], [1, 4]), [12, 15])
    np.testing.assert_array_equal(run1("shift_left", "i4", [1, 1, -1], [3, 4, -1]), [-8, 0, 0])


def test_popcnt_and_clz_at_own_width():
    np.testing.assert_array_equal(run1("popcnt", "i4", [-8, -1, 7]), [1, 4, 3])
    np.testing.assert_array_equal(run1("count_leading_zeros", "i4", [-8, -1, 1, 0]), [0, 0, 3, 4])
    np.testing.assert_array_equal(run1("count_leading_zeros", "ui64", [0, 1, 2**63]), [64, 63, 0])


def ieee_extremum(is_max: bool, a: float, b: float) -> float:
    """IEEE-754 maximum / minimum (spec: maximum, minimum) of two Python floats,
    written out: NaN propagates, -0.0 < +0.0."""
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b == 0:
        negative = (math.copysign(1, a) < 0) and (math.copysign(1, b) < 0) if is_max else \
            (math.copysign(1, a) < 0) or (math.copysign(1, b) < 0)
        return -0.0 if negative else 0.0
    return max(a, b) if is_max else min(a, b)


@pytest.mark.parametrize("element_type", ["bf16", "f16", "f32", "f64", "f8E4M3FN"])
def test_maximum_minimum_nan_and_signed_zeros(element_type):
    """Every ordered pair of -inf, -1, -0.0, +0.0, 1, +inf and NaN (f8E4M3FN has no
    infinities), in arrays long enough for NumPy's vector loops and in short ones,
    bit for bit the IEEE-754 extremum written out (zero signs compared)."""
    specials = [-math.inf, -1.0, -0.0, 0.0, 1.0, math.inf, math.nan]
    if element_type == "f8E4M3FN":
        specials = [v for v in specials if not math.isinf(v)]
    pairs = [(a, b) for a in specials for b in specials]
    for length in (len(pairs), 3):
        lhs, rhs = [a for a, _ in pairs][:length], [b for _, b in pairs][:length]
        for op, is_max in (("maximum", True), ("minimum", False)):
            expected = np.asarray([ieee_extremum(is_max, a, b) for a, b in zip(lhs, rhs)], dtype_of(element_type))
            assert_same(run1(op, element_type, lhs, rhs), expected, context=f"{op} ")


def test_complex_maximum_minimum_lexicographic():
    lhs = np.array([1 + 5j, 2 + 0j, 1 + 1j, np.nan + 0j, 3 + 0j], np.complex64)
    rhs = np.array([2 + 0j, 1 + 5j, 1 + 2j, 0j, 3 + np.nan * 1j], np.complex64)
    high = run1("maximum", "complex<f32>", lhs, rhs)
    low = run1("minimum", "complex<f32>", lhs, rhs)
    np.testing.assert_array_equal(high[:3], [2 + 0j, 2 + 0j, 1 + 2j])
    np.testing.assert_array_equal(low[:3], [1 + 5j, 1 + 5j, 1 + 1j])
    # A NaN part compares false: the other operand is taken.
    assert high[3] == 0 and low[3] == 0


def test_rounding_ties():
    x = [0.5, 1.5, 2.5, -0.5, -2.5, -0.3, 0.49999997, 8388609.0, -0.0, np.inf, np.nan]
    even = run1("round_nearest_even", "f32", x)
    away = run1("round_nearest_afz", "f32", x)
    np.testing.assert_array_equal(even, [0, 2, 2, -0.0, -2, -0.0, 0, 8388609, -0.0, np.inf, np.nan])
    np.testing.assert_array_equal(away, [1, 2, 3, -1, -3, -0.0, 0, 8388609, -0.0, np.inf, np.nan])
    assert list(np.signbit(even[[3, 5, 8]])) == [True] * 3
    assert list(np.signbit(away[[5, 8]])) == [True] * 2


def test_sign_keeps_signed_zero_and_nan():
    out = run1("sign", "f32", [-0.0, 0.0, -3.0, 1e-45, np.nan, -np.inf])
    assert list(np.signbit(out[:2])) == [True, False]
    np.testing.assert_array_equal(out[2:], [-1, 1, np.nan, -1])  # 1e-45 is a denormal: sign 1


def test_complex_sign_follows_the_spec_formula():
    z = np.array([3 + 4j, 0j, complex(np.inf, 0), complex(np.nan, 1), 5e-324 + 0j], np.complex128)
    out = run1("sign", "complex<f64>", z)
    np.testing.assert_allclose(out[0], 0.6 + 0.8j)
    assert out[1] == 0
    assert np.isnan(out[2].real) and np.isnan(out[2].imag)  # inf / convert(inf): complex division
    assert np.isnan(out[3].real) and np.isnan(out[3].imag)
    assert out[4] == 1


_INF, _NAN, _PI = np.inf, np.nan, np.pi
# C11 Annex G (G.6): op -> [(z, f(z), whether the signs of zeros are specified)], by hand.
ANNEX_G = {
    "exponential": [  # G.6.3.1 cexp
        ((0.0, 0.0), (1, 0.0), True), ((-0.0, 0.0), (1, 0.0), True), ((1.0, _INF), (_NAN, _NAN), True),
        ((1.0, _NAN), (_NAN, _NAN), True), ((_INF, 0.0), (_INF, 0.0), True),
        ((-_INF, 2.0), (-0.0, 0.0), True), ((-_INF, -1.0), (0.0, -0.0), True), ((_INF, 2.0), (-_INF, _INF), True),
        ((-_INF, _INF), (0.0, 0.0), False), ((_INF, _INF), (_INF, _NAN), False),
        ((-_INF, _NAN), (0.0, 0.0), False), ((_INF, _NAN), (_INF, _NAN), False), ((_NAN, 0.0), (_NAN, 0.0), True),
        ((_NAN, 1.0), (_NAN, _NAN), True), ((_NAN, _NAN), (_NAN, _NAN), True)],
    "sqrt": [  # G.6.4.2 csqrt
        ((0.0, 0.0), (0.0, 0.0), True), ((-0.0, 0.0), (0.0, 0.0), True), ((1.0, _INF), (_INF, _INF), True),
        ((_NAN, _INF), (_INF, _INF), True), ((-_INF, _INF), (_INF, _INF), True), ((1.0, _NAN), (_NAN, _NAN), True),
        ((-_INF, 1.0), (0.0, _INF), True), ((_INF, 1.0), (_INF, 0.0), True), ((-_INF, _NAN), (_NAN, _INF), False),
        ((_INF, _NAN), (_INF, _NAN), True), ((_NAN, 1.0), (_NAN, _NAN), True), ((1.0, -_INF), (_INF, -_INF), True),
        ((-_INF, -1.0), (0.0, -_INF), True), ((-_INF, -0.0), (0.0, -_INF), True)],
    "log": [  # G.6.3.2 clog
        ((-0.0, 0.0), (-_INF, _PI), True), ((0.0, 0.0), (-_INF, 0.0), True), ((1.0, _INF), (_INF, _PI / 2), True),
        ((1.0, _NAN), (_NAN, _NAN), True), ((-_INF, 1.0), (_INF, _PI), True), ((_INF, 1.0), (_INF, 0.0), True),
        ((-_INF, _INF), (_INF, 3 * _PI / 4), True), ((_INF, _INF), (_INF, _PI / 4), True),
        ((_INF, _NAN), (_INF, _NAN), True), ((-_INF, _NAN), (_INF, _NAN), True), ((_NAN, 1.0), (_NAN, _NAN), True),
        ((_NAN, _INF), (_INF, _NAN), True), ((_NAN, _NAN), (_NAN, _NAN), True), ((-_INF, -1.0), (_INF, -_PI), True)],
    "tanh": [  # G.6.2.6 ctanh
        ((0.0, 0.0), (0.0, 0.0), True), ((1.0, _INF), (_NAN, _NAN), True), ((1.0, _NAN), (_NAN, _NAN), True),
        ((_INF, 1.0), (1.0, 0.0), True), ((_INF, 2.0), (1.0, -0.0), True), ((_INF, _INF), (1.0, 0.0), False),
        ((_INF, _NAN), (1.0, 0.0), False), ((_NAN, 0.0), (_NAN, 0.0), True), ((_NAN, 1.0), (_NAN, _NAN), True),
        ((_NAN, _NAN), (_NAN, _NAN), True), ((-_INF, 1.0), (-1.0, 0.0), True)],
}


@pytest.mark.parametrize("element_type", COMPLEX_TYPES)
@pytest.mark.parametrize("op", ANNEX_G)
def test_complex_special_values_follow_c99(op, element_type):
    """The special values C11 Annex G gives (NaN of either sign; zero signs where it
    specifies them; finite parts such as pi/2 within 1 ULP)."""
    cases = ANNEX_G[op]
    z = np.array([complex(*point) for point, _, _ in cases])
    ours = run1(op, element_type, z)
    for got, (point, want, signs) in zip(ours, cases):
        for part, expected in ((got.real, want[0]), (got.imag, want[1])):
            expected = np.asarray(expected, part.dtype)
            if np.isnan(expected) or not signs:
                ok = np.isnan(part) if np.isnan(expected) else abs(float(part)) == abs(float(expected))
            else:
                ok = int(ulp_difference(part, expected)) <= 1 and np.signbit(part) == np.signbit(expected)
            assert ok, f"{op}{complex(*point)} = {got}, C99: {complex(*want)}"
    assert run1("abs", element_type, [complex(_NAN, _INF)], rtype=element_type[8:-1])[0] == np.inf  # hypot


def test_complex_logistic_of_a_large_negative_real_part():
    """logistic(z) = 1 / (1 + e**-z) ~ e**z where e**-z overflows: tiny or zero,
    with the signs of cos(im z) and sin(im z) (mpmath; it was NaN from NumPy's
    1 / (inf + inf i))."""
    import mpmath

    z = np.array([-800 + 1j, -800 - 2j, -2e4 + 3j, -1e5 - 2j, -700 + 1j, -720.5 - 0.25j])
    expected = np.array([complex(1 / (1 + mpmath.exp(-mpmath.mpc(v.real, v.imag)))) for v in z])
    assert_same(run1("logistic", "complex<f64>", z), expected, max_ulp=1)
    assert_same(run1("logistic", "complex<f64>", z[:4]), expected[:4])   # the zeros' signs


@pytest.mark.parametrize("element_type", COMPLEX_TYPES)
def test_complex_expm1_of_an_overflowing_real_part_keeps_its_zero_imaginary_part(element_type):
    """e**(x ± i0) - 1 = (e**x - 1) ± i0 where e**x overflows: inf ± i0 (mpmath's
    exact value rounded; C99 G.6.3.1 cexp(x ± i0) = e**x ± i0). NumPy's formula gave
    inf + NaN i (inf * sin(0)); found by fuzz (docs/findings.md)."""
    import mpmath

    big = float(np.finfo(np.dtype(element_type[8:-1].replace("f", "float"))).max)
    z = np.array([complex(big, 0.0), complex(big, -0.0), complex(800.0, 0.0), complex(_INF, -0.0)])
    ours = run1("exponential_minus_one", element_type, z)
    for got, point in zip(ours, z):
        exact = mpmath.expm1(mpmath.mpc(point.real, 0))   # unbounded exponent: finite, imaginary part 0
        assert float(exact.imag) == 0 and float(exact.real) > float(np.finfo(got.real.dtype).max)
        assert got.real == np.inf and got.imag == 0 and np.signbit(got.imag) == np.signbit(point.imag), (point, got)


@pytest.mark.parametrize("element_type", COMPLEX_TYPES)
def test_complex_log1p_keeps_a_tiny_real_part(element_type):
    """log1p(z) ~ z for tiny z: the real part is not lost in 1 + z (mpmath's log1p,
    exact, as the oracle). NumPy's formula gave 0 for 2.2e-308; found by fuzz."""
    import mpmath

    real = np.dtype(element_type[8:-1].replace("f", "float"))
    tiny = float(np.finfo(real).smallest_normal)
    z = np.array([complex(tiny, -float(np.finfo(real).smallest_subnormal)), complex(1e-20, 1e-20),
                  complex(-3e-30, 2e-15), complex(0.25, -0.3)])
    stored = z.astype(np.complex64 if real == np.float32 else np.complex128)
    with mpmath.workdps(60):
        expected = np.array([complex(mpmath.log1p(mpmath.mpc(float(v.real), float(v.imag)))) for v in stored])
    assert_same(run1("log_plus_one", element_type, z), expected.astype(z.dtype if real == np.float64 else np.complex64),
                max_ulp=2)


def test_denormals_are_kept():
    tiny = np.float32(1e-45)
    assert run1("add", "f32", [tiny], [tiny])[0] == np.float32(3e-45)
    assert run1("multiply", "f32", [tiny], [np.inf])[0] == np.inf
    assert run1("ceil", "f32", [tiny])[0] == 1
    assert np.isfinite(run1("log", "f32", [tiny])[0])


def test_f8e8m0fnu_has_no_zero():
    one = np.ones(2, ml_dtypes.float8_e8m0fnu)
    assert np.isnan(run1("subtract", "f8E8M0FNU", one, one).astype(np.float32)).all()
    assert np.isnan(run1("imag", "f8E8M0FNU", one).astype(np.float32)).all()


def test_unsupported_remainder_of_complex_names_the_op():
    import stablehlo_interp as si

    text = op_module("stablehlo.remainder", ["tensor<2xcomplex<f32>>"] * 2, "tensor<2xcomplex<f32>>")
    with pytest.raises(si.UnsupportedOpError, match="stablehlo.remainder.*complex<f32>"):
        si.load(text)


# ------------------------------------------------------------- compare, select, clamp

DIRECTIONS = ["EQ", "NE", "GE", "GT", "LE", "LT"]


def compare_attrs(direction, compare_type):
    return (f"comparison_direction = #stablehlo<comparison_direction {direction}>, "
            f"compare_type = #stablehlo<comparison_type {compare_type}>")


def compare_types(element_type):
    if element_type in SIGNED_TYPES:
        return ["SIGNED"]
    if element_type in UNSIGNED_TYPES or element_type == "i1":
        return ["UNSIGNED"]
    if element_type in COMPLEX_TYPES:
        return ["FLOAT"]
    return ["FLOAT", "TOTALORDER"]


@pytest.mark.parametrize("element_type", [
    pytest.param(t, marks=() if t in SAMPLE_TYPES | {"bf16", "f8E5M2FNUZ"} else (pytest.mark.slow,))
    for t in ALL_TYPES])
def test_compare(element_type, reference):
    args = operands(element_type, 2)
    n = len(args[0])
    for compare_type in compare_types(element_type):
        for direction in DIRECTIONS:
            text = op_module("stablehlo.compare", [tensor_type((n,), element_type)] * 2,
                             tensor_type((n,), "i1"), compare_attrs(direction, compare_type))
            (ours,) = run_interp_text(text, *args)
            try:
                (expected,) = run_xla_text(text, *args)
                keep = np.ones(n, bool)
                if element_type not in F8_TYPES and compare_type == "FLOAT":
                    keep = ~(is_subnormal(args[0]) | is_subnormal(args[1]))
                if element_type in COMPLEX_TYPES:
                    keep &= args[0].real != args[1].real  # XLA orders -0.0 before +0.0 in ties
            except XlaLacksType:  # f6 types: XLA on the values in f32
                wide = text.replace(element_type, "f32")
                keep = np.ones(n, bool)
                (expected,) = run_xla_text(wide, *[a.astype(np.float32) for a in args])
            np.testing.assert_array_equal(ours[keep], expected[keep],
                                          err_msg=f"{element_type} {direction} {compare_type}")


def test_total_order():
    values = [-np.nan, -np.inf, -1.0, -0.0, 0.0, 1e-45, 1.0, np.inf, np.nan]
    x = np.array(values, np.float32)
    x[0] = -np.abs(x[0])
    lt = run1("compare", "f32", x[:-1], x[1:], rtype="i1", attrs=compare_attrs("LT", "TOTALORDER"))
    assert lt.all()
    eq = run1("compare", "f32", [0.0, np.nan], [-0.0, np.nan], rtype="i1", attrs=compare_attrs("EQ", "TOTALORDER"))
    assert list(eq) == [False, True]


def test_total_order_of_every_f8e8m0fnu_pattern():
    """f8E8M0FNU has no sign bit: its 255 values 2^-127 .. 2^127 order as their bit
    patterns, and its one NaN (0xFF) is a positive NaN, above them all (spec: compare,
    totalOrder). The oracle: the values' order in f32, the NaN placed by hand."""
    patterns = np.arange(256, dtype=np.uint8)
    lhs, rhs = (p.ravel().view(ml_dtypes.float8_e8m0fnu) for p in np.meshgrid(patterns, patterns))
    wide_lhs, wide_rhs = lhs.astype(np.float32), rhs.astype(np.float32)
    assert np.isnan(wide_lhs).sum() == 256 and np.isfinite(wide_lhs).sum() == 255 * 256
    both_nan = np.isnan(wide_lhs) & np.isnan(wide_rhs)
    expected = {"LT": np.where(np.isnan(wide_rhs), ~np.isnan(wide_lhs), wide_lhs < wide_rhs),
                "EQ": np.where(both_nan, True, wide_lhs == wide_rhs),
                "GE": np.where(np.isnan(wide_lhs), True, ~np.isnan(wide_rhs) & (wide_lhs >= wide_rhs))}
    for direction, want in expected.items():
        ours = run1("compare", "f8E8M0FNU", lhs, rhs, rtype="i1", attrs=compare_attrs(direction, "TOTALORDER"))
        np.testing.assert_array_equal(ours, want, err_msg=direction)


@pytest.mark.parametrize("element_type", ["i1", "i4", "ui8", "i32", "bf16", "f32", "f8E5M2", "complex<f64>"])
def test_select_and_clamp(element_type):
    values = element_values(element_type, 50)
    n = len(values)
    rng = np.random.default_rng(3)
    on_false = values[rng.permutation(n)]
    pred = rng.integers(0, 2, n).astype(bool)
    t = tensor_type((n,), element_type)
    text = op_module("stablehlo.select", [tensor_type((n,), "i1"), t, t], t)
    (ours,) = run_interp_text(text, pred, values, on_false)
    (xla,) = run_xla_text(text, pred, values, on_false)
    assert_close(ours, xla, 0, "select", flushes_subnormals=True)
    scalar_pred = op_module("stablehlo.select", ["tensor<i1>", t, t], t)
    for p in (True, False):
        (ours,) = run_interp_text(scalar_pred, np.array(p), values, on_false)
        assert_close(ours, values if p else on_false, 0, "select with 0-d pred")
    if element_type in COMPLEX_TYPES:
        return  # XLA's complex clamp departs from the lexicographic order (see maximum)
    low, high = np.sort(values[:2]) if element_type != "i1" else (values[0], values[1])
    for bounds in ([tensor_type((), element_type)] * 2, [t, t]):
        text = op_module("stablehlo.clamp", [bounds[0], t, bounds[1]], t)
        lo = np.array(low, values.dtype) if bounds[0] == tensor_type((), element_type) else values[rng.permutation(n)]
        hi = np.array(high, values.dtype) if bounds[1] == tensor_type((), element_type) else values[rng.permutation(n)]
        (ours,) = run_interp_text(text, lo, values, hi)
        (xla,) = run_xla_text(text, lo, values, hi)
        keep = ~(is_subnormal(values) | is_subnormal(lo) | is_subnormal(hi)) \
            if element_type not in F8_TYPES else np.ones(n, bool)
        assert_close(ours[keep], xla[keep], 0, f"clamp {element_type}", flushes_subnormals=True)


@pytest.mark.parametrize("element_type", ["f32", "f64"])
def test_complex_op(element_type):
    re, im = element_values(element_type, 30), element_values(element_type, 30, seed=1)
    t = tensor_type((len(re),), element_type)
    text = op_module("stablehlo.complex", [t, t], tensor_type((len(re),), f"complex<{element_type}>"))
    (ours,) = run_interp_text(text, re, im)
    assert_close(ours.real, re, 0, "real part")
    assert_close(ours.imag, im, 0, "imag part")  # an infinite imag part stays as it is


# --------------------------------------------------------- hypothesis vs jax.lax

LAX_UNARY = {
    "abs": jax.lax.abs, "negate": jax.lax.neg, "exponential": jax.lax.exp, "log": jax.lax.log,
    "tanh": jax.lax.tanh, "sine": jax.lax.sin, "floor": jax.lax.floor, "sign": jax.lax.sign,
    "logistic": jax.lax.logistic, "sqrt": jax.lax.sqrt, "round_nearest_even":
        lambda x: jax.lax.round(x, jax.lax.RoundingMethod.TO_NEAREST_EVEN),
}
LAX_BINARY = {
    "add": jax.lax.add, "subtract": jax.lax.sub, "multiply": jax.lax.mul, "divide": jax.lax.div,
    "maximum": jax.lax.max, "minimum": jax.lax.min, "remainder": jax.lax.rem, "power": jax.lax.pow,
    "atan2": jax.lax.atan2,
}
INT_BINARY = {
    "add": jax.lax.add, "multiply": jax.lax.mul, "divide": jax.lax.div, "remainder": jax.lax.rem,
    "shift_left": jax.lax.shift_left, "shift_right_arithmetic": jax.lax.shift_right_arithmetic,
    "shift_right_logical": jax.lax.shift_right_logical, "and": jax.lax.bitwise_and, "max": jax.lax.max,
}

shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


@functools.lru_cache(maxsize=None)
def _jitted(fn):
    return jax.jit(fn)


@given(st.sampled_from(sorted(LAX_UNARY) + sorted(LAX_BINARY)), st.sampled_from(["f32", "f64"]), shapes,
       st.integers(0, 2 ** 32 - 1))
def test_random_float_ops_against_lax(op, element_type, shape, seed):
    from oracles import run_interp

    fn = LAX_UNARY.get(op) or LAX_BINARY[op]
    arity = 1 if op in LAX_UNARY else 2
    size = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    pool = element_values(element_type, 100, seed % 1000)
    args = [pool[rng.integers(0, len(pool), size)].reshape(shape) for _ in range(arity)]
    (ours,) = run_interp(fn, *args)
    xla = np.asarray(_jitted(fn)(*args))
    keep = ~np.any([is_subnormal(a) for a in args], 0)   # XLA reads them as zeros
    assume(keep.any())
    assert_close(ours[keep], xla[keep], xla_ulp(op, element_type), op, flushes_subnormals=True)


@given(st.sampled_from(sorted(INT_BINARY)), st.sampled_from(["i8", "i32", "i64", "ui16", "ui64"]), shapes,
       st.integers(0, 2 ** 32 - 1))
def test_random_integer_ops_against_lax(op, element_type, shape, seed):
    from oracles import run_interp

    fn = INT_BINARY[op]
    size = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    pool = element_values(element_type, 100, seed % 1000)
    args = [pool[rng.integers(0, len(pool), size)].reshape(shape) for _ in range(2)]
    (ours,) = run_interp(fn, *args)
    np.testing.assert_array_equal(ours, np.asarray(_jitted(fn)(*args)))
    assert ours.dtype == args[0].dtype


def test_jnp_program_with_broadcasts():
    from oracles import run_interp, run_xla

    def f(x, y):
        return jnp.where(x > 0, jnp.tanh(x) * y, jnp.maximum(x, -1.0) - y) / (1.0 + jnp.abs(y))

    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    y = np.arange(4, dtype=np.float32)
    assert_close(run_interp(f, x, y)[0], run_xla(f, x, y)[0], 2, "program", flushes_subnormals=True)
