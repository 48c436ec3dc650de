"""Conformance: run a program on the interpreter and on another backend, and
find the first op whose value differs beyond rounding noise.

    comparison = si.compare(f, x, backend="cpu")
    print(comparison)               # agreement, or each difference with its kind, and the first divergent op

How the first divergent op is found: calls in the entry function are inlined
(so nested ``jit``\\ s and helpers such as ``jnp.where`` are ops of one
function); the interpreter runs that module once and keeps the value of every
op of the entry function. When the final results differ beyond tolerance, the
other backend runs *prefixes* of the module: the entry function cut after op
*k*, returning the values of a window of ops up to *k* as its results
(windows in program order, their size bounded by ``window_bytes``), until it has
shown the value of every op. Each op is then re-run here on the *backend's*
operands and judged by its own rounding bound (judge/bounds.py): the backend's
value agrees, is rounding noise (what another summation order, a fused
multiply-add or excess precision can produce), is beyond the bound, or is
unbounded (it arose inside a loop or conditional, which is not bounded op by op).
The first op beyond its bound is the first divergent op (the first unbounded one
when none is: a ``while``, ``case`` or ``if``, which is then stepped on the backend,
iteration by iteration, to the iteration, op and decision where it goes another way:
tools/loops.py); a result that depends on no such op is rounding noise. A result
whose value from the whole program is not the one the prefixes showed (XLA
fuses a program with more results otherwise) is judged by the noise estimated
for the whole program. XLA's CPU runs the prefixes in a child process of its own
(a program JAX never handed XLA may abort it: the child dies, not this process);
where the backend cannot run a prefix, one line says why and only the results are
compared.

``per_device=True`` compares what each device computes instead: a sharded program
runs as XLA runs it, each device its partitioned program on its shards
(sharding/per_device.py), and each device's results are compared with the
backend's results of that device (a JAX platform with enough devices runs the
program partitioned over them, as ``jax.jit`` does: the addressable shards of its
outputs), or, for a backend that gives no per-device results, with the device's
shards of the backend's global results (:class:`PerDeviceComparison`). The
report gives each device's values and the bytes each device sent and received at
each collective, and on each device whose results differ, the first divergent op of
its per-device program: the backend runs that program itself, every device at once
(its body in an ``sdy.manual_computation`` over a mesh of the devices, each value
stacked over them: ir/edit.py ``manual_over_devices``), returning windows of its
ops' values as the global search's prefixes do; each device's ops are judged as
above, an op across devices (a collective) on every device's backend operands
(judge/bounds.py ``classify_across_devices``). Where the backend cannot run that
program, one line says why and only the results are compared. Where Shardy cannot
partition the program, a ``PerDeviceWarning`` says why and the global program is compared.

Host callbacks (``jax.debug.print``, ``pure_callback``, ``io_callback``,
Equinox's checks): the interpreter runs the function lowered for the ``interp``
platform, whose callbacks it calls; a JAX backend gets the same function lowered
for its own platform, whose callbacks it calls itself, op for op the same
program otherwise. The callbacks run on every run: the interpreter's, the
backend's, each prefix the backend runs, and the runs that estimate noise
(judge/bounds.py); those with side effects are not run again op by op.
"""

from __future__ import annotations

import os
from typing import Any, Literal, overload

from dataclasses import dataclass, field

import numpy as np

from ..program.calls import Call, interpreter_platform
from ..engine.run import Execution, Listener, RunContext, numpy_warnings_off
from ..errors import InterpreterError
from ..ir.edit import entry_op_names, inline_calls, manual_over_devices, prefix_module
from ..ir.locations import SourceLocation
from ..ir.types import Token
from ..ops.host_callback import TARGET as HOST_CALLBACK
from ..program import load, prepare
from ..program.signature import is_jax_function
from ..backends import JaxBackend, JaxChildBackend, resolve
from ..backends.jax import with_host_devices
from ..backends.errors import BackendError
from ..engine.grid import PROCESS_OPS, process_ops
from ..engine.process_groups import ProcessGroups, reducing_strategy
from ..judge.precision import DeclaredPrecision
from ..judge.bounds import (AGREE, BEYOND, NOISE, PRECISION, UNBOUNDED, Verdict, classify, classify_across_devices,
                            noise_runs, spread_allowance, within)
from ..judge.difference import Difference, difference, max_ulp_distance, tolerances
from .loops import LoopStepping, step_control_flow
from .per_device import prepare_checked
from ..ir.locations import describe_location
from .region_calls import op_label, region_name, source_text
from ..judge.summary import summarize
from ..sharding.traffic import CollectiveTraffic

WINDOW_BYTES = 64 << 20
# Ops not run again on the backend's operands: what they do is not a function of them alone.
SIDE_EFFECT_OPS = frozenset({"stablehlo.infeed", "stablehlo.outfeed", "stablehlo.send", "stablehlo.recv"})
# Ops whose values the spec leaves to the implementation (rng: "implementation-defined";
# rng_bit_generator: "not guaranteed to be deterministic between implementations"): the
# backend's values of the right types are the op's, and the ops after it judged on them.
IMPLEMENTATION_DEFINED_VALUES = frozenset({"stablehlo.rng", "stablehlo.rng_bit_generator"})


