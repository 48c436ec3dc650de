"""How XLA's CPU backend on *this* host orders a float sum or product (semantics "xla").

XLA CPU compiles a reduction to a loop of ``fadd reassoc`` over its rows, and LLVM's
loop vectorizer decides, with the cost model of the host's vector unit, how many
rows it sums side by side in the lanes of a vector register
(support.fold_in_lanes). That choice differs between hosts and with XLA's
``--xla_cpu_max_isa`` flag: the 4x8 complex64 sum that an AVX2 host adds in 4
lanes, an AVX-512 host adds in one (measured; docs/semantics.md, "Accumulation").
LLVM's cost model is not something to re-derive, so this module asks XLA CPU:
a child process (``xla_cpu_schedule_child``, with this process's environment,
``XLA_FLAGS`` included) runs the reduction on cancelling values and says which
lane count reproduces XLA's bits. Each (operation, type, shape, dimensions) is
asked once per process.
"""

from __future__ import annotations

import functools
import json

import numpy as np

from ...ir.child_process import ERROR, ChildDied, ChildProcess

_CHILD = ChildProcess(f"{__package__}.xla_cpu_child")

UNKNOWN = 0   # no lane count reproduces XLA CPU's bits (or XLA CPU could not be asked)


def lanes_on_this_host(ufunc, shape: tuple, axes: tuple, dtype) -> int:
    """How many lanes XLA CPU on this host sums the rows of this reduction in (see
    :func:`~stablehlo_interp.engine.accumulation.orders.fold_in_lanes`); 1 (a left fold) where
    XLA's schedule is not one of those."""
    return max(1, _measured_lanes(ufunc.__name__, tuple(shape), tuple(axes), np.dtype(dtype).name))


@functools.lru_cache(maxsize=None)
def _measured_lanes(operation: str, shape: tuple, axes: tuple, dtype: str) -> int:
    request = json.dumps({"operation": operation, "shape": shape, "axes": axes, "dtype": dtype})
    try:
        status, answer = _CHILD.ask(request.encode("utf-8"))
    except ChildDied:
        return UNKNOWN
    return UNKNOWN if status == ERROR else int(answer)
