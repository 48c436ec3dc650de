"""Loops and decisions on another backend: where a ``while``, ``case`` or ``if`` of a
program goes another way there (tools/compare.py calls :func:`step_control_flow`).

compare judges each op of the entry function on the backend's operands by its own
rounding bound; an op with control-flow regions shows no value inside them, so its
difference is judged only against noise *estimated* for the whole op (judge/bounds.py)
and, beyond that, is "unbounded". Such an op is stepped here, on the backend itself:

* a ``while``: its cond and its body, each made the ``@main`` of a module of its own
  (ir/edit.py, ``region_module``: the values a region captures are its first arguments),
  are compiled by the backend and run iteration by iteration from the loop's operands
  as the backend computed them: the backend's path. The interpreter runs each iteration
  from the same carried state beside it, and its own path from the same start.
* a ``case`` or ``if``: the branch its index chose, as a module of its own, run once.

What is reported:

* **The first iteration beyond noise**: the first whose state, computed by the backend
  from the state it carried in, is beyond the rounding noise of the interpreter's iteration
  from that same state: each float within ``ELEMENTWISE_ULP`` ULP of it, or within the
  spread of ``noise_runs`` of the iteration (``spread_allowance``), each integer equal to
  it or to one of those runs'. That iteration's module is then compared op by op on the
  backend (compare, on the carried state): its first op beyond its rounding bound is the
  cause ("beyond noise: op X at line L"); where that is an inner loop or conditional,
  compare steps it in turn, the same way, at any depth. Where every op there is within
  its bound, the decision that went the other way inside the iteration is named.
* **The first decision that went the other way**: the interpreter records every decision
  its runs take, in order (each ``compare``'s result and operands, each ``case`` and ``if``
  index, at any depth except inside data-parallel regions: a reduce's body, a sort's
  comparator ...). At each iteration those of its own path are matched against the
  backend's: the decisions of the cond's and the body's own ops are the backend's own
  (one run of the module cut after the last of them, ir/edit.py ``prefix_module``); those
  inside inner regions are the interpreter's from the backend's carried state, trusted
  while its run decides the region's own ops as the backend does. The first that differs
  is where the paths split: its operands on both paths (a compare's as the backend
  computes them: ir/edit.py, ``operands_module``), their distance in ULP, and the noise
  of the interpreter's own path up to there: how far ``noise_runs`` of it spread the
  operands (``spread_allowance``, counted in ULP towards the backend's value) and how many
  of those runs went another way by then. Either makes the split rounding noise. Where
  the paths carry an integer or a boolean otherwise, the iteration it starts is named too.
* How many iterations each path ran, and whether the stepped loop ends at the value the
  backend gives for the loop compiled whole: a backend may compile a loop otherwise than
  its cond and body alone, and what is said here is of the stepped loop.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..backends import BackendError
from ..errors import InterpreterError
from ..engine.numerics import ulp_difference
from ..engine.plan import Step
from ..engine.run import Execution, Listener, RunContext, numpy_warnings_off
from ..ir.edit import operands_module, prefix_module, region_module
from ..ir.locations import SourceLocation, describe_location
from ..ir.types import Token
from ..judge.bounds import AGREE, BEYOND, DATA_PARALLEL_REGIONS, NOISE_RUNS, noise_runs, spread_allowance, within
from ..judge.difference import is_numeric, max_ulp_distance
from ..judge.summary import format_number
from ..ops.host_callback import TARGET as HOST_CALLBACK
from ..program import load
from .region_calls import op_label, region_name, source_text

STEPPED_ITERATIONS = 10_000    # a loop is stepped this far at most
BRANCHES = frozenset({"stablehlo.case", "stablehlo.if"})
CONTROL_FLOW = BRANCHES | {"stablehlo.while"}
# ops a decision's value passes through on its way to what it decides
_CARRIES_A_DECISION = frozenset({"stablehlo.and", "stablehlo.or", "stablehlo.not", "stablehlo.xor",
                                 "stablehlo.convert", "stablehlo.reshape", "stablehlo.broadcast_in_dim",
                                 "stablehlo.transpose", "stablehlo.reduce", "stablehlo.select"})


@dataclass
class OperandDistance:
    """One operand of a decision at the element where it went the other way: its value on
    the interpreter's path and on the backend's, their distance in ULP and the noise
    bound in ULP (None for integers: those are equal or not); ``within``: the backend's
    value is within the noise bound of the interpreter's (None: no noise run came to the
    decision as the interpreter did, so there is no bound)."""

    interpreter: object
    backend: object
    ulp: int | None
    bound_ulp: int | None
    within: bool | None

    def describe(self, backend: str) -> str:
        text = f"{_shown(self.interpreter)} (interpreter) vs {_shown(self.backend)} ({backend})"
        if self.ulp is not None:
            text += f": {self.ulp} ULP apart"
        if self.bound_ulp is not None:
            text += f", noise bound {self.bound_ulp} ULP"
        elif self.ulp is None and self.within is not None and self.interpreter != self.backend:
            text += ", " + ("one of the values noise gives" if self.within else "not a value noise gives")
        return text


@dataclass
class Decision:
    """A decision taken one way on the interpreter's path and the other on the backend's:
    the op (a ``compare``, or the ``case``/``if`` whose index it is), what it decides
    (``role``), the iteration of the stepped loop (None for a branch), the element where
    the two differ, the value each path took there and the operands' distances."""

    op: str
    location: SourceLocation
    role: str
    iteration: int | None
    element: tuple
    taken: tuple                 # (the interpreter's, the backend's)
    operands: list[OperandDistance] = field(default_factory=list)
    backend_values: bool = True  # the backend's operands are its own (else the interpreter's from its state)
    noise_split: int = 0         # how many noise runs of the interpreter's path went another way by then

    @property
    def within_noise(self) -> bool:
        """Rounding noise explains it: a noise run went another way by then, or every
        operand is within the noise bound of the interpreter's."""
        return bool(self.noise_split) or all(operand.within for operand in self.operands)

    def describe(self, backend: str) -> list[str]:
        where = describe_location(self.location)
        lines = [f"{self.role}: {self.op}" + (f" at {where}" if where else "")]
        text = source_text(self.location)
        if text:
            lines.append(f"  source: {text}")
        at = f" at [{', '.join(map(str, self.element))}]" if self.element else ""
        lines.append(f"  it decides{at}: {_shown(self.taken[0])} (interpreter) vs {_shown(self.taken[1])} ({backend})")
        if not self.backend_values:
            lines.append(f"  (the {backend} side: the interpreter's values from {backend}'s carried state, "
                         "within noise of its own there)")
        lines += [f"  operand #{i}: {operand.describe(backend)}" for i, operand in enumerate(self.operands)]
        if self.noise_split:
            lines.append(f"  {self.noise_split} of {NOISE_RUNS} runs of the interpreter's path with every op moved "
                         "within its bound went another way by then")
        return lines


