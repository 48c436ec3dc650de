"""Where the NaN or inf in a result came from.

    report = si.find_nonfinite(f, x)     # None when every result is finite
    print(report)                        # per origin: op, source line, operands, path to the result

The default answer follows each non-finite value of a result (the loss, a
gradient, the new state: every result of the entry function) back through the
dataflow to its *origin*, the op that computed it from finite operands, and
names that op, its source line, its operands, the region calls around it and
the ops it then flowed through to the result. Non-finite values that never reach
a result are not blamed: ``jnp.take``'s NaN fill that the gather's mask selects
away, the ``-inf`` initial value of a max reduction, a masked branch of
``jnp.where``, a solver's inf fill of steps it does not save. The program runs
once (:class:`NonFiniteTracer`); values are followed into and out of
``func.call``, ``while``, ``case`` and ``if`` (see :class:`NonFiniteTracer` for
the rule at each op).

Each origin also says *why* (``origin.why``, :class:`WhyStep`): a constant that a
``select``, ``if`` or ``case`` chose, or any value a ``while`` returned when it stopped,
because the predicate, index or condition was computed from a non-finite value or from
a LAPACK call that failed, is followed to that cause and its own origin: ``-inf`` chosen
by ``where(isfinite(loglike), loglike, -inf)``, ``loglike`` NaN because the Cholesky
factorization failed at column 7. Factorizations and solves say how they failed
(ops/lapack.py ``failure``): the tracer keeps that for each LAPACK custom call whose
``info`` is not 0 and each spec ``cholesky`` or ``triangular_solve`` (other platforms'
lowerings) whose result is not finite on a finite matrix; the
rest is found when the report is made, from the program's dataflow (:meth:`NonFiniteTracer.why`).

``mode="first"`` gives the older answer (:class:`NonFiniteFinder`): the first op
anywhere whose results hold a NaN or inf that its operands did not, whether or
not it reaches a result. Infinities written into the program as constants are
not reported there (JAX writes ``-inf`` and ``inf`` as the initial values of
every max and min reduction); a NaN constant is.

``per_device=True`` runs a sharded program as XLA runs it, each device its own
partitioned program on its shards (sharding/per_device.py), and gives either answer
for each device whose results (its shards) hold a NaN or inf, on that device's
program and values (:class:`PerDeviceNonFinite`). Where Shardy cannot partition the
program, a ``PerDeviceWarning`` says why and the global program answers. Where an
origin of the global program's answer is a manual computation (``jax.shard_map``'s
``sdy.manual_computation``: its body runs on each device's block, so the global run
sees the whole op make the value), the program is also run per device, and the
answer says which op of the body made it on which device (``inside_manual``).
"""

from __future__ import annotations

from typing import Any

import math
import threading
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..engine.grid import COLLECTIVES
from ..engine.registry import ELEMENTWISE_OPS
from ..engine.run import Listener, numpy_warnings_off
from ..errors import InterpreterError, StopExecution
from ..ir.locations import SourceLocation, describe_location
from ..engine.process_groups import contributors
from ..ops.lapack import failure
from ..program import prepare
from .per_device import prepare_checked
from ..sharding.per_device import PerDeviceWarning
from .region_calls import RegionCall, describe_stack, op_heading, op_label, region_calls, region_name
from ..judge.summary import ValueSummary, is_float_dtype, summarize, widened


KINDS = ("nan", "inf")
MODES = ("origins", "first")


@dataclass
class NonFiniteReport:
    """An op where a NaN or infinity appeared (the answer of ``mode="first"``).

    ``new`` lists, per result that has them, ``(result index, kind, count,
    index of the first one)`` with kind ``"nan"`` or ``"inf"``. ``operands`` and
    ``results`` are the op's values (arrays, or their
    :class:`~.summary.ValueSummary` where a long run keeps no more). ``process``
    is the id of the process of a grid that ran the op (in a per-device run, the
    device's), None outside a grid.
    """

    op: str
    location: SourceLocation
    stack: tuple[RegionCall, ...]
    operands: list
    results: list
    new: list
    process: int | None = field(default=None, kw_only=True)
    process_name: str = field(default="process", kw_only=True)   # "device" in a device's run (Grid.member)

    def title(self) -> str:
        return f"first non-finite value: {self.op}"

    def lines(self) -> list[str]:
        lines = op_heading(self.title(), self.location)
        if self.process is not None:
            lines.append(f"  on {self.process_name} {self.process}")
        for index in sorted({entry[0] for entry in self.new}):
            found = [f"{count} {_kind_name(kind)}" + (f" (first at {list(first)})" if first else "")
                     for i, kind, count, first in self.new if i == index]
            lines.append(f"  result #{index} has {' and '.join(found)}: {_summary(self.results[index])}")
        for index, operand in enumerate(self.operands):
            lines.append(f"  operand #{index}: {_summary(operand)}")
        return lines + ["  " + line for line in describe_stack(self.stack)]

    def __str__(self) -> str:
        return "\n".join(self.lines())


@dataclass
class PerDeviceNonFinite:
    """The answer of :func:`find_nonfinite` with ``per_device=True``: by device id, the
    answer on that device's partitioned program (:class:`NonFiniteOrigins` of the NaNs
    and infs of its results, or with ``mode="first"`` its first
    :class:`NonFiniteReport`), for each device that has one."""

    devices: dict

    @property
    def first(self):
        """The first device's answer's first origin (its report in mode first; None
        where no origin was found)."""
        answer = next(iter(self.devices.values()))
        return answer if isinstance(answer, NonFiniteReport) else (answer.origins or [None])[0]

    @property
    def op(self) -> str | None:
        return self.first.op if self.first is not None else None

    def __str__(self) -> str:
        lines = []
        for device, answer in self.devices.items():
            lines.append(f"device {device}:")
            lines += ["  " + line for line in str(answer).splitlines()]
        return "\n".join(lines)


@dataclass(frozen=True)
class ChainLink:
    """An op a non-finite value flowed through on its way to a result."""

    op: str
    location: SourceLocation | None
    stack: tuple[RegionCall, ...]
    process: int | None = None    # set where the value has moved to another process than its origin's
    process_name: str = "process"  # "device" in a device's run (Grid.member)

    def __str__(self) -> str:
        frame = self.location.frame if self.location else None
        text = f"{self.op} ({frame.file.rsplit('/', 1)[-1]}:{frame.line})" if frame else self.op
        return text if self.process is None else f"{text} on {self.process_name} {self.process}"


