"""Constant folding: ops whose result depends on nothing but their operands, all constants.

Shape ops and converts of constants (JAX's literals: ``constant`` then
``broadcast_in_dim``) are computed once at load and left out of the run loop's
program: their values wait in their slots of each fresh environment
(Region.result_slots). The plan holds them anyway, so the releases the left-out
entries made would free nothing. The observed loop still runs every op, so
every tool sees every op.
"""

from __future__ import annotations

import numpy as np

from ..plan import OpInfo, RunProgram, StepColumns

# Ops cheap to keep whose result depends on nothing but their operands.
FOLDABLE = frozenset({"stablehlo.constant", "stablehlo.broadcast_in_dim", "stablehlo.broadcast", "stablehlo.reshape",
                      "stablehlo.transpose", "stablehlo.convert"})


def fold(entries: list, foldable: list, columns: StepColumns) -> RunProgram:
    """The program of ``entries`` without the foldable ops (``foldable``, as
    :func:`~stablehlo_interp.engine.passes.flatten.flatten` lists them, last op first)
    whose operands are all constants; their ``(slot, value)`` pairs are the program's
    ``folded``."""
    constants: dict[int, object] = {}
    folded = set()
    for op, operands, result, position in reversed(foldable):   # (in program order)
        if (value := _folded(op.info, op.run, operands, constants)) is not None:
            constants[result] = value
            folded.add(len(entries) - 1 - position)
    if folded:
        entries = [entry for position, entry in enumerate(entries) if position not in folded]
    return RunProgram(entries, columns, tuple(constants.items()))


def _folded(info: OpInfo, run, operands: tuple, constants: dict):
    """The value of a foldable op whose operands are all constants, or None."""
    if info.has_quantized_types or not all(slot in constants for slot in operands):
        return None
    try:
        value = run(*[constants[slot] for slot in operands])
    except Exception:   # noqa: BLE001 - it fails again at run time, where the error belongs
        return None
    if isinstance(value, np.ndarray):   # (a NumPy scalar, a ufunc's answer on 0-d arrays, is immutable)
        if value.ndim == 0:   # as a NumPy scalar: the runners on 0-d values compute on scalars
            return value[()]  # (ops/scalars.py; an operator on a 0-d array costs its ufunc)
        value.flags.writeable = False   # every run returns this array: read-only, as constants are
    return value