@dataclass
class Divergence:
    """The first op of the entry function whose backend value is beyond its rounding bound
    (or, when none is, the first whose difference is unbounded: ``kind``)."""

    op: str
    location: SourceLocation
    position: int                 # its position among the entry function's ops (after inlining)
    result: int
    difference: Difference        # the backend's value vs the interpreter's op on the backend's operands
    ours: object                  # the interpreter's op on the backend's operands
    theirs: object
    operands: list                # the backend's operands
    kind: str = BEYOND
    rule: str = ""
    operands_agree: bool = True   # the backend's operands are the interpreter's own
    regions: tuple = ()           # names of its regions, where the difference arose
    stepping: LoopStepping | None = None   # an unbounded loop or conditional stepped on the backend (tools/loops.py)
    program: str = "the entry function"   # whose ops ``position`` counts (a device's: "the per-device program")

    def describe(self, backend: str) -> str:
        where = describe_location(self.location)
        lines = [f"first divergent op: {self.op} (op #{self.position} of {self.program})"
                 + (f" at {where}" if where else "")]
        if self.location and self.location.name:
            lines.append(f"  jax: {self.location.name}")
        text = source_text(self.location)
        if text:
            lines.append(f"  source: {text}")
        if self.kind == BEYOND:
            lines.append(f"  beyond its rounding bound ({self.rule})")
        elif self.rule:
            lines.append(f"  beyond the rounding noise estimated for it ({self.rule})")
        lines.append(f"  result #{self.result}: {self.difference.describe(backend)}")
        lines.append(f"    interpreter: {summarize(self.ours)}")
        lines.append(f"    {backend}: {summarize(self.theirs)}")
        if self.operands:
            lines.append("  its operands agree on both sides:" if self.operands_agree else
                         f"  its operands as {backend} computed them (the interpreter ran the op on these):")
            lines += [f"    operand #{i}: {summarize(v)}" for i, v in enumerate(self.operands)]
        if self.regions:
            lines.append(f"  the difference arises inside its regions ({', '.join(self.regions)})"
                         + ("" if self.kind == BEYOND or self.stepping is not None else ": it is not bounded op by "
                            "op there, so it may be rounding noise or an error"))
        if self.stepping is not None:
            lines += ["  " + line for line in self.stepping.describe(backend).splitlines()]
        return "\n".join(lines)


@dataclass
class OpFinding:
    """What compare found of one op of the entry function (after inlining): its
    verdict (``kind``: AGREE, NOISE, BEYOND or UNBOUNDED, judge/bounds.py) and the
    largest ULP distance of the backend's value from the interpreter's own run of it
    (its float results' elements finite on both sides; None without such elements)."""

    step: object                  # the op's step in the inlined entry function
    kind: str
    max_ulp: int | None


@dataclass
class Comparison:
    """The outcome of :func:`compare`. ``ok`` when every result is within tolerance.

    ``kinds``: per result that differs, ``"rounding noise"`` (every op it depends on
    is within its rounding bound), ``"beyond its bound"`` (it depends on an op
    that is not) or ``"unbounded"``; None for the others. ``ops``: how many ops of
    the entry function were found of each kind; ``findings`` each op's
    :class:`OpFinding` (after a search: results that differ, or ``every_op=True``)."""

    backend: str
    outputs: list                 # per result: None (within tolerance) or a Difference
    divergence: Divergence | None = None
    note: str | None = None
    tolerances: dict = field(default_factory=dict)
    compiled_prefixes: int = 0
    kinds: list = field(default_factory=list)
    ops: dict = field(default_factory=dict)
    findings: list = field(default_factory=list)
    settings: tuple = ()          # the backend's settings that change semantics (Backend.settings)
    result_names: tuple = ()      # each result by its name (result['loss']), or by number where it has none
    precision: DeclaredPrecision | None = None   # the backend's declared precision, if it declares one

    @property
    def ok(self) -> bool:
        return all(d is None for d in self.outputs)

    def result_name(self, index: int) -> str:
        return self.result_names[index] if index < len(self.result_names) else f"result #{index}"

    @property
    def noise_only(self) -> bool:
        """Every result is within tolerance or differs only by rounding noise."""
        return all(d is None or kind == NOISE for d, kind in zip(self.outputs, self._kinds()))

    @property
    def explained(self) -> bool:
        """Every result is within tolerance, or differs by rounding noise or within the
        backend's declared precision (judge/precision.py): no sign of an error."""
        return all(d is None or kind in (NOISE, PRECISION) for d, kind in zip(self.outputs, self._kinds()))

    def _kinds(self) -> list:
        return self.kinds or [None] * len(self.outputs)

    def __str__(self) -> str:
        settings = [f"{self.backend} setting: {sentence}" for sentence in self.settings]
        if self.precision is not None:
            settings.append(f"{self.backend} declared precision: {self.precision.name}")
        if self.ok:
            count = len(self.outputs)
            return "\n".join([f"the interpreter and {self.backend} agree on " + (
                "the result" if count == 1 else f"all {count} results")] + settings)
        lines = []
        for i, (d, kind) in enumerate(zip(self.outputs, self._kinds())):
            if d is not None:
                lines.append(f"{self.result_name(i)} differs" + (f" ({_KIND_TEXT[kind]})" if kind else "")
                             + f": {d.describe(self.backend)}")
        if self.ops:
            counted = ", ".join(f"{n} {kind}" for kind, n in self.ops.items() if n and kind != AGREE)
            lines.append(f"ops whose value differs: {counted or 'none'}")
        if self.divergence is not None:
            lines.append(self.divergence.describe(self.backend))
        if self.note:
            lines.append(self.note)
        return "\n".join(lines + settings)