@dataclass(frozen=True)
class WhyStep:
    """One step of why a non-finite value is what it is (:attr:`NonFiniteOrigin.why`),
    from the result towards the cause. ``kind``: ``"chosen"``, a decision op (``select``,
    ``if``, ``case``, a ``while``'s exit) picked the value, ``detail`` says
    on what; ``"made"``, the op made the non-finite value (``detail``: ``NaN``, ``inf``)
    that a decision was computed from (``"argument"``: it came in as an argument);
    ``"failed"``, a factorization or solve whose failure the value or the decision comes from,
    ``detail`` says how it failed (ops/lapack.py ``failure``)."""

    kind: str
    op: str
    location: SourceLocation | None
    detail: str = ""

    def __str__(self) -> str:
        where = describe_location(self.location)
        at = f" at {where}" if where else ""
        if self.kind == "chosen":
            return f"chosen by {self.op}{at}: {self.detail}"
        if self.kind == "made":
            return f"{self.detail} made by {self.op}{at}"
        if self.kind == "argument":
            return f"{self.detail} in {self.op}"
        return f"{self.op}{at} failed: {self.detail}"


@dataclass
class NonFiniteOrigin(NonFiniteReport):
    """An op that computed non-finite values from finite operands, and those values
    reached results.

    ``new`` counts only the values this op made (an element-wise op may also pass
    on non-finite operands). ``reaches`` are the indices of the results they
    reach; ``chain`` the ops from this one to the first of them (the origin
    itself not included); ``why`` the decisions and failures behind the value
    (:class:`WhyStep`, from the result to the cause: the ``select`` that chose a ``-inf``
    constant because ``isfinite(loglike)`` was false, the op that made ``loglike`` NaN,
    the Cholesky factorization that failed); ``executions`` how many executions of this op are
    origins of values that reach results (in a loop: how many iterations);
    ``stack``, ``operands`` and ``results`` are those of the first of them;
    ``step`` the op's step in the plan. An origin that is an argument of the entry
    function has ``op`` ``"argument #i"``, no location and no step.
    """

    reaches: tuple[int, ...] = ()
    chain: tuple[ChainLink, ...] = ()
    executions: int = 1
    step: object = field(default=None, repr=False, compare=False)
    labels: tuple = ()            # the results it reaches by name (result['loss'], or result #0), as reaches
    argument: str | None = None   # an argument origin by name (argument x['w'], or argument #0)
    why: tuple[WhyStep, ...] = ()

    def title(self) -> str:
        kinds = " and ".join(dict.fromkeys(_kind_name(kind) for _, kind, _, _ in self.new)) or "non-finite value"
        return f"{kinds} in {self.argument}" if self.argument else f"{kinds} made by {self.op}"

    def lines(self) -> list[str]:
        lines = super().lines()
        heading = 2 if len(lines) > 1 and lines[1].startswith("  source: ") else 1
        lines[heading:heading] = [f"  {'why:' if number == 0 else '   ←'} {step}"
                                  for number, step in enumerate(self.why)]
        if self.executions > 1:
            lines.insert(1, f"  in {self.executions} executions of the op; the first is shown")
        labels = self.labels or tuple(f"result #{index}" for index in self.reaches)
        path = " → ".join(compress_chain(self.chain) + [labels[0]])
        if all(label == f"result #{index}" for label, index in zip(labels, self.reaches)):   # no names
            targets = f"result{'s' if len(self.reaches) > 1 else ''} " + ", ".join(f"#{i}" for i in self.reaches)
        else:
            targets = ", ".join(labels)
        lines.append(f"  reaches {targets}: {path}")
        return lines


@dataclass
class NonFiniteOrigins:
    """The answer of :func:`find_nonfinite`: the non-finite results, and the origins of
    their non-finite values (:class:`NonFiniteOrigin`, by order of execution).

    ``nonfinite_results`` lists ``(index, summary)`` of each result holding a NaN
    or inf. ``op``, ``location``, ``stack``, ``operands``, ``results`` and ``new``
    are the first origin's (None when no origin was found).
    """

    nonfinite_results: list
    origins: list[NonFiniteOrigin] = field(default_factory=list)
    labels: dict = field(default_factory=dict)   # result index -> its name (result['loss']), where it has one
    inside_manual: PerDeviceNonFinite | None = None   # where an origin is manual code: each device's own origins

    def _first(self, name: str):
        return getattr(self.origins[0], name) if self.origins else None

    op = property(lambda self: self._first("op"))
    location = property(lambda self: self._first("location"))
    stack = property(lambda self: self._first("stack"))
    operands = property(lambda self: self._first("operands"))
    results = property(lambda self: self._first("results"))
    new = property(lambda self: self._first("new"))
    process = property(lambda self: self._first("process"))

    def __str__(self) -> str:
        lines = [f"non-finite {self.labels.get(index, f'result #{index}')}: {summary}"
                 for index, summary in self.nonfinite_results]
        for origin in self.origins:
            lines += origin.lines()
        if not self.origins:
            lines.append("no origin found: the values were followed back to ops this search does not enter")
        if self.inside_manual is not None:
            lines.append(f"inside {MANUAL}, run per device:")
            lines += ["  " + line for line in str(self.inside_manual).splitlines()]
        return "\n".join(lines)


def compress_chain(chain) -> list[str]:
    """The links as text, a run of repeated links (a loop's iterations, up to
    _CHAIN_PERIOD links each) written once with ``×n``: ``add (f.py:3) → [add (f.py:3)
    → func.call @body] ×97 → while``; a chain still longer than 2 x _CHAIN_SHOWN
    links keeps its ends."""
    texts = [str(link) for link in chain]
    out, position = [], 0
    while position < len(texts):
        best_period, best_count = 1, 1
        for period in range(1, _CHAIN_PERIOD + 1):
            if position + period >= len(texts) or texts[position + period] != texts[position]:
                continue
            block, count = texts[position:position + period], 1
            while texts[position + count * period:position + (count + 1) * period] == block:
                count += 1
            if count > 1 and count * period > best_count * best_period:
                best_period, best_count = period, count
        block = texts[position:position + best_period]
        if best_count == 1:
            out.append(block[0])
        else:
            out.append(f"{block[0] if best_period == 1 else '[' + ' → '.join(block) + ']'} ×{best_count}")
        position += best_period * best_count
    if len(out) > 2 * _CHAIN_SHOWN + 1:
        out = out[:_CHAIN_SHOWN] + [f"… {len(out) - 2 * _CHAIN_SHOWN} more …"] + out[-_CHAIN_SHOWN:]
    return out


