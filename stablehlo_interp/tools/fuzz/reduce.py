"""Shrink a program that shows a finding to a minimal one that still shows it.

Delta debugging (Zeller and Hildebrandt, *Simplifying and Isolating
Failure-Inducing Input*, 2002) on the program's parts, each step kept only when
the smaller program still shows the same :class:`~.check.Outcome` (same cause,
op and element type):

1. **fewer results**: one result alone, the ops it does not depend on dropped;
2. **fewer ops**: an op is *cut* when its result becomes an argument holding
   the value the interpreter computed for it in the whole program, so any set of
   ops is again a program; first the op the outcome names alone, then every op
   in turn; then each op *bypassed*: its uses read one of its operands of the
   same type (what a compiler that folds ``x - x`` needs to keep seeing);
3. **smaller shapes**: a program of element-wise ops (the same shape for every
   operand and result) becomes the same program on one element (rank 0), at an
   element where the backend differs;
4. **simpler values**: each argument element replaced by 0, then 1.

Every step costs one check (the interpreter and the backend run the candidate);
``budget`` bounds them. A candidate whose check times out (an
:class:`~.check.IsolatedCheck`'s deadline: cutting a loop's bound can make the
loop endless) shows another cause, so it is not kept and the reduction goes on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ...engine.run import Listener
from ...program import load
from ..compare import IMPLEMENTATION_DEFINED_VALUES
from .check import CRASH, Outcome, Timings, check
from .generate import BINARY, UNARY, random_values
from .programs import Program, TupleSpec

# Ops applied element by element to operands of one shape (a 0-d select predicate or clamp bound too).
ELEMENTWISE = frozenset(f"stablehlo.{name}" for name in [*UNARY, *BINARY, "compare", "select", "clamp", "convert",
                                                         "bitcast_convert", "reduce_precision", "complex"])


@dataclass
class Reduced:
    program: Program
    arguments: list
    outcome: Outcome
    checks: int


class _Values(Listener):
    """The results of the entry function's ops, in order (a list per op)."""

    def __init__(self):
        self.results: list = []

    def after_op(self, step, operands, results, stack):
        if not stack:
            self.results.append(list(results))
        return None


def values_of(program: Program, arguments: list) -> list:
    """Every value of ``program`` on ``arguments`` as the interpreter computes it; None
    for the ops after one that fails (those cannot be cut)."""
    recorder = _Values()
    try:
        load(program.text()).run(*arguments, listeners=[recorder])
    except Exception:  # noqa: BLE001 - an interpreter error is itself what the reduction keeps
        pass
    values = list(arguments)
    for k, op in enumerate(program.ops):
        results = recorder.results[k] if k < len(recorder.results) else [None] * len(op.results)
        values += list(results)
    return values


def reduce_finding(program: Program, arguments: list, outcome: Outcome, backend, budget: int = 100,
                   timings: Timings | None = None, checker=check) -> Reduced:
    """The smallest program (and arguments) found that shows ``outcome`` (module docstring).
    ``checker``: how a candidate is checked, :func:`~.check.check` or an
    :class:`~.check.IsolatedCheck` (for a backend that may kill its process, or a
    candidate that may not end)."""
    timings = Timings() if timings is None else timings
    start = time.perf_counter()
    state = _State(program, list(arguments), outcome, backend, budget, timings, checker)
    try:
        state.fewer_results()
        state.fewer_ops()
        state.one_element()
        state.simpler_values()
    finally:
        timings.add("reduction", time.perf_counter() - start)
    return Reduced(state.program, state.arguments, state.outcome, state.checks)