@dataclass
class PerDeviceComparison:
    """The outcome of :func:`compare` with ``per_device=True``: each device's partitioned
    run against the backend's. ``against`` is ``"per device"`` (the backend's own
    results on each device) or ``"shards"`` (each device's shards of the backend's
    global results: a backend that gives no per-device results). ``outputs[d][i]``:
    None where device ``d``'s result ``i`` is within tolerance, else a
    :class:`~.difference.Difference`; ``ours[d]`` and ``theirs[d]``: each device's
    results; ``traffic``: the bytes each device sent and received at each collective.
    ``divergence_per_device[d]``, for each device ``d`` whose results differ: the first
    divergent op of its per-device program (a :class:`Divergence`: ``position`` counts
    the ops of that program's entry function, calls inlined), or None, with
    ``device_notes[d]`` saying why; ``search_note``: why no op was searched for."""

    backend: str
    against: str
    outputs: list
    ours: list
    theirs: list
    traffic: CollectiveTraffic
    tolerances: dict = field(default_factory=dict)
    settings: tuple = ()
    result_names: tuple = ()      # each result by its name (result['loss']), or by number where it has none
    divergence_per_device: dict = field(default_factory=dict)   # device -> its first divergent op, or None
    device_notes: dict = field(default_factory=dict)            # device -> what the search found besides
    search_note: str | None = None   # why no op was searched for on the devices whose results differ
    compiled_prefixes: int = 0

    @property
    def ok(self) -> bool:
        return all(d is None for device in self.outputs for d in device)

    def __str__(self) -> str:
        what = "its results on each device" if self.against == "per device" else \
            "each device's shards of its global results (it gives no per-device results)"
        lines = [f"each device's partitioned program against {self.backend}: {what}"]
        for device, (differences, ours, theirs) in enumerate(zip(self.outputs, self.ours, self.theirs)):
            agree = all(d is None for d in differences)
            lines.append(f"device {device}: " + ("agrees" if agree else "differs"))
            for index, (d, mine, other) in enumerate(zip(differences, ours, theirs)):
                name = self.result_names[index] if index < len(self.result_names) else f"result #{index}"
                if d is None:
                    lines.append(f"  {name}: {summarize(mine)}")
                else:
                    lines.append(f"  {name} differs: {d.describe(self.backend)}")
                    lines.append(f"    interpreter: {summarize(mine)}")
                    lines.append(f"    {self.backend}: {summarize(other)}")
            if device in self.divergence_per_device:
                found = self.divergence_per_device[device]
                lines += ["  " + line for line in ([] if found is None else found.describe(self.backend).splitlines())
                          + self.device_notes.get(device, "").splitlines()]
        if self.search_note:
            lines.append(self.search_note)
        lines.append("collectives (bytes sent/received by each device):")
        lines += ["  " + line for line in str(self.traffic).splitlines()]
        return "\n".join(lines + [f"{self.backend} setting: {sentence}" for sentence in self.settings])


_KIND_TEXT = {NOISE: "rounding noise: every op it depends on is within its bound",
              PRECISION: "within the backend's declared precision: every op it depends on is within the spec's "
                         "rounding or within what the backend declares of its arithmetic",
              BEYOND: "beyond bound: it depends on an op beyond its rounding bound",
              UNBOUNDED: "unbounded: it depends on a loop or conditional whose difference is not bounded"}


class _EntryValues(Listener):
    """Keeps operands and results of every op of the entry function, by position."""

    def __init__(self):
        self.ops: list = []

    def after_op(self, step, operands, results, stack):
        if not stack:
            self.ops.append((step, list(operands), list(results)))
        return None


@overload
def compare(target: Any, *args: Any, backend: Any = "cpu", tolerance: Any = None, function: str | None = None,
            window_bytes: int = WINDOW_BYTES, every_op: bool = False, per_device: Literal[False] = False,
            **kwargs: Any) -> Comparison: ...


@overload
def compare(target: Any, *args: Any, backend: Any = "cpu", tolerance: Any = None, function: str | None = None,
            window_bytes: int = WINDOW_BYTES, every_op: bool = False, per_device: bool = ...,
            **kwargs: Any) -> Comparison | PerDeviceComparison: ...