_CHAIN_PERIOD = 32   # the longest run of links compress_chain finds repeated
_CHAIN_SHOWN = 6     # links shown at each end of a long chain


# ------------------------------------------------------------------ the origins


# Ops whose regions the search follows values into: the others (reduce, sort, map,
# scatter ...) are followed as one op, from their results to their operands.
_WHILE, _CASE, _IF = "stablehlo.while", "stablehlo.case", "stablehlo.if"
_CALLS = ("func.call", "stablehlo.composite")     # region[-1] takes the operands, returns the results
_ENTERED = (_WHILE, _CASE, _IF, *_CALLS)
# Ops that only move elements: a non-finite result element is a non-finite operand element.
_MOVES = frozenset(f"stablehlo.{name}" for name in (
    "broadcast_in_dim", "concatenate", "dynamic_slice", "dynamic_update_slice", "gather", "pad", "reshape",
    "reverse", "slice", "transpose"))
_PICKS = ("stablehlo.maximum", "stablehlo.minimum", "stablehlo.clamp")   # element-wise, result = an operand
_REDUCTIONS = ("stablehlo.reduce", "stablehlo.reduce_window")   # operands: inputs, then initial values
_CUSTOM_CALL = "stablehlo.custom_call"
_MAY_FAIL = frozenset((_CUSTOM_CALL, "stablehlo.cholesky", "stablehlo.triangular_solve"))   # ops/lapack.py failure
_CAUSE_SEARCH = 4096       # the values a search for a decision's cause looks at, at most
_WHY_DEPTH = 8             # the origins a why follows, at most
_SMALL = 256               # arrays up to this size are checked for NaN and inf by subtraction (faster)
_KEEP_ELEMENTS = 1 << 20    # an origin's values are kept whole up to this many elements (else summaries)


class _Made:
    """One execution of an op (in the region call ``key``) that produced a non-finite
    result: where the non-finite values of result ``r`` come from, the operands
    ``follow[r]`` (indices; None for a finite result) or the outputs of the region
    call ``inner`` (a loop's last iteration, a called function, the branch taken),
    and which ones it made itself (``new``: None, or per result ``(kind, count,
    first index)`` tuples; then ``details`` keep the op's values)."""

    __slots__ = ("step", "key", "order", "follow", "inner", "new", "details", "peers")

    def __init__(self, step, key, order, follow, inner, new, details, peers=None):
        self.step, self.key, self.order, self.follow, self.inner = step, key, order, follow, inner
        self.new, self.details, self.peers = new, details, peers


