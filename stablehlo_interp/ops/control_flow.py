"""Control flow and calls (spec: while, if, case, map, optimization_barrier,
composite; func.call).

Runners of ops with regions receive their bound regions first; a region call
returns the list of values its ``stablehlo.return`` yields.
"""

from __future__ import annotations

import numpy as np

from ..engine.plan import RegionCallRunner
from ..engine.registry import op
from ..engine.run import OpenLoop, run_while
from ..engine.regions import is_elementwise


@op("stablehlo.while", variadic=True)
def while_(info):
    """Run ``body`` while ``cond`` returns true; the loop-carried values are the results."""

    def run(regions, *values):
        execution = regions[0].execution
        loops = execution.context.loops
        if loops is None and not execution.listeners:
            return run_while(*regions, values)
        cond, body = (region.repeated() for region in regions)
        if loops is not None:
            return _counted(cond, body, values, loops, OpenLoop(info))
        while cond(values)[0]:
            values = body(values)
        return values

    return run


def _counted(cond, body, values, loops: list, loop: OpenLoop):
    """The loop, with its iterations counted in ``loops`` while it runs (RunContext.loops)."""
    loops.append(loop)
    try:
        while cond(values)[0]:
            loop.iterations += 1
            values = body(values)
        return values
    finally:
        loops.remove(loop)


@op("stablehlo.if", variadic=True)
def if_(info):
    return RegionCallRunner(choose=lambda pred: 0 if pred else 1)


@op("stablehlo.case", variadic=True)
def case(info):
    """An index outside [0, number of branches) selects the last branch."""
    last = len(info.regions) - 1

    def choose(index):
        index = int(index)
        return index if 0 <= index < last else last

    return RegionCallRunner(choose=choose)


@op("stablehlo.map")
def map_(info):
    """Apply ``computation`` element-wise. A computation made only of built-in element-wise
    ops runs once on whole tensors (listeners see it as a vectorized region, like
    reduce's); any other runs once per element on 0-d values."""
    vectorized = is_elementwise(info.regions[0])
    ttype = info.result_type

    def run(regions, *inputs):
        (computation,) = regions
        if vectorized:
            out = computation.as_vectorized()(*inputs)[0]
            return np.broadcast_to(np.asarray(out, ttype.dtype), ttype.shape)
        result = np.empty(ttype.shape, ttype.dtype)
        for index in np.ndindex(*ttype.shape):
            result[index] = computation(*[np.asarray(x[index]) for x in inputs])[0]
        return result

    return run


@op("stablehlo.optimization_barrier", variadic=True)
def optimization_barrier(info):
    return lambda *operands: operands


@op("func.call", "stablehlo.composite", variadic=True)
def call(info):
    """Call the function named by ``callee`` (func.call) or ``decomposition``
    (composite: running its decomposition is its semantics)."""
    return RegionCallRunner(-1)


@op("stablehlo.async_start")
def async_start(info):
    """Runs its region at once (ops run in program order here: there is nothing to
    overlap) and holds the region's results as the future."""
    return lambda regions, *operands: tuple(regions[0](*operands))


@op("stablehlo.async_done", variadic=True)
def async_done(info):
    """The results held by an ``async_start``'s future."""
    return lambda future: future
