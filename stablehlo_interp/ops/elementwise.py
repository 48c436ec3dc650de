"""Element-wise arithmetic and math (spec: abs, add, atan2, cbrt, ceil, clamp,
compare, complex, cosine, divide, exponential, exponential_minus_one, floor,
imag, is_finite, log, log_plus_one, logistic, maximum, minimum, multiply,
negate, power, real, remainder, round_nearest_afz, round_nearest_even, rsqrt,
select, sign, sine, sqrt, subtract, tan, tanh).

Integer ops wrap around at the element type's width (sub-byte types too).
Transcendental functions of f32 are evaluated in f64 and rounded, those of
f16/bf16/f8 in f32, so results are within StableHLO's test tolerances of the
correctly rounded value.
"""

from __future__ import annotations

import numpy as np

from ..registry import op
from .support import in_integer_precision, in_wider_precision, integer_compute_dtype


def _result_dtype(info):
    return info.result_type.dtype


def _by_kind(info, *, integer=None, floating=None, complex_=None, boolean=None, ttype=None):
    """Pick the runner for the operand element kind; a missing kind is unsupported."""
    ttype = ttype or info.operand_types[0]
    choice = {"signed": integer, "unsigned": integer, "float": floating,
              "complex": complex_, "bool": boolean}[ttype.kind]
    if choice is None:
        raise info.unsupported(f"element type {ttype.element_type} is not allowed for this op")
    return choice


def _math(fn, *, complex_ok=True, integer=None):
    """Builder of a float math op evaluated in wider precision."""

    def build(info):
        dtype = info.operand_types[0].dtype
        return _by_kind(info, floating=in_wider_precision(fn, dtype),
                        complex_=in_wider_precision(fn, dtype) if complex_ok else None,
                        integer=integer)

    return build


# ------------------------------------------------------------------ arithmetic


@op("stablehlo.add", elementwise=True)
def add(info):
    """Logical OR for i1 (NumPy's bool add is OR), wrapping add for integers."""
    return in_integer_precision(np.add, info.operand_types[0].dtype)


@op("stablehlo.subtract", elementwise=True)
def subtract(info):
    dtype = info.operand_types[0].dtype
    return _by_kind(info, integer=in_integer_precision(np.subtract, dtype),
                    floating=np.subtract, complex_=np.subtract)


@op("stablehlo.multiply", elementwise=True)
def multiply(info):
    """Logical AND for i1, wrapping product for integers."""
    return in_integer_precision(np.multiply, info.operand_types[0].dtype)


@op("stablehlo.negate", elementwise=True)
def negate(info):
    dtype = info.operand_types[0].dtype
    return _by_kind(info, integer=in_integer_precision(np.negative, dtype),
                    floating=np.negative, complex_=np.negative)


@op("stablehlo.abs", elementwise=True)
def abs_(info):
    """abs(INT_MIN) wraps to INT_MIN; complex operands give their modulus."""
    dtype = info.operand_types[0].dtype
    result = info.result_type.dtype
    return _by_kind(info, integer=in_integer_precision(np.abs, dtype), floating=np.abs,
                    complex_=lambda z: np.abs(np.asarray(z, np.complex128)).astype(result))


@op("stablehlo.divide", elementwise=True)
def divide(info):
    dtype = info.operand_types[0].dtype
    return _by_kind(info, integer=_integer_divide(info), floating=np.divide,
                    complex_=in_wider_precision(np.divide, dtype))


def _integer_divide(info):
    """Truncating division. As in XLA: x / 0 = -1 (all bits set for unsigned),
    INT_MIN / -1 = INT_MIN."""
    dtype = info.operand_types[0].dtype
    compute = integer_compute_dtype(dtype)
    signed = info.operand_types[0].kind == "signed"
    all_ones = np.array(-1 if signed else np.iinfo(compute).max, compute)
    if not signed and compute != dtype:
        all_ones = np.array(2 ** info.operand_types[0].bit_width - 1, compute)

    def run(lhs, rhs):
        lhs, rhs = np.asarray(lhs).astype(compute), np.asarray(rhs).astype(compute)
        safe = _safe_divisor(lhs, rhs, signed, info.operand_types[0].bit_width)
        remainder = np.fmod(lhs, safe)
        quotient = (lhs - remainder) // safe
        return np.where(rhs == 0, all_ones, quotient).astype(dtype)

    return run


def _safe_divisor(lhs, rhs, signed: bool, bits: int):
    """rhs with 0 (and -1 where lhs is INT_MIN) replaced by 1."""
    bad = rhs == 0
    if signed:
        bad |= (rhs == -1) & (lhs == -(1 << (bits - 1)))
    return np.where(bad, np.ones_like(rhs), rhs)