class NonFiniteTracer(Listener):
    """Records, in one run, where each non-finite value came from; :meth:`report`
    follows the non-finite results back to their origins.

    For each op whose results hold a NaN or inf it keeps a small record (no
    arrays): for each such result, which values its non-finite elements come from,
    and whether the op made some itself. The rule, chosen to be sound where it is
    cheap and never to blame a value that was selected away:

    * element-wise ops: an operand is followed when one of its non-finite elements
      sits where the result is non-finite (``select``: only where the predicate
      picks that operand); result elements non-finite where every operand is
      finite were made by the op (``log(-1)``, ``0/0``, an overflowing ``exp``).
    * ops that only move elements (slices, gathers, pads, concatenation,
      ``dynamic_update_slice`` ...): the non-finite operands; when several are, the
      op is run again on the masks of each to see whose elements land in the result
      (an inf fill overwritten by an update is not followed).
    * ``scatter``: the non-finite updates, and the inputs whose non-finite elements
      are still in the result (a buffer's inf fill that the updates replaced is not).
    * ``reduce`` and ``reduce_window``: the non-finite inputs; an initial value
      (``-inf`` of a max) only when no input is non-finite.
    * a collective (``all_reduce``, ``all_gather`` ...) in a grid of processes: the
      operands of the same execution on every process whose operand reaches this
      process's result (ops/collectives.py ``contributors``: its group, a
      permute's source), so a NaN one device made and another received is followed
      to the device that made it; the collective made it only when none is
      non-finite (an all-reduce that overflows).
    * ``func.call``, ``while``, ``case``, ``if``: into the region call that returned
      the value (a loop's last iteration, the branch taken), and from a region's
      arguments to the operands or to the previous iteration's results.
    * any other op: its non-finite operands; with none, the op made the values
      (a ``dot_general`` that overflows, a NaN ``constant``). Regions of these ops
      are not entered (a ``reduce`` that overflows is the origin).

    A result element that is non-finite because of two inputs is followed to both.
    A tracer observes one run of the function whose region it is given (the
    processes of a grid each run it: :meth:`report` follows the first's results,
    or those of the process it is given). Memory grows with the
    number of non-finite values a run computes (a small record each), never with
    the arrays; an origin keeps its operands and results whole for its first
    execution (summaries after it).
    """

    def __init__(self, region):
        self.region = region      # the entry function's region (entry_region)
        self._values: dict = {}        # (invocation key, slot) -> _Made
        self._last_body_call: dict = {}   # (while's invocation key, while step) -> last body call
        self._current = (None, None)   # (the last stack seen, its invocation key)
        self._shown: set = set()       # steps whose first origin execution kept its values
        self._order = 0
        self._entry_process = None
        self._process_name = "process"   # what the grid's processes are (engine/grid.py Grid.member)
        self._failures: dict = {}      # (invocation key, first result slot) -> how a LAPACK call failed
        self._producers: dict = {}     # region -> {slot: the step that makes it}, made when a search asks

    def after_op(self, step, operands, results, stack):
        current = self._current
        if current[0] is not stack:
            current = self._enter(stack)
        if step.info.name in _MAY_FAIL and current[1] is not None:
            self._note_failure(step, operands, results, current[1])
        last_body_call = self._last_body_call.pop((current[1], step), None) if step.regions else None
        for value in results:
            if _nonfinite(value):
                if current[1] is not None:
                    self._record(step, operands, results, current[1], stack, last_body_call)
                return None
        return None

    def _enter(self, stack) -> tuple:
        """The invocation key of the region call running ``stack``'s ops: the
        process, then per enclosing region ``(owner step, region index, call)``; None
        inside a region the search does not enter."""
        if not stack:
            key = (stack.process.id,)
            self._process_name = stack.process.grid.member
            if self._entry_process is None or stack.process.id < self._entry_process:
                self._entry_process = stack.process.id     # a grid's results are its first process's
        elif all(frame.step.info.name in _ENTERED for frame in stack):
            key = (stack[0].process, *((frame.step, frame.region_index, frame.call) for frame in stack))
            owner, region_index, call = key[-1]
            if owner.info.name == _WHILE and region_index == 1:
                self._last_body_call[(key[:-1], owner)] = call
        else:
            key = None
        self._current = (stack, key)
        return self._current

    def _note_failure(self, step, operands, results, key) -> None:
        """Keep how a LAPACK call failed (its info, ops/lapack.py ``failure``): what a
        decision or an origin was computed from, for :meth:`why`."""
        with numpy_warnings_off():
            reason = failure(step.info, operands, results)
        if reason is not None:
            self._failures.setdefault((key, step.results[0]), reason)

    def _record(self, step, operands, results, key, stack, last_body_call) -> None:
        follow, inner, new = _sources(step, operands, results, key, last_body_call)
        details = None
        if new is not None:
            keep = (key[0], step) not in self._shown and sum(np.size(v) for v in (*operands, *results)
                                                   if not isinstance(v, tuple)) <= _KEEP_ELEMENTS
            self._shown.add((key[0], step))
            values = (list(operands), list(results)) if keep else \
                ([summarize(v) for v in operands], [summarize(v) for v in results])
            details = (region_calls(stack), *values)
        self._order += 1
        peers = contributors(step.info, stack.process) if step.info.name in COLLECTIVES else None
        made = _Made(step, key, self._order, follow, inner, new, details, peers)
        for slot, followed in zip(step.results, follow):
            if followed is not None:
                self._values[(key, slot)] = made

    # ---------------------------------------------------------- following back

    def _region_of(self, key):
        if len(key) == 1:
            return self.region
        owner, region_index, _ = key[-1]
        return owner.regions[region_index]

    def _home(self, key, slot) -> tuple:
        """Where the value in ``slot`` of the region call ``key`` was made: the region call
        and slot of a non-finite value an op made, of a value an op of that region made,
        or of an argument of the entry function. Captures lead to the enclosing call, a
        region's arguments to the op's operands or to the previous iteration's results."""
        while (key, slot) not in self._values:
            region = self._region_of(key)
            if slot >= region.n_captures + region.n_args or len(key) == 1:
                break
            owner, region_index, call = key[-1]
            parent = key[:-1]
            if slot < region.n_captures:
                key, slot = parent, owner.captures[region_index][slot]
                continue
            argument = slot - region.n_captures
            if owner.info.name == _WHILE and call > 0:   # the previous iteration's results
                key, slot = parent + ((owner, 1, call - 1),), owner.regions[1].outputs[argument]
            else:                                        # a while's first call, a function's call
                key, slot = parent, owner.operands[argument]
        return key, slot

    def resolve(self, key, slot, arguments) -> list:
        """What the value in ``slot`` of the region call ``key`` holds of non-finite
        values: ``[(_Made, result index)]`` for a value an op made, ``[("argument",
        i, process)]`` for a non-finite argument of the entry function, ``[]`` for a
        finite value. ``arguments``: the entry function's arguments, by process."""
        key, slot = self._home(key, slot)
        found = self._values.get((key, slot))
        if found is not None:
            return [(found, found.step.results.index(slot))]
        if len(key) == 1 and slot < self.region.n_captures + self.region.n_args:
            return [("argument", slot, key[0])] if _nonfinite(arguments[key[0]][slot]) else []
        return []       # a finite value of the region

    # ---------------------------------------------------------- why: decisions and failures

    def _producer(self, region, slot):
        """The step of ``region`` whose result is ``slot`` (None: a value folded at load)."""
        producers = self._producers.get(region)
        if producers is None:
            producers = self._producers[region] = {result: step for step in region.steps for result in step.results}
        return producers.get(slot)

    def _cause(self, key, slot, arguments, failures_only: bool = False) -> tuple | None:
        """The first value, breadth first through the ops that computed the value in
        ``slot`` of the region call ``key``, that was non-finite (``("nonfinite", nodes,
        reader)``) or that a LAPACK call which failed made (``("failed", the call, how it
        failed, reader, the call's region call)``), ``reader`` being ``(the op that read
        it, its region call)`` (None: the value itself); None when none is found within
        _CAUSE_SEARCH values. The search follows the program, not elements: a cause
        found is one the value was computed from, not necessarily at the element picked."""
        queue: list[tuple] = [(key, slot, None)]
        seen: set[tuple] = set()
        for key, slot, reader in queue:     # the queue grows as it is read
            key, slot = self._home(key, slot)
            if (key, slot) in seen:
                continue
            if len(seen) == _CAUSE_SEARCH:
                break
            seen.add((key, slot))
            nodes = self.resolve(key, slot, arguments)
            if nodes:
                if failures_only:
                    continue
                return ("nonfinite", nodes, reader)
            region = self._region_of(key)
            step = self._producer(region, slot) if slot >= region.n_captures + region.n_args else None
            if step is None:
                continue        # an argument of the entry function, a folded constant
            reason = self._failures.get((key, step.results[0]))
            if reason is not None:
                return ("failed", step, reason, reader, key)
            if step.info.name in _CALLS:
                inner = key + ((step, len(step.regions) - 1, 0),)
                queue.append((inner, step.regions[-1].outputs[step.results.index(slot)], reader))
            else:
                queue.extend((key, operand, (step, key)) for operand in step.operands)
        return None

    def why(self, node, parents, arguments, seen: set | None = None) -> list[WhyStep]:
        """Why the values of an origin ``node`` reached the result its walk (``parents``)
        started from: the first decision on the way (``select``, ``if``, ``case`` for a
        constant, a ``while``'s exit for any value) whose predicate, index or condition
        was computed from a non-finite value or a failed LAPACK call, then that cause,
        followed the same way to its own origin; with no such decision, how the op
        failed itself (a triangular solve by a zero pivot) and the failed call its
        operands come from. ``seen``: the origins already explained (a cycle ends there)."""
        seen = set() if seen is None else seen
        if node[0] == "argument" or len(seen) >= _WHY_DEPTH:
            return []
        made = node[0]
        seen.add(made.step)
        constant = made.step.info.name == "stablehlo.constant"
        link = parents[node]
        while link is not None:
            decision = self._decision(link, constant, arguments)
            if decision is not None:
                chosen, cause = decision
                return [chosen, *self._cause_steps(cause, arguments, seen)]
            link = parents[link]
        steps = []
        reason = self._failures.get((made.key, made.step.results[0]))
        if reason is not None:
            steps.append(WhyStep("failed", _label(made.step), _place(made.step, made.key), reason))
        for operand in made.step.operands:
            cause = self._cause(made.key, operand, arguments, failures_only=True)
            if cause is not None:
                return steps + self._cause_steps(cause, arguments, seen)
        return steps

    def _decision(self, node, constant: bool, arguments) -> tuple | None:
        """``(WhyStep chosen, cause)`` when the op of a walk's ``node`` chose the value by
        a predicate computed from a non-finite or failed value (see :meth:`why`). A
        ``select``, ``if`` or ``case`` is asked only about a ``constant`` (a fill such
        as ``where(isfinite(x), x, -inf)``'s): an op that made a NaN from finite operands
        is its own explanation, and a predicate computed from some NaN elsewhere in an
        array would only mislead there."""
        made, index = node
        step = made.step
        name = step.info.name
        if name == "stablehlo.select" and constant:
            picked = {(1,): "true", (2,): "false"}.get(made.follow[index], "true at some elements, false at others")
            return self._decided(made, f"its predicate was {picked}", made.key, step.operands[0], arguments)
        if name == _WHILE:    # the condition's call after the last iteration (call 0: the body never ran)
            call = made.inner[-1][2] + 1 if made.inner is not None else 0
            return self._decided(made, f"the loop stopped after {call} iteration{'s' if call != 1 else ''}: "
                                 "its condition was false", made.key + ((step, 0, call),), step.regions[0].outputs[0],
                                 arguments)
        if made.inner is None or name not in (_IF, _CASE) or not constant:
            return None
        region_index = made.inner[-1][1]
        decided = f"its predicate was {'true' if region_index == 0 else 'false'}" if name == _IF else \
            f"its index chose branch {region_index}"
        return self._decided(made, decided, made.key, step.operands[0], arguments)

    def _decided(self, made, decided: str, key, slot, arguments) -> tuple | None:
        """The decision ``made`` took as ``decided`` on the value in ``slot`` of ``key``,
        when that value was computed from a non-finite or failed one."""
        cause = self._cause(key, slot, arguments)
        if cause is None:
            return None
        reader = cause[2] if cause[0] == "nonfinite" else cause[3]
        if reader is not None:
            where = describe_location(_place(*reader))
            source = "a non-finite value" if cause[0] == "nonfinite" else "the result of a call that failed"
            decided += f", computed by {_label(reader[0])}{f' at {where}' if where else ''} from {source}"
        return WhyStep("chosen", _label(made.step), _place(made.step, made.key), decided), cause

    def _cause_steps(self, cause, arguments, seen) -> list[WhyStep]:
        """A cause as steps: the failed call, and where an operand it was given was not
        finite (a factorization of a matrix holding an inf), that operand's origin; or the
        origin of the non-finite value (the first one made) and why it is what it is."""
        if cause[0] == "failed":
            _, step, reason, _, key = cause
            steps = [WhyStep("failed", _label(step), _place(step, key), reason)]
            if step in seen:
                return steps
            seen.add(step)
            for operand in step.operands:
                nodes = self.resolve(key, operand, arguments)
                if nodes:
                    return steps + self._cause_steps(("nonfinite", nodes, (step, key)), arguments, seen)
            return steps
        origins, parents = self._walk(cause[1], arguments)
        if not origins:
            return []
        first = min(origins, key=_order)
        if first[0] == "argument":
            _, slot, process = first
            kinds = " and ".join(_kind_name(kind) for kind in KINDS if _first(arguments[process][slot], kind)[0])
            return [WhyStep("argument", self.region.kind.argument_name(slot), None, kinds)]
        made = first[0]
        kinds = " and ".join(dict.fromkeys(_kind_name(kind) for kind, _, _ in made.new[first[1]]))
        steps = [WhyStep("made", _label(made.step), _place(made.step, made.key), kinds)]
        return steps if made.step in seen else steps + self.why(first, parents, arguments, seen)

    def _sources_of(self, node, arguments) -> list:
        """The nodes the non-finite values of a node's result come from."""
        made, index = node
        if made.inner is not None:
            return self.resolve(made.inner, self._region_of(made.inner).outputs[index], arguments)
        if made.peers is not None:
            operands = [index] if len(made.step.operands) == len(made.step.results) else \
                range(len(made.step.operands))
            return [source for peer in made.peers for operand in operands
                    for source in self.resolve((peer, *made.key[1:]), made.step.operands[operand], arguments)]
        return [source for operand in made.follow[index]
                for source in self.resolve(made.key, made.step.operands[operand], arguments)]

    def report(self, arguments, outputs, process: int | None = None,
               every_process: dict | None = None) -> NonFiniteOrigins | None:
        """The origins of the non-finite values among ``outputs``, the entry function's
        results for ``arguments`` (None when every result is finite). In a grid's run:
        ``process``, whose results they are (default: the first); ``every_process``,
        each process's arguments (followed through collectives); the origins then name
        the process that made them."""
        with numpy_warnings_off():     # NaN and inf are what it looks at
            return self._report(arguments, outputs, process, every_process or {})

    def _report(self, arguments, outputs, process, every_process) -> NonFiniteOrigins | None:
        nonfinite = [index for index, value in enumerate(outputs) if _nonfinite(value)]
        if not nonfinite:
            return None
        entry = (self._entry_process if process is None else process,)
        arguments = {**every_process, entry[0]: arguments}
        found: dict = {}   # the origin's step (or argument) -> [first node, its walk, executions, results reached]
        for index in nonfinite:
            origins, parents = self._walk(self.resolve(entry, self.region.outputs[index], arguments), arguments)
            for node in origins:
                origin = found.setdefault(node if node[0] == "argument" else node[0].step, [node, parents, set(), []])
                origin[2].add(node[0])
                if index not in origin[3]:
                    origin[3].append(index)
                if _order(node) < _order(origin[0]):
                    origin[0], origin[1] = node, parents
        name = self._process_name if process is not None else None
        kind = self.region.kind
        origins = [self._origin(node, _chain(node, parents, self._process_name), executions, reaches, arguments, name,
                                kind, tuple(self.why(node, parents, arguments)))
                   for node, parents, executions, reaches in sorted(found.values(), key=lambda o: _order(o[0]))]
        return NonFiniteOrigins([(index, summarize(outputs[index])) for index in nonfinite], origins,
                                {index: kind.result_name(index) for index in nonfinite})

    def _walk(self, start, arguments) -> tuple[list, dict]:
        """Breadth first from a result's sources: the origin nodes reached, and for
        each node reached the node it was reached from (None for the first ones)."""
        parents = dict.fromkeys(start)
        queue, origins = list(parents), []
        for node in queue:      # the queue grows as it is read
            if node[0] == "argument":
                origins.append(node)
                continue
            sources = self._sources_of(node, arguments)
            made = node[0].new is not None and node[0].new[node[1]]
            if made and (node[0].peers is None or not sources):   # a collective makes what no process sent
                origins.append(node)
            for source in sources:
                if source not in parents:
                    parents[source] = node
                    queue.append(source)
        return origins, parents

    @staticmethod
    def _origin(node, chain, executions, reaches, arguments, process_name: str | None,
                region_kind, why: tuple = ()) -> NonFiniteOrigin:
        """The origin at ``node``, naming its process as ``process_name`` (None: unnamed),
        and the results it reaches by their names in the entry region's ``kind``."""
        labels = tuple(region_kind.result_name(index) for index in reaches)
        if node[0] == "argument":
            _, slot, process = node
            value = arguments[process][slot]
            new = [(0, kind, *_first(value, kind)) for kind in KINDS if _first(value, kind)[0]]
            return NonFiniteOrigin(f"argument #{slot}", None, (), [], [value], new, tuple(reaches), chain,
                                   labels=labels, argument=region_kind.argument_name(slot),
                                   process=process if process_name else None, process_name=process_name or "process")
        made, index = node
        stack, operands, results = made.details
        new = [(result, *made) for result, found in enumerate(made.new) for made in found]
        return NonFiniteOrigin(op_label(made.step), made.step.info.location, stack, operands, results, new,
                               tuple(reaches), chain, len(executions), made.step, labels, why=why,
                               process=made.key[0] if process_name else None, process_name=process_name or "process")


