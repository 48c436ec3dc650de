"""Element-wise arithmetic and math (spec: abs, add, atan2, cbrt, ceil, clamp,
complex, cosine, divide, exponential, exponential_minus_one, floor, imag,
is_finite, log, log_plus_one, logistic, maximum, minimum, multiply, negate,
power, real, remainder, round_nearest_afz, round_nearest_even, rsqrt, select,
sign, sine, sqrt, subtract, tan, tanh).

Integer ops wrap around at the element type's width (sub-byte types too).
Floats follow IEEE-754 with denormals (XLA CPU flushes them to zero; the spec
does not). Transcendental functions are evaluated in a wider type and rounded
once (support.wider_float), so they are correctly rounded in all but rare
cases. Runners for the common element types are bare NumPy ufuncs.
"""

from __future__ import annotations

import decimal
import operator

import numpy as np

from ..engine.registry import op
from ..engine.dtypes import (NATIVE_FLOATS, count_nonzero, in_float32_if_needed, in_integer_precision,
    in_wider_precision, integer_compute_dtype, same_ufunc)
from ..engine.numerics import ExtremumOfZeros
from . import scalars


def _by_kind(info, *, integer=None, floating=None, complex_=None, boolean=None, ttype=None):
    """The runner for the operand's element kind; a missing kind is unsupported.

    Choices may be callables of no arguments, so only the chosen one is built.
    """
    ttype = ttype or info.operand_types[0]
    choice = {"signed": integer, "unsigned": integer, "float": floating,
              "complex": complex_, "bool": boolean}[ttype.kind]
    if choice is None:
        raise info.unsupported(f"element type {ttype.element_type} is not allowed for this op")
    return choice


# add/multiply of i1 are OR/AND, which is what NumPy's bool add/multiply are.
op("stablehlo.add", elementwise=True, scalar=scalars.ADD)(same_ufunc(np.add))
op("stablehlo.subtract", elementwise=True, scalar=scalars.SUBTRACT)(same_ufunc(np.subtract))
op("stablehlo.multiply", elementwise=True, scalar=scalars.MULTIPLY)(same_ufunc(np.multiply))
# Unsigned negate wraps (spec: bitcast to signed, negate, bitcast back).
op("stablehlo.negate", elementwise=True, scalar=scalars.NEGATE)(same_ufunc(np.negative))


@op("stablehlo.abs", elementwise=True)
def abs_(info):
    """abs(INT_MIN) is INT_MIN (the spec allows it or saturation; XLA wraps).
    Complex operands give their modulus (hypot: |inf + NaN i| = inf)."""
    dtype = info.operand_types[0].dtype
    result = info.result_type.dtype
    return _by_kind(info, integer=in_integer_precision(np.abs, dtype),
                    floating=in_float32_if_needed(np.abs, dtype),
                    complex_=lambda z: np.abs(np.asarray(z, np.complex128)).astype(result))


# ----------------------------------------------------------- division, power


@op("stablehlo.divide", elementwise=True, scalar=scalars.DIVIDE)
def divide(info):
    ttype = info.operand_types[0]
    dtype = ttype.dtype
    if ttype.is_integer:
        _watch_integer_division(info, ttype)
        return _integer_divide(ttype)
    return _by_kind(info, floating=in_float32_if_needed(np.divide, dtype),
                    complex_=in_wider_precision(np.divide, dtype))


def _watch_integer_division(info, ttype):
    """Report divisors of 0 and INT_MIN / -1 (engine/semantics.py: the spec gives
    them no value; we give XLA's)."""

    def by_zero(lhs, rhs, result):
        count = np.count_nonzero(np.broadcast_to(rhs, np.shape(result)) == 0)
        return f"{count} of {np.size(result)} elements have the divisor 0" if count else None

    info.watch("integer-division-by-zero", by_zero)
    if ttype.kind == "signed":
        minimum = -(1 << (ttype.bit_width - 1))

        def overflow(lhs, rhs, result):
            count = np.count_nonzero((np.asarray(lhs) == minimum) & (np.asarray(rhs) == -1))
            return f"{count} of {np.size(result)} elements divide {minimum} by -1" if count else None

        info.watch("integer-division-overflow", overflow)


