"""CHLO ops against XLA's CPU backend, a wider-precision reference and jaxlib's
own CHLO legalization (chlo-legalize-to-stablehlo, run by our stablehlo ops).

Accuracy, element-wise math (ULP = units in the last place of the type):

* Ours: within 1 ULP of the reference for every op and type (measured: 0). The
  reference is NumPy in long double (f64) or f64 (narrower types) for the
  elementary functions and their complex versions, SciPy in f64 for the special
  functions; rounded once to the type. The special functions are also checked
  against mpmath, independent of the SciPy calls ops/chlo.py makes
  (``MPMATH``): narrower types within 1 ULP, f64 within SciPy's measured error
  (up to 21151 ULP for zeta); lgamma within 1/2 of its zeros 1 and 2 against
  :func:`lgamma_decimal` (gammaln cancels there; ours does not).
* XLA CPU: the bounds in ``XLA_BOUNDS`` (measured on these inputs), on normal
  inputs and results away from the subnormal range, which XLA CPU flushes to
  zero. XLA is less accurate than SciPy/NumPy nearly everywhere; most notably
  lgamma and digamma near their zeros (absolute, not relative, error: a few
  eps), erfc f32 (61 ULP), erf_inv (32 ULP), atanh f64 (127 ULP), cosh/sinh
  f32/f64 for large |x| (20 / 424 ULP) and the small component of complex
  cosh/sinh (relative to |result| only).
* Poles and special values follow XLA (CPU and jaxlib's CHLO decomposition),
  checked against the legalized module: digamma is NaN at 0 and the negative
  integers, lgamma(-inf) = +inf; SciPy's i1e and erfinv lose the sign of zero
  and gammaln overflows for subnormal x, which ours corrects.
"""

import decimal
import functools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import mpmath
import numpy as np
import pytest
import scipy.special

import stablehlo_interp as si
from oracles import (assert_same, dtype_id, element_values, legalized, op_module, run_interp, run_interp_text,
                     run_xla, run_xla_text, tensor_type)
from test_elementwise import is_subnormal
from stablehlo_interp.engine.numerics import ulp_difference
from stablehlo_interp.ir.types import dtype_of

REAL_TYPES = ["f16", "bf16", "f32", "f64"]
COMPLEX_TYPES = ["complex<f32>", "complex<f64>"]
LONG = np.longdouble


def _long(fn):
    return lambda x: fn(np.asarray(x, np.clongdouble if np.iscomplexobj(x) else LONG))


def _f64(fn):
    return lambda x: fn(np.asarray(x, np.float64))


_PI = decimal.Decimal("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899863")


@functools.cache
def _bernoulli_numbers(n):
    """B_0 ... B_n (B_1 = -1/2), exactly, by sum over k <= m of C(m + 1, k) * B_k = 0."""
    numbers = [Fraction(1)]
    for m in range(1, n + 1):
        numbers.append(-sum(math.comb(m + 1, k) * numbers[k] for k in range(m)) / (m + 1))
    return numbers


@functools.cache
def lgamma_decimal(x: float) -> decimal.Decimal:
    """log|gamma(x)| to ~50 digits, independently of SciPy: Stirling's series
    (30 Bernoulli terms) at x + 40, then lgamma(x) = lgamma(x + 40) - sum of
    log|x + i| for i < 40, in 90-digit decimal arithmetic (enough for the
    cancellation near the zeros 1 and 2, where lgamma(x + 40) is ~ 110)."""
    shift = 40
    with decimal.localcontext() as context:
        context.prec = 90
        z = decimal.Decimal(x) + shift
        total = (z - decimal.Decimal("0.5")) * z.ln() - z + (2 * _PI).ln() / 2
        bernoulli = _bernoulli_numbers(60)
        for k in range(1, 31):
            b = bernoulli[2 * k]
            total += decimal.Decimal(b.numerator) / b.denominator / (2 * k * (2 * k - 1) * z ** (2 * k - 1))
        for i in range(shift):
            total -= abs(decimal.Decimal(x) + i).ln()
        return +total


def _lgamma_reference(x):
    """SciPy's gammaln, but lgamma_decimal within 1/2 of the zeros 1 and 2, where
    gammaln has an absolute, not relative, error of an f64 eps (there it is
    1.7e16 ULP off at 2 - 2**-52, with the wrong sign)."""
    x = np.asarray(x, np.float64)
    result = np.asarray(scipy.special.gammaln(x))
    near_zeros = ((np.abs(x - 1) <= 0.5) | (np.abs(x - 2) <= 0.5)) & (x != 1) & (x != 2)
    result[near_zeros] = [float(lgamma_decimal(float(v))) for v in x[near_zeros]]
    return result


# op -> (reference, complex allowed, (low, high) of extra uniform inputs in its domain)
UNARY = {
    "acos": (_long(np.arccos), True, (-1, 1)),
    "acosh": (_long(np.arccosh), True, (1, 10)),
    "asin": (_long(np.arcsin), True, (-1, 1)),
    "asinh": (_long(np.arcsinh), True, (-10, 10)),
    "atan": (_long(np.arctan), True, (-10, 10)),
    "atanh": (_long(np.arctanh), True, (-1, 1)),
    "cosh": (_long(np.cosh), True, (-20, 20)),
    "sinh": (_long(np.sinh), True, (-20, 20)),
    "tan": (_long(np.tan), True, (-3, 3)),
    "square": (_long(np.square), True, (-10, 10)),
    "bessel_i1e": (_f64(scipy.special.i1e), False, (-20, 20)),
    "digamma": (_f64(scipy.special.psi), False, (-10, 10)),
    "erf": (_f64(scipy.special.erf), False, (-4, 4)),
    "erfc": (_f64(scipy.special.erfc), False, (-4, 10)),
    "erf_inv": (_f64(scipy.special.erfinv), False, (-1, 1)),
    "lgamma": (_lgamma_reference, False, (-10, 20)),
}