def _chain(node, parents, process_name: str) -> tuple[ChainLink, ...]:
    """The ops from an origin node to the result its walk started from (each naming its
    process where it is not the origin's: the value went through a collective)."""
    chain = []
    origin = node[2] if node[0] == "argument" else node[0].key[0]
    node = parents[node]
    while node is not None:
        made = node[0]
        chain.append(ChainLink(op_label(made.step), made.step.info.location, _calls_of(made.key),
                               made.key[0] if made.key[0] != origin else None, process_name))
        node = parents[node]
    return tuple(chain)


def _place(step, key) -> SourceLocation | None:
    """An op's location, or where it has no Python frame (an op of a function JAX wrote,
    such as ``jnp.where``'s ``@_where``), that of the innermost call around it that has one."""
    for location in (step.info.location, *(frame[0].info.location for frame in reversed(key[1:]))):
        if location is not None and location.frame is not None:
            return location
    return step.info.location


def _label(step) -> str:
    """An op as a why names it: ``func.call @f``, ``stablehlo.custom_call @lapack_spotrf_ffi``,
    ``stablehlo.compare GT``."""
    attributes = step.info.attributes
    if step.info.name == _CUSTOM_CALL:
        return f"{_CUSTOM_CALL} @{attributes.get('call_target_name')}"
    if step.info.name == "stablehlo.compare":
        return f"stablehlo.compare {attributes.get('comparison_direction')}"
    return op_label(step)


