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

# Floats that NumPy has no math kernels for, or whose kernels are less accurate
# than XLA's: evaluate transcendental functions in this wider type, then round.
_WIDER_FLOAT = {
    np.dtype(np.float16): np.dtype(np.float32),
    np.dtype(np.float32): np.dtype(np.float64),
    np.dtype(np.float64): np.dtype(np.float64),
    np.dtype(np.complex64): np.dtype(np.complex128),
    np.dtype(np.complex128): np.dtype(np.complex128),
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
    return _WIDER_FLOAT.get(dtype, np.dtype(np.float32))


def in_wider_precision(fn, dtype):
    """``fn`` evaluated in a wider float type and rounded back to ``dtype``.

    f32 goes through f64 (NumPy's own f32 kernels can be several ULP off);
    f16, bf16 and the f8 types go through f32.
    """
    dtype = np.dtype(dtype)
    wide = wider_float(dtype)
    if wide == dtype:
        return fn

    def run(*operands):
        return fn(*[np.asarray(x, dtype=wide) for x in operands]).astype(dtype)

    return run


def in_integer_precision(fn, dtype):
    """``fn`` applied in the compute dtype of ``dtype`` and wrapped back to it."""
    dtype = np.dtype(dtype)
    compute = integer_compute_dtype(dtype)
    if compute == dtype:
        return fn  # NumPy integer ufuncs keep the operands' dtype and wrap

    def run(*operands):
        return fn(*[np.asarray(x).astype(compute) for x in operands]).astype(dtype)

    return run


def unsigned_view_dtype(dtype) -> np.dtype:
    """The unsigned integer dtype of the same storage width (for bit tricks)."""
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def static_shape(ttype, op_info) -> tuple:
    if not ttype.is_static:
        raise op_info.unsupported(f"dynamic shape {ttype} needs shape refinement")
    return ttype.shape