# XLA CPU's error per op and type, on normal inputs: (ULP, absolute error in eps
# of the type), an element passing either; complex: (0, norm of the error relative
# to |reference|, in eps of the part type). Measured on these inputs under each
# instruction set XLA CPU runs with (--xla_cpu_max_isa AVX, AVX2, AVX512: XLA's
# approximations round differently without FMA), rounded up to a power of 2.
XLA_BOUNDS = {
    "acos": {"f16": (1, 0), "bf16": (1, 0), "f32": (1, 0), "f64": (1, 0),
             "complex<f32>": (0, 2), "complex<f64>": (0, 2)},
    "acosh": {"f16": (1, 0), "bf16": (1, 0), "f32": (2, 0), "f64": (2, 0),
              "complex<f32>": (0, 1), "complex<f64>": (0, 2)},
    "asin": {"f16": (1, 0), "bf16": (1, 0), "f32": (2, 0), "f64": (1, 0),
             "complex<f32>": (0, 2), "complex<f64>": (0, 2)},
    "asinh": {"f16": (1, 0), "bf16": (1, 0), "f32": (2, 0), "f64": (2, 0),
              "complex<f32>": (0, 2), "complex<f64>": (0, 2)},
    "atan": {"f16": (0, 0), "bf16": (0, 0), "f32": (1, 0), "f64": (1, 0),
             "complex<f32>": (0, 2), "complex<f64>": (0, 2)},
    "atanh": {"f16": (1, 0), "bf16": (1, 0), "f32": (2, 0), "f64": (128, 0),
              "complex<f32>": (0, 2), "complex<f64>": (0, 2)},
    # cosh/sinh: e**(x + log(1/2)) loses log2(|x|) bits for large |x|; for complex
    # sinh, only |z| >= 1 is compared: below, the real part of XLA's result can be
    # 100% off (e**(z + log(1/2)) - e**(-z + log(1/2)) cancels).
    "cosh": {"f16": (1, 0), "bf16": (0, 0), "f32": (32, 0), "f64": (512, 0),
             "complex<f32>": (0, 64), "complex<f64>": (0, 256)},
    "sinh": {"f16": (1, 0), "bf16": (0, 0), "f32": (32, 0), "f64": (512, 0),
             "complex<f32>": (0, 32), "complex<f64>": (0, 256)},
    "tan": {"f16": (0, 0), "bf16": (0, 0), "f32": (1, 0), "f64": (1, 0),
            "complex<f32>": (0, 32), "complex<f64>": (0, 16)},
    "square": {"f16": (0, 0), "bf16": (0, 0), "f32": (0, 0), "f64": (1, 0),
               "complex<f32>": (0, 1), "complex<f64>": (0, 1)},
    "bessel_i1e": {"f16": (1, 0), "bf16": (0, 0), "f32": (16, 0), "f64": (8, 0)},   # f32: 10 with AVX
    # digamma, lgamma: absolute error near their zeros; digamma f64 near the poles.
    "digamma": {"f16": (0, 8), "bf16": (0, 8), "f32": (4, 8), "f64": (512, 8)},
    "erf": {"f16": (0, 0), "bf16": (0, 0), "f32": (4, 0), "f64": (2, 0)},
    "erfc": {"f16": (0, 0), "bf16": (0, 0), "f32": (64, 0), "f64": (16, 0)},
    "erf_inv": {"f16": (0, 0), "bf16": (0, 0), "f32": (32, 0), "f64": (32, 0)},
    "lgamma": {"f16": (0, 32), "bf16": (0, 32), "f32": (8, 32), "f64": (8, 32)},
}


def test_values(op_name, element_type, seed=0):
    """Edge values, random bit patterns and values in the op's domain."""
    low, high = UNARY[op_name][2]
    dtype = dtype_of(element_type)
    rng = np.random.default_rng(seed)
    extra = rng.uniform(low, high, 1000)
    if dtype.kind == "c":
        extra = extra + 1j * rng.uniform(low, high, 1000)
    return np.concatenate([element_values(element_type, 500, seed), extra.astype(dtype)])


test_values.__test__ = False


def reference(op_name, values):
    """The op's reference value, rounded once to the type of ``values``."""
    part = np.complex128 if np.iscomplexobj(values) else np.float64
    with np.errstate(all="ignore"):
        return np.asarray(UNARY[op_name][0](values)).astype(part).astype(values.dtype)


def away_from_subnormals(values) -> np.ndarray:
    """Finite values that are zero or at least 2**(mantissa bits + 1) smallest
    normals (XLA CPU flushes subnormal intermediates and results to zero)."""
    values = np.asarray(values)
    if values.dtype.kind == "c":
        return away_from_subnormals(values.real) & away_from_subnormals(values.imag)
    finfo = ml_dtypes.finfo(values.dtype)
    with np.errstate(invalid="ignore"):
        wide = values.astype(np.float64)
    tiny = float(finfo.smallest_normal) * 2.0 ** (finfo.nmant + 1)
    return np.isfinite(wide) & ((wide == 0) | (np.abs(wide) >= tiny))


def xla_error(actual, expected):
    """(ULP distance, absolute error in eps) per element; complex: (0, relative
    error norm in eps)."""
    eps = float(ml_dtypes.finfo(np.float32 if actual.dtype == np.complex64 else
                                np.float64 if actual.dtype.kind == "c" else actual.dtype).eps)
    wide = np.complex128 if actual.dtype.kind == "c" else np.float64
    a, e = actual.astype(wide), expected.astype(wide)
    with np.errstate(all="ignore"):
        absolute = np.where(a == e, 0.0, np.abs(a - e)) / eps
        if actual.dtype.kind == "c":
            relative = absolute / np.where(e == 0, 1.0, np.abs(e))
            return np.zeros(a.shape, np.uint64), relative
    return ulp_difference(actual, expected), absolute


@functools.lru_cache(maxsize=None)
def unary_results(op_name, element_type):
    """(inputs, ours, XLA CPU's, reference, comparable-with-XLA mask)."""
    values = test_values(op_name, element_type)
    ttype = tensor_type(values.shape, element_type)
    text = op_module(f"chlo.{op_name}", [ttype], ttype)
    (ours,) = run_interp_text(text, values)
    (xla,) = run_xla_text(text, values)
    expected = reference(op_name, values)
    comparable = away_from_subnormals(values) & away_from_subnormals(expected)
    if values.dtype.kind == "c":  # XLA ignores the sign of zero on the branch cuts
        comparable &= (values.real != 0) & (values.imag != 0) & (np.abs(values) < 1e30)
    return values, ours, xla, expected, comparable


UNARY_CASES = [(op_name, t) for op_name, (_, complex_ok, _) in UNARY.items()
               for t in REAL_TYPES + (COMPLEX_TYPES if complex_ok else [])]


