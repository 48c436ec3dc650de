"""Floating-point distances shared by the check ops, the tools and the tests."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .dtypes import contiguous


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


class ExtremumOfZeros:
    """Which zero ``stablehlo.maximum`` / ``minimum`` of floats return among zeros.

    Spec (maximum, minimum): IEEE-754 maximum and minimum, which order -0.0 below
    +0.0; reduce, reduce_window and scatter with such a body combine by the same
    op. NumPy's maximum and minimum return either zero, so where their result is
    zero the sign has to be decided again: the maximum of zeros is +0.0 unless
    all are -0.0, which is exactly their IEEE-754 sum (-0.0 + -0.0 = -0.0,
    -0.0 + +0.0 = +0.0); the minimum of zeros is -0.0 unless all are +0.0, the
    negated sum of the negated zeros. With ``sign`` 1 for maximum and -1 for
    minimum the zero is ``sign * sum(sign * zeros)``; a value that is not zero
    adds the term -0.0, which changes no sum of zeros. (The scalars are Python
    numbers, so values keep their float type.)
    """

    def __init__(self, is_max: bool):
        self.is_max = is_max
        self.sign = 1 if is_max else -1

    def of_two(self, lhs, rhs):
        """The extremum of two zeros: the sum of their two terms, without the multiplications."""
        return lhs + rhs if self.is_max else -(-lhs - rhs)

    def of_reduction(self, values, axes, init, dtype):
        """The extremum's zero of ``values`` reduced over ``axes`` from ``init``.

        NumPy's sum starts from +0.0, which turns a sum of -0.0 terms into +0.0:
        this one starts from the init's term (a scalar: ``terms`` of a 0-d array
        costs more than the rest)."""
        init = np.asarray(init)[()]
        initial = self.sign * init if init == 0 else -0.0
        return self.from_sum(np.add.reduce(self.terms(values), axis=axes, dtype=dtype, initial=initial))

    def terms(self, values):
        """What each value adds to the sum: ``sign * value`` for a zero, -0.0 for any
        other value of a sum that is used. Only the sums where the extremum is zero are
        used, and all their values lie on one side of zero (at most zero for maximum,
        at least zero for minimum; a NaN would have made the extremum NaN), so there
        ``sign * value`` is at most zero and its sign is the term: the zero with the
        sign of ``sign * value``, in one or two ufunc calls."""
        return np.copysign(0.0, values if self.is_max else np.negative(values))

    def from_sum(self, total):
        """The extremum's zero, from a sum of :meth:`terms` that starts from a term."""
        return self.sign * total