@dataclass
class IterationFinding:
    """The first iteration whose state the backend computed beyond the rounding noise of
    the interpreter's from the same state: the region's module compared op by op on that
    state (``comparison``, compare's Comparison, whose ``divergence`` is the first op
    beyond its bound or an inner loop stepped in turn), or, where every op is within
    its bound, the ``decision`` that went the other way there."""

    iteration: int | None
    region: str
    comparison: Any              # compare's Comparison (compare imports this module)
    decision: Decision | None = None

    @property
    def divergence(self):
        return self.comparison.divergence

    def verdict(self) -> str:
        divergence = self.divergence
        where = f"iteration {self.iteration}, {self.region}" if self.iteration is not None else self.region
        if divergence is not None and divergence.kind == BEYOND:
            at = describe_location(divergence.location)
            return f"beyond noise: {divergence.op}" + (f" at {at}" if at else "") + f" ({where})"
        if divergence is not None:
            inner = divergence.stepping.verdict() if divergence.stepping is not None else "not stepped"
            return f"{where}: inside {divergence.op}: {inner}"
        if self.decision is not None:
            return (f"the paths split at {where} on a difference "
                    f"{'within' if self.decision.within_noise else 'beyond'} rounding noise")
        if all(found.kind == AGREE for found in self.comparison.findings):
            return (f"{where}: run alone, it agrees with the interpreter's: the backend computes it otherwise "
                    "only within the whole program")
        return (f"{where}: beyond the noise estimated for it, though every op there is within its rounding bound "
                "and no decision went the other way")