def compare(target: Any, *args: Any, backend: Any = "cpu", tolerance: Any = None, function: str | None = None,
            window_bytes: int = WINDOW_BYTES, every_op: bool = False, per_device: bool = False,
            **kwargs: Any) -> Comparison | PerDeviceComparison:
    """Run ``target`` on ``args`` here and on ``backend``; classify the differences and
    find the first divergent op (module docstring).

    ``backend``: what :func:`~stablehlo_interp.backends.resolve` takes (a JAX platform
    name, ``"iree"``, a :class:`~stablehlo_interp.backends.Backend` such as an
    :class:`~stablehlo_interp.backends.InterpreterBackend`, or a callable
    ``(module_text, args) -> arrays``); a backend that cannot compile or run the program
    raises a :class:`~stablehlo_interp.backends.BackendError` (one that cannot run a prefix
    the search writes: the comparison's ``note`` says why). ``tolerance``: ``(rtol, atol)``
    for every float type, or a dict by element type (``{"f32": (1e-4, 1e-5)}``)
    over :data:`~stablehlo_interp.judge.difference.DEFAULT_TOLERANCES`: results
    within it agree, and no search is made unless ``every_op`` asks for each op's
    finding (``Comparison.findings``) all the same. ``per_device``: each device's
    partitioned run against the backend's (:class:`PerDeviceComparison`, module docstring).
    """
    platform = interpreter_platform() if is_jax_function(target) else None
    call = (prepare_checked if per_device else prepare)(target, args, kwargs, function, platform=platform)
    return compare_call(call, backend, tolerance, window_bytes, every_op)


def compare_call(call: Call, backend: Any = "cpu", tolerance: Any = None, window_bytes: int = WINDOW_BYTES,
                 every_op: bool = False) -> Comparison | PerDeviceComparison:
    """:func:`compare` of a call another tool prepared (program/calls.py; the explorer's):
    a call in the function's form keeps its ``traced``, so that a backend whose platform
    is not the one the call was lowered for gets the function lowered for its own
    (host callbacks are lowered for one platform each)."""
    if call.function != "main":
        raise InterpreterError(f"compare runs @main (backends compile a module's @main), not @{call.function}")
    table = tolerances(tolerance)
    run_backend = resolve(backend)
    if call.partitioned is not None:
        return _compare_per_device(call, run_backend, table, window_bytes)
    values = call.arguments
    text = inline_calls(module_text(call.program), "main")
    run_theirs, their_text = _backend_side(call, text, run_backend)
    recorder = _EntryValues()
    program = load(text, host_callbacks=call.program.host_callbacks)
    ours = program.run(*values, listeners=[recorder])
    theirs = run_theirs(their_text, values)
    outputs = [difference(o, t, table) for o, t in zip(ours, theirs)]
    comparison = Comparison(run_backend.name, outputs, tolerances=table, settings=tuple(run_backend.settings),
                            result_names=_result_names(program, len(ours)),
                            precision=getattr(run_backend, "precision", None))
    if len(theirs) != len(ours):
        comparison.outputs = [Difference(problem=f"{run_backend.name} returned {len(theirs)} results, "
                                                 f"the interpreter {len(ours)}")]
    if comparison.ok and not every_op:
        return comparison
    if their_text != text and entry_op_names(their_text, "main") != entry_op_names(text, "main"):
        comparison.note = (f"the program lowered for {run_backend.name} is not op for op the interpreter's "
                           "(beyond its host callbacks): no search for the first divergent op")
        return comparison
    isolated = _isolated(run_backend, 1) if run_theirs is run_backend else None   # (a child: no host callbacks)
    try:
        return _search(comparison, call, program, recorder.ops, text, their_text, isolated or run_theirs,
                       isolated or run_backend, ours, theirs, tolerance, window_bytes)
    finally:
        if isolated is not None:
            isolated.close()


def _search(comparison: Comparison, call: Call, program, ops: list, text: str, their_text: str, run_theirs,
            run_backend, ours: list, theirs: list, tolerance: Any, window_bytes: int) -> Comparison:
    """The search for the first divergent op (module docstring): the backend shows each
    window's values (``run_theirs`` runs a prefix), each op is judged, and a divergent
    loop or conditional is stepped on ``run_backend``."""
    values = call.arguments
    backend_values: dict = {}
    try:
        for window in _windows(ops, window_bytes):
            comparison.compiled_prefixes += _backend_window(window, their_text, values, run_theirs, backend_values)
    except BackendError as error:
        said = error.message.strip()
        comparison.note = (f"no search for the first divergent op: {run_backend.name} cannot run a prefix of the "
                           f"program ({said.splitlines()[0] if said else type(error).__name__})")
        return comparison
    with numpy_warnings_off():   # NaN, inf and overflow are values here, as in a run
        _classify(comparison, program, ops, values, backend_values, ours, theirs)
    divergence = comparison.divergence
    if divergence is not None and divergence.kind == UNBOUNDED and their_text == text:
        step, _, results = ops[divergence.position]

        def captured(op, result):   # the backend's value of an op's result (op None: an argument)
            return values[result] if op is None else backend_values.get((op, result), ops[op][2][result])

        divergence.stepping = step_control_flow(
            step, text, divergence.operands, captured, [backend_values.get((step.index, r)) for r in range(len(results))],
            run_backend, lambda module, arguments: compare(module, *arguments, backend=run_backend, tolerance=tolerance,
                                                           every_op=True), program.semantics)
    return comparison