def _order(node) -> int:
    """When a walk's node was made: an entry argument first, then ops in execution order."""
    return -1 if node[0] == "argument" else node[0].order


def _calls_of(key) -> tuple[RegionCall, ...]:
    return tuple(RegionCall(step.info.name, step.index, step.info.location, region_name(step, index), call)
                 for step, index, call in key[1:])


def _sources(step, operands, results, key, last_body_call) -> tuple:
    """``(follow, inner, new)`` of an op execution with a non-finite result (see
    :class:`_Made`), by NonFiniteTracer's rule (``last_body_call``: a while's last
    iteration, None if its body never ran)."""
    name = step.info.name
    nonfinite = [_nonfinite(value) for value in results]
    if name in _ENTERED:
        if name == _WHILE:
            if last_body_call is None:   # a loop that never ran returns its operands
                return tuple((index,) if flag else None for index, flag in enumerate(nonfinite)), None, None
            inner = key + ((step, 1, last_body_call),)
        elif name in _CALLS:
            inner = key + ((step, len(step.regions) - 1, 0),)
        else:
            branch = (0 if operands[0] else 1) if name == _IF else int(operands[0])
            inner = key + ((step, branch if 0 <= branch < len(step.regions) else len(step.regions) - 1, 0),)
        return tuple(() if flag else None for flag in nonfinite), inner, None
    if name == "stablehlo.optimization_barrier":
        return tuple((index,) if flag else None for index, flag in enumerate(nonfinite)), None, None
    if name in ELEMENTWISE_OPS and len(results) == 1:
        followed, made = _elementwise_sources(name, operands, results[0])
        return (tuple(followed),), None, ((made,) if made else None)
    followed = [index for index, operand in enumerate(operands) if _nonfinite(operand)]
    if name in _REDUCTIONS:
        inputs = len(operands) // 2
        if any(index < inputs for index in followed):
            followed = [index for index in followed if index < inputs]
    elif name in _MOVES and len(followed) > 1 and not step.execution:   # (a user's runner may want the Execution)
        followed = [index for index in followed if _lands(step, operands, index)]
    elif name == "stablehlo.scatter":   # operands: inputs, indices, updates; results: the inputs updated
        inputs = len(results)
        followed = [index for index in followed if index >= inputs or _survives(operands[index], results[index])]
    follow = tuple(tuple(followed) if flag else None for flag in nonfinite)
    if followed:
        return follow, None, None
    return follow, None, tuple(_counts(value) if flag else () for value, flag in zip(results, nonfinite))


