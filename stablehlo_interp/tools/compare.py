"""Conformance: run a program on the interpreter and on another backend, and
find the first op whose value differs.

    comparison = si.compare(f, x, backend="cpu")
    print(comparison)               # agreement, or the first divergent op with its error

How the first divergent op is found: calls in the entry function are inlined
(so nested ``jit``\\ s and helpers such as ``jnp.where`` are ops of one
function); the interpreter runs that module once and keeps the value of every
op of the entry function. When the final results differ beyond tolerance, the
other backend runs *prefixes* of the module: the entry function cut after op
*k*, returning the values of a window of ops up to *k* as its results. Windows
are checked in program order (their size bounded by ``window_bytes``); the
first value outside tolerance names the op. All its operands matched (they
come earlier), so the op itself computes differently. When that op has
regions (a loop, a conditional) the difference arose inside them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..engine.run import Listener
from ..errors import InterpreterError
from ..ir.locations import SourceLocation
from ..program import load
from ..ir.types import Token
from .backends import resolve
from .difference import Difference, difference, tolerances
from ..ir.edit import inline_calls, prefix_module
from .region_calls import describe_location, op_label, region_name, source_text
from ..program import prepare
from .summary import summarize

WINDOW_BYTES = 64 << 20


@dataclass
class Divergence:
    """The first op of the entry function whose value differs on the other backend."""

    op: str
    location: SourceLocation
    position: int                 # its position among the entry function's ops (after inlining)
    result: int
    difference: Difference
    ours: object
    theirs: object
    operands: list
    regions: tuple = ()           # names of its regions, where the difference arose

    def describe(self, backend: str) -> str:
        where = describe_location(self.location)
        lines = [f"first divergent op: {self.op} (op #{self.position} of the entry function)"
                 + (f" at {where}" if where else "")]
        if self.location and self.location.name:
            lines.append(f"  jax: {self.location.name}")
        text = source_text(self.location)
        if text:
            lines.append(f"  source: {text}")
        lines.append(f"  result #{self.result}: {self.difference.describe(backend)}")
        lines.append(f"    interpreter: {summarize(self.ours)}")
        lines.append(f"    {backend}: {summarize(self.theirs)}")
        if self.operands:
            lines.append("  its operands agree on both sides:")
            lines += [f"    operand #{i}: {summarize(v)}" for i, v in enumerate(self.operands)]
        if self.regions:
            lines.append(f"  the difference arises inside its regions ({', '.join(self.regions)})")
        return "\n".join(lines)


@dataclass
class Comparison:
    """The outcome of :func:`compare`. ``ok`` when every result is within tolerance."""

    backend: str
    outputs: list                 # per result: None (within tolerance) or a Difference
    divergence: Divergence | None = None
    note: str | None = None
    tolerances: dict = field(default_factory=dict)
    compiled_prefixes: int = 0

    @property
    def ok(self) -> bool:
        return all(d is None for d in self.outputs)

    def __str__(self) -> str:
        if self.ok:
            count = len(self.outputs)
            return f"the interpreter and {self.backend} agree on " + (
                "the result" if count == 1 else f"all {count} results")
        lines = [f"result #{i} differs: {d.describe(self.backend)}"
                 for i, d in enumerate(self.outputs) if d is not None]
        if self.divergence is not None:
            lines.append(self.divergence.describe(self.backend))
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)


class _EntryValues(Listener):
    """Keeps operands and results of every op of the entry function, by position."""

    def __init__(self):
        self.ops: list = []

    def after_op(self, step, operands, results, stack):
        if not stack:
            self.ops.append((step, list(operands), list(results)))
        return None


def compare(target, *args, backend="cpu", tolerance=None, function: str | None = None,
            window_bytes: int = WINDOW_BYTES, **kwargs) -> Comparison:
    """Run ``target`` on ``args`` here and on ``backend``; find the first divergent op.

    ``backend``: a JAX platform name, an :class:`~stablehlo_interp.tools.backends.InterpreterBackend`
    or a callable ``(module_text, args) -> arrays``. ``tolerance``: ``(rtol, atol)``
    for every float type, or a dict by element type (``{"f32": (1e-4, 1e-5)}``)
    over :data:`~stablehlo_interp.tools.difference.DEFAULT_TOLERANCES`.
    """
    call = prepare(target, args, kwargs, function)
    if call.function != "main":
        raise InterpreterError(f"compare runs @main (backends compile a module's @main), not @{call.function}")
    table = tolerances(tolerance)
    run_backend = resolve(backend)
    values = call.arguments
    text = inline_calls(module_text(call.program), "main")
    recorder = _EntryValues()
    ours = load(text).run(*values, listeners=[recorder])
    theirs = run_backend(text, values)
    outputs = [difference(o, t, table) for o, t in zip(ours, theirs)]
    comparison = Comparison(run_backend.name, outputs, tolerances=table)
    if len(theirs) != len(ours):
        comparison.outputs = [Difference(problem=f"{run_backend.name} returned {len(theirs)} results, "
                                                 f"the interpreter {len(ours)}")]
    if comparison.ok:
        return comparison
    for window in _windows(recorder.ops, window_bytes):
        comparison.compiled_prefixes += 1
        found = _check_window(window, text, values, run_backend, table)
        if found is not None:
            comparison.divergence = found
            return comparison
    comparison.note = ("every intermediate value of the entry function is within tolerance: the results "
                       "differ only when the whole program is compiled at once")
    return comparison


def module_text(program) -> str:
    """The module as MLIR text with locations (what backends compile). Text parsed
    from a file has locations in file ``"-"``; they name the file here."""
    text = program.module.operation.get_asm(enable_debug_info=True)
    if program.file_name:
        quoted = program.file_name.replace("\\", "\\\\").replace('"', '\\"')
        text = text.replace('loc("-":', 'loc("' + quoted + '":')
    return text


def _tensor_results(results) -> list[int]:
    return [i for i, value in enumerate(results) if not isinstance(value, (tuple, Token))]


def _windows(ops, budget: int):
    """Consecutive runs of ops whose tensor results fit ``budget`` bytes (at least one op each)."""
    window, size = [], 0
    for entry in ops:
        step, _, results = entry
        nbytes = sum(np.asarray(results[i]).nbytes for i in _tensor_results(results))
        if window and size + nbytes > budget:
            yield window
            window, size = [], 0
        window.append(entry)
        size += nbytes
    if window:
        yield window


def _check_window(window, text: str, values, run_backend, table) -> Divergence | None:
    returned = [(step.index, r) for step, _, results in window for r in _tensor_results(results)]
    if not returned:
        return None
    prefix = prefix_module(text, "main", window[-1][0].index, returned)
    theirs = iter(run_backend(prefix, values))
    for step, operands, results in window:
        for r in _tensor_results(results):
            other = next(theirs)
            found = difference(results[r], other, table)
            if found is not None:
                return Divergence(op_label(step), step.info.location, step.index, r, found,
                                  results[r], other, operands,
                                  tuple(region_name(step, i) for i in range(len(step.regions))))
    return None
