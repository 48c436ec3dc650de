"""How far apart two values are: per-dtype tolerances, abs and ULP errors, and where.

The interpreter's value is the reference: an element matches when
``|theirs - ours| <= atol + rtol * |ours|``, NaN matches NaN and infinities
match themselves. Integers and booleans must be equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.numerics import ulp_difference
from ..ir.types import Token
from .summary import element_name, format_number, format_pair, is_float_dtype

# (rtol, atol) by element type. Integers, booleans: exact.
DEFAULT_TOLERANCES = {
    "f64": (1e-9, 1e-12), "complex<f64>": (1e-9, 1e-12),
    "f32": (1e-5, 1e-6), "complex<f32>": (1e-5, 1e-6),
    "f16": (5e-3, 1e-3), "bf16": (3e-2, 1e-2),
}
SMALL_FLOAT_TOLERANCE = (0.25, 0.1)   # f8, f6 and f4 types


def tolerances(overrides=None) -> dict:
    """The default table updated with ``overrides``: a dict by element type, or
    one ``(rtol, atol)`` pair for every float type."""
    table = dict(DEFAULT_TOLERANCES)
    if isinstance(overrides, tuple):
        return {name: overrides for name in table} | {"*": overrides}
    table.update(overrides or {})
    return table


def tolerance_of(table: dict, dtype) -> tuple[float, float]:
    name = element_name(dtype)
    if name in table:
        return table[name]
    if "*" in table:
        return table["*"]
    return SMALL_FLOAT_TOLERANCE if is_float_dtype(dtype) else (0.0, 0.0)


@dataclass
class Difference:
    """A value of the other backend that is not within tolerance of the interpreter's.

    ``index`` is where the largest error is (the first mismatch when none is
    numeric); ``ours`` / ``theirs`` are the values there. ``problem`` is set
    instead when the shapes or element types differ.
    """

    mismatched: int = 0
    size: int = 0
    index: tuple = ()
    ours: object = None
    theirs: object = None
    max_abs: float | None = None
    max_ulp: int | None = None
    problem: str | None = None
    bound: float | None = None    # the rounding bound at ``index``, when elements were judged by one


    def describe(self, backend: str) -> str:
        if self.problem:
            return self.problem
        at = f" at [{', '.join(map(str, self.index))}]" if self.index else ""
        what = "differ" if self.bound is None else "are beyond the bound"
        ours, theirs = format_pair(self.ours, self.theirs)
        text = f"{self.mismatched} of {self.size} elements {what}; largest{at}: {ours} (interpreter) vs {theirs} ({backend})"
        if self.bound is not None:
            text += f", bound there {format_number(self.bound)}"
        if self.max_abs is not None:
            text += f"; max abs error {format_number(self.max_abs)}"
        if self.max_ulp is not None:
            text += f", max {self.max_ulp} ULP"
        return text


def difference(ours, theirs, table: dict) -> Difference | None:
    """None when ``theirs`` matches ``ours`` within the tolerance of its element type."""
    if isinstance(ours, (tuple, Token)) or isinstance(theirs, (tuple, Token)):
        return None   # tokens and tuples are not compared
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    problem = mismatched_types(ours, theirs)
    if problem:
        return problem
    rtol, atol = tolerance_of(table, ours.dtype)
    if is_numeric(ours.dtype):
        a, b = widened_pair(ours, theirs)
        with np.errstate(all="ignore"):
            close = np.abs(a - b) <= atol + rtol * np.abs(a)
        return differing(ours, theirs, close | same_values(a, b))
    return differing(ours, theirs, ours == theirs)


def is_numeric(dtype) -> bool:
    """Floats and complex numbers: compared by distance (integers and booleans: equal or not)."""
    return np.dtype(dtype).kind == "c" or is_float_dtype(dtype)


def mismatched_types(ours: np.ndarray, theirs: np.ndarray) -> Difference | None:
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return Difference(problem=f"expected {element_name(ours.dtype)}{list(ours.shape)}, "
                                  f"got {element_name(theirs.dtype)}{list(theirs.shape)}")
    return None


def widened_pair(ours: np.ndarray, theirs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both values as float64 (complex128 for complex types)."""
    wide = np.complex128 if ours.dtype.kind == "c" else np.float64
    return ours.astype(wide), theirs.astype(wide)


def max_ulp_distance(ours: np.ndarray, theirs: np.ndarray) -> int | None:
    """The largest ULP distance between two float (or complex) arrays of one type and
    shape, over the elements finite on both sides (the subnormal range one step, as
    XLA CPU flushes it); None for other types or without such elements."""
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype or not is_numeric(ours.dtype):
        return None
    a, b = widened_pair(ours, theirs)
    both_finite = np.isfinite(a) & np.isfinite(b)
    if not both_finite.any():
        return None
    return int(ulp_difference(theirs, ours, subnormals_as_one_step=True)[both_finite].max())


def same_values(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Equal, or NaN on both sides (infinities match themselves)."""
    return (a == b) | (np.isnan(a) & np.isnan(b))


def differing(ours: np.ndarray, theirs: np.ndarray, ok: np.ndarray, bound=None) -> Difference | None:
    """The Difference of the elements that are not ``ok`` (None when all are). The
    largest error is where the abs error is largest, or with a ``bound`` (an array
    of the abs error allowed per element), where it exceeds the bound most."""
    mismatched = int(np.count_nonzero(~ok))
    if not mismatched:
        return None
    if is_numeric(ours.dtype):
        a, b = widened_pair(ours, theirs)
        with np.errstate(all="ignore"):
            error = np.abs(a - b)
        with np.errstate(all="ignore"):
            measure = error if bound is None else error - bound
        ranked = np.where(ok, -1.0, np.where(np.isnan(measure), np.inf, measure))
        flat = int(np.argmax(ranked))
        finite_errors = error[~ok & np.isfinite(error)]
        max_abs = float(finite_errors.max()) if finite_errors.size else float("inf")
        max_ulp = max_ulp_distance(ours, theirs)
    else:
        flat, max_abs, max_ulp = int(np.argmax(~ok.reshape(-1))), None, None
    index = tuple(int(i) for i in np.unravel_index(flat, ours.shape)) if ours.shape else ()
    return Difference(mismatched, int(ours.size), index, ours[index].item(), theirs[index].item(),
                      max_abs, max_ulp, bound=None if bound is None else float(np.broadcast_to(bound, ours.shape)[index]))