def _compare_per_device(call, run_backend, table: dict, window_bytes: int = WINDOW_BYTES) -> PerDeviceComparison:
    """Each device's partitioned run against the backend's results on that device, or
    its shards of the backend's global results, and on each device whose results
    differ, the first divergent op of its program (module docstring)."""
    partitioned = call.per_device_program()
    shards = partitioned.shards(call.arguments)
    traffic = CollectiveTraffic()
    ours = call.run_devices([traffic])   # checked against the global run (sharding/check.py)
    text = module_text(call.program)
    run_per_device = getattr(run_backend, "run_per_device", None)
    theirs = run_per_device(text, shards) if run_per_device is not None else None
    against = "per device"
    if theirs is None:
        theirs, against = partitioned.result_shards(run_backend(inline_calls(text, "main"), call.arguments)), "shards"
    outputs = [[difference(mine, other, table) for mine, other in zip(device_ours, device_theirs)]
               for device_ours, device_theirs in zip(ours, theirs)]
    comparison = PerDeviceComparison(run_backend.name, against, outputs, ours, theirs, traffic, table,
                                     tuple(getattr(run_backend, "settings", ())),
                                     _result_names(call.program, len(call.program.function(call.function).result_types),
                                                   call.function))
    differing = [device for device, differences in enumerate(outputs) if any(d is not None for d in differences)]
    if differing:
        with numpy_warnings_off():   # NaN, inf and overflow are values here, as in a run
            _search_devices(comparison, call, run_backend, differing, window_bytes)
    return comparison


class _DeviceValues(Listener):
    """Keeps operands and results of every op of the entry function on each device (by
    process id); or with ``replace`` (``[device][(op, result)] -> value``), replaces
    each op's results by those values where they are of the same type: each op then
    runs on the backend's operands, and ``recomputed[device][op]`` holds what it made
    of them (on every device at once: a collective's too)."""

    def __init__(self, count: int, replace: list | None = None):
        self.ops: list = [[] for _ in range(count)]
        self.replace = replace
        self.recomputed: list = [{} for _ in range(count)]
        self.group_operands: dict = {}   # (device, op) -> (its process, its operands) at an all_reduce

    def after_op(self, step, operands, results, stack):
        if stack:
            return None
        device = stack.process.id
        if self.replace is None:
            self.ops[device].append((step, list(operands), list(results)))
            return None
        self.recomputed[device][step.index] = list(results)
        if step.name == "stablehlo.all_reduce":
            self.group_operands[(device, step.index)] = (stack.process, list(operands))
        shown = [self.replace[device].get((step.index, r)) for r in range(len(results))]
        return [other if _same_type(own, other) else own for own, other in zip(results, shown)]

    def operands_of_group(self, device: int, step) -> list | None:
        """The operands of each device of ``device``'s group at the all_reduce ``step``
        (engine/process_groups.py), in group order; None for other ops."""
        found = self.group_operands.get((device, step.index))
        if found is None:
            return None
        process, _ = found
        group = ProcessGroups(step.info, reducing_strategy(step.info)).of(process)
        return [self.group_operands[(member, step.index)][1] for member in group]