def _integer_divide(ttype):
    """Truncating division. The spec leaves x / 0 and INT_MIN / -1 to the
    implementation; as XLA: x / 0 = -1 (all bits set), INT_MIN / -1 = INT_MIN.
    (The C++ reference interpreter aborts on both.)"""
    dtype = ttype.dtype
    all_ones = np.array(-1).astype(dtype) if ttype.kind == "signed" else \
        np.array(2 ** ttype.bit_width - 1).astype(dtype)

    if ttype.kind == "unsigned":
        def quotient(lhs, rhs):
            return np.floor_divide(lhs, rhs)  # NumPy gives 0 for x // 0, fixed below
    else:
        def quotient(lhs, rhs):
            # lhs - fmod(lhs, rhs) is a multiple of rhs, so floor division is exact
            # (= truncation); NumPy defines INT_MIN // -1 = INT_MIN and x // 0 = 0.
            return np.floor_divide(lhs - np.fmod(lhs, rhs), rhs)

    quotient = in_integer_precision(quotient, dtype)

    def run(lhs, rhs):
        result = quotient(lhs, rhs)
        if rhs.all():
            return result
        return np.where(rhs == 0, all_ones, result)

    return run


@op("stablehlo.remainder", elementwise=True)
def remainder(info):
    """The sign of the dividend (C fmod, exact for floats). As XLA: x % 0 = x,
    INT_MIN % -1 = 0 (the reference interpreter aborts on x % 0)."""
    ttype = info.operand_types[0]
    fmod = in_integer_precision(np.fmod, ttype.dtype)
    if ttype.is_integer:
        _watch_integer_division(info, ttype)

    def integer(lhs, rhs):
        result = fmod(lhs, rhs)  # NumPy: x fmod 0 = 0, INT_MIN fmod -1 = 0
        if rhs.all():
            return result
        return np.where(rhs == 0, lhs, result)

    return _by_kind(info, integer=integer, floating=in_float32_if_needed(np.fmod, ttype.dtype))


@op("stablehlo.power", elementwise=True)
def power(info):
    ttype = info.operand_types[0]
    if ttype.is_integer:
        return _integer_power(ttype)
    return _math_in_wider_precision(np.power, exact=True)(info)


def _integer_power(ttype):
    """Exponentiation by squaring, wrapping at the type's width. A negative
    exponent gives 0, except for bases 1 (-> 1) and -1 (-> +-1), as XLA.
    XLA CPU only looks at the low 6 bits of the exponent (0 ** 64 = 1); we
    compute the exact wrapped power, as the spec and the reference interpreter."""
    dtype = ttype.dtype
    compute = integer_compute_dtype(dtype)
    unsigned = np.dtype(f"u{compute.itemsize}")
    signed = ttype.kind == "signed"

    def run(base, exponent):
        base = np.asarray(base).astype(compute)
        exponent = np.asarray(exponent).astype(compute)
        negative = exponent < 0 if signed else np.zeros(exponent.shape, bool)
        remaining = np.where(negative, 0, exponent).astype(unsigned)
        result = np.ones(base.shape, compute)
        square = base.copy()
        while remaining.any():
            result = np.where(remaining & 1 == 1, result * square, result)
            square = square * square
            remaining >>= 1
        if negative.any():
            odd = exponent & 1 == 1
            reciprocal = np.where(base == 1, 1, np.where(base == -1, np.where(odd, -1, 1), 0))
            result = np.where(negative, reciprocal.astype(compute), result)
        return result.astype(dtype)

    return run


# ---------------------------------------------------------------- min, max, ...


@op("stablehlo.maximum", elementwise=True,
    scalar=scalars.extremum(lambda info: maximum(info), operator.gt))