def assert_within_xla_bound(actual, expected, op_name, element_type, context=""):
    assert actual.size > 0, f"{context}no elements compared"
    ulp_bound, other_bound = XLA_BOUNDS[op_name][element_type]
    ulp, other = xla_error(actual, expected)
    bad = (ulp > ulp_bound) & (other > other_bound)
    if bad.any():
        i = int(np.argmax(bad))
        raise AssertionError(f"{context}{int(bad.sum())} of {bad.size} beyond {(ulp_bound, other_bound)}: "
                             f"got {actual[i]!r}, expected {expected[i]!r} (ULP {int(ulp[i])}, "
                             f"other {float(other[i]):.3g})")


def pole_conventions(op_name, values):
    """Inputs where the op follows XLA rather than the reference: digamma(+-0)
    is NaN (psi gives -+inf) and lgamma(-inf) is +inf."""
    if op_name == "digamma":
        return values == 0
    if op_name == "lgamma":  # and SciPy's gammaln overflows for subnormal f64
        wide = values.astype(np.float64)
        return np.isneginf(wide) | ((wide != 0) & (np.abs(wide) < np.finfo(np.float64).smallest_normal))
    return np.zeros(values.shape, bool)


@pytest.mark.parametrize("op_name, element_type", UNARY_CASES)
def test_unary_against_reference(op_name, element_type):
    """Ours is within 1 ULP of the wider-precision reference, special values included."""
    values, ours, _, expected, _ = unary_results(op_name, element_type)
    keep = ~pole_conventions(op_name, values)
    assert_same(ours[keep], expected[keep], max_ulp=1)


def test_lgamma_of_subnormals():
    """lgamma(x) = -log|x| - euler_gamma * x + O(x**2): -log|x| to within rounding."""
    x = np.array([5e-324, -5e-324, 1e-310, -2e-308, 1e-300])
    (ours,) = run_interp(jax.lax.lgamma, x)
    assert_same(ours, (-np.log(np.abs(x.astype(LONG))) - np.euler_gamma * x).astype(np.float64), max_ulp=1)


def test_lgamma_decimal_reference():
    """The test's own reference at values known in closed form: lgamma(1/2) =
    log(pi) / 2, lgamma(3) = log(2), lgamma(10) = log(9!)."""
    with decimal.localcontext() as context:
        context.prec = 60
        assert abs(lgamma_decimal(0.5) - _PI.ln() / 2) < decimal.Decimal("1e-50")
        assert abs(lgamma_decimal(3.0) - decimal.Decimal(2).ln()) < decimal.Decimal("1e-50")
        assert abs(lgamma_decimal(10.0) - decimal.Decimal(math.factorial(9)).ln()) < decimal.Decimal("1e-50")


@pytest.mark.parametrize("element_type", REAL_TYPES)
def test_lgamma_near_its_zeros(element_type):
    """lgamma is within 1 ULP of the decimal reference next to its zeros 1 and 2,
    where log(gamma(x)) cancels: relative, not absolute, accuracy. f32 1.9942907
    is from StableHLO's lgamma_float32 test (ours -0.0024032749 is the correctly
    rounded value; the file's expected -0.0024023056, XLA's, is 4163 ULP off)."""
    dtype = dtype_of(element_type)
    finfo = ml_dtypes.finfo(dtype)
    steps = [float(finfo.eps) * 2.0 ** -i for i in range(2)] + [2.0 ** -k for k in range(2, 12)]
    if dtype == np.float64:
        steps += [2.0 ** -k for k in range(12, 50, 3)]
    points = [at + sign * step for at in (1, 2) for sign in (-1, 1) for step in steps] + [1.9942907094955444]
    x = np.array(points).astype(dtype)
    x = x[(x != 1) & (x != 2)]
    ttype = tensor_type(x.shape, element_type)
    (ours,) = run_interp_text(op_module("chlo.lgamma", [ttype], ttype), x)
    expected = np.array([float(lgamma_decimal(float(v))) for v in x.astype(np.float64)]).astype(dtype)
    assert_same(ours, expected, max_ulp=1)


# The zeros of lgamma between its poles -2, -3 and -4 (where |gamma(x)| = 1), to f64.
_LGAMMA_NEGATIVE_ZEROS = (-2.4570247382208006, -2.7476826467274127, -3.14358088834998)


@pytest.mark.parametrize("element_type", REAL_TYPES)
def test_lgamma_near_its_negative_zeros(element_type):
    """Next to lgamma's zeros on the negative axis SciPy's gammaln, like XLA, has an
    absolute error of about an f64 eps, not a relative one (docs/semantics.md,
    CHLO): narrower types are still within 1 ULP of the decimal reference; f64
    within 2 f64 eps absolute (XLA CPU: 2.7e-15 there)."""
    dtype = dtype_of(element_type)
    zeros = np.array(_LGAMMA_NEGATIVE_ZEROS).astype(dtype)
    x = np.array([np.float64(z) + k * float(ml_dtypes.finfo(dtype).eps) * 4 for z in zeros
                  for k in (-64, -8, -1, 0, 1, 8, 64)]).astype(dtype)
    ttype = tensor_type(x.shape, element_type)
    (ours,) = run_interp_text(op_module("chlo.lgamma", [ttype], ttype), x)
    exact = np.array([float(lgamma_decimal(float(v))) for v in x.astype(np.float64)])
    if dtype == np.float64:
        assert np.max(np.abs(ours - exact)) <= 2 * np.finfo(np.float64).eps
    else:
        assert_same(ours, exact.astype(dtype), max_ulp=1)


@pytest.mark.parametrize("op_name, element_type", UNARY_CASES)
def test_unary_xla_against_reference(op_name, element_type):
    """XLA CPU is within XLA_BOUNDS of the same reference (away from subnormals)."""
    values, _, xla, expected, comparable = unary_results(op_name, element_type)
    if op_name == "sinh" and values.dtype.kind == "c":
        comparable &= np.abs(values) >= 1
    assert_within_xla_bound(xla[comparable], expected[comparable], op_name, element_type)


# --------------------------------------------- special functions against mpmath

