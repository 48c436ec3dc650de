"""Trace: a record of every op a run executes, with a summary of its values.

    trace = si.trace(f, x)          # or a module and its arguments
    print(trace)                    # nesting shown, long runs of loop iterations folded
    trace.records[3].results        # the data: one OpRecord per executed op

Ops inside regions (loop bodies, branches, called functions, reduction bodies
that run op by op) are recorded with the region calls around them; regions an
op runs once on whole tensors appear with ``vectorized`` set. Records are
made before an op runs (so an op that owns regions comes before the ops of its
regions) and completed when it has run.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import html
import warnings
from dataclasses import dataclass, field

from ..engine.run import Listener
from ..errors import InterpreterError, OpError
from ..ir.locations import Frame, SourceLocation, describe_frame
from .region_calls import RegionCall, op_label, region_calls, result_names
from .selection import describe, matcher
from ..program import prepare
from .per_device import prepare_checked
from ..judge.summary import ValueSummary, summarize
from .transcript import render


@dataclass
class OpRecord:
    """One executed op.

    ``number`` is its position in the run; ``parent`` the number of the op whose
    region it ran in (None in the entry function); ``stack`` the region calls
    around it, outermost first. ``results`` summarize the values it produced
    (``values`` holds the arrays themselves when the trace keeps them). An op
    that failed has ``results is None``. ``process`` is the id of the process of
    a grid that ran it (in a per-device run, the device's), None outside a grid.

    ``location`` is the op's own; ``frame`` the Python line that made it, which an op
    of a function JAX lowered with no Python frame lacks in its own location (the ops
    of a jitted library function such as ``jax.nn.silu``, of the PRNG's threefry):
    ``frame_reason`` then says where ``frame`` came from, or why there is none.
    """

    number: int
    step: object
    label: str
    stack: tuple[RegionCall, ...]
    parent: int | None
    result_types: tuple[str, ...]
    results: tuple[ValueSummary, ...] | None = None
    values: tuple | None = None
    process: int | None = None

    @property
    def op(self) -> str:
        return self.step.info.name

    @property
    def location(self) -> SourceLocation:
        return self.step.info.location

    @property
    def names(self) -> tuple[str, ...]:
        """The names the module's text gives the op's results (``%m``), or () (region_calls.result_names)."""
        return result_names(self.step)

    @property
    def depth(self) -> int:
        return len(self.stack)

    @property
    def frame(self) -> Frame | None:
        """The Python line that made the op: its location's innermost frame; where it has
        none, that of the innermost op around it that has one (the call of the function
        whose ops JAX lowered without frames). None where no op around it has one either."""
        return self._source()[0]

    @property
    def frame_reason(self) -> str | None:
        """None when ``frame`` is the op's own; else where it came from, or why there is none."""
        frame, around = self._source()
        if around is not None:
            return f"its location has no Python frame: the frame is that of the {around} around it"
        if frame is not None:
            return None
        if not self.location:
            return "the module gives this op no location"
        return f"its location names no Python frame, only {self.location.name!r}"

    @property
    def where(self) -> str:
        """``model.py:8 (f)``; ``inside func.call @silu at model.py:8 (f)`` for a frame taken
        from the op around it; ``no source: `` and the reason where there is none."""
        frame, around = self._source()
        if frame is None:
            return f"no source: {self.frame_reason}"
        return f"inside {around} at {describe_frame(frame)}" if around else describe_frame(frame)

    def _source(self) -> tuple[Frame | None, str | None]:
        """The frame, and the op around whose frame it is (``func.call @silu``,
        ``stablehlo.while``; None for the op's own frame, or none)."""
        own = self.location.frame
        if own is not None:
            return own, None
        for call in reversed(self.stack):
            frame = call.location.frame if call.location else None
            if frame is not None:
                return frame, f"{call.op} {call.region}" if call.region.startswith("@") else call.op
        return None, None

    def as_dict(self) -> dict:
        """The record as JSON-ready data."""
        frame = self.frame
        return {
            "number": self.number, "op": self.op, "label": self.label, "names": list(self.names), "parent": self.parent,
            "process": self.process,
            "location": str(self.location) if self.location else None,
            "source": f"{frame.file}:{frame.line}" if frame else None,
            "source_reason": self.frame_reason,
            "stack": [{"op": c.op, "region": c.region, "call": c.call, "vectorized": c.vectorized}
                      for c in self.stack],
            "result_types": list(self.result_types),
            "results": None if self.results is None else [str(r) for r in self.results],
            "nonfinite": None if self.results is None else sum(r.nonfinite for r in self.results),
        }

    def __str__(self) -> str:
        values = ", ".join(map(str, self.results)) if self.results is not None else "(did not finish)"
        return f"{self.label}  {values}  # {self.where}"


@dataclass
class Trace:
    """The ops one run executed, in order. ``str(trace)`` is the readable transcript."""

    records: list[OpRecord] = field(default_factory=list)
    function: str | None = None
    outputs: list | None = None       # the run's results, when the run finished
    error: InterpreterError | None = None
    process_name: str = "process"     # what a grid's process is (engine/grid.py Grid.member): "device" or "process"

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def __getitem__(self, index):
        return self.records[index]

    def find(self, selector) -> list[OpRecord]:
        """The records of the ops a selector chooses (see ``tools.selection``: an op name,
        ``FILE:LINE``, a file name, a line number, a predicate). When it chooses none: an
        empty list, and a :class:`NoMatchWarning` that says how the selector was read and
        which ops and files the trace holds."""
        chosen = matcher(selector)
        found = [record for record in self.records if chosen(record.step)]
        if not found:
            warnings.warn(self._no_match(selector), NoMatchWarning, stacklevel=2)
        return found

    def _no_match(self, selector) -> str:
        if not self.records:
            return f"no op matches {selector!r}: the trace holds no op"
        ops = dict.fromkeys(record.op.removeprefix("stablehlo.") for record in self.records)
        files = dict.fromkeys(record.location.frame.file.rsplit("/", 1)[-1]
                              for record in self.records if record.location.frame is not None)
        return (f"no op matches {selector!r} (read as {describe(selector)}); the trace's ops are {_some(ops)}, "
                f"from {'the files ' + _some(files) if files else 'no file (no op has a source location)'}")

    def as_dicts(self) -> list[dict]:
        return [record.as_dict() for record in self.records]

    def text(self, *, head: int = 2, tail: int = 1, sources: bool = False) -> str:
        """The transcript; see :func:`~stablehlo_interp.tools.transcript.render`."""
        return render(self, head=head, tail=tail, sources=sources)

    def __str__(self) -> str:
        return self.text()

    def _repr_html_(self, limit: int = 2000) -> str:
        """The trace as an HTML table, for Jupyter: each op (indented inside its region
        calls), its results and its source line; the first ``limit`` ops."""
        rows = []
        for record in self.records[:limit]:
            values = ", ".join(map(str, record.results)) if record.results is not None else "(did not finish)"
            calls = f' title="{html.escape(str(record.stack[-1]))}"' if record.stack else ""
            rows.append(f'<tr><td style="padding-left: {0.3 + 1.5 * record.depth}em"{calls}>{html.escape(record.label)}'
                        f"</td><td><code>{html.escape(values)}</code></td>"
                        f"<td>{html.escape(record.where)}</td></tr>")
        more = len(self.records) - limit
        if more > 0:
            rows.append(f'<tr><td colspan="3">... {more} more ops</td></tr>')
        if self.error is not None:
            rows.append(f'<tr><td colspan="3" style="color: #a00">{html.escape(str(self.error))}</td></tr>')
        return ('<table style="font-family: monospace; text-align: left"><thead><tr><th>op</th><th>results</th>'
                f'<th>source</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


class TraceRecorder(Listener):
    """A listener that records every op; one :class:`Trace` per run it observes.

    ``values=True`` also keeps every result array (memory grows with the run).
    The same recorder can watch many runs (on the interp device, every program
    JAX executes): a run starts when the first op of an entry function runs (in
    a grid of processes, process 0's), and ends when its last op has run (in
    every process of the grid); ``on_trace(trace)`` is then called. The processes
    of a grid take turns (engine/grid.py), so each has its own open ops.
    """

    def __init__(self, values: bool = False, on_trace=None):
        self.keep_values = values
        self.on_trace = on_trace
        self.traces: list[Trace] = []
        self._open: dict = {}   # id of a process -> the records of the ops it runs, outermost first
        self._last_step = None   # the entry function's last op: when every process has run it, the run is over
        self._finished = 0

    @property
    def trace(self) -> Trace:
        """The latest run's trace."""
        if not self.traces:
            self.traces.append(Trace())
        return self.traces[-1]

    def before_op(self, step, operands, stack) -> None:
        process = stack.process
        if not stack and step.index == 0 and process.id == 0:
            function = _entry_function(step)
            self.traces.append(Trace(function=function and function.name))
            self._last_step = function.region.steps[-1] if function else None
            self._open, self._finished = {}, 0
        opened = self._open.setdefault(id(process), [])
        while opened and opened[-1].depth >= len(stack):  # ops that raised never closed
            opened.pop()
        trace = self.trace
        if process.grid.size > 1:
            trace.process_name = process.grid.member
        parent = self._enclosing(opened, stack)
        record = OpRecord(len(trace.records), step, op_label(step), region_calls(stack), parent,
                          tuple(map(str, step.info.result_types)),
                          process=process.id if process.grid.size > 1 else None)
        trace.records.append(record)
        opened.append(record)

    def _enclosing(self, opened: list, stack) -> int | None:
        """The number of the op whose region runs the op: the process's own innermost open
        op, or for the first op of a process that a region started (a manual
        computation's), the open op that owns that region."""
        if not stack:
            return None
        if opened:
            return opened[-1].number
        owners = [record for records in self._open.values() for record in records
                  if record.depth == len(stack) - 1 and record.step is stack[-1].step]
        return max(owners, key=lambda record: record.number).number if owners else None

    def after_op(self, step, operands, results, stack):
        record = self._open[id(stack.process)].pop()
        record.results = tuple(summarize(value) for value in results)
        if self.keep_values:
            record.values = tuple(results)
        if step is self._last_step and not stack:
            self._finished += 1
            if self._finished == stack.process.grid.size and self.on_trace is not None:
                self.on_trace(self.trace)
        return None


def _some(names, shown: int = 12) -> str:
    """The first ``shown`` names, and how many more."""
    names = list(names)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


class NoMatchWarning(UserWarning):
    """``Trace.find``'s selector chose no op (a misspelt op name, a file no op came from)."""


def _entry_function(step):
    """The function whose first op is ``step`` (None for an unknown plan)."""
    module = step.info.module
    for function in (module.functions.values() if module is not None else ()):
        if function.region and function.region.steps and function.region.steps[0] is step:
            return function
    return None


def trace(target: Any, *args: Any, function: str | None = None, values: bool = False, per_device: bool = False,
          listeners: Sequence[Listener] = (), **kwargs: Any) -> Trace:
    """Run ``target`` (a module, or a jit-able function) on ``args`` and record every op.

    A run that fails returns the trace up to the failing op, with ``trace.error``
    set (the failing op is the last record, with ``results is None``). With
    ``per_device=True`` a sharded program runs as XLA runs it, each device its own
    program (``si.run_per_device``): the records of device ``d`` have ``process == d``;
    where Shardy cannot partition it, a ``PerDeviceWarning`` says why and the global
    program runs. ``listeners`` watch the run too (a progress line, say).
    """
    call = prepare_checked(target, args, kwargs, function) if per_device else prepare(target, args, kwargs, function)
    return record_run(call, values=values, listeners=listeners)


def record_run(call, values: bool = False, listeners: Sequence[Listener] = ()) -> Trace:
    """The trace of one run of a prepared :class:`~stablehlo_interp.program.calls.Call`."""
    recorder = TraceRecorder(values=values)
    try:
        outputs = call.run([recorder, *listeners])
    except OpError as error:
        recorder.trace.error = error
    else:
        recorder.trace.outputs = outputs
    recorder.trace.function = call.function
    return recorder.trace
