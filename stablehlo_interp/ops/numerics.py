"""Floating-point distances shared by the check ops, the tools and the tests."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .support import contiguous


def ulp_difference(actual, expected, *, subnormals_as_one_step: bool = False) -> np.ndarray:
    """ULP distance, element-wise (uint64).

    By default the rule of StableHLO's ``check.expect_close``
    (``ULPDifference`` in stablehlo/tests/CheckOps.cpp): the distance of the
    magnitudes' bit patterns, their sum when the signs differ (so 0.0 and -0.0
    are 0 apart, and every subnormal is a step); complex values take the larger
    distance of their parts; non-finite values are 0 apart when they match (any
    NaN matches any NaN), else maximal.

    ``subnormals_as_one_step`` is for comparing with XLA CPU, which flushes
    subnormals to zero: the whole subnormal range counts as one step between
    zero and the smallest normal (a subnormal below half of it as zero).
    """
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.dtype.kind == "c":
        return np.maximum(
            ulp_difference(actual.real, expected.real, subnormals_as_one_step=subnormals_as_one_step),
            ulp_difference(actual.imag, expected.imag, subnormals_as_one_step=subnormals_as_one_step))
    dtype = actual.dtype
    finfo = ml_dtypes.finfo(dtype)
    unsigned = np.dtype(f"u{dtype.itemsize}")
    sign_bit = unsigned.type(1 << (finfo.bits - 1))

    def bits(x):
        return contiguous(x).view(unsigned)

    def magnitude(x):
        return (bits(x) & ~sign_bit).astype(np.uint64)

    smallest_normal_bits = int(np.array(finfo.smallest_normal, dtype).view(unsigned)) - 1
    a, b = magnitude(actual), magnitude(expected)
    with np.errstate(invalid="ignore"):  # NaNs of the small float types
        wide_a, wide_b = actual.astype(np.float64), expected.astype(np.float64)
    negative_a, negative_b = np.signbit(wide_a), np.signbit(wide_b)

    def collapse_subnormals(m):
        z = np.uint64(smallest_normal_bits)
        below_half = m < (z + np.uint64(1)) // np.uint64(2)
        # uint64 constants: a Python int would make np.where's result float64, which
        # rounds f64 magnitudes to 512 steps (1 ULP counted as 512).
        return np.where(m > z, np.maximum(m, z) - z, np.where(below_half, np.uint64(0), np.uint64(1)))

    finite = np.isfinite(wide_a) & np.isfinite(wide_b)
    has_subnormals = smallest_normal_bits > 0  # f8E8M0FNU has none
    ca, cb = (collapse_subnormals(a), collapse_subnormals(b)) if subnormals_as_one_step and has_subnormals \
        else (a, b)
    # uint64 throughout: the distance between -max and +max of f64 exceeds int64.
    finite_distance = np.where(negative_a != negative_b, ca + cb, np.maximum(ca, cb) - np.minimum(ca, cb))
    bits_equal = bits(actual) == bits(expected)
    both_nan = np.isnan(wide_a) & np.isnan(wide_b)
    nonfinite_distance = np.where(bits_equal | both_nan, np.uint64(0), np.iinfo(np.uint64).max)
    return np.where(finite, finite_distance, nonfinite_distance).astype(np.uint64)