# The special functions against mpmath (50 digits), an oracle independent of the
# SciPy functions ops/chlo.py evaluates them with. f16, bf16 and f32 results are
# SciPy's f64 values rounded once: within 1 ULP (measured: 0). f64 results are
# SciPy's own, with its error: the ULP bound here, the largest measured on 3000
# inputs in these domains rounded up to a power of 2.
MPMATH = {
    "bessel_i1e": (lambda x: mpmath.besseli(1, x) * mpmath.exp(-abs(x)), 8),
    # digamma on the negative axis (its reflection formula): 1995 ULP at -2.62
    "digamma": (mpmath.digamma, 2048),
    "erf": (mpmath.erf, 2),
    "erfc": (mpmath.erfc, 64),   # its tail: 62 ULP at 8.93
    "erf_inv": (mpmath.erfinv, 2),
    # next to its zeros on the negative axis, absolute error (docs/semantics.md): 65 ULP at -3.955
    "lgamma": (lambda x: mpmath.log(abs(mpmath.gamma(x))), 128),
    "zeta": (mpmath.zeta, 32768),   # large s and q: 21151 ULP (4.7e-12 relative) at (28.5, 93.0)
    "polygamma": (lambda n, x: mpmath.polygamma(int(n), x), 4),
}


def mpmath_inputs(op_name, dtype, count=128):
    """Inputs in the function's domain (UNARY, ZETA_LIKE), poles left out."""
    rng = np.random.default_rng(11)
    if op_name in ZETA_LIKE:
        return [v[:count].astype(dtype) for v in ZETA_LIKE[op_name][1](rng)]
    low, high = UNARY[op_name][2]
    x = rng.uniform(low, high, count).astype(dtype)
    wide = x.astype(np.float64)
    if op_name == "erf_inv":
        x = x[np.abs(wide) < 1]
    if op_name in ("digamma", "lgamma"):
        x = x[wide != np.round(wide)]
    return [x]


@pytest.mark.parametrize("op_name", MPMATH)
@pytest.mark.parametrize("element_type", [pytest.param(t, marks=() if t in ("f32", "f64") else pytest.mark.slow)
                                          for t in REAL_TYPES])
def test_special_functions_against_mpmath(op_name, element_type):
    fn, f64_bound = MPMATH[op_name]
    dtype = dtype_of(element_type)
    args = mpmath_inputs(op_name, dtype)
    ttype = tensor_type(args[0].shape, element_type)
    (ours,) = run_interp_text(op_module(f"chlo.{op_name}", [ttype] * len(args), ttype), *args)
    with mpmath.workdps(50), np.errstate(over="ignore"):   # (beyond the type's range: inf)
        expected = np.array([float(fn(*(mpmath.mpf(float(a)) for a in point))) for point in zip(*args)])
        expected = expected.astype(dtype)
    compared = assert_same(ours, expected, max_ulp=f64_bound if dtype == np.float64 else 1)
    assert compared >= 100


# ------------------------------------------------------- jaxlib's CHLO legalization


def assert_same_special_values(actual, expected, context=""):
    """The same NaNs and infinities, and the same sign where both are zero."""
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    special = ~np.isfinite(a) | ~np.isfinite(e) | ((a == 0) & (e == 0))
    same = ((a == e) & (np.signbit(a) == np.signbit(e))) | (np.isnan(a) & np.isnan(e))
    bad = special & ~same
    if bad.any():
        i = int(np.argmax(bad))
        raise AssertionError(f"{context}{int(bad.sum())} special values differ, first: got {actual[i]!r}, "
                             f"expected {expected[i]!r} (input {context})")


@pytest.mark.parametrize("op_name, element_type", UNARY_CASES)
def test_legalized_module_agrees(op_name, element_type):
    """The op run directly and its legalized form run by our stablehlo ops: finite
    results within twice XLA's bounds (the decompositions are XLA's
    approximations, here evaluated without flushing subnormals), special values
    identical on real types."""
    values, ours, _, expected, comparable = unary_results(op_name, element_type)
    ttype = tensor_type(values.shape, element_type)
    (decomposed,) = run_interp_text(legalized(op_module(f"chlo.{op_name}", [ttype], ttype)), values)
    if values.dtype.kind != "c":
        assert_same_special_values(ours, decomposed)
    if op_name == "sinh" and values.dtype.kind == "c":
        comparable &= np.abs(values) >= 1
    assert comparable.any()
    ulp_bound, other_bound = XLA_BOUNDS[op_name][element_type]
    ulp, other = xla_error(decomposed[comparable], expected[comparable])
    assert not np.any((ulp > 2 * ulp_bound) & (other > 2 * other_bound))


# --------------------------------------------------------------- binary math


def binary_module(op_name, element_type, shape, result_type=None):
    ttype = tensor_type(shape, element_type)
    return op_module(f"chlo.{op_name}", [ttype, ttype], result_type or ttype)


def all_pairs(values):
    lhs, rhs = np.meshgrid(values, values)
    return lhs.ravel(), rhs.ravel()


def next_after_by_enumeration(lhs, rhs):
    """C's nextafter for a type of at most 16 bits, from the sorted list of all its
    values: the neighbour of x toward y; y where x == y; NaN where either is; a zero
    reached from a subnormal has the subnormal's sign."""
    dtype = lhs.dtype
    every = np.arange(2 ** (8 * dtype.itemsize), dtype=f"u{dtype.itemsize}").view(dtype)
    with np.errstate(invalid="ignore"):
        ladder = np.unique(every.astype(np.float64))
        x, y = lhs.astype(np.float64), rhs.astype(np.float64)
    ladder = ladder[~np.isnan(ladder)]
    up = ladder[np.minimum(np.searchsorted(ladder, x, "right"), len(ladder) - 1)]
    down = ladder[np.maximum(np.searchsorted(ladder, x, "left") - 1, 0)]
    with np.errstate(invalid="ignore"):
        result = np.where(y > x, up, down)
        result = np.where(result == 0, np.copysign(0.0, x), result)
        result = np.where(x == y, y, result)
    result = np.where(np.isnan(x) | np.isnan(y), np.nan, result)
    return result.astype(dtype)


@pytest.mark.parametrize("element_type", REAL_TYPES + ["f8E5M2"])
def test_next_after(element_type):
    """Bit-exact against C's nextafter (NumPy's for f16, f32, f64; by enumerating
    the values for bf16 and f8E5M2; subnormals kept), XLA CPU (subnormals flushed)
    and the legalized module, on all pairs of edge values."""
    values = element_values(element_type, 20)
    lhs, rhs = all_pairs(values if len(values) < 100 else values[::2])
    text = binary_module("next_after", element_type, lhs.shape)
    (ours,) = run_interp_text(text, lhs, rhs)
    (decomposed,) = run_interp_text(legalized(text), lhs, rhs)
    assert_same(ours, decomposed)
    if lhs.dtype in (np.float16, np.float32, np.float64):
        # (NumPy's own f16 nextafter gives x, not C's y, for x == y: -0.0 for (-0.0, 0.0);
        # stepping from the largest finite value to inf is an overflow, and the value)
        with np.errstate(over="ignore"):
            assert_same(ours, np.nextafter(lhs, rhs), zero_signs=lhs.dtype != np.float16)
    if lhs.dtype.itemsize <= 2:
        assert_same(ours, next_after_by_enumeration(lhs, rhs))
    if element_type in REAL_TYPES:
        (xla,) = run_xla_text(text, lhs, rhs)
        keep = ~(is_subnormal(lhs) | is_subnormal(rhs))   # XLA CPU reads them as zeros
        assert_same(ours[keep], xla[keep], flushes_subnormals=True)