def maximum(info, ttype=None):
    """Floats: IEEE-754 maximum (NaN propagates, -0.0 < +0.0). Complex:
    lexicographic on (real, imag), as compare; i1: OR."""
    ttype = ttype or info.operand_types[0]
    return _by_kind(info, integer=in_integer_precision(np.maximum, ttype.dtype), boolean=np.logical_or,
                    floating=float_extremum_of_two(np.maximum, ttype.dtype),
                    complex_=_complex_extremum(np.greater), ttype=ttype)


@op("stablehlo.minimum", elementwise=True,
    scalar=scalars.extremum(lambda info: minimum(info), operator.lt))
def minimum(info, ttype=None):
    """Floats: IEEE-754 minimum (NaN propagates, -0.0 < +0.0). Complex:
    lexicographic on (real, imag); i1: AND."""
    ttype = ttype or info.operand_types[0]
    return _by_kind(info, integer=in_integer_precision(np.minimum, ttype.dtype), boolean=np.logical_and,
                    floating=float_extremum_of_two(np.minimum, ttype.dtype),
                    complex_=_complex_extremum(np.less), ttype=ttype)


def float_extremum_of_two(ufunc, dtype):
    """NumPy's maximum/minimum propagate NaN but return either zero of (-0, +0):
    only a result that is zero needs a second look (ExtremumOfZeros), and only where
    both operands are zeros (``maximum(x, 0)`` has zeros wherever x < 0: where none is
    a pair of zeros, as where x has no zero, NumPy's result stands: 4 us -> 1.5 on 16
    elements)."""
    zeros = ExtremumOfZeros(ufunc is np.maximum)

    def run(lhs, rhs):
        result = ufunc(lhs, rhs)
        size = result.size
        if count_nonzero(result) == size:  # no zeros (NaN counts); 15x cheaper than .all()
            return result
        # (a 0-d result comes back a 0-d array, as np.where's)
        if result.ndim and (count_nonzero(lhs) == size or count_nonzero(rhs) == size):
            return result   # an operand without zeros: no pair of zeros
        both = (lhs == 0) & (rhs == 0)
        if result.ndim and not count_nonzero(both):
            return result
        return np.where(both, zeros.of_two(lhs, rhs), result)

    return in_float32_if_needed(run, dtype)


def _complex_extremum(prefer):
    """lhs if it is preferred to rhs on (real, imag) order, else rhs (so a NaN
    part, which compares false, gives rhs: XLA does the same)."""

    def run(lhs, rhs):
        take_lhs = prefer(lhs.real, rhs.real) | ((lhs.real == rhs.real) & prefer(lhs.imag, rhs.imag))
        return np.where(take_lhs, lhs, rhs)

    return run


@op("stablehlo.clamp", elementwise=True)
def clamp(info):
    """clamp(min, operand, max) = minimum(maximum(operand, min), max); min/max may be 0-d."""
    ttype = info.operand_types[1]
    low, high = maximum(info, ttype), minimum(info, ttype)
    return lambda lo, operand, hi: high(low(operand, lo), hi)


@op("stablehlo.select", elementwise=True, scalar=scalars.select)
def select(info):
    """pred may be a 0-d tensor that selects whole operands."""
    return np.where


