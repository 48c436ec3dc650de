"""The first op that produces a NaN or an infinity.

    report = si.find_nonfinite(f, x)     # None when every value stays finite
    print(report)                        # op, source line, inputs, region calls around it

An op is reported when one of its results holds a NaN (or an infinity) and
none of its operands does: the op where the non-finite value appears, not the
ops it then flows through. The search runs the exact lowered program once,
inside loops and branches too, and stops at the first such op.

Infinities written into the program as constants are not reported: JAX writes
``-inf`` and ``inf`` as the initial values of every max and min reduction
(``softmax``, ``argmax``, ``max_pool`` ...), so the first infinity of most
programs is one of those. A NaN constant is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.run import Listener
from ..errors import StopExecution
from ..ir.locations import SourceLocation
from .region_calls import RegionCall, describe_stack, op_heading, op_label, region_calls
from ..program import prepare
from .summary import summarize, widened


KINDS = ("nan", "inf")


@dataclass
class NonFiniteReport:
    """Where a NaN or infinity first appeared.

    ``new`` lists, per result that has them, ``(result index, kind, count,
    index of the first one)`` with kind ``"nan"`` or ``"inf"``.
    """

    op: str
    location: SourceLocation
    stack: tuple[RegionCall, ...]
    operands: list
    results: list
    new: list

    def __str__(self) -> str:
        lines = op_heading(f"first non-finite value: {self.op}", self.location)
        for index in sorted({entry[0] for entry in self.new}):
            found = [f"{count} {'NaN' if kind == 'nan' else 'inf'}" + (f" (first at {list(first)})" if first else "")
                     for i, kind, count, first in self.new if i == index]
            lines.append(f"  result #{index} has {' and '.join(found)}: {summarize(self.results[index])}")
        for index, operand in enumerate(self.operands):
            lines.append(f"  operand #{index}: {summarize(operand)}")
        lines += ["  " + line for line in describe_stack(self.stack)]
        return "\n".join(lines)


class NonFiniteFinder(Listener):
    """A listener that finds the first op whose results hold a NaN or inf its operands did not.

    With ``stop=True`` (default) it stops the run there (``StopExecution``
    carrying the report, whose message is the report's text: on the interp
    device, JAX raises it as the error of the computation). With
    ``stop=False`` it keeps the first report of each run in ``reports`` and
    lets the runs go on.
    """

    def __init__(self, stop: bool = True):
        self.stop = stop
        self.reports: list[NonFiniteReport] = []
        self._reported_this_run = False

    @property
    def report(self) -> NonFiniteReport | None:
        return self.reports[0] if self.reports else None

    def before_op(self, step, operands, stack) -> None:
        if not stack and step.index == 0:
            self._reported_this_run = False

    def after_op(self, step, operands, results, stack):
        if self._reported_this_run:
            return None
        before = _kinds(operands) if operands else {"inf"}   # a constant's infinities: see the module's text
        new = [(index, kind, *_first(value, kind)) for index, value in enumerate(results)
               for kind in KINDS if kind in _kinds([value]) - before]
        if new:
            self._reported_this_run = True
            report = NonFiniteReport(op_label(step), step.info.location, region_calls(stack),
                                     list(operands), list(results), new)
            self.reports.append(report)
            if self.stop:
                raise StopExecution(str(report), values=report)
        return None


def find_nonfinite(target, *args, function: str | None = None, **kwargs) -> NonFiniteReport | None:
    """Run ``target`` on ``args`` and report the first op that made a NaN or inf (None if none did)."""
    call = prepare(target, args, kwargs, function)
    finder = NonFiniteFinder(stop=True)
    try:
        call.run([finder])
    except StopExecution as stopped:
        if stopped.values is not finder.report:
            raise
    return finder.report


def _kinds(values) -> set:
    kinds = set()
    for value in values:
        if isinstance(value, tuple):
            kinds |= _kinds(value)
            continue
        array = widened(value)
        if array is None:
            continue
        if np.isnan(array).any():
            kinds.add("nan")
        if np.isinf(array).any():
            kinds.add("inf")
    return kinds


def _first(value, kind: str) -> tuple[int, tuple]:
    """(count, index of the first) of NaNs or infinities in a value (tuples: their elements)."""
    if isinstance(value, tuple):
        found = [_first(v, kind) for v in value]
        return sum(count for count, _ in found), next((index for count, index in found if count), ())
    array = widened(value)
    mask = np.isnan(array) if kind == "nan" else np.isinf(array)
    positions = np.argwhere(mask)
    return len(positions), tuple(int(i) for i in positions[0]) if len(positions) else ()
