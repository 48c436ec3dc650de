"""Shardy's own sharding propagation, run on a module in a child process.

XLA decides the shardings a program leaves open with Shardy's propagation
(openxla/shardy, ``sdy-propagation-pipeline``: import, propagation with op
priorities and each op's sharding rule, export). jaxlib registers that pipeline
in the context JAX's ``make_ir_context()`` builds, so the device asks Shardy
itself rather than approximating it. Shardy's passes stop the process with a
check failure on input they do not expect, which nothing here could catch: the
pipeline runs in a child process (one per process, started at the first
request, :class:`~stablehlo_interp.ir.child_process.ChildProcess`), which answers with the shardings it
found. A child killed by a module is a :class:`~stablehlo_interp.errors.ModuleError`
and the next request starts a fresh one.

The pipeline rewrites ops (constants become ``sdy.constant``, constraints
``sdy.reshard``, it adds and removes data-flow edges), so the child first tags
each op of each function with its position, and reads each op's shardings
after the pipeline by its tag.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

from ..errors import ModuleError
from ..ir.child_process import ERROR, ChildDied, ChildProcess

PIPELINE = "builtin.module(sdy-propagation-pipeline)"
# The attributes in which Shardy leaves an op's shardings: its results' (``sdy.sharding``)
# and those of a named or manual computation's operands and results.
SHARDING_ATTRIBUTES = ("sdy.sharding", "in_shardings", "out_shardings")


@dataclass(frozen=True)
class OpShardings:
    """One op after propagation: the text of each of its SHARDING_ATTRIBUTES it has, and
    the ops of each of its regions' blocks."""

    attributes: dict
    regions: tuple


@dataclass(frozen=True)
class FunctionShardings:
    """A function after propagation: the ``sdy.sharding`` text of each argument and result
    (None without one) and its ops, in block order (the terminator left out)."""

    arguments: tuple
    results: tuple
    ops: tuple


_CHILD = ChildProcess(f"{__package__}.shardy_child")


def propagate(module) -> dict:
    """The shardings Shardy's propagation gives ``module``'s functions and ops, by function
    name (:class:`FunctionShardings`); ``module`` is left as it is. A module the pipeline
    rejects, or that kills it, is a ModuleError with Shardy's diagnostics."""
    data = io.BytesIO()
    module.operation.write_bytecode(data)
    try:
        status, answer = _CHILD.ask(data.getvalue())
    except ChildDied as death:
        raise ModuleError(f"Shardy's sharding propagation killed the child process that runs it ({death})") from None
    if status == ERROR:
        raise ModuleError(answer.decode("utf-8"))
    answer = json.loads(answer)
    return {name: FunctionShardings(tuple(f["arguments"]), tuple(f["results"]), _ops(f["ops"]))
            for name, f in answer.items()}


def _ops(found: list) -> tuple:
    return tuple(OpShardings(attributes, tuple(_ops(region) for region in regions))
                 for attributes, regions in found)