def test_broadcast_next_after_of_complex_operands_is_a_clear_error():
    """chlo.next_after takes floats only; the broadcasting op's verifier lets complex
    operands through (and jaxlib's legalization crashes on them)."""
    ttype = tensor_type((2,), "complex<f32>")
    text = op_module("chlo.broadcast_next_after", [ttype, ttype], ttype)
    x = np.array([1 + 1j, 2], np.complex64)
    with pytest.raises(si.OpError, match=r"chlo.next_after at .*:2: expects floating-point operands, got "
                                         r"tensor<2xcomplex<f32>>"):
        run_interp_text(text, x, x)


# (op, regular domain of the two operands) -> XLA CPU's (ULP, absolute eps) bound per type
ZETA_LIKE = {
    "zeta": ({"f16": (0, 0), "bf16": (2, 0), "f32": (16, 0), "f64": (4, 0)},
             lambda rng: (rng.uniform(1.5, 30, 1000), np.exp(rng.uniform(np.log(0.1), np.log(100), 1000)))),
    "polygamma": ({"f16": (1, 8), "bf16": (1, 8), "f32": (32, 8), "f64": (32, 8)},
                  lambda rng: (rng.integers(0, 8, 1000).astype(float),
                               np.exp(rng.uniform(np.log(0.1), np.log(50), 1000)))),
}


@pytest.mark.parametrize("op_name", ZETA_LIKE)
@pytest.mark.parametrize("element_type", REAL_TYPES)
def test_zeta_and_polygamma_regular(op_name, element_type):
    """Ours is SciPy's value rounded once; XLA CPU within its measured bound."""
    bounds, domain = ZETA_LIKE[op_name]
    dtype = dtype_of(element_type)
    lhs, rhs = (x.astype(dtype) for x in domain(np.random.default_rng(2)))
    text = binary_module(op_name, element_type, lhs.shape)
    (ours,) = run_interp_text(text, lhs, rhs)
    (xla,) = run_xla_text(text, lhs, rhs)
    wide_lhs, wide_rhs = lhs.astype(np.float64), rhs.astype(np.float64)
    with np.errstate(over="ignore"):
        if op_name == "zeta":
            expected = scipy.special.zeta(wide_lhs, wide_rhs).astype(dtype)
        else:
            expected = scipy.special.polygamma(wide_lhs.astype(int), wide_rhs).astype(dtype)
    assert_same(ours, expected, max_ulp=1)
    keep = away_from_subnormals(expected)   # where XLA CPU's flushing cannot reach
    assert keep.sum() > len(keep) // 2, f"{keep.sum()} of {len(keep)} compared"
    ulp, absolute = xla_error(xla[keep], ours[keep])
    assert not np.any((ulp > bounds[element_type][0]) & (absolute > bounds[element_type][1]))


# Points where XLA's decomposition decides the result (poles, x < 1, n not natural ...).
ZETA_SPECIAL = [(x, q) for x in (0.5, 1.0, 1.5, 2.0, 3.0, 4.0) for q in (-3.0, -2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 2.0)]
POLYGAMMA_SPECIAL = [(n, x) for n in (-1.0, 0.0, 0.5, 1.0, 2.0, 3.0) for x in (-3.0, -2.5, -1.0, -0.0, 0.0, 0.5, 2.0)]


@pytest.mark.parametrize("op_name, points", [("zeta", ZETA_SPECIAL), ("polygamma", POLYGAMMA_SPECIAL)])
@pytest.mark.parametrize("element_type", ["f32", "f64"])
def test_zeta_and_polygamma_special_points(op_name, points, element_type):
    """NaN, inf and finite results where the legalized module has them."""
    lhs, rhs = (np.array(p, dtype_of(element_type)) for p in zip(*points))
    text = binary_module(op_name, element_type, lhs.shape)
    (ours,) = run_interp_text(text, lhs, rhs)
    (decomposed,) = run_interp_text(legalized(text), lhs, rhs)
    assert_same_special_values(ours, decomposed)
    assert np.array_equal(np.isfinite(ours), np.isfinite(decomposed))


def test_zeta_at_infinity_is_the_limit():
    """zeta(inf, q) is 0 (q > 1), 1 (q = 1), inf (0 < q < 1); zeta(x, inf) = 0.
    (XLA's decomposition gives NaN there.)"""
    x = np.array([np.inf, np.inf, np.inf, 2.0])
    q = np.array([2.0, 1.0, 0.5, np.inf])
    (ours,) = run_interp(jax.scipy.special.zeta, x, q)
    np.testing.assert_array_equal(ours, [0.0, 1.0, np.inf, 0.0])


@pytest.mark.parametrize("element_type", ["i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64"])
def test_mulhi(element_type):
    """Bit-exact against XLA CPU on all pairs of edge values."""
    lhs, rhs = all_pairs(element_values(element_type, 24))
    text = binary_module("mulhi", element_type, lhs.shape)
    (ours,) = run_interp_text(text, lhs, rhs)
    (xla,) = run_xla_text(text, lhs, rhs)
    assert_same(ours, xla)
    (decomposed,) = run_interp_text(legalized(text), lhs, rhs)
    assert_same(ours, decomposed)


# ------------------------------------------------------------- broadcasting ops

# op -> (element type, result element type, ULP bound against XLA CPU)
BROADCAST_OPS = {
    "add": ("f32", None, 0), "and": ("i1", None, 0), "atan2": ("f32", None, 1),
    "complex": ("f32", "complex<f32>", 0), "divide": ("i32", None, 0), "maximum": ("f32", None, 0),
    "minimum": ("bf16", None, 0), "multiply": ("i16", None, 0), "next_after": ("f32", None, 0),
    "or": ("ui8", None, 0), "polygamma": ("f32", None, 32), "power": ("f32", None, 1),
    "remainder": ("i32", None, 0), "shift_left": ("i32", None, 0),
    "shift_right_arithmetic": ("i32", None, 0), "shift_right_logical": ("ui16", None, 0),
    "subtract": ("f64", None, 0), "xor": ("i1", None, 0), "zeta": ("f32", None, 16),
}