class _State:
    def __init__(self, program, arguments, outcome, backend, budget, timings, checker):
        self.program, self.arguments, self.outcome = program, arguments, outcome
        self.backend, self.budget, self.timings, self.checker = backend, budget, timings, checker
        self.checks = 0
        self.values = values_of(program, arguments)

    def _try(self, program: Program, arguments: list) -> bool:
        """Keep ``program`` when it still shows the outcome."""
        if self.checks >= self.budget:
            return False
        self.checks += 1
        seen = self.checker(program.text(), arguments, self.backend, Timings())
        if not self.outcome.same_as(seen):
            return False
        self.program, self.arguments, self.outcome = program, arguments, _keep_known(self.outcome, seen)
        self.values = values_of(program, arguments)
        return True

    def _cut(self, kept_ops, outputs=None, base: Program | None = None) -> bool:
        """Keep only ``kept_ops`` of ``base`` (this program, or one with the same values); the
        values they read that no kept op makes are arguments holding the interpreter's
        values, or random ones of their type where the interpreter never computed them (an
        interpreter error: its finding is not about values)."""
        program, sources = (base or self.program).keep(kept_ops, outputs)
        if len(program.ops) == len(self.program.ops) and program.outputs == self.program.outputs:
            return False
        if any(isinstance(program.values[v], TupleSpec) for v in [*range(program.arguments), *program.outputs]):
            return False   # a tuple argument or result: not what the generator makes, nor every backend takes
        if any(program.ops[k].name in IMPLEMENTATION_DEFINED_VALUES for k in map(program.op_of, program.outputs)
               if k is not None):
            return False   # random numbers returned as they are: the spec leaves them to the implementation
        if any(self.values[v] is None for v in sources) and not self.outcome.ours:
            return False   # a value the interpreter never computed
        rng = np.random.default_rng(len(self.program.ops))
        return self._try(program, [random_values(self.program.values[v], rng) if self.values[v] is None
                                   else self.values[v] for v in sources])

    def fewer_results(self) -> None:
        if len(self.program.outputs) > 1:
            all_ops = range(len(self.program.ops))
            for output in list(self.program.outputs):
                if self._cut(all_ops, [output]):
                    return

    def fewer_ops(self) -> None:
        """One op alone (the op the outcome names, or any), else every op cut in turn."""
        for k in reversed(range(len(self.program.ops))):
            if self.outcome.op in (None, self.program.ops[k].name) and self._cut([k], list(self.program.op_values(k))):
                return
        k = len(self.program.ops) - 1
        while k >= 0 and len(self.program.ops) > 1:
            kept = [j for j in range(len(self.program.ops)) if j != k]
            self._cut(kept)
            k = min(k - 1, len(self.program.ops) - 1)
        self.bypassed_ops()

    def bypassed_ops(self) -> None:
        """Each op in turn bypassed: its uses read one of its operands of its result's type."""
        k = len(self.program.ops) - 1
        while k >= 0 and len(self.program.ops) > 1:
            op = self.program.ops[k]
            for operand in dict.fromkeys(op.operands):
                if op.results == (self.program.values[operand],):
                    kept = [j for j in range(len(self.program.ops)) if j != k]
                    if self._cut(kept, base=self.program.bypass(k, operand)):
                        break
            k = min(k - 1, len(self.program.ops) - 1)

    def one_element(self) -> None:
        program = self.program
        shapes = {spec.shape for spec in program.values if spec.shape != ()}
        if len(shapes) != 1 or any(op.name not in ELEMENTWISE for op in program.ops):
            return
        shape = shapes.pop()
        if not shape or np.prod(shape) <= 1:
            return
        scalar = program.on_one_element()
        for index in self._differing_first(shape)[:16]:
            arguments = [np.asarray(a)[index] if np.shape(a) == shape else np.asarray(a) for a in self.arguments]
            if self._try(scalar, [np.asarray(a, a.dtype) for a in arguments]):
                return

    def _differing_first(self, shape: tuple) -> list:
        """Every element position, the one where the outcome saw a difference first."""
        positions = [tuple(p) for p in np.ndindex(*shape)]
        first = self.outcome.where
        return ([first] if first in positions else []) + [p for p in positions if p != first]

    def simpler_values(self, tries: int = 24) -> None:
        """Each argument all zeros; else each element 0, else 1 (at most ``tries`` elements;
        none for a crash, where each check that still crashes costs a new process)."""
        if self.outcome.cause == CRASH:
            tries = 0
        for position, argument in enumerate(self.arguments):
            argument = np.asarray(argument)
            zeros = np.zeros_like(argument)
            if argument.size and not _same_bits(argument, zeros) and self._replace(position, zeros):
                continue
            flat = argument.reshape(-1)
            for element in range(flat.size):
                for simple in (0, 1):
                    candidate = np.array(simple).astype(flat.dtype)
                    if _same_bits(flat[element], candidate) or tries <= 0:
                        break
                    tries -= 1
                    changed = flat.copy()
                    changed[element] = candidate
                    if self._replace(position, changed.reshape(argument.shape)):
                        flat = changed
                        break

    def _replace(self, position: int, value: np.ndarray) -> bool:
        arguments = list(self.arguments)
        arguments[position] = value
        return self._try(self.program, arguments)


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.tobytes() == b.tobytes()


def _keep_known(before: Outcome, after: Outcome) -> Outcome:
    """The newer outcome, keeping the op and element type the older one knew."""
    return Outcome(after.cause, after.op or before.op, after.element_type or before.element_type, after.detail,
                   after.where)
