"""Small helpers shared by op implementations."""

from __future__ import annotations

import ml_dtypes
import numpy as np

_SUB_BYTE_COMPUTE = {
    np.dtype(ml_dtypes.int2): np.dtype(np.int8),
    np.dtype(ml_dtypes.int4): np.dtype(np.int8),
    np.dtype(ml_dtypes.uint2): np.dtype(np.uint8),
    np.dtype(ml_dtypes.uint4): np.dtype(np.uint8),
}

# Float types NumPy has its own kernels for; bf16 and the f8/f6/f4 types of
# ml_dtypes are computed in f32, which holds each of their values exactly.
NATIVE_FLOATS = frozenset(map(np.dtype, (np.float16, np.float32, np.float64)))
_F32 = np.dtype(np.float32)

# Transcendental functions are evaluated in a wider type and rounded once, so
# results are (almost always) the correctly rounded values: every float type
# narrower than f64 goes through f64; f64 and complex<f64> go through the x87
# extended type when the platform has it (64-bit significand), else stay as is.
_EXTENDED = np.finfo(np.longdouble).nmant >= 63
_WIDER = {
    np.dtype(np.float64): np.dtype(np.longdouble if _EXTENDED else np.float64),
    np.dtype(np.complex64): np.dtype(np.complex128),
    np.dtype(np.complex128): np.dtype(np.clongdouble if _EXTENDED else np.complex128),
}


def integer_compute_dtype(dtype) -> np.dtype:
    """The dtype to compute integer ops in: int8/uint8 for the sub-byte types.

    ml_dtypes' int2/int4 ufuncs do not all wrap at their own width, so callers
    compute in this type and convert back with ``.astype(dtype)``, which wraps.
    """
    dtype = np.dtype(dtype)
    return _SUB_BYTE_COMPUTE.get(dtype, dtype)


def wider_float(dtype) -> np.dtype:
    """The dtype in which to evaluate a transcendental function of ``dtype``."""
    dtype = np.dtype(dtype)
    return _WIDER.get(dtype, np.dtype(np.float64))


def _cast_operands(fn, compute, dtype):
    def run(*operands):
        return fn(*[np.asarray(x, dtype=compute) for x in operands]).astype(dtype)

    return run


def in_wider_precision(fn, dtype):
    """``fn`` evaluated in :func:`wider_float` of ``dtype`` and rounded back to ``dtype``."""
    dtype = np.dtype(dtype)
    wide = wider_float(dtype)
    return fn if wide == dtype else _cast_operands(fn, wide, dtype)


def in_float32_if_needed(fn, dtype):
    """``fn`` itself for f16/f32/f64 (and complex), else computed in f32 and rounded back.

    For ops whose exact result is representable (floor, maximum, fmod ...) or
    correctly rounded after one rounding from f32 (+, -, *, / and sqrt of
    types with at most 11 significand bits), this gives the exact answer.
    """
    dtype = np.dtype(dtype)
    if dtype in NATIVE_FLOATS or dtype.kind == "c":
        return fn
    return _cast_operands(fn, _F32, dtype)


def same_ufunc(ufunc):
    """Builder of an op that is one NumPy ufunc on every element type it allows
    (integers wrap at their own width, sub-byte ones too).

    For i1, NumPy's add/multiply and bitwise ufuncs are the logical OR/AND/XOR/NOT
    the spec asks for. For bf16 and the f8/f6/f4 types, ml_dtypes computes in f32
    and rounds once, which is correctly rounded for them."""

    def build(info):
        return in_integer_precision(ufunc, info.operand_types[0].dtype)

    return build


def in_integer_precision(fn, dtype):
    """``fn`` applied in the compute dtype of ``dtype`` and wrapped back to it."""
    dtype = np.dtype(dtype)
    compute = integer_compute_dtype(dtype)
    if compute == dtype:
        return fn  # NumPy integer ufuncs keep the operands' dtype and wrap
    return _cast_operands(fn, compute, dtype)


def contiguous(x) -> np.ndarray:
    """x as a C-contiguous array of the same shape (np.ascontiguousarray makes 0-d arrays 1-d)."""
    return np.array(x, order="C", copy=None)


def unsigned_view_dtype(dtype) -> np.dtype:
    """The unsigned integer dtype of the same storage width (for bit tricks)."""
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def static_shape(ttype, op_info) -> tuple:
    if not ttype.is_static:
        raise op_info.unsupported(f"dynamic shape {ttype} needs shape refinement")
    return ttype.shape


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
        """What each value adds to the sum: ``sign * value`` for a zero, else -0.0."""
        return np.where(values == 0, self.sign * values, -0.0)

    def from_sum(self, total):
        """The extremum's zero, from a sum of :meth:`terms` that starts from a term."""
        return self.sign * total