@pytest.mark.parametrize("op_name", BROADCAST_OPS)
@pytest.mark.parametrize("lhs_shape, rhs_shape, result_shape",
                         [((3, 1), (4,), (3, 4)), ((2, 3), (2, 3), (2, 3)), ((), (2, 1, 3), (2, 1, 3))], ids=str)
def test_broadcast_binary_op(op_name, lhs_shape, rhs_shape, result_shape):
    """numpy-style broadcasting, then the op: against XLA CPU on the same chlo module."""
    element_type, result_element, max_ulp = BROADCAST_OPS[op_name]
    lhs = np.resize(element_values(element_type, 16, seed=1), lhs_shape)
    rhs = np.resize(element_values(element_type, 16, seed=2)[::-1], rhs_shape)
    text = op_module(f"chlo.broadcast_{op_name}", [tensor_type(lhs_shape, element_type),
                                                   tensor_type(rhs_shape, element_type)],
                     tensor_type(result_shape, result_element or element_type))
    (ours,) = run_interp_text(text, lhs, rhs)
    (xla,) = run_xla_text(text, lhs, rhs)
    # XLA CPU reads subnormal operands as zeros and flushes subnormal results (flushes_subnormals)
    keep = ~(np.broadcast_to(is_subnormal(lhs), result_shape) | np.broadcast_to(is_subnormal(rhs), result_shape))
    assert_same(ours[keep], xla[keep], max_ulp=max_ulp, flushes_subnormals=True)


@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
@pytest.mark.parametrize("compare_type", [None, "FLOAT", "TOTALORDER"])
def test_broadcast_compare(direction, compare_type):
    """(XLA CPU compares subnormals as zero, except in TOTALORDER: none here.)"""
    values = element_values("f32", 8)
    values = values[away_from_subnormals(values) | np.isnan(values) | np.isinf(values)]
    lhs, rhs = values[:, None], values[::-1].copy()
    attributes = f"comparison_direction = #chlo<comparison_direction {direction}>"
    if compare_type:
        attributes += f", compare_type = #chlo<comparison_type {compare_type}>"
    text = op_module("chlo.broadcast_compare", [tensor_type(lhs.shape, "f32"), tensor_type(rhs.shape, "f32")],
                     tensor_type((len(lhs), len(rhs)), "i1"), attributes)
    assert_same(run_interp_text(text, lhs, rhs)[0], run_xla_text(text, lhs, rhs)[0])


def test_broadcast_select():
    pred = np.array([True, False, True])
    on_true = np.arange(6, dtype=np.int32).reshape(2, 1, 3)
    on_false = np.int32(-1)
    text = op_module("chlo.broadcast_select", ["tensor<3xi1>", "tensor<2x1x3xi32>", "tensor<i32>"],
                     "tensor<2x1x3xi32>")
    assert_same(run_interp_text(text, pred, on_true, on_false)[0], run_xla_text(text, pred, on_true, on_false)[0])


@pytest.mark.parametrize("lhs_shape, rhs_shape, dims", [
    ((3,), (3, 4), (0,)), ((4,), (3, 4), (1,)), ((3, 4), (2, 3, 5, 4), (1, 3)), ((2, 4), (4, 2), (1, 0)),
    ((1, 3), (3, 5), (1, 0)),
    ((2, 5), (5, 3, 2), (2, 0)),
    ((2, 3, 5, 4), (3, 4), (1, 3)), ((5, 3, 2), (2, 5), (2, 0)),   # the rhs the lower-rank operand
], ids=str)
def test_broadcast_dimensions(lhs_shape, rhs_shape, dims):
    """Explicit broadcast_dimensions map the lower-rank operand (lhs for equal
    ranks) into the result (ChloOps.cpp); XLA only takes prefix padding, so the
    oracle is the same program with explicit broadcast_in_dim ops on XLA CPU."""
    lhs = np.resize(element_values("f32", 30, seed=4), lhs_shape)
    rhs = np.resize(element_values("f32", 30, seed=5), rhs_shape)
    small, large = (lhs, rhs) if lhs.ndim <= rhs.ndim else (rhs, lhs)
    result_shape = list(large.shape)
    for i, d in enumerate(dims):
        result_shape[d] = max(small.shape[i], large.shape[d])
    result_shape = tuple(result_shape)

    def expected(lhs, rhs):
        small, large = (lhs, rhs) if lhs.ndim <= rhs.ndim else (rhs, lhs)
        small = jax.lax.broadcast_in_dim(small, result_shape, dims)
        large = jax.lax.broadcast_in_dim(large, result_shape, tuple(range(large.ndim)))
        return jax.lax.sub(*((small, large) if lhs.ndim <= rhs.ndim else (large, small)))

    text = op_module("chlo.broadcast_subtract", [tensor_type(lhs_shape, "f32"), tensor_type(rhs_shape, "f32")],
                     tensor_type(result_shape, "f32"),
                     f"broadcast_dimensions = array<i64: {', '.join(map(str, dims))}>")
    assert_same(run_interp_text(text, lhs, rhs)[0], run_xla(expected, lhs, rhs)[0])


# ------------------------------------------------------------------ top_k


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int8, np.uint32,
                                   np.int64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape, k", [((9,), 4), ((3, 9), 9), ((2, 2, 9), 1), ((2, 0), 0)], ids=str)
def test_top_k(dtype, shape, k):
    """Values and indices bit-exact against XLA CPU: ties in index order, +NaN
    first and -NaN last, +0.0 before -0.0."""
    if np.dtype(dtype).kind == "f" or dtype == ml_dtypes.bfloat16:
        pool = np.array([np.nan, 1.0, -0.0, 0.0, -np.nan, np.inf, 1.0, -np.inf, -2.5], np.float64)
    else:
        pool = np.array([3, 0, 3, 1, 200, 7, 3, 0, 9])
    x = np.resize(np.concatenate([pool, pool[::-1]]), shape).astype(dtype)
    f = lambda x: jax.lax.top_k(x, k)  # noqa: E731 - a lambda reads as the expression it names
    ours, xla = run_interp(f, x), run_xla(f, x)
    assert len(ours) == len(xla) == 2
    assert_same(ours[0], xla[0], empty_ok=True)
    assert_same(ours[1], xla[1], empty_ok=True)