@op("stablehlo.remainder", elementwise=True)
def remainder(info):
    """Sign of the dividend (C fmod). As in XLA: x % 0 = x, INT_MIN % -1 = 0."""
    dtype = info.operand_types[0].dtype
    compute = integer_compute_dtype(dtype)
    signed = info.operand_types[0].kind == "signed"
    bits = info.operand_types[0].bit_width

    def integer(lhs, rhs):
        lhs, rhs = np.asarray(lhs).astype(compute), np.asarray(rhs).astype(compute)
        result = np.fmod(lhs, _safe_divisor(lhs, rhs, signed, bits))
        return np.where(rhs == 0, lhs, result).astype(dtype)

    return _by_kind(info, integer=integer, floating=in_wider_precision(np.fmod, dtype))


@op("stablehlo.power", elementwise=True)
def power(info):
    dtype = info.operand_types[0].dtype
    return _by_kind(info, integer=_integer_power(info), floating=in_wider_precision(np.power, dtype),
                    complex_=in_wider_precision(np.power, dtype))


def _integer_power(info):
    """Exponentiation by squaring with wrap-around. A negative exponent gives
    0, except for bases 1 (-> 1) and -1 (-> +-1), as XLA defines it."""
    dtype = info.operand_types[0].dtype
    compute = integer_compute_dtype(dtype)
    unsigned = np.dtype(f"u{compute.itemsize}")

    def run(base, exponent):
        base = np.asarray(base).astype(compute)
        exponent = np.asarray(exponent).astype(compute)
        base, exponent = np.broadcast_arrays(base, exponent)
        negative = exponent < 0
        remaining = np.where(negative, 0, exponent).astype(unsigned)
        result = np.ones(base.shape, compute)
        square = base.copy()
        while remaining.any():
            odd = (remaining & 1).astype(bool)
            result = np.where(odd, result * square, result)
            square = square * square
            remaining >>= 1
        if negative.any():
            odd_exponent = (exponent & 1).astype(bool)
            reciprocal = np.where(base == 1, 1, np.where(base == -1, np.where(odd_exponent, -1, 1), 0))
            result = np.where(negative, reciprocal.astype(compute), result)
        return result.astype(dtype)

    return run


# ---------------------------------------------------------------- min, max, ...


@op("stablehlo.maximum", elementwise=True)
def maximum(info, ttype=None):
    """NaN propagates; -0.0 < +0.0 (IEEE-754 maximum); complex: lexicographic."""
    ttype = ttype or info.operand_types[0]
    return _by_kind(info, integer=in_integer_precision(np.maximum, ttype.dtype), boolean=np.logical_or,
                    floating=_float_maximum, complex_=_lexicographic(np.greater), ttype=ttype)


@op("stablehlo.minimum", elementwise=True)
def minimum(info, ttype=None):
    ttype = ttype or info.operand_types[0]
    return _by_kind(info, integer=in_integer_precision(np.minimum, ttype.dtype), boolean=np.logical_and,
                    floating=_float_minimum, complex_=_lexicographic(np.less), ttype=ttype)


def _float_maximum(lhs, rhs):
    both_zero = (lhs == 0) & (rhs == 0)
    # For two zeros, lhs + rhs is -0.0 only when both are -0.0.
    return np.where(both_zero, lhs + rhs, np.maximum(lhs, rhs))


def _float_minimum(lhs, rhs):
    both_zero = (lhs == 0) & (rhs == 0)
    # For two zeros, -(-lhs + -rhs) is -0.0 when either is -0.0.
    return np.where(both_zero, -(-lhs + -rhs), np.minimum(lhs, rhs))


def _lexicographic(prefer):
    def run(lhs, rhs):
        take_lhs = prefer(lhs.real, rhs.real) | ((lhs.real == rhs.real) & prefer(lhs.imag, rhs.imag))
        nan = np.isnan(lhs) | np.isnan(rhs)
        return np.where(nan, lhs + rhs, np.where(take_lhs, lhs, rhs))

    return run


@op("stablehlo.clamp", elementwise=True)
def clamp(info):
    """clamp(min, operand, max) = minimum(maximum(operand, min), max); min/max may be 0-d."""
    ttype = info.operand_types[1]
    low, high = maximum(info, ttype), minimum(info, ttype)
    return lambda lo, operand, hi: high(low(operand, lo), hi)


@op("stablehlo.select", elementwise=True)
def select(info):
    """pred may be a 0-d tensor that selects whole operands."""
    return np.where