def _elementwise_sources(name, operands, result) -> tuple[list, tuple]:
    """(operands whose non-finite elements reach the result's, what the op made).

    At a NaN of the result, the operands NaN there are its source (a NaN goes
    through whatever the others are: ``max(-inf, NaN)``), and when none is, the
    operands infinite there (``inf - inf``, ``0 * inf``); at an infinity of the
    result, the operands infinite there. ``select`` takes each branch only where
    the predicate picks it; ``maximum``, ``minimum`` and ``clamp`` take an operand
    only where the result is that operand (not the ``-inf`` that lost a max)."""
    result_nan, result_inf = np.isnan(result), np.isinf(result)
    any_nan = np.zeros(np.shape(result), bool)
    nonfinite = []          # (operand index, its NaN elements, its infinite elements)
    for index, operand in enumerate(operands):
        mask = _mask(operand)
        if mask is None or not mask.any():
            continue
        nan = np.isnan(operand)
        if name == "stablehlo.select":
            picked = np.asarray(operands[0], bool)
            picked = picked if index == 1 else ~picked
            mask, nan = mask & picked, nan & picked
        elif name in _PICKS:      # the result is one of the operands: only that one reaches it
            picked = (operand == result) | (nan & result_nan)
            mask, nan = mask & picked, nan & picked
        any_nan = any_nan | nan
        nonfinite.append((index, nan, mask & ~nan))
    infinities_make = result_inf | (result_nan & ~any_nan)
    covered, followed = np.zeros(np.shape(result), bool), []
    for index, nan, infinite in nonfinite:
        reach = (nan & result_nan) | (infinite & infinities_make)
        if reach.any():
            followed.append(index)
            covered = covered | reach
    made = (result_nan | result_inf) & ~covered
    return followed, (_counts(result, made) if made.any() else ())


def _counts(value, where=None) -> tuple:
    """``(kind, count, index of the first)`` of the NaNs and infinities of a value
    (its elements ``where`` is true, or all of them)."""
    if where is None:
        return tuple((kind, *_first(value, kind)) for kind in KINDS if _first(value, kind)[0])
    array = widened(value)
    found = []
    for kind in KINDS:
        positions = np.argwhere(where & (np.isnan(array) if kind == "nan" else np.isinf(array)))
        if len(positions):
            found.append((kind, len(positions), tuple(int(i) for i in positions[0])))
    return tuple(found)


def _survives(before, after) -> bool:
    """Whether some non-finite element of an op's operand ``before`` is still there in
    its result ``after`` (a scatter writes over some elements: an inf fill that an
    update replaced is gone; a NaN replaced by a NaN counts as still there)."""
    kept = _mask(before) & _mask(after) & ((before == after) | (np.isnan(before) & np.isnan(after)))
    return bool(kept.any())


def _lands(step, operands, index) -> bool:
    """Whether operand ``index``'s non-finite elements land in the result of an op that
    only moves elements: the op run again on that operand's mask, the other float
    operands zero."""
    probe = []
    for position, operand in enumerate(operands):
        mask = _mask(operand)
        if mask is None:
            probe.append(operand)
        else:
            probe.append((mask if position == index else np.zeros_like(mask)).astype(np.asarray(operand).dtype))
    return bool(np.asarray(step.run(*probe)).any())


def _nonfinite(value) -> bool:
    """Whether a value (array, scalar, tuple) holds a NaN or an infinity; cheap for
    the finite float arrays most ops return."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return type(value) is tuple and any(map(_nonfinite, value))
    kind = dtype.kind
    if kind == "f":
        if value.ndim == 0:
            return not math.isfinite(value)
        if value.size <= _SMALL:   # x - x is 0 for every finite x, NaN for the others
            return np.count_nonzero(value - value) != 0
        return not np.isfinite(value).all()
    if kind == "c" or (kind == "V" and is_float_dtype(dtype)):
        return not np.isfinite(value).all()
    return False


def _mask(value) -> np.ndarray | None:
    """The non-finite elements of a float value (None for other values)."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or not (dtype.kind in "fc" or (dtype.kind == "V" and is_float_dtype(dtype))):
        return None
    return ~np.isfinite(value)


# ------------------------------------------------------------------ the first non-finite value


class NonFiniteFinder(Listener):
    """The NaN guard of a run: a listener that, when a run's results hold a NaN or inf,
    says where they came from.

    Its answer is :func:`find_nonfinite`'s (``mode="origins"``, the default): the ops
    that made the non-finite values which reach a result, with their source lines and
    the ops each value flowed through (:class:`NonFiniteOrigins`); a NaN or inf that no
    result holds (``jnp.take``'s masked fill, a ``where``'s other branch, the ``-inf``
    that starts a max) is not reported, however early it appears. ``mode="first"``
    gives the older answer instead: the first op anywhere whose results hold a NaN
    or inf its operands did not (:class:`NonFiniteReport`), as soon as it runs.

    With ``stop=True`` (default) it stops the run with a ``StopExecution`` carrying the
    report, whose message is the report's text: on the interp device
    (``STABLEHLO_INTERP_NONFINITE=1``, ``si.on_device``), JAX raises it as the error of
    the computation. With ``stop=False`` it keeps the reports in ``reports`` and lets
    the runs go on; ``each_process=True`` gives one report per process of a grid (in a
    per-device run: per device) instead of the run's first.
    """

    def __init__(self, stop: bool = True, each_process: bool = False, mode: str = "origins"):
        if mode not in MODES:
            raise ValueError(f"mode is one of {', '.join(MODES)}, not {mode!r}")
        self.stop = stop
        self.each_process = each_process
        self.mode = mode
        self.reports: list = []
        # the runs in progress, innermost last, by key (a grid, or the thread of a run outside one:
        # a host callback may run another program on the thread of the run that called it)
        self._runs: dict = {}

    @property
    def report(self):
        """The first report (None before one)."""
        return self.reports[0] if self.reports else None

    def enter_run(self, region, arguments, process) -> None:
        runs = self._runs.setdefault(_run_key(process), [])
        if process.grid.size == 1 or not runs or runs[-1].region is not region:
            runs.append(_GuardedRun(region))
        runs[-1].arguments[process.id] = list(arguments)

    def _run(self, process) -> "_GuardedRun | None":
        runs = self._runs.get(_run_key(process))
        return runs[-1] if runs else None   # None: a run this guard did not see begin (attached in its middle)

    def after_op(self, step, operands, results, stack):
        run = self._run(stack.process)
        if run is None:
            return None
        if self.mode == "origins":
            return run.tracer.after_op(step, operands, results, stack)
        reporter = stack.process.id if self.each_process else None
        if reporter in run.reported or not any(map(_nonfinite, results)):
            return None
        before = _kinds(operands) if operands else {"inf"}   # a constant's infinities: see the module's text
        new = [(index, kind, *_first(value, kind)) for index, value in enumerate(results)
               for kind in KINDS if kind in _kinds([value]) - before]
        if new:
            run.reported.add(reporter)
            process = stack.process
            self._found(NonFiniteReport(op_label(step), step.info.location, region_calls(stack), list(operands),
                                        list(results), new, process=process.id if process.grid.size > 1 else None,
                                        process_name=process.grid.member), process)
        return None

    def exit_run(self, region, arguments, results, process) -> None:
        run = self._run(process)
        if run is None:
            return
        run.finished += 1
        if run.finished == process.grid.size:
            self._end(process)
        reporter = process.id if self.each_process else None
        if self.mode != "origins" or reporter in run.reported:
            return
        in_grid = process.grid.size > 1
        origins = run.tracer.report(arguments, list(results), process.id if in_grid else None,
                                    run.arguments if in_grid else None)
        if origins is not None:
            run.reported.add(reporter)
            self._found(origins, process)

    def _found(self, report, process) -> None:
        self.reports.append(report)
        if self.stop:
            self._end(process)   # the run stops here: no exit_run will close it
            raise StopExecution(str(report), values=report)

    def _end(self, process) -> None:
        key = _run_key(process)
        runs = self._runs.get(key)
        if runs:
            runs.pop()
            if not runs:
                del self._runs[key]


