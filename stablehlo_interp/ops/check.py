"""The ``check`` dialect of StableHLO's interpreter tests, and its custom-call
spellings (``@check.expect_eq`` ...). A failed check raises :class:`CheckFailure`.

- expect_eq / expect_eq_const / eq: equal values (NaN matches NaN).
- expect_almost_eq / expect_almost_eq_const / almost_eq: as StableHLO's
  reference: equal, or both NaN, or same sign and ``|a - b| <= tolerance``
  (default 1e-4); complex parts are compared separately.
- expect_close: ULP distance within ``[min_ulp_difference, max_ulp_difference]``;
  non-finite values must match exactly (any NaN matches any NaN).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..errors import OpError
from ..registry import custom_call, op


class CheckFailure(OpError):
    """A check op found values that differ from the expectation."""


def _fail(info, reason):
    return CheckFailure(info.name, info.location, reason)


def _first_mismatch(actual, expected, ok) -> str:
    bad = np.argwhere(~np.asarray(ok))
    count = len(bad)
    index = tuple(int(i) for i in bad[0]) if np.ndim(ok) else ()
    return (f"{count} of {np.size(ok)} elements differ; first at index {list(index)}: "
            f"{np.asarray(actual)[index]!r} (actual) vs {np.asarray(expected)[index]!r} (expected)")


def _equal(actual, expected) -> np.ndarray:
    actual, expected = np.asarray(actual), np.asarray(expected)
    same = actual == expected
    try:
        return same | (np.isnan(actual) & np.isnan(expected))
    except TypeError:  # no NaN in this element type
        return same


def _almost_equal(actual, expected, tolerance) -> np.ndarray:
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.dtype.kind == "c":
        return (_almost_equal(actual.real, expected.real, tolerance)
                & _almost_equal(actual.imag, expected.imag, tolerance))
    a, b = actual.astype(np.float64), expected.astype(np.float64)
    equal = (a == b) | (np.isnan(a) & np.isnan(b))
    finite = np.isfinite(a) & np.isfinite(b)
    same_sign = np.signbit(a) == np.signbit(b)
    return equal | (finite & same_sign & (np.abs(a - b) <= tolerance))


def ulp_difference(actual, expected) -> np.ndarray:
    """ULP distance of StableHLO's check.expect_close, element-wise (uint64).

    Subnormals count as one step between zero and the smallest normal; non-finite
    values are 0 apart when they match (any NaN matches any NaN), else maximal.
    """
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.dtype.kind == "c":
        return np.maximum(ulp_difference(actual.real, expected.real),
                          ulp_difference(actual.imag, expected.imag))
    dtype = actual.dtype
    finfo = ml_dtypes.finfo(dtype)
    unsigned = np.dtype(f"u{dtype.itemsize}")
    sign_bit = unsigned.type(1 << (finfo.bits - 1))

    def magnitude(x):
        return (np.ascontiguousarray(x).view(unsigned) & ~sign_bit).astype(np.int64)

    smallest_normal_bits = int(np.array(finfo.smallest_normal, dtype).view(unsigned)) - 1
    a, b = magnitude(actual), magnitude(expected)
    negative_a, negative_b = np.signbit(actual.astype(np.float64)), np.signbit(expected.astype(np.float64))

    def collapse_subnormals(m):
        return np.where(m > smallest_normal_bits, m - smallest_normal_bits,
                        np.where(2 * m < smallest_normal_bits, 0, 1))

    finite = np.isfinite(actual.astype(np.float64)) & np.isfinite(expected.astype(np.float64))
    ca, cb = collapse_subnormals(a), collapse_subnormals(b)
    finite_distance = np.where(negative_a != negative_b, ca + cb, np.abs(ca - cb))
    bits_equal = np.ascontiguousarray(actual).view(unsigned) == np.ascontiguousarray(expected).view(unsigned)
    both_nan = np.isnan(actual.astype(np.float64)) & np.isnan(expected.astype(np.float64))
    nonfinite_distance = np.where(bits_equal | both_nan, 0, np.iinfo(np.int64).max)
    return np.where(finite, finite_distance, nonfinite_distance).astype(np.uint64)


def _checker(info, compare, describe=""):
    def run(actual, expected):
        ok = compare(actual, expected)
        if not np.all(ok):
            raise _fail(info, describe + _first_mismatch(actual, expected, ok))
        return None

    return run


def _with_constant(info, check):
    expected = info.attr("value")
    return lambda actual: check(actual, expected)


@op("check.expect_eq")
def expect_eq(info):
    return _checker(info, _equal)


@op("check.expect_eq_const", "check.eq")
def expect_eq_const(info):
    return _with_constant(info, expect_eq(info))


@op("check.expect_almost_eq")
def expect_almost_eq(info):
    tolerance = info.attributes.get("tolerance", 1e-4)
    return _checker(info, lambda a, b: _almost_equal(a, b, tolerance), f"tolerance {tolerance}: ")


@op("check.expect_almost_eq_const", "check.almost_eq")
def expect_almost_eq_const(info):
    return _with_constant(info, expect_almost_eq(info))


@op("check.expect_close")
def expect_close(info):
    high = info.attributes.get("max_ulp_difference", 1)
    low = info.attributes.get("min_ulp_difference", 0)

    def within(actual, expected):
        distance = ulp_difference(actual, expected)
        return (distance >= low) & (distance <= high)

    return _checker(info, within, f"ULP difference outside [{low}, {high}]: ")


@custom_call("check.expect_eq", "check.eq")
def custom_expect_eq(info):
    return expect_eq(info)


@custom_call("check.expect_almost_eq")
def custom_expect_almost_eq(info):
    return expect_almost_eq(info)


@custom_call("check.expect_close")
def custom_expect_close(info):
    return expect_close(info)
