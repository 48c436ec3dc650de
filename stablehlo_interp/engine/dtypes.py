"""The dtypes op implementations compute in: sub-byte integers in a byte, bf16 and the
small floats in f32, transcendental functions in a wider float, and the builders
of ops that are one NumPy ufunc on every element type."""

from __future__ import annotations

import ml_dtypes
import numpy as np

try:
    # np.count_nonzero of a whole array without the wrapper that dispatches it to other
    # array types (__array_function__), which costs three times the count itself on small
    # arrays; runners count NumPy arrays only. (NumPy's private module: the public
    # function where a NumPy keeps it elsewhere.)
    from numpy._core.multiarray import count_nonzero
except ImportError:
    count_nonzero = np.count_nonzero

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
    """``fn`` on its operands converted to ``compute``, its result converted to ``dtype``.
    A unary ufunc (sine, exp, log ...: most of these) gets a runner without the list
    of operands and its unpacking, a third of its cost on small arrays. A ufunc converts
    its operands itself (``dtype=compute``), a buffer at a time: on large arrays 4x faster
    than a converted copy of each, the same values."""
    if isinstance(fn, np.ufunc) and fn.nin == 1:
        if dtype in NATIVE_FLOATS and compute.kind == "f":
            return _scalar_widening_ufunc(fn, compute, dtype)

        def run_ufunc(operand):
            return fn(operand, dtype=compute).astype(dtype)

        return run_ufunc
    if getattr(fn, "nin", None) == 1:
        def run_unary(operand):
            return fn(np.asarray(operand, dtype=compute)).astype(dtype)

        return run_unary

    def run(*operands):
        return fn(*[np.asarray(x, dtype=compute) for x in operands]).astype(dtype)

    return run


def _scalar_widening_ufunc(fn, compute, dtype):
    """:func:`_cast_operands` of a unary ufunc on f16, f32 or f64 values computed in a
    wider float: a NumPy scalar of ``dtype`` is widened by the wider type's constructor
    (exact: every value of ``dtype``, NaN payloads included, is one of ``compute``),
    4 us less than the ufunc's own cast (``dtype=``) of a 0-d value (exp of an f64
    through long double: 7.6 us against 4.1 on a loaded machine). The result rounds
    back by ``astype`` either way (a constructor would warn of an overflow whatever
    NumPy's error setting says)."""
    scalar_type, wide_type = dtype.type, compute.type

    def run_ufunc(operand):
        if type(operand) is scalar_type:
            return fn(wide_type(operand)).astype(dtype)
        return fn(operand, dtype=compute).astype(dtype)

    return run_ufunc


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


