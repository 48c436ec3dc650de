"""Profile: where a run's time goes, by op name and by source line.

    profile = si.profile(f, x)      # or a module and its arguments
    print(profile)                  # op names by their share of the run: time, calls, time per call
    profile.by_op()                 # the data: {op name: OpTime(calls, seconds)}, most time first
    profile.by_line()               # {"file.py:12": OpTime}: the Python line each op came from

An op's time is its *own* time: from just before its runner starts to just after
it returns, less the time of the ops its regions ran op by op (a ``while``'s
body, a called function, a reduction body that is not vectorized), which are
counted under their own names. What is left of the run's wall time is the run
loop's own work between ops, and the profiler's (``overhead``).
"""

from __future__ import annotations

from typing import Any

import time
from dataclasses import dataclass

from ..engine.run import Listener
from ..program import prepare
from ..ir.locations import describe_location


@dataclass(frozen=True)
class OpTime:
    """The calls of an op name (or of a source line's ops) and their own time, in seconds."""

    calls: int
    seconds: float

    @property
    def per_call(self) -> float:
        return self.seconds / self.calls if self.calls else 0.0


class Profiler(Listener):
    """A listener that times each op it sees run (its own time, nested ops excepted).

    ``times`` maps each :class:`~stablehlo_interp.engine.plan.Step` to ``[calls, seconds]``;
    the same profiler can watch many runs (on the interp device, ``si.on_device``),
    and sums them.

    In a grid of processes (a per-device run, a ``shard_map`` body), the processes run
    one at a time (engine/grid.py): while one waits at a collective for the others, they
    run their own ops. So a process's op is timed on the process's own clock, which
    runs only while it does; the collective's time is its own exchange, not the others'
    work before it (which their ops count).
    """

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.times: dict = {}
        self._open: dict = {}   # id of a process -> [step, start, time of nested ops] of its open ops
        self._ran: dict = {}    # id of a process of a grid -> the time it has run (its own clock)
        self._last = None       # the clock at the last op's start or end seen in a grid

    def _now(self, process) -> float:
        """The clock of ``process``: ``clock()`` outside a grid; in a grid, the time
        it has run, the time since the last op's start or end in any process counted
        as the running process's (one runs at a time)."""
        now = self.clock()
        if process.grid.size == 1:
            return now
        key = id(process)
        self._ran[key] = self._ran.get(key, 0.0) + (now - self._last if self._last is not None else 0.0)
        self._last = now
        return self._ran[key]

    def before_op(self, step, operands, stack) -> None:
        opened = self._open.setdefault(id(stack.process), [])
        del opened[len(stack):]   # ops that raised never closed
        opened.append([step, 0.0, 0.0])
        opened[-1][1] = self._now(stack.process)

    def after_op(self, step, operands, results, stack):
        end = self._now(stack.process)
        opened = self._open[id(stack.process)]
        _, start, nested = opened.pop()
        elapsed = end - start
        if opened:
            opened[-1][2] += elapsed
        entry = self.times.get(step)
        if entry is None:
            self.times[step] = [1, elapsed - nested]
        else:
            entry[0] += 1
            entry[1] += elapsed - nested
        return None

    def profile(self, wall: float | None = None) -> "Profile":
        """The times so far as a :class:`Profile` (``wall``: the runs' wall time, if known)."""
        return Profile({step: OpTime(calls, seconds) for step, (calls, seconds) in self.times.items()}, wall)


@dataclass
class Profile:
    """Each executed op's calls and own time; ``wall`` the run's wall time (None when unknown)."""

    steps: dict
    wall: float | None = None

    @property
    def seconds(self) -> float:
        """The own time of every op, summed."""
        return sum(t.seconds for t in self.steps.values())

    @property
    def calls(self) -> int:
        """Ops executed."""
        return sum(t.calls for t in self.steps.values())

    @property
    def overhead(self) -> float | None:
        """The run's wall time outside the ops: the run loop's work and the profiler's."""
        return None if self.wall is None else self.wall - self.seconds

    def by_op(self) -> dict[str, OpTime]:
        """``{op name: OpTime}``, most time first."""
        return self._grouped(lambda step: step.info.name)

    def by_line(self) -> dict[str, OpTime]:
        """``{"file.py:12 (function)": OpTime}`` by the Python line JAX recorded in each op's
        location ("" for ops without one), most time first."""
        return self._grouped(lambda step: describe_location(step.location))

    def _grouped(self, key) -> dict:
        totals: dict = {}
        for step, spent in self.steps.items():
            calls, seconds = totals.get(key(step), (0, 0.0))
            totals[key(step)] = (calls + spent.calls, seconds + spent.seconds)
        ordered = sorted(totals.items(), key=lambda item: -item[1][1])
        return {name: OpTime(calls, seconds) for name, (calls, seconds) in ordered}

    def text(self, *, by: str = "op", top: int = 20) -> str:
        """A table of the ``top`` op names (``by="op"``) or source lines (``by="line"``) with
        the most time: own time, share of all ops' time, calls, time per call."""
        groups = self.by_op() if by == "op" else self.by_line()
        total = self.seconds
        width = max([len(name) for name in list(groups)[:top]] + [len(by)])
        lines = [f"{by:{width}}  {'time':>9}  {'share':>6}  {'calls':>7}  {'per call':>9}"]
        for name, spent in list(groups.items())[:top]:
            share = spent.seconds / total if total else 0.0
            lines.append(f"{name:{width}}  {_format_seconds(spent.seconds):>9}  {share:6.1%}  {spent.calls:7d}  "
                         f"{_format_seconds(spent.per_call):>9}")
        if len(groups) > top:
            rest = list(groups.values())[top:]
            lines.append(f"... {len(rest)} more, {_format_seconds(sum(t.seconds for t in rest))}")
        summary = f"{self.calls} ops, {_format_seconds(total)} in ops"
        if self.wall is not None:
            summary += f", {_format_seconds(self.wall)} wall ({_format_seconds(self.wall - total)} between ops)"
        return "\n".join(lines + [summary])

    def __str__(self) -> str:
        return self.text()


def _format_seconds(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def profile(target: Any, *args: Any, function: str | None = None, per_device: bool = False,
            **kwargs: Any) -> Profile:
    """Run ``target`` (a module, or a jit-able function) on ``args`` once and time every op.

    The times are those of an observed run (each op's runner as the run loop calls it);
    the plan is built before the clock starts. A run that fails raises its error.
    """
    call = prepare(target, args, kwargs, function, per_device=per_device)
    profiler = Profiler()
    start = time.perf_counter()
    call.run([profiler])
    return profiler.profile(time.perf_counter() - start)