@dataclass
class LoopStepping:
    """What stepping a loop or conditional on the backend found (module docstring)."""

    op: str
    location: SourceLocation
    iterations: tuple | None = None            # (the interpreter's path, the backend's): how many ran
    beyond: IterationFinding | None = None
    split: Decision | None = None
    drift: tuple | None = None                 # (iteration, ULP): where the two paths' carried states first differ
    carried: tuple | None = None               # (iteration, position, ours, theirs): the first carried integer or
                                               # boolean that differs (a decision carried to the next iteration)
    whole: int | None = None                   # the stepped loop's end against the loop compiled whole: its
                                               # largest distance in ULP from it (0: the same; -1: not floats)
    note: str = ""                             # why it was not stepped (further)

    def verdict(self) -> str:
        """One line: the cause, or where the paths split and on what."""
        if self.beyond is not None:
            text = self.beyond.verdict()
            if self.split is not None and (self.beyond.iteration or 0) > (self.split.iteration or 0):
                text += f" (the paths had split at iteration {self.split.iteration} before)"
            return text
        if self.split is not None:
            kind = "within rounding noise" if self.split.within_noise else "beyond the noise estimated for the path"
            return f"the paths split at iteration {self.split.iteration} on a difference {kind}"
        return self.note or "the stepped loop agrees with the interpreter's iteration by iteration"

    def describe(self, backend: str) -> str:
        if self.note and self.iterations is None and self.beyond is None:
            return f"not stepped on {backend}: {self.note}"
        if self.op == "stablehlo.while":
            lines = [f"stepped on {backend} iteration by iteration (its cond and body compiled alone, run from "
                     f"{backend}'s carried state): {self.verdict()}"]
        else:
            lines = [f"its branch run alone on {backend}: {self.verdict()}"]
        if self.iterations is not None:
            ours, theirs = (str(n) if n is not None else f"over {STEPPED_ITERATIONS}" for n in self.iterations)
            lines.append(f"  iterations from {backend}'s operands: {ours} on the interpreter's path, {theirs} on "
                         f"{backend}'s")
        if self.whole == 0:
            lines.append(f"  {backend}'s stepped loop ends at its value of the loop compiled whole")
        elif self.whole is not None:
            lines.append(f"  {backend} computes the loop compiled whole otherwise than its cond and body stepped"
                         + (f" (up to {self.whole} ULP apart)" if self.whole > 0 else "")
                         + ": what is said here is of the stepped loop")
        if self.beyond is not None:
            if self.beyond.divergence is not None:
                heading = (f"  iteration {self.beyond.iteration} from {backend}'s carried state, its {self.beyond.region} "
                           "op by op:" if self.beyond.iteration is not None else f"  {self.beyond.region} op by op:")
                lines.append(heading)
                lines += ["    " + line for line in self.beyond.divergence.describe(backend).splitlines()]
            elif self.beyond.decision is not None:
                lines.append(f"  iteration {self.beyond.iteration}: every op is within its rounding bound; a decision "
                             "went the other way:")
                lines += ["    " + line for line in self.beyond.decision.describe(backend)]
        elif self.iterations is not None:
            lines.append(f"  every iteration {backend} ran is within rounding noise of the interpreter's from the "
                         "same state")
        if self.drift is not None:
            iteration, ulp = self.drift
            lines.append(f"  the two paths' carried states first differ entering iteration {iteration}"
                         + (f" (by {ulp} ULP)" if ulp is not None else ""))
        if self.carried is not None:
            iteration, position, mine, other = self.carried
            lines.append(f"  the loop carries value #{position} otherwise from iteration {iteration} on: "
                         f"{_shown(mine)} (interpreter) vs {_shown(other)} ({backend}), decided in the iteration before")
        if self.split is not None:
            lines.append(f"  the first decision that went the other way, at iteration {self.split.iteration}:")
            lines += ["    " + line for line in self.split.describe(backend)]
        if self.note:
            lines.append(f"  {self.note}")
        return "\n".join(lines)


