"""Shared helpers for differential tests: XLA CPU through JAX, the C++ reference
interpreter, and comparisons bit-exact or within a ULP bound."""

from __future__ import annotations

import functools

import jax
import ml_dtypes
import numpy as np

import stablehlo_interp as si
from stablehlo_interp.ops.check import ulp_difference
from stablehlo_interp.types import element_type_of

jax.config.update("jax_enable_x64", True)

FLOAT_DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
COMPLEX_DTYPES = [np.complex64, np.complex128]
SIGNED_DTYPES = [np.int8, np.int16, np.int32, np.int64]
UNSIGNED_DTYPES = [np.uint8, np.uint16, np.uint32, np.uint64]
SUB_BYTE_DTYPES = [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2]
INTEGER_DTYPES = SIGNED_DTYPES + UNSIGNED_DTYPES
F8_DTYPES = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz,
             ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e4m3b11fnuz]
SHAPES = [(), (0,), (5,), (2, 3), (2, 0, 3)]


def dtype_id(dtype) -> str:
    return element_type_of(dtype)


def run_xla(fn, *args):
    """fn jitted on XLA's CPU backend; results as a list of NumPy arrays."""
    cpu = jax.devices("cpu")[0]
    out = jax.jit(fn)(*[jax.device_put(a, cpu) for a in args])
    leaves = jax.tree_util.tree_leaves(out)
    return [np.asarray(leaf) for leaf in leaves]


def run_interp(fn, *args):
    """fn lowered by jax.jit and run by stablehlo_interp (with result type checks)."""
    lowered = jax.jit(fn).lower(*args)
    return si.run(lowered, *args, listeners=[si.validation.ResultTypeChecker()])


def edge_values(dtype, size: int = 0, seed: int = 0) -> np.ndarray:
    """Edge values of a dtype (NaN, +-inf, +-0, denormals, min/max ...) then random ones."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        values = np.array([True, False] + list(rng.integers(0, 2, size).astype(bool)))
        return values
    if dtype.kind in "iu" or dtype in map(np.dtype, SUB_BYTE_DTYPES):
        info = ml_dtypes.iinfo(dtype)
        special = [0, 1, info.min, info.max, info.min + 1, info.max - 1]
        if info.min < 0:
            special += [-1, -2]
        randoms = rng.integers(int(info.min), int(info.max), size, endpoint=True)
        return np.array(special + list(randoms)).astype(dtype)
    if dtype.kind == "c":
        part = np.float32 if dtype == np.complex64 else np.float64
        re, im = edge_values(part, size, seed), edge_values(part, size, seed + 1)[::-1]
        out = np.empty(len(re), dtype)
        out.real, out.imag = re, im
        return out
    finfo = ml_dtypes.finfo(dtype)
    special = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, float(finfo.max), -float(finfo.max),
               float(finfo.smallest_normal), float(finfo.smallest_subnormal),
               -float(finfo.smallest_subnormal)]
    try:
        np.array(np.inf).astype(dtype)
        if np.isinf(np.array(np.inf).astype(dtype)):
            special += [np.inf, -np.inf]
    except (OverflowError, ValueError):
        pass
    if np.isnan(np.array(np.nan).astype(dtype)):
        special += [np.nan]
    scale = min(float(finfo.max), 1e4)
    randoms = rng.standard_normal(size) * rng.choice([0.01, 1.0, scale], size)
    return np.array(special + list(randoms), dtype=np.float64).astype(dtype)


def assert_same(actual, expected, *, max_ulp: int = 0, context: str = ""):
    """Bit-exact equality (NaN matches NaN), or within ``max_ulp`` for floats."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{context}dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{context}shape {actual.shape} != {expected.shape}"
    if actual.size == 0:
        return
    inexact = actual.dtype.kind in "fc" or actual.dtype in map(np.dtype, [ml_dtypes.bfloat16, *F8_DTYPES])
    if inexact:
        distance = ulp_difference(actual, expected)
        bad = distance > max_ulp
    else:
        bad = actual != expected
    if np.any(bad):
        index = tuple(np.argwhere(bad)[0])
        raise AssertionError(
            f"{context}{int(np.sum(bad))} of {actual.size} elements differ (max_ulp={max_ulp}); first at "
            f"{list(index)}: got {actual[index]!r}, expected {expected[index]!r}")


@functools.lru_cache(maxsize=None)
def reference_interpreter():
    from reference_interpreter import ReferenceInterpreter

    return ReferenceInterpreter()