@op("stablehlo.sign", elementwise=True)
def sign(info):
    """-1, 0 or 1; the sign of a zero is kept; NaN gives NaN.

    Complex: NaN if a part is NaN, 0 for 0, else x / convert(abs(x)) as the
    spec writes it: a complex division, so an infinite x gives NaN + NaN i
    (XLA divides the parts by |x| and gives e.g. NaN + 0i for inf + 0i)."""
    dtype = info.operand_types[0].dtype

    def floating(x):
        return np.copysign(np.sign(x), x)  # sign(-0.0) = -0.0; sign(NaN) = NaN

    def complex_(z):
        wide = np.asarray(z, np.complex128)
        magnitude = np.abs(wide)
        # The divisor is real: dividing the parts is the exact complex division
        # (NumPy's complex division overflows for subnormal divisors).
        unit = _from_parts(wide.real / magnitude, wide.imag / magnitude, np.complex128)
        unit = np.where(magnitude == 0, 0, unit)
        nan = np.isnan(wide.real) | np.isnan(wide.imag) | np.isinf(magnitude)
        return np.where(nan, complex(np.nan, np.nan), unit).astype(dtype)

    return _by_kind(info, integer=in_integer_precision(np.sign, dtype),
                    floating=in_float32_if_needed(floating, dtype), complex_=complex_)


# ----------------------------------------------------------------- rounding


def _round_half_away(x):
    truncated = np.trunc(x)
    fraction = x - truncated  # exact
    return np.where(np.abs(fraction) >= 0.5, truncated + np.sign(x), truncated)


def _rounding(fn):
    """floor (roundToIntegralTowardNegative), ceil, round_nearest_even
    (roundToIntegralTiesToEven), round_nearest_afz (roundToIntegralTiesToAway)."""

    def build(info):
        return _by_kind(info, floating=in_float32_if_needed(fn, info.operand_types[0].dtype))

    return build


op("stablehlo.floor", elementwise=True)(_rounding(np.floor))
op("stablehlo.ceil", elementwise=True)(_rounding(np.ceil))
op("stablehlo.round_nearest_even", elementwise=True)(_rounding(np.rint))
op("stablehlo.round_nearest_afz", elementwise=True)(_rounding(_round_half_away))


# --------------------------------------------------------------- math functions


def _math_in_wider_precision(fn, exact=False, accurate_f32=False, complex_fn=None):
    """Builder of a float/complex math op evaluated in wider precision.

    ``exact``: NumPy's f64 function is correctly rounded (sqrt, pow), so f64
    stays f64 (through the extended type it would be rounded twice).
    ``accurate_f32``: NumPy's own f32 kernel is within 1 ULP of the correctly
    rounded result (tanh: measured over 10^8 random f32 bit patterns; exp, log,
    tan ... are up to 3 ULP off), so f32 stays f32, 5x faster than going
    through f64. (NumPy's f32 sin and cos are within 1 ULP too, but 1 ULP off
    for 11-17% of inputs where XLA's are correctly rounded for 99%: they go
    through f64.)
    ``complex_fn``: the function for complex operands, given in their own type,
    instead of ``fn`` in the wider one."""

    def build(info):
        dtype = info.operand_types[0].dtype
        if (exact and dtype == np.float64) or (accurate_f32 and dtype == np.float32):
            return _by_kind(info, floating=fn)
        wide = in_wider_precision(fn, dtype)
        return _by_kind(info, floating=wide, complex_=complex_fn or wide)

    return build


def _logistic(x):
    """1 / (1 + e**-x). For complex x with a negative real part, the same as
    e**x / (1 + e**x): e**-x overflows there, and NumPy's complex 1 / (inf + inf i)
    is NaN where C99 Annex G (and XLA) give 0. e**x is e**re x * (cos im x, sin im x)
    (C99's cexp), so that an underflow to zero keeps the signs of the cosine and the
    sine; where 1 + e**x is 1, the quotient is e**x itself (NumPy's complex division
    would lose those signs)."""
    if not np.iscomplexobj(x):
        return 1 / (1 + np.exp(-x))
    x = np.asarray(x)
    negative = x.real < 0
    w = np.where(negative, x, -x)
    magnitude = np.exp(w.real)
    e = np.empty_like(w)
    e.real, e.imag = magnitude * np.cos(w.imag), magnitude * np.sin(w.imag)
    with np.errstate(invalid="ignore"):
        return np.where(negative, np.where(1 + e == 1, e, e / (1 + e)), 1 / (1 + e))


def _rsqrt(x):
    return 1 / np.sqrt(x)