def _search_devices(comparison: PerDeviceComparison, call, run_backend, differing: list, window_bytes: int) -> None:
    """On each device in ``differing``, the first divergent op of its per-device program:
    the backend runs that program itself, on every device at once (its body in a manual
    computation over the devices: ir/edit.py ``manual_over_devices``), a window of its
    ops' values at a time; each op is then judged on each device as the global compare
    judges it (:func:`_classify`), an op across devices on every device's backend
    operands (judge/bounds.py ``classify_across_devices``). Where the backend cannot
    run it, ``search_note`` says why."""
    partitioned = call.per_device_program()
    count = partitioned.num_devices
    if call.program.host_callbacks or HOST_CALLBACK in partitioned.text:
        comparison.search_note = ("no search for the first divergent op on each device: the per-device program "
                                  "calls host callbacks")
        return
    text = inline_calls(partitioned.text, partitioned.function.name)
    local = call.program.sibling(text)
    shards = partitioned.shards(call.arguments)
    recorder = _DeviceValues(count)
    ours = local.run_grid(shards, function="main", listeners=[recorder])
    shown: list = [{} for _ in range(count)]
    isolated = _isolated(run_backend, count)
    run_devices = _run_on_devices(isolated or run_backend, shards, count)
    try:
        for window in _windows(recorder.ops[0], max(1, window_bytes // count)):
            stacked: dict = {}
            comparison.compiled_prefixes += _backend_window(window, text, shards[0], run_devices, stacked)
            _check_shown(window, stacked, count)
            for key, value in stacked.items():
                for device in range(count):
                    shown[device][key] = value[device]
    except (BackendError, InterpreterError) as error:
        said = (error.message if isinstance(error, BackendError) else str(error)).strip()
        reason = said.splitlines()[0] if said else type(error).__name__
        comparison.search_note = (f"no search for the first divergent op on each device: {run_backend.name} "
                                  f"cannot run the per-device program ({reason})")
        return
    finally:
        if isolated is not None:
            isolated.close()
    replay = _DeviceValues(count, replace=shown)
    local.run_grid(shards, function="main", listeners=[replay])
    for device in differing:
        comparison.divergence_per_device[device], comparison.device_notes[device] = _device_divergence(
            comparison, local, recorder.ops[device], shards[device], shown[device], ours[device], device, replay,
            getattr(run_backend, "precision", None))
    _name_sources(comparison)


def _name_sources(comparison: PerDeviceComparison) -> None:
    """On each device without a divergent op of its own, say which devices have one:
    their values reach it through the collectives."""
    sources = [device for device, found in comparison.divergence_per_device.items() if found is not None]
    if not sources:
        return
    named = f"device{'s' if len(sources) > 1 else ''} {', '.join(map(str, sources))}"
    for device, found in comparison.divergence_per_device.items():
        if found is not None:
            continue
        note = comparison.device_notes[device]
        comparison.device_notes[device] = (
            f"{note}\nthe first divergent op is on {named}, whose values reach device {device} through the "
            "collectives" if note else
            f"every op of device {device} agrees on the backend's operands: the difference came from other "
            f"devices, through the collectives (the first divergent op is on {named})")


def _device_divergence(comparison: PerDeviceComparison, local, ops: list, arguments: list, shown: dict,
                       ours: list, device: int, replay: _DeviceValues, precision) -> tuple:
    """``(the first divergent op on device, a note)``: the device's ops judged as the
    global compare judges them (:func:`_classify`), on the values the backend showed;
    ``precision``: the backend's declared precision, if it declares one."""
    execution = Execution(RunContext(semantics=local.semantics))
    alone = _judge_alone(execution, precision)

    def judge(step, operands, env, own_results, theirs):
        if step.name in PROCESS_OPS or any(process_ops(region) for region in step.regions):
            recomputed = replay.recomputed[device][step.index]
            return recomputed, classify_across_devices(step, recomputed, theirs, replay.operands_of_group(device, step))
        return alone(step, operands, env, own_results, theirs)

    final = _shown_results(local, ops, arguments, shown)
    device_comparison = Comparison(comparison.backend, [difference(o, t, comparison.tolerances)
                                                        for o, t in zip(ours, final)], tolerances=comparison.tolerances,
                                   precision=precision)
    _classify(device_comparison, local, ops, arguments, shown, ours, final, judge)
    if device_comparison.ok:
        return None, (f"{comparison.backend} running this per-device program agrees with the interpreter on device "
                      f"{device}: the results above come from {comparison.backend}'s own run of the program, which "
                      "computes otherwise")
    counts = device_comparison.ops
    if device_comparison.divergence is None and counts[NOISE] + counts[PRECISION] == 0:
        return None, ""   # every op agrees: the difference came from other devices (_name_sources says)
    if device_comparison.divergence is not None:
        device_comparison.divergence.program = "the per-device program"
    return device_comparison.divergence, device_comparison.note or ""


def _isolated(run_backend, count: int) -> JaxChildBackend | None:
    """XLA's CPU in a child process of its own for the programs the search writes (the
    prefixes of the global search, the regions a loop's stepping runs, the per-device
    programs: a program JAX never handed XLA may abort it: the child dies, not this
    process), with ``count`` host devices and this process's other XLA flags, named as
    ``run_backend``; None for another backend (a subclass's runs are its own; an
    accelerator's chip is held by this process)."""
    if type(run_backend) is not JaxBackend or run_backend.platform != "cpu":
        return None
    return JaxChildBackend("cpu", with_host_devices(os.environ.get("XLA_FLAGS", ""), count), name=run_backend.name)


def _run_on_devices(run_backend, shards: list, count: int):
    """``run(module_text, arguments)`` for :func:`_backend_window`: the backend runs the
    per-device program ``module_text`` on every device's ``shards`` (``arguments`` are
    device 0's); each value stacked over the devices (``[count, *local shape]``). A
    backend that runs per device gets each device's part; another, the stacked values."""
    run_per_device = getattr(run_backend, "run_per_device", None)

    def run(module_text: str, arguments: list) -> list:
        program = manual_over_devices(module_text, "main", count)
        try:
            if run_per_device is None:
                return run_backend(program, [np.stack([np.asarray(device[i]) for device in shards])
                                             for i in range(len(arguments))])
            per_device = run_per_device(program, [[np.asarray(value)[None] for value in device] for device in shards])
        except (BackendError, InterpreterError):
            raise
        except Exception as error:   # a caller's backend on a program it was not written for
            raise BackendError(run_backend.name, f"{type(error).__name__}: {error}") from error
        if per_device is None:
            raise InterpreterError(f"it has fewer than {count} devices")
        return [np.concatenate([np.asarray(device[i]) for device in per_device]) for i in range(len(per_device[0]))]

    return run


def _check_shown(window, stacked: dict, count: int) -> None:
    """Raise where the backend did not return, for each op result of ``window``, a value
    of its type stacked over ``count`` devices."""
    for step, _, results in window:
        for r in _tensor_results(results):
            value, own = stacked.get((step.index, r)), np.asarray(results[r])
            if value is None or value.shape != (count, *own.shape) or value.dtype != own.dtype:
                raise InterpreterError(f"it returned {'no value' if value is None else f'{value.dtype}{list(value.shape)}'}"
                                       f" for {step.name}'s result #{r} on the devices, not "
                                       f"{own.dtype}{[count, *own.shape]}")


def _shown_results(program, ops: list, arguments: list, shown: dict) -> list:
    """The entry function's results as the backend showed them (``shown``, by ``(op,
    result)``; an argument returned as it is, itself; a value not shown, the interpreter's)."""
    origin = {slot: (step.index, r, results[r]) for step, _, results in ops for r, slot in enumerate(step.results)}
    found = []
    for slot in program.function("main").region.outputs:
        if slot in origin:
            index, r, own = origin[slot]
            found.append(shown.get((index, r), own))
        else:
            found.append(arguments[slot])
    return found


def _backend_side(call, text: str, run_backend):
    """``(run, text)``: how the backend runs a module, and the module it runs. The
    interpreter's own unless that one calls host callbacks and the backend is a
    JAX platform other than ``interp``: then the function lowered for it. A
    ``Lowered`` the caller made for the CPU (or a call lowered for the CPU as JAX's
    default platform) runs with its callbacks' functions on the CPU backend."""
    platform = getattr(run_backend, "platform", None)
    if not call.program.host_callbacks and (HOST_CALLBACK not in text or platform in (None, "interp")):
        return run_backend, text
    if call.program.host_callbacks and platform == "cpu":
        their_text, host_callbacks = text, call.program.host_callbacks
    elif call.traced is not None and hasattr(run_backend, "lower"):
        lowered_text, host_callbacks = run_backend.lower(call.traced)
        their_text = inline_calls(lowered_text, "main")
    elif call.program.host_callbacks:
        raise InterpreterError(f"this Lowered calls host callbacks lowered for the CPU, which {run_backend.name} "
                               "cannot call: compare it with backend='cpu', or give compare the function (or "
                               f"jitted function) itself, and it lowers it for {run_backend.name} too")
    else:
        raise InterpreterError(f"this module calls host callbacks lowered for the interp platform, which "
                               f"{run_backend.name} cannot call: give compare the function (or jitted function) "
                               f"itself, and it lowers it for {run_backend.name} too")

    def run(module_text, arguments):
        return run_backend(module_text, arguments, host_callbacks=host_callbacks)

    return run, their_text


def _judge_alone(execution: Execution, precision):
    """``judge(step, operands, env, own_results, theirs) -> (recomputed, verdict)``: the op
    run here alone on the backend's operands and judged by its rounding bound."""
    def judge(step, operands, env, own_results, theirs):
        if _has_side_effect(step):
            recomputed = own_results   # not run again: compared with the interpreter's own run
        elif step.name in IMPLEMENTATION_DEFINED_VALUES and all(
                other is not None and _same_type(own, other) for own, other in zip(own_results, theirs)):
            recomputed = theirs
        else:
            recomputed = execution.run_alone(step, operands, env)
        return recomputed, classify(execution, step, operands, recomputed, theirs, env, precision)

    return judge


def _classify(comparison: Comparison, program, ops, arguments, backend_values: dict, ours: list,
              final: list, judge=None) -> None:
    """Judge each op of the entry function by its rounding bound on the backend's
    operands (judge/bounds.py); set the comparison's divergence, kinds and counts.
    ``ours`` and ``final``: both sides' results of the whole program. A result that is
    an argument returned as it is, and differs, is beyond any bound. ``judge``: how an
    op is judged (:func:`_judge_alone`'s form; that one where None)."""
    entry = program.function("main")
    execution = Execution(RunContext(semantics=program.semantics))
    judge = judge or _judge_alone(execution, comparison.precision)
    env = dict(enumerate(arguments))          # slot -> the backend's value (its arguments are ours)
    taint = {}                                # slot -> the worst kind of the ops it depends on
    counts = dict.fromkeys((AGREE, NOISE, PRECISION, BEYOND, UNBOUNDED), 0)
    first = {}
    for step, own_operands, own_results in ops:
        operands = [env[slot] for slot in step.operands]
        theirs = [backend_values.get((step.index, r)) for r in range(len(own_results))]
        recomputed, verdict = judge(step, operands, env, own_results, theirs)
        counts[verdict.kind] += 1
        comparison.findings.append(OpFinding(step, verdict.kind, _max_ulp(own_results, theirs)))
        if verdict.kind in (BEYOND, UNBOUNDED) and verdict.kind not in first:
            first[verdict.kind] = _divergence(step, verdict, recomputed, theirs, operands, own_operands)
        inherited = [taint.get(slot) for slot in step.operands + tuple(s for c in step.captures for s in c)]
        kind = _worst([verdict.kind, *inherited])
        for slot, own, other in zip(step.results, own_results, theirs):
            env[slot] = other if _same_type(own, other) else own   # a value of another type runs nowhere
            taint[slot] = kind
    comparison.ops = counts
    comparison.divergence = first.get(BEYOND) or first.get(UNBOUNDED)
    outputs = list(zip(comparison.outputs, entry.region.outputs, final))
    comparison.kinds = [None if d is None else taint.get(slot, BEYOND) for d, slot, _ in outputs]   # no op: an argument
    notes = []
    if comparison.divergence is None and counts[PRECISION] and comparison.precision is not None:
        notes.append(f"every op is within its rounding bound or within the backend's declared precision on the "
                     f"backend's operands ({counts[PRECISION]} only within the latter: {comparison.precision.name})")
    elif comparison.divergence is None:
        notes.append("every op is within its rounding bound on the backend's operands: the results differ "
                     "only as much as summation order, fused multiply-adds and excess precision allow")
    recompiled = [i for i, (d, slot, value) in enumerate(outputs)
                  if d is not None and d.problem is None and slot in env and not _same(env[slot], value)]
    if recompiled:
        notes.append(_judge_whole_program(comparison, program, arguments, recompiled,
                                          [env[outputs[i][1]] for i in recompiled], ours, final))
    comparison.note = "\n".join(notes) or None


def _judge_whole_program(comparison: Comparison, program, arguments, recompiled: list, shown: list, ours: list,
                         final: list) -> str:
    """Results whose value from the whole program is not the one the backend's prefixes
    showed (XLA fuses a program with more results otherwise): within the noise
    estimated for the whole program (its runs with every op moved within its bound,
    judge/bounds.py) of the prefixes' value, they keep their kind (noise, if every op
    agreed); else they are unbounded. Says which are which."""
    runs = noise_runs(lambda listener: program.run(*arguments, listeners=[listener]), program.semantics, ours,
                      comparison.precision)
    outside = []
    for index, prefix_value in zip(recompiled, shown):
        bound, alternatives = spread_allowance(ours[index], [run[index] for run in runs])
        value = np.asarray(final[index])
        if within(np.asarray(prefix_value), value, bound, alternatives).all():
            comparison.kinds[index] = _worst([comparison.kinds[index], NOISE if comparison.precision is None else PRECISION])
        else:
            outside.append(index)
            comparison.kinds[index] = _worst([comparison.kinds[index], UNBOUNDED])
    names = ", ".join(comparison.result_name(i) for i in recompiled)
    text = (f"{names}: the backend's value from the whole program is not the one its prefixes showed "
            f"(compiled with other fusions)")
    if not outside:
        return text + "; within the noise estimated for the whole program of it"
    return text + (f"; {', '.join(comparison.result_name(i) for i in outside)} beyond the noise estimated for the whole program "
                   "of it (unbounded)")


def _result_names(program, count: int, function: str = "main") -> tuple:
    """The function's results by name where the module names them (a JAX function's pytree
    paths), else by number."""
    entry = program.function(function)
    return tuple(entry.result_name(index) for index in range(count))


def _max_ulp(own_results, theirs) -> int | None:
    """The largest ULP distance of the backend's results from the interpreter's own."""
    distances = [max_ulp_distance(np.asarray(own), other) for own, other in zip(own_results, theirs)
                 if other is not None and not isinstance(own, (tuple, Token))]
    distances = [d for d in distances if d is not None]
    return max(distances) if distances else None


def _worst(kinds) -> str | None:
    for kind in (BEYOND, UNBOUNDED, PRECISION, NOISE, AGREE):
        if kind in kinds:
            return kind
    return None


def _has_side_effect(step) -> bool:
    if step.name in SIDE_EFFECT_OPS:
        return True
    return step.name == "stablehlo.custom_call" and bool(step.info.attributes.get("has_side_effect"))


def _divergence(step, verdict: Verdict, recomputed, theirs, operands, own_operands) -> Divergence:
    agree = all(_same(a, b) for a, b in zip(operands, own_operands))
    return Divergence(op_label(step), step.info.location, step.index, verdict.result, verdict.difference,
                      recomputed[verdict.result], theirs[verdict.result], operands, verdict.kind, verdict.rule,
                      agree, tuple(region_name(step, i) for i in range(len(step.regions))))


def _same_type(own, other) -> bool:
    if other is None or isinstance(own, (tuple, Token)):
        return False
    own = np.asarray(own)
    return own.shape == other.shape and own.dtype == other.dtype


def _same(a, b) -> bool:
    if isinstance(a, (tuple, Token)) or isinstance(b, (tuple, Token)):
        return True
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


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


def _backend_window(window, text: str, values, run_backend, found: dict) -> int:
    """Have the backend show the values of ``window``'s ops (a prefix of ``text``) into
    ``found`` by ``(op position, result)``; how many prefixes it compiled (0 or 1)."""
    returned = [(step.index, r) for step, _, results in window for r in _tensor_results(results)]
    if not returned:
        return 0
    prefix = prefix_module(text, "main", window[-1][0].index, returned)
    found.update(zip(returned, (np.asarray(value) for value in run_backend(prefix, values))))
    return 1