class _GuardedRun:
    """What a :class:`NonFiniteFinder` keeps of one run: the tracer of its origins, each
    process's arguments, the processes that finished, and those already reported."""

    def __init__(self, region):
        self.region = region
        self.tracer = NonFiniteTracer(region)
        self.arguments: dict = {}
        self.finished = 0
        self.reported: set = set()


def _run_key(process):
    """A run's key: its grid (a grid's processes are threads of one run), or the thread of
    a run outside any grid (the interp device may run programs on several threads)."""
    return process.grid if process.grid.size > 1 else threading.get_ident()


def find_nonfinite(target: Any, *args: Any, function: str | None = None, mode: str = "origins",
                   per_device: bool = False, **kwargs: Any) -> Any:
    """Run ``target`` on ``args`` and say where the NaNs and infs of its results came
    from (:class:`NonFiniteOrigins`; None when every result is finite). With
    ``mode="first"``: the first op that made a NaN or inf anywhere
    (:class:`NonFiniteReport`; None if none did). With ``per_device=True``, either
    answer for each device that runs its partitioned program (:class:`PerDeviceNonFinite`;
    None when no device has one), or the global program's where Shardy cannot
    partition it (a ``PerDeviceWarning`` says why)."""
    if mode not in MODES:
        raise ValueError(f"mode is one of {', '.join(MODES)}, not {mode!r}")
    call = prepare_checked(target, args, kwargs, function) if per_device else prepare(target, args, kwargs, function)
    if call.partitioned is not None:
        if mode == "origins":
            return run_traced_per_device(call, [])[1]
        finder = NonFiniteFinder(stop=False, each_process=True, mode="first")
        call.run_devices([finder])
        by_device = {report.process: report for report in finder.reports}
        found = {device: by_device[device] for device in range(call.partitioned.num_devices) if device in by_device}
        return PerDeviceNonFinite(found) if found else None
    if mode == "origins":
        origins = run_traced(call, [])[1]
        if origins is not None and any(origin.op == MANUAL for origin in origins.origins):
            origins.inside_manual = _inside_manual_code(target, args, kwargs, function)
        return origins
    finder = NonFiniteFinder(stop=True, mode="first")
    try:
        call.run([finder])
    except StopExecution as stopped:
        if stopped.values is not finder.report:
            raise
    return finder.report


MANUAL = "sdy.manual_computation"


def _inside_manual_code(target, args: tuple, kwargs: dict, function: str | None) -> PerDeviceNonFinite | None:
    """Each device's origins of the program run per device (:func:`run_traced_per_device`),
    for an answer whose origin is a manual computation; None where Shardy cannot
    partition the program (the global answer stands: no warning, none was asked for)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PerDeviceWarning)
            call = prepare_checked(target, args, kwargs, function)
        if call.partitioned is None:
            return None
        return run_traced_per_device(call, [])[1]
    except InterpreterError:   # (the global answer stands)
        return None


def run_traced(call, listeners) -> tuple[list, NonFiniteOrigins | None]:
    """Run a prepared call with ``listeners`` and a :class:`NonFiniteTracer`: its
    results, and the origins of their non-finite values."""
    tracer = NonFiniteTracer(entry_region(call))
    outputs = call.run([*listeners, tracer])
    return outputs, tracer.report(call.arguments, outputs)


def run_traced_per_device(call, listeners) -> tuple[list, PerDeviceNonFinite | None]:
    """Run a call prepared per device with ``listeners`` and a :class:`NonFiniteTracer`:
    each device's results (``[d][i]``), and per device the origins of the non-finite
    values of its results (None when every device's results are finite)."""
    partitioned = call.per_device_program()
    tracer = NonFiniteTracer(partitioned.local.runnable(call.function).region)
    shards = partitioned.shards(call.arguments)
    outputs = call.run_devices([*listeners, tracer])
    every_device = dict(enumerate(shards))
    found = {device: tracer.report(shards[device], outputs[device], device, every_device)
             for device in range(partitioned.num_devices)}
    found = {device: origins for device, origins in found.items() if origins is not None}
    return outputs, (PerDeviceNonFinite(found) if found else None)


def entry_region(call):
    """The region a prepared call runs (its refined copy for a shape-polymorphic program)."""
    program = call.program.refined(*call.arguments, function=call.function)
    return program.runnable(call.function).region


def _summary(value) -> ValueSummary:
    """A value's summary (a value a long run kept as its summary: itself)."""
    return value if isinstance(value, ValueSummary) else summarize(value)


def _kind_name(kind: str) -> str:
    return "NaN" if kind == "nan" else "inf"


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
    if array is None:
        return 0, ()
    mask = np.isnan(array) if kind == "nan" else np.isinf(array)
    positions = np.argwhere(mask)
    return len(positions), tuple(int(i) for i in positions[0]) if len(positions) else ()