# ------------------------------------------------------------------ ragged_dot


def ragged_dot_numbers(contract, batch, ragged, group):
    return jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(contract, batch),
                                             lhs_ragged_dimensions=ragged, rhs_group_dimensions=group)


RAGGED_DOT_CASES = {
    # mode 1: ragged non-contracting m; [m,k] x [g,k,n], then with a batch dim
    "m": ((7, 3), (3, 3, 4), [2, 0, 4], ragged_dot_numbers(([1], [1]), ([], []), [0], [0])),
    "b-m": ((2, 6, 3), (2, 2, 3, 4), [1, 3], ragged_dot_numbers(([2], [2]), ([0], [1]), [1], [0])),
    "b-m, sizes per batch": ((2, 6, 3), (2, 2, 3, 4), [[1, 3], [4, 2]],
                             ragged_dot_numbers(([2], [2]), ([0], [1]), [1], [0])),
    # the ragged dimension after another non-contracting one: sizes per batch and per row
    "b-x-m": ((2, 3, 6, 4), (2, 2, 4, 5), [[[1, 5], [4, 2], [0, 6]], [[3, 3], [6, 0], [2, 1]]],
              ragged_dot_numbers(([3], [2]), ([0], [0]), [2], [1])),
    # mode 2: ragged contracting k -> [g, m, n]
    "k": ((4, 7), (7, 5), [3, 0, 2], ragged_dot_numbers(([1], [0]), ([], []), [1], [])),
    "b-k": ((2, 4, 6), (2, 6, 3), [2, 4], ragged_dot_numbers(([2], [1]), ([0], [0]), [2], [])),
    "b-k, sizes per batch": ((2, 4, 6), (2, 6, 3), [[2, 4], [5, 0]],
                             ragged_dot_numbers(([2], [1]), ([0], [0]), [2], [])),
    # mode 3: ragged batch b
    "b": ((3, 4, 5), (3, 5, 2), [1, 2], ragged_dot_numbers(([2], [1]), ([0], [0]), [0], [])),
}


@pytest.mark.parametrize("case", RAGGED_DOT_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32], ids=lambda d: np.dtype(d).name)
def test_ragged_dot(case, dtype):
    """chlo.ragged_dot (as JAX lowers it for TPU) against jax.lax.ragged_dot_general
    on XLA CPU, which computes it with masked dot_generals."""
    lhs_shape, rhs_shape, sizes, numbers = RAGGED_DOT_CASES[case]
    rng = np.random.default_rng(7)
    lhs = rng.integers(-4, 5, lhs_shape).astype(dtype)
    rhs = rng.integers(-4, 5, rhs_shape).astype(dtype)
    group_sizes = np.array(sizes, np.int32)

    def f(lhs, rhs, group_sizes):
        return jax.lax.ragged_dot_general(lhs, rhs, group_sizes, numbers)

    lowered = jax.jit(f).trace(lhs, rhs, group_sizes).lower(lowering_platforms=("tpu",))
    assert "chlo.ragged_dot" in lowered.as_text()
    ours = si.run(lowered, lhs, rhs, group_sizes, listeners=[si.validation.ResultTypeChecker()])
    (xla,) = run_xla(f, lhs, rhs, group_sizes)
    assert_same(ours, xla)


def test_ragged_dot_uses_only_the_rows_group():
    """An inf in another group's rhs does not reach a row (XLA CPU's masked
    dot_generals give NaN there: 0 * inf)."""
    lhs = np.ones((4, 2), np.float32)
    rhs = np.stack([np.full((2, 3), 2.0, np.float32), np.full((2, 3), np.inf, np.float32)])
    numbers = ragged_dot_numbers(([1], [1]), ([], []), [0], [0])
    f = lambda lhs, rhs, sizes: jax.lax.ragged_dot_general(lhs, rhs, sizes, numbers)  # noqa: E731 - a lambda reads as the expression it names
    lowered = jax.jit(f).trace(lhs, rhs, np.array([3, 1], np.int32)).lower(lowering_platforms=("tpu",))
    ours = si.run(lowered, lhs, rhs, np.array([3, 1], np.int32))
    np.testing.assert_array_equal(ours, [[4, 4, 4]] * 3 + [[np.inf] * 3])


# ------------------------------------------------------------------ scan


SCAN = """
func.func @main(%x: tensor<3x5xf32>, %y: tensor<3x5xi32>, %c: tensor<3xf32>, %n: tensor<i32>)
    -> (tensor<3x5xf32>, tensor<3x5xi32>, tensor<3xf32>, tensor<i32>) {
  %0:4 = "chlo.scan"(%x, %y, %c, %n) ({
  ^bb0(%a: tensor<3xf32>, %b: tensor<3xi32>, %acc: tensor<3xf32>, %count: tensor<i32>):
    %s = stablehlo.add %a, %acc : tensor<3xf32>
    %m = stablehlo.multiply %s, %s : tensor<3xf32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %next = stablehlo.add %count, %one : tensor<i32>
    %nb = stablehlo.broadcast_in_dim %next, dims = [] : (tensor<i32>) -> tensor<3xi32>
    %t = stablehlo.multiply %b, %nb : tensor<3xi32>
    stablehlo.return %m, %t, %s, %next : tensor<3xf32>, tensor<3xi32>, tensor<3xf32>, tensor<i32>
  }) {dimension = 1 : i64, is_reverse = REVERSE, operandSegmentSizes = array<i32: 2, 2>,
      resultSegmentSizes = array<i32: 2, 2>}
      : (tensor<3x5xf32>, tensor<3x5xi32>, tensor<3xf32>, tensor<i32>)
      -> (tensor<3x5xf32>, tensor<3x5xi32>, tensor<3xf32>, tensor<i32>)
  return %0#0, %0#1, %0#2, %0#3 : tensor<3x5xf32>, tensor<3x5xi32>, tensor<3xf32>, tensor<i32>
}
"""


@pytest.mark.parametrize("reverse", ["false", "true"])
def test_scan(reverse):
    """Two inputs and two carries along dimension 1, against XLA CPU."""
    text = SCAN.replace("REVERSE", reverse)
    args = (np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5), np.arange(15, dtype=np.int32).reshape(3, 5),
            np.array([0.5, -1, 2], np.float32), np.int32(0))
    ours, xla = run_interp_text(text, *args), run_xla_text(text, *args)
    assert len(ours) == len(xla) == 4
    for a, e in zip(ours, xla):
        assert_same(a, e)