def step_control_flow(step, text: str, operands: list, captured: Callable, whole: list, backend,
                      judge: Callable, semantics: str) -> LoopStepping | None:
    """Step ``step``, a ``while``, ``case`` or ``if`` of ``text``'s ``@main`` (its op number
    ``step.index``, calls of ``@main`` inlined), on ``backend`` (module docstring); None
    for any other op. ``operands``: the backend's values of its operands;
    ``captured(op, result)``: the backend's value of result ``result`` of ``@main``'s op
    number ``op`` (``op`` None: argument ``result``); ``whole``: the backend's results of
    the op compiled whole. ``judge(module_text, arguments)``: compare's Comparison of a
    module run here and on the backend, op by op. ``semantics``: the interpreter's."""
    if step.name not in CONTROL_FLOW:
        return None
    stepping = LoopStepping(op_label(step), step.info.location)
    if any(isinstance(value, (tuple, Token)) for value in operands):
        stepping.note = "it carries tokens or tuples, which are not stepped"
        return stepping
    try:
        with numpy_warnings_off():
            if step.name == "stablehlo.while":
                _step_while(stepping, step, text, operands, captured, whole, backend, judge, semantics)
            else:
                _step_branch(stepping, step, text, operands, captured, backend, judge, semantics)
    except BackendError as refusal:
        stepping.note = f"{backend.name} cannot run a region of it alone: {refusal}"
    except InterpreterError as why:   # a region that is no program of its own, or fails alone: compare's answer stands
        stepping.note = str(why)
    return stepping


class _Region:
    """One region of a control-flow op as a program of its own: its module's text (for the
    backend), that module loaded (for the interpreter), and the values it captures."""

    def __init__(self, text: str, step, index: int, captured: Callable, role: str):
        self.text, origins = region_module(text, "main", step.index, index)
        if HOST_CALLBACK in self.text:
            raise InterpreterError("its regions call host callbacks, which the backend's copy of them cannot call alone")
        self.program = load(self.text)
        self.captures = [captured(op, result) for op, result in origins]
        self.role = role
        main = self.program.function("main").region
        assert main is not None, "a module of text has its functions compiled"
        self.main = main

    def arguments(self, state) -> list:
        return [*self.captures, *state]

    def source_of(self, taken: "_Taken") -> tuple[int, int] | None:
        """``(op, result)`` of ``@main`` that holds a decision of ``@main`` itself: a compare's
        result, or the op that computes a branch's index; None for an index that is an
        argument (the state itself)."""
        if taken.step.name == "stablehlo.compare":
            return taken.step.index, 0
        slot = taken.step.operands[0]
        return next(((step.index, position) for step in self.main.steps
                     for position, result in enumerate(step.results) if result == slot), None)

    def run(self, state, listeners=()) -> list:
        for listener in listeners:
            if isinstance(listener, _Decisions):
                listener.enter(self)
        return self.program.run(*self.arguments(state), listeners=listeners)


def _step_while(stepping: LoopStepping, step, text, operands, captured, whole, backend, judge, semantics) -> None:
    cond = _Region(text, step, 0, captured, "cond")
    body = _Region(text, step, 1, captured, "body")
    start = list(operands)
    theirs, ours = list(operands), list(operands)    # the state the backend carries, and the interpreter's own path
    counts: list = [None, None]                       # iterations run: the interpreter's path, the backend's
    for iteration in range(STEPPED_ITERATIONS):
        ours_running, theirs_running = counts[0] is None, counts[1] is None
        if ours_running and theirs_running and stepping.split is None:
            stepping.drift = stepping.drift or _first_drift(ours, theirs, iteration)
            stepping.carried = stepping.carried or _first_carried_difference(ours, theirs, iteration)
        from_theirs = _Decisions()                    # the interpreter's iteration from the backend's state
        if theirs_running:
            go = _truth(backend(cond.text, cond.arguments(theirs))[0])
            if go != _truth(cond.run(theirs, [from_theirs])[0]):
                stepping.beyond = _judge_region(cond, theirs, iteration, from_theirs, backend, judge, semantics)
                return
            if go:
                following = [np.asarray(value) for value in backend(body.text, body.arguments(theirs))]
                if _beyond_noise(body, theirs, following, from_theirs, semantics):
                    stepping.beyond = _judge_region(body, theirs, iteration, from_theirs, backend, judge, semantics)
                    return
            else:
                counts[1] = iteration
        if ours_running:
            on_ours = _Decisions()
            recorders = [on_ours] if stepping.split is None and theirs_running else []
            if _truth(cond.run(ours, recorders)[0]):
                ours = body.run(ours, recorders)
            else:
                counts[0] = iteration
            pair = on_ours.first_difference(from_theirs.as_the_backend_took_them(backend, theirs)) if recorders \
                else None
            if pair is not None:
                stepping.split = _decision(pair, iteration, cond, body, start, theirs, backend, semantics)
        if counts[1] is None:
            theirs = following
        if None not in counts:
            break
    stepping.iterations = tuple(counts)
    if counts[1] is not None:
        stepping.whole = _against_whole(theirs, whole)