def _cbrt(x):
    """Real cube root (odd: cbrt(-8) = -2); principal root for complex."""
    if np.iscomplexobj(x):
        return np.power(x, 1 / 3)
    return np.cbrt(x)


_PI = decimal.Decimal("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899862803"
                      "4825342117067982148086513282306647093844609550582231725359408128481117450284102701938521"
                      "10555964462294895493038196")
_DECIMAL_DIGITS = 120
# |y| below which the 200 digits of _PI reduce y modulo 2 pi to 90 correct digits.
_DECIMAL_REDUCIBLE = 1e30


def _decimal_sin_cos(y: decimal.Decimal):
    """sin(y) and cos(y) in the current decimal context: y reduced modulo 2 pi,
    then their Taylor series."""
    two_pi = 2 * _PI
    y -= two_pi * (y / two_pi).to_integral_value()
    sine = cosine = decimal.Decimal(0)
    negligible = decimal.Decimal(10) ** -(decimal.getcontext().prec + 5)
    term, n = decimal.Decimal(1), 0  # y**n / n!
    while abs(term) > negligible:
        signed = term if n % 4 < 2 else -term
        if n % 2:
            sine += signed
        else:
            cosine += signed
        n += 1
        term = term * y / n
    return sine, cosine


def _decimal_expm1_real(x: float, y: float) -> float:
    """Re(e**(x + iy) - 1) = e**x * cos(y) - 1 in 120-digit decimal arithmetic."""
    with decimal.localcontext() as context:
        context.prec = _DECIMAL_DIGITS
        _, cosine = _decimal_sin_cos(decimal.Decimal(y))
        return float(decimal.Decimal(x).exp() * cosine - 1)


def _complex_expm1(z):
    """e**z - 1 for complex z (spec: exponential_minus_one): NumPy's formula in
    complex long double, real part expm1(x) * cos(y) - 2 * sin(y / 2)**2 and
    imaginary part e**x * sin(y) (z = x + iy). The real part's two terms cancel
    where e**x * cos(y) is near 1; where they cancel by more bits than long
    double holds beyond the result type (6 spare bits kept), it is recomputed in
    decimal (:func:`_decimal_expm1_real`): complex128 has only 11 bits to spare,
    and long double gave e.g. 6.37e-19 for 6.41e-19. A zero imaginary part stays
    that zero (e**x * sin(±0) is ±0, as C99's cexp(x ± i0) = e**x ± i0, Annex G.6.3.1):
    NumPy multiplies an overflowed e**x = inf by it, which is NaN (found by fuzz:
    expm1(DBL_MAX + 0i) gave inf + NaN i, XLA CPU inf + 0i)."""
    wide = np.asarray(z, np.clongdouble)
    x, y = wide.real, wide.imag
    with np.errstate(all="ignore"):
        result = np.asarray(np.expm1(wide))
        terms = np.abs(np.expm1(x) * np.cos(y)) + 2 * np.sin(y / 2) ** 2
    spare_bits = np.finfo(np.longdouble).nmant - np.finfo(z.real.dtype).nmant - 6
    cancels = np.isfinite(wide) & (np.abs(y) < _DECIMAL_REDUCIBLE) & (np.abs(result.real) < terms * 2.0**-spare_bits)
    result.real[cancels] = [_decimal_expm1_real(float(a), float(b)) for a, b in zip(x[cancels], y[cancels])]
    result.imag[y == 0] = y[y == 0]
    return result.astype(z.dtype)