def test_reverse_scan_in_custom_syntax_by_hand():
    """``attributes {is_reverse = true}``: suffix sums, the outputs in input order (issue 12)."""
    text = """func.func @main(%input: tensor<4xi32>) -> (tensor<4xi32>, tensor<i32>) {
  %init = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = chlo.scan(%input) inits(%init) dimension=0 attributes {is_reverse = true} {
  ^bb0(%x: tensor<i32>, %carry: tensor<i32>):
    %1 = stablehlo.add %x, %carry : tensor<i32>
    stablehlo.return %1, %1 : tensor<i32>, tensor<i32>
  } : (tensor<4xi32>, tensor<i32>) -> (tensor<4xi32>, tensor<i32>)
  return %0#0, %0#1 : tensor<4xi32>, tensor<i32>
}"""
    sums, total = si.run(text, np.array([1, 2, 3, 4], np.int32))
    assert sums.tolist() == [10, 9, 7, 4] and int(total) == 10


# ------------------------------------------------- constants, conj, is_inf, JAX programs


def test_constant_and_constant_like():
    text = """
func.func @main(%x: tensor<2x3xf32>, %z: tensor<2xcomplex<f32>>) -> (tensor<2x2xi32>, tensor<2x3xf32>, tensor<2xcomplex<f32>>) {
  %0 = "chlo.constant"() {value = dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>} : () -> tensor<2x2xi32>
  %1 = "chlo.constant_like"(%x) {value = -2.5 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "chlo.constant_like"(%z) {value = #complex.number<:f32 1.5, -2.0> : complex<f32>} : (tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>>
  return %0, %1, %2 : tensor<2x2xi32>, tensor<2x3xf32>, tensor<2xcomplex<f32>>
}"""
    args = (np.zeros((2, 3), np.float32), np.zeros(2, np.complex64))
    ours, xla = run_interp_text(text, *args), run_xla_text(text, *args)
    assert len(ours) == len(xla) == 3
    for a, e in zip(ours, xla):
        assert_same(a, e)


@pytest.mark.parametrize("op_name, element_type, result", [
    ("conj", "complex<f32>", None), ("conj", "complex<f64>", None), ("conj", "f32", None),
    ("is_inf", "f16", "i1"), ("is_inf", "bf16", "i1"), ("is_pos_inf", "f32", "i1"), ("is_neg_inf", "f64", "i1"),
])
def test_exact_unary(op_name, element_type, result):
    values = element_values(element_type, 50)
    ttype = tensor_type(values.shape, element_type)
    text = op_module(f"chlo.{op_name}", [ttype], tensor_type(values.shape, result) if result else ttype)
    (ours,) = run_interp_text(text, values)
    assert_same(ours, run_xla_text(text, values)[0])
    assert_same(ours, run_interp_text(legalized(text), values)[0])


# JAX function -> ULP bound of ours against XLA CPU on f32 inputs in [0.05, 0.95]:
# XLA's error, measured under AVX, AVX2 and AVX-512 (the largest, rounded up to a
# power of 2); ours is within 1 ULP of the reference (test_unary_against_reference).
JAX_PROGRAMS = {
    "acos": (jax.lax.acos, 1), "asinh": (jax.lax.asinh, 2),
    "digamma": (jax.lax.digamma, 16),   # 13: absolute, not relative, error by digamma's zero 1.46
    "lgamma": (jax.lax.lgamma, 128),    # 92 at 0.95: absolute error by lgamma's zero at 1
    "erf_inv": (jax.lax.erf_inv, 2), "i1e": (jax.lax.bessel_i1e, 4), "cosh": (jax.lax.cosh, 1),
    "i0e": (jax.scipy.special.i0e, 4),  # 3 under AVX2 and AVX-512, 0 under AVX
    "gelu": (jax.nn.gelu, 2),           # tanh's approximation in XLA
    "polygamma": (lambda x: jax.scipy.special.polygamma(2, x), 16),   # 10: XLA's zeta series
    "nextafter": (lambda x: jax.lax.nextafter(x, -x), 0), "arctanh": (jnp.arctanh, 1),
    "square": (jax.lax.square, 0),
}


@pytest.mark.parametrize("name", JAX_PROGRAMS)
def test_jax_programs(name):
    """JAX functions that lower to chlo ops, end to end against XLA CPU (f32, inputs
    in their domains), within XLA's error for each (JAX_PROGRAMS)."""
    fn, max_ulp = JAX_PROGRAMS[name]
    x = np.linspace(0.05, 0.95, 64, dtype=np.float32)
    (ours,), (xla,) = run_interp(fn, x), run_xla(fn, x)
    assert_same(ours, xla, max_ulp=max_ulp, flushes_subnormals=True)


def test_unsupported_element_type_names_the_op():
    text = op_module("chlo.bessel_i1e", ["tensor<2xcomplex<f32>>"], "tensor<2xcomplex<f32>>")
    with pytest.raises(si.UnsupportedOpError, match="chlo.bessel_i1e"):
        si.load(text)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=dtype_id)
def test_asin_acos_kernel_gives_asin_and_acos(dtype):
    """The kernel's defining identities (ChloOps.td): asin(z) = (atan2(re z, re w),
    sign(im z) im w) and acos(z) = (atan2(re w, re z), -sign(im z) im w), checked
    against NumPy's complex asin/acos in complex128."""
    rng = np.random.default_rng(3)
    z = (rng.standard_normal(64) * rng.choice([0.1, 1.0, 30.0], 64)
         + 1j * rng.standard_normal(64) * rng.choice([0.0, 0.1, 1.0, 30.0], 64)).astype(dtype)
    element = "complex<f32>" if dtype == np.complex64 else "complex<f64>"
    text = op_module("chlo._asin_acos_kernel", [f"tensor<64x{element}>"], [f"tensor<64x{element}>"])
    (w,) = run_interp_text(text, z)
    sign = np.where(z.imag < 0, -1.0, 1.0)
    asin = np.arctan2(z.real, w.real) + 1j * sign * w.imag
    acos = np.arctan2(w.real, z.real) - 1j * sign * w.imag
    tolerance = 1e-5 if dtype == np.complex64 else 1e-12
    wide = z.astype(np.complex128)
    np.testing.assert_allclose(asin, np.arcsin(wide), rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(acos, np.arccos(wide), rtol=tolerance, atol=tolerance)