def _beyond_noise(region: "_Region", state: list, theirs: list, recorder: "_Decisions", semantics: str) -> bool:
    """Whether ``theirs``, the backend's run of ``region`` from ``state``, is beyond the
    rounding noise of the interpreter's run from the same state (which ``recorder`` sees)."""
    ours = region.run(state, [recorder])
    return not _within_noise(ours, theirs, lambda: noise_runs(lambda listener: region.run(state, [listener]),
                                                               semantics, ours))


def _first_carried_difference(ours: list, theirs: list, iteration: int) -> tuple | None:
    """``(iteration, position, ours, theirs)`` for the first integer or boolean the two paths
    carry otherwise (a flag one decision set), or None."""
    for position, (mine, other) in enumerate(zip(ours, theirs)):
        mine, other = np.asarray(mine), np.asarray(other)
        if not is_numeric(mine.dtype) and not np.array_equal(mine, other):
            at = tuple(int(i) for i in np.argwhere(mine != other)[0]) if mine.ndim else ()
            return iteration, position, _scalar(mine[at]), _scalar(other[at])
    return None


def _first_drift(ours: list, theirs: list, iteration: int) -> tuple | None:
    """``(iteration, largest ULP distance)`` where the two paths' carried states differ, or None."""
    if all(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True) for a, b in zip(ours, theirs)):
        return None
    distances = [max_ulp_distance(np.asarray(a), np.asarray(b)) for a, b in zip(ours, theirs)]
    return iteration, max((d for d in distances if d is not None), default=None)


def _step_branch(stepping: LoopStepping, step, text, operands, captured, backend, judge, semantics) -> None:
    """A ``case`` or ``if``: the branch the backend's index chose, run alone."""
    index = int(np.asarray(operands[0]))
    if step.name == "stablehlo.if":
        chosen = 0 if index else 1
    else:
        chosen = index if 0 <= index < len(step.regions) - 1 else len(step.regions) - 1
    branch = _Region(text, step, chosen, captured, region_name(step, chosen))
    recorded = _Decisions()
    branch.run([], [recorded])
    stepping.beyond = _judge_region(branch, [], None, recorded, backend, judge, semantics)


def _judge_region(region: _Region, state, iteration, recorded: "_Decisions", backend, judge,
                  semantics) -> IterationFinding:
    """The region's module compared op by op on ``state`` (the backend's carried state);
    where no op is beyond its bound, the first of its compares whose value on the backend
    is not the interpreter's from that state (``recorded``): a decision that went the other
    way on noise."""
    comparison = judge(region.text, region.arguments(state))
    finding = IterationFinding(iteration, region.role, comparison)
    if comparison.divergence is not None:
        return finding
    took = recorded.as_the_backend_took_them(backend, state)
    flipped = next(((mine, other) for mine, other in zip(recorded.taken, took.taken)
                    if other.own and mine.region is region and not np.array_equal(mine.value, other.value)), None)
    if flipped is not None:
        mine, other = flipped
        noise = _decision_noise(mine, region, None, state, 0, semantics)
        finding.decision = _describe_decision(mine, _backend_operands(other, state, backend) or other, True,
                                              iteration, noise)
    return finding


@dataclass
class _Taken:
    """A decision as a run took it: where (``key``: the region, the enclosing frames, the
    op), the op, its frames, its operands and the value it decided."""

    key: tuple
    step: Step
    stack: tuple
    region: _Region          # whose run took it
    operands: list
    value: np.ndarray
    own: bool = False        # the value is the backend's own (else the interpreter's from the backend's state)
    recorded: np.ndarray | None = None   # for an own value: the interpreter's from the backend's state