op("stablehlo.exponential", elementwise=True)(_math_in_wider_precision(np.exp))
op("stablehlo.exponential_minus_one", elementwise=True)(_math_in_wider_precision(np.expm1, complex_fn=_complex_expm1))
op("stablehlo.log", elementwise=True)(_math_in_wider_precision(np.log))
def _complex_log1p(z):
    """log(1 + z) for complex z = x + iy (spec: log_plus_one) in complex long double.
    NumPy's complex log1p takes the log of 1 + z, where a real part far below the
    precision of 1 is lost (found by fuzz: log1p(2.2e-308 - 4.9e-324i) gave a real
    part of 0 for 2.2e-308). Near z = 0 (|x|, |y| < 1/2) the real part is
    log|1 + z| = log1p(x * (2 + x) + y**2) / 2, which keeps it, and the imaginary
    part atan2(y, 1 + x); elsewhere NumPy's (whose log of |1 + z| does not cancel
    there: near z = -1 the formula would, -1 + y**2 rounding to -1)."""
    wide = np.asarray(z, np.clongdouble)
    x, y = wide.real, wide.imag
    with np.errstate(all="ignore"):
        result = np.asarray(np.log1p(wide))
        near = (np.abs(x) < 0.5) & (np.abs(y) < 0.5)
        result.real[near] = np.log1p(x[near] * (2 + x[near]) + y[near] * y[near]) / 2
        result.imag[near] = np.arctan2(y[near], 1 + x[near])
    return result.astype(z.dtype)


op("stablehlo.log_plus_one", elementwise=True)(_math_in_wider_precision(np.log1p, complex_fn=_complex_log1p))
op("stablehlo.logistic", elementwise=True)(_math_in_wider_precision(_logistic))
op("stablehlo.sine", elementwise=True)(_math_in_wider_precision(np.sin))
op("stablehlo.cosine", elementwise=True)(_math_in_wider_precision(np.cos))
op("stablehlo.tan", elementwise=True)(_math_in_wider_precision(np.tan))
op("stablehlo.tanh", elementwise=True)(_math_in_wider_precision(np.tanh, accurate_f32=True))
op("stablehlo.sqrt", elementwise=True)(_math_in_wider_precision(np.sqrt, exact=True))
op("stablehlo.rsqrt", elementwise=True)(_math_in_wider_precision(_rsqrt))
op("stablehlo.cbrt", elementwise=True)(_math_in_wider_precision(_cbrt))


def _complex_atan2(y, x):
    """atan2 for complex operands, as the reference interpreter:
    -i * log((x + iy) / sqrt(x^2 + y^2))."""
    return -1j * np.log((x + 1j * y) / np.sqrt(x * x + y * y))


@op("stablehlo.atan2", elementwise=True)
def atan2(info):
    dtype = info.operand_types[0].dtype
    return _by_kind(info, floating=in_wider_precision(np.arctan2, dtype),
                    complex_=in_wider_precision(_complex_atan2, dtype))


@op("stablehlo.is_finite", elementwise=True)
def is_finite(info):
    dtype = info.operand_types[0].dtype
    if dtype in NATIVE_FLOATS:
        return _by_kind(info, floating=np.isfinite)
    return _by_kind(info, floating=lambda x: np.isfinite(np.asarray(x, np.float32)))


# ---------------------------------------------------------------- complex parts


@op("stablehlo.complex", elementwise=True)
def complex_(info):
    """Built part by part: real + 1j * imag would turn an infinite imag into NaN."""
    dtype = info.result_type.dtype

    return lambda real, imag: _from_parts(real, imag, dtype)


def _from_parts(real, imag, dtype):
    real, imag = np.broadcast_arrays(real, imag)
    result = np.empty(real.shape, dtype)
    result.real = real
    result.imag = imag
    return result


@op("stablehlo.real", elementwise=True)
def real(info):
    dtype = info.result_type.dtype
    return _by_kind(info, floating=lambda x: x, complex_=lambda z: np.real(z).astype(dtype))


@op("stablehlo.imag", elementwise=True)
def imag(info):
    """Zero for real operands (f8E8M0FNU has no zero: NaN, as XLA and ml_dtypes)."""
    dtype = info.result_type.dtype
    return _by_kind(info, floating=lambda x: np.zeros(np.shape(x), np.float32).astype(dtype),
                    complex_=lambda z: np.imag(z).astype(dtype))
