"""Floating-point distances shared by the check ops, the tools and the tests."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .support import contiguous


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

    def bits(x):
        return contiguous(x).view(unsigned)

    def magnitude(x):
        return (bits(x) & ~sign_bit).astype(np.int64)

    smallest_normal_bits = int(np.array(finfo.smallest_normal, dtype).view(unsigned)) - 1
    a, b = magnitude(actual), magnitude(expected)
    with np.errstate(invalid="ignore"):  # NaNs of the small float types
        wide_a, wide_b = actual.astype(np.float64), expected.astype(np.float64)
    negative_a, negative_b = np.signbit(wide_a), np.signbit(wide_b)

    def collapse_subnormals(m):
        return np.where(m > smallest_normal_bits, m - smallest_normal_bits,
                        np.where(m < (smallest_normal_bits + 1) // 2, 0, 1))  # 2m < z, no overflow

    finite = np.isfinite(wide_a) & np.isfinite(wide_b)
    ca, cb = collapse_subnormals(a), collapse_subnormals(b)
    finite_distance = np.where(negative_a != negative_b, ca + cb, np.abs(ca - cb))
    bits_equal = bits(actual) == bits(expected)
    both_nan = np.isnan(wide_a) & np.isnan(wide_b)
    nonfinite_distance = np.where(bits_equal | both_nan, 0, np.iinfo(np.int64).max)
    return np.where(finite, finite_distance, nonfinite_distance).astype(np.uint64)