class _Decisions(Listener):
    """Records the decisions runs take, in order: each compare's result and operands, each
    case's and if's index (not inside data-parallel regions: reduce bodies, comparators)."""

    def __init__(self):
        self.taken: list[_Taken] = []
        self.region: _Region | None = None

    def enter(self, region: _Region) -> None:
        self.region = region

    def _record(self, step, stack, operands, value) -> None:
        if any(frame.step.name in DATA_PARALLEL_REGIONS for frame in stack):
            return
        assert self.region is not None, "runs are made by _Region.run, which says whose"
        key = (id(self.region), tuple((id(f.step), f.region_index, f.call) for f in stack), id(step))
        self.taken.append(_Taken(key, step, tuple(stack), self.region, list(operands), np.asarray(value)))

    def before_op(self, step, operands, stack):
        if step.name in BRANCHES:
            self._record(step, stack, operands[:1], operands[0])

    def after_op(self, step, operands, results, stack):
        if step.name == "stablehlo.compare":
            self._record(step, stack, operands, results[0])
        return None

    def as_the_backend_took_them(self, backend, state) -> "_Decisions":
        """These decisions as the backend takes them from ``state`` (the state they were
        recorded from): those of a region's module itself (the compares and branch indices
        of its ``@main``) with the values the backend computes for them, from one run of
        the module cut after the last of them; the others, inside inner regions, as
        recorded (``own`` False)."""
        took = _Decisions()
        took.taken = list(self.taken)
        by_region: dict = {}
        for position, taken in enumerate(self.taken):
            if not taken.stack:
                by_region.setdefault(taken.region, []).append(position)
        for region, positions in by_region.items():
            sources = [region.source_of(self.taken[position]) for position in positions]
            computed = [source for source in sources if source is not None]
            shown = dict(zip(computed, backend(prefix_module(region.text, "main", max(op for op, _ in computed),
                                                             computed), region.arguments(state)))) if computed else {}
            for position, source in zip(positions, sources):
                taken = self.taken[position]
                value = taken.value if source is None else np.asarray(shown[source])   # an argument: the state's own
                took.taken[position] = dataclasses.replace(
                    taken, value=value, own=True, recorded=taken.value,
                    operands=[value] if taken.step.name in BRANCHES else taken.operands)
        return took

    def first_difference(self, other: "_Decisions"):
        """``(mine, theirs)``: the first of these decisions that ``other`` took otherwise (or
        did not take: None), in the order taken. A decision ``other`` holds as the backend's
        own (``as_the_backend_took_them``) is compared as such; one inside an inner region,
        recorded from the interpreter's run from the backend's state, only while every own
        decision of that run before it is what the interpreter's run decided too (after one
        is not, the interpreter's run has gone another way than the backend's)."""
        others = {taken.key: taken for taken in other.taken}
        faithful: dict = {}   # region -> whether the interpreter's run still decides as the backend does
        for mine in self.taken:
            theirs = others.get(mine.key)
            trusted = faithful.get(id(mine.region), True)
            if theirs is not None and theirs.own:
                if theirs.recorded is not None and not np.array_equal(theirs.value, theirs.recorded):
                    faithful[id(mine.region)] = False
            elif not trusted:
                continue
            if theirs is None or not np.array_equal(mine.value, theirs.value):
                return mine, theirs
        return None


def _decision(pair, iteration, cond, body, start, theirs, backend, semantics) -> Decision:
    """The Decision of ``pair`` (``_Decisions.first_difference``) at ``iteration``: its
    operands' noise from runs of the interpreter's path from ``start``, and the backend's
    own operands where the decision is one of the stepped region's (from ``theirs``)."""
    ours, other = pair
    if ours is None or other is None or ours.key != other.key:
        known = ours if ours is not None else other
        side = "the interpreter's path" if known is ours else "the backend's path"
        decision = _describe_decision(known, None, False, iteration)
        decision.role += (f" (taken on {side} only" + (": the paths went other ways before, inside a region "
                          "whose decisions are not recorded)" if ours is not None and other is not None else ")"))
        return decision
    noise = _decision_noise(ours, cond, body, start, iteration, semantics)
    if other.own and other.step.name not in BRANCHES:   # its operands as the backend computes them too
        other = _backend_operands(other, theirs, backend) or other
    return _describe_decision(ours, other, other.own, iteration, noise)