@op("stablehlo.sign", elementwise=True)
def sign(info):
    """-1, 0 or 1; the sign of zero is kept; NaN gives NaN; complex: z / |z| (0 for 0)."""
    dtype = info.operand_types[0].dtype

    def floating(x):
        return np.where(x == 0, x, np.sign(x)).astype(dtype)

    def complex_(z):
        wide = np.asarray(z, np.complex128)
        magnitude = np.abs(wide)
        with np.errstate(all="ignore"):
            unit = np.where(magnitude == 0, 0, wide / np.where(magnitude == 0, 1, magnitude))
        return unit.astype(dtype)

    return _by_kind(info, integer=in_integer_precision(np.sign, dtype), floating=floating,
                    complex_=complex_)


# ----------------------------------------------------------------- rounding


@op("stablehlo.floor", elementwise=True)
def floor(info):
    return _by_kind(info, floating=in_wider_precision(np.floor, info.operand_types[0].dtype))


@op("stablehlo.ceil", elementwise=True)
def ceil(info):
    return _by_kind(info, floating=in_wider_precision(np.ceil, info.operand_types[0].dtype))


@op("stablehlo.round_nearest_even", elementwise=True)
def round_nearest_even(info):
    return _by_kind(info, floating=in_wider_precision(np.rint, info.operand_types[0].dtype))


@op("stablehlo.round_nearest_afz", elementwise=True)
def round_nearest_afz(info):
    """Round half away from zero, keeping the sign of zero (round(-0.3) = -0.0)."""

    def run(x):
        truncated = np.trunc(x)
        fraction = x - truncated  # exact
        return np.where(np.abs(fraction) >= 0.5, truncated + np.sign(x), truncated)

    return _by_kind(info, floating=in_wider_precision(run, info.operand_types[0].dtype))


# --------------------------------------------------------------- math functions

def _logistic(x):
    return 1 / (1 + np.exp(-x))


def _rsqrt(x):
    return 1 / np.sqrt(x)


def _complex_atan2(y, x):
    """atan2 for complex operands: -i * log((x + iy) / sqrt(x^2 + y^2))."""
    return -1j * np.log((x + 1j * y) / np.sqrt(x * x + y * y))


def _cbrt(x):
    if np.iscomplexobj(x):
        return np.power(x, 1 / 3)
    return np.cbrt(x)


op("stablehlo.exponential", elementwise=True)(_math(np.exp))
op("stablehlo.exponential_minus_one", elementwise=True)(_math(np.expm1))
op("stablehlo.log", elementwise=True)(_math(np.log))
op("stablehlo.log_plus_one", elementwise=True)(_math(np.log1p))
op("stablehlo.logistic", elementwise=True)(_math(_logistic))
op("stablehlo.sine", elementwise=True)(_math(np.sin))
op("stablehlo.cosine", elementwise=True)(_math(np.cos))
op("stablehlo.tan", elementwise=True)(_math(np.tan))
op("stablehlo.tanh", elementwise=True)(_math(np.tanh))
op("stablehlo.sqrt", elementwise=True)(_math(np.sqrt))
op("stablehlo.rsqrt", elementwise=True)(_math(_rsqrt))
op("stablehlo.cbrt", elementwise=True)(_math(_cbrt))


@op("stablehlo.atan2", elementwise=True)
def atan2(info):
    dtype = info.operand_types[0].dtype
    return _by_kind(info, floating=in_wider_precision(np.arctan2, dtype),
                    complex_=in_wider_precision(_complex_atan2, dtype))


@op("stablehlo.is_finite", elementwise=True)
def is_finite(info):
    return _by_kind(info, floating=np.isfinite)


# ---------------------------------------------------------------- complex parts


@op("stablehlo.complex", elementwise=True)
def complex_(info):
    """Built part by part: real + 1j * imag would turn an infinite imag into NaN."""
    dtype = info.result_type.dtype

    def run(real, imag):
        real, imag = np.broadcast_arrays(real, imag)
        result = np.empty(real.shape, dtype)
        result.real = real
        result.imag = imag
        return result

    return run


@op("stablehlo.real", elementwise=True)
def real(info):
    dtype = info.result_type.dtype
    return _by_kind(info, floating=lambda x: x, complex_=lambda z: np.real(z).astype(dtype))


@op("stablehlo.imag", elementwise=True)
def imag(info):
    dtype = info.result_type.dtype
    return _by_kind(info, floating=lambda x: np.zeros_like(x),
                    complex_=lambda z: np.imag(z).astype(dtype))
