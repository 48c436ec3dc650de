"""The child process of xla_cpu_schedule.py: runs each reduction it is asked about on
XLA's CPU backend and answers with the lane count of
:func:`~stablehlo_interp.engine.accumulation.orders.fold_in_lanes` that gives XLA's bits on every
trial input, or 0 when none does."""

from __future__ import annotations

import json
import os

import numpy as np

from ...ir.child_process import serve
from .orders import fold_in_lanes, fold_reduce

TRIALS = 4   # inputs whose sums cancel: two orders agreeing on all of them by chance is unlikely


def _cancelling(shape, dtype, seed):
    """Random signs and magnitudes 2**-12 ... 2**12: any change of order shows in the bits."""
    rng = np.random.default_rng(seed)

    def real():
        return rng.standard_normal(shape) * 2.0 ** rng.integers(-12, 13, shape)

    values = real() + 1j * real() if dtype.kind == "c" else real()
    return values.astype(dtype)


def measured_lanes(operation: str, shape: tuple, axes: tuple, dtype: np.dtype) -> int:
    import jax
    from jax import lax

    ufunc, combine = {"add": (np.add, lax.add), "multiply": (np.multiply, lax.mul)}[operation]
    identity = np.array(0 if ufunc is np.add else 1, dtype)
    reduce = jax.jit(lambda values: lax.reduce(values, identity, combine, axes))
    rows = int(np.prod([shape[d] for d in axes[:-1]]))
    candidates = [lanes for lanes in (2 ** k for k in range(rows.bit_length())) if rows % lanes == 0]
    with np.errstate(all="ignore"):
        for seed in range(TRIALS):
            values = _cancelling(shape, dtype, seed)
            if ufunc is np.multiply:   # products of values near 1: they neither vanish nor overflow
                values = (1 + values / 8192).astype(dtype)
            expected = np.asarray(reduce(values)).tobytes()
            candidates = [lanes for lanes in candidates if expected == np.asarray(
                fold_reduce(ufunc, values, axes, identity, dtype) if lanes == 1
                else fold_in_lanes(ufunc, values, list(axes), identity, dtype, lanes)).tobytes()]
    return candidates[0] if candidates else 0


def _lanes_asked(request: bytes) -> bytes:
    """The answer of :func:`measured_lanes` to a JSON request naming its arguments."""
    question = json.loads(request)
    return str(measured_lanes(question["operation"], tuple(question["shape"]), tuple(question["axes"]),
                              np.dtype(question["dtype"]))).encode()


if __name__ == "__main__":
    os.environ["JAX_PLATFORMS"] = "cpu"   # XLA CPU, whatever platforms the parent runs on
    import jax

    jax.config.update("jax_enable_x64", True)
    serve(_lanes_asked, reported=(Exception,),   # any failure: the parent falls back to a left fold
          describe=lambda error: f"{type(error).__name__}: {error}")