def _backend_operands(taken: _Taken, state, backend) -> _Taken | None:
    """The backend's own operands and value of a compare of its region's module itself
    (its ``@main``): the module cut before it, run on the backend from ``state``; else None."""
    if taken.stack or taken.step.name != "stablehlo.compare":
        return None
    region = taken.region
    operands = [np.asarray(v) for v in backend(operands_module(region.text, "main", taken.step.index),
                                               region.arguments(state))]
    value = Execution(RunContext()).run_alone(taken.step, operands)[0]
    return _Taken(taken.key, taken.step, taken.stack, region, operands, np.asarray(value), own=True)


def _decision_noise(taken: _Taken, cond: _Region, body: _Region | None, start, iteration: int,
                    semantics) -> tuple[list, int]:
    """``(operands, other_way)``: the decision's operands in ``noise_runs`` of the
    interpreter's path from ``start`` up to ``iteration`` (every op moved within its
    bound) that took it as the interpreter did, and how many of those runs went another
    way by then (ended before it, did not come to it, or decided it otherwise): rounding
    noise alone splits the paths there. ``body`` None: one run of ``cond`` alone (any
    region run once)."""
    def run(listener):
        state = list(start)
        for current in range(iteration + 1):
            recorder = _Decisions()
            go = cond.run(state, [listener, recorder])
            if body is not None and _truth(go[0]):
                state = body.run(state, [listener, recorder])
            if current == iteration:
                found = next((other for other in recorder.taken if other.key == taken.key), None)
                if found is None or not np.array_equal(found.value, taken.value):
                    break
                return [found.operands, False]
            if body is None or not _truth(go[0]):
                break
        return [taken.operands, True]

    runs = noise_runs(run, semantics, [taken.operands, False])
    return [operands for operands, other_way in runs if not other_way], sum(other_way for _, other_way in runs)


def _describe_decision(ours: _Taken, theirs: _Taken | None, own_values: bool, iteration,
                       noise: tuple[list, int] = ([], 0)) -> Decision:
    runs, other_way = noise
    decision = Decision(op_label(ours.step), ours.step.info.location, _role(ours), iteration, (),
                        (_scalar(ours.value), None), backend_values=own_values, noise_split=other_way)
    if theirs is None:
        return decision
    ours_value, their_value = np.asarray(ours.value), np.asarray(theirs.value)
    differ = np.argwhere(ours_value != their_value) if ours_value.shape == their_value.shape else np.empty((0, 0))
    element = tuple(int(i) for i in differ[0]) if len(differ) else ()
    decision.element = element
    decision.taken = (_scalar(ours_value[element] if ours_value.ndim else ours_value),
                      _scalar(their_value[element] if their_value.ndim else their_value))
    for position, (mine, other) in enumerate(zip(ours.operands, theirs.operands)):
        decision.operands.append(_distance(np.asarray(mine), np.asarray(other), [np.asarray(run[position])
                                           for run in runs], element))
    return decision


def _distance(ours: np.ndarray, theirs: np.ndarray, runs: list, element: tuple) -> OperandDistance:
    """One operand's distance at ``element``: in ULP, and against the bound the noise runs give."""
    at = element if ours.ndim else ()
    mine, other = ours[at], theirs[at]
    distance = int(ulp_difference(np.asarray(other), np.asarray(mine))) if is_numeric(ours.dtype) else None
    if not runs:   # no noise run came to the decision as the interpreter did: no bound to give
        return OperandDistance(_scalar(mine), _scalar(other), distance, None, None)
    bound, alternatives = spread_allowance(ours, runs)
    inside = bool(within(np.asarray(mine), np.asarray(other), None if bound is None else np.asarray(bound)[at],
                         [np.asarray(alternative)[at] for alternative in alternatives]))
    if distance is None:
        return OperandDistance(_scalar(mine), _scalar(other), None, None, inside)
    with np.errstate(all="ignore"):   # the bound counted in ULP towards the backend's value (across zero, ULP grow)
        toward = -1.0 if ours.dtype.kind != "c" and float(other) < float(mine) else 1.0
        edge = (np.asarray(mine).astype(np.float64) + toward * np.asarray(bound)[at]).astype(ours.dtype)
    return OperandDistance(_scalar(mine), _scalar(other), distance, int(ulp_difference(edge, np.asarray(mine))),
                           inside)


def _role(taken: _Taken) -> str:
    """What a decision decides: the exit test of a loop, a branch index, a select ..."""
    step, stack = taken.step, taken.stack
    if step.name in BRANCHES:
        return f"the {'predicate' if step.name == 'stablehlo.if' else 'branch index'} of {op_label(step)}"
    region = stack[-1].step.regions[stack[-1].region_index] if stack else taken.region.main
    use = _first_use(region, step)
    owner = stack[-1] if stack else None
    if use == "returned":
        if owner is None and taken.region.role == "cond" or owner is not None and (
                owner.step.name == "stablehlo.while" and owner.region_index == 0):
            return "the loop's exit test" if owner is None else (
                f"the exit test of the inner loop {_described(owner.step)}, its iteration {owner.call}")
        return "a compare whose value the region returns"
    inner = "" if owner is None else f" inside {_described(owner.step)}, call {owner.call}"
    if use is None:
        return "a compare" + inner
    return f"the compare behind {use}" + inner


def _first_use(region, step) -> str | None:
    """What the decision's value reaches first in ``region``, through logical and shape ops:
    ``"a select at L"``, ``"the branch index of X at L"``, ``"returned"`` or None."""
    steps = region.steps
    pending, seen = list(step.results), set()
    while pending:
        slot = pending.pop(0)
        if slot in seen:
            continue
        seen.add(slot)
        if slot in region.outputs:
            return "returned"
        for user in steps:
            if slot not in user.operands:
                continue
            where = describe_location(user.info.location)
            at = f" at {where}" if where else ""
            if user.name == "stablehlo.select" and user.operands[0] == slot:
                return f"a select{at}"
            if user.name in BRANCHES and user.operands[0] == slot:
                return f"the branch index of {user.name}{at}"
            if user.name in _CARRIES_A_DECISION:
                pending.extend(user.results)
    return None


def _described(step) -> str:
    """``stablehlo.while at file.py:12 (f)``."""
    where = describe_location(step.info.location)
    return op_label(step) + (f" at {where}" if where else "")


def _within_noise(ours: list, theirs: list, runs_of) -> bool:
    """Whether each of ``theirs`` is within the noise of ``ours``: floats within
    ELEMENTWISE_ULP ULP (spread_allowance's floor) without a run, else within the spread
    of ``runs_of()`` (computed only when needed)."""
    runs = None
    for index, (mine, other) in enumerate(zip(ours, theirs)):
        mine, other = np.asarray(mine), np.asarray(other)
        if mine.shape != other.shape or mine.dtype != other.dtype:
            return False
        if within(mine, other, *spread_allowance(mine, [])).all():
            continue
        if runs is None:
            runs = runs_of()
        if not within(mine, other, *spread_allowance(mine, [run[index] for run in runs])).all():
            return False
    return True


def _against_whole(stepped: list, whole: list) -> int:
    """How far the backend's stepped loop ends from its value of the loop compiled whole:
    0 when the same, else the largest ULP distance (-1 where no float differs)."""
    if all(other is not None and np.array_equal(np.asarray(mine), np.asarray(other), equal_nan=True)
           for mine, other in zip(stepped, whole)):
        return 0
    distances = [max_ulp_distance(np.asarray(other), np.asarray(mine)) for mine, other in zip(stepped, whole)
                 if other is not None]
    return max((d for d in distances if d), default=-1)


def _truth(value) -> bool:
    return bool(np.asarray(value).reshape(-1)[0])


def _shown(value) -> str:
    """A decision's value or operand as the reports print it: booleans as true, false; a
    float in full (its shortest decimal that reads back the same: a decision turns on its
    last digits)."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, np.floating):
        return str(value)
    return format_number(value)


def _scalar(value):
    """One element as a NumPy scalar of its type (an array of other sizes as it is)."""
    value = np.asarray(value)
    return value.reshape(())[()] if value.size == 1 else value
