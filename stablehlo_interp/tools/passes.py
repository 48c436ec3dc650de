"""XLA's CPU pipeline, pass by pass, on the interpreter: the first pass after which the
program computes something else.

    report = si.passes(f, x, y)
    print(report)        # every pass keeps the values, or the first that changes them

XLA's CPU compiler compiles the program in a child process with its own dump options
(every pass that changed the module, backends/xla_passes.py); jaxlib's translator turns
each dumped module back into StableHLO (MHLO's ``fusion``, ``copy`` and ``bitcast`` stay:
ops/xla.py runs them), and the interpreter runs it. Each stage's results are judged
against the original program's by compare's noise judge (judge/bounds.py): within the
noise of the original program run with every op moved within its rounding bound, a
stage keeps the values; beyond it, it computes something else.

Only stages whose module differs from the one before need a run, and those are
bisected (``every_stage=False``): the last stage first, then halves, on the rule that
a pass keeps the values or changes them for the stages after it. ``every_stage=True``
runs every distinct stage. A stage the interpreter cannot follow (the translator
refuses it, or it holds an op the interpreter does not run) is not judged: the report
says from which pass on, and why, and gives no verdict on what it could not run.

A sharded program compiles for its devices, and the SPMD partitioner is a pass like the
others: from it on a stage is each device's program, run on the interpreter's grid on
the devices' parts of the arguments under XLA's own parameter shardings (the stage's
``mhlo.sharding``), its results assembled under XLA's output sharding and judged against
the global program's (collectives over a mesh of reordered devices, whose order the
translation drops, take their groups from XLA's text: backends/xla_passes.py).

When every pass keeps the values, ``compiled_differs`` tells whether XLA's compiled
program itself gives values beyond the noise all the same (the code generator, not a
pass); then :func:`~stablehlo_interp.tools.codegen.codegen_options` recompiles it under
each candidate XLA flag and the report names those under which it gives the
interpreter's values again ("no pass changes the values; with --xla_cpu_enable_fast_math=false
the compiled result equals the interpreter's").
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

import numpy as np

from ..backends.errors import BackendError
from ..backends.xla_passes import Stage, TranslationError, compile_pipeline, run_compiled, translate
from ..errors import InterpreterError
from ..ir.locations import Frame, describe_frame
from ..ir.types import Token
from ..engine.run import Listener
from ..judge import bounds
from ..judge.difference import Difference, differing, mismatched_types
from ..judge.summary import summarize
from ..program import load, prepare
from ..program.signature import is_jax_function
from ..sharding.per_device import assemble, device_shards, shard_types
from ..sharding.propagation import value_tilings
from .codegen import EQUINOX_CHECKS, CodegenReport, codegen_options
from .compare import Comparison, compare, module_text

KEEPS, CHANGES, NOT_RUN = "keeps the values", "changes the values", "not run"
SHOWN_CHANGES = 12   # changed HLO instructions shown on each side


@dataclass
class StageRun:
    """One stage run on the interpreter and judged: ``verdict`` is :data:`KEEPS`,
    :data:`CHANGES` or :data:`NOT_RUN` (``reason`` says why); ``outputs`` per result None
    (within the noise) or its :class:`Difference` from the original program's value."""

    stage: Stage
    verdict: str
    outputs: list = field(default_factory=list)
    results: list = field(default_factory=list)
    reason: str = ""
    rerun: Callable | None = field(default=None, repr=False, compare=False)   # the stage run again (listener)
    program: Any = field(default=None, repr=False, compare=False)             # the stage translated and loaded
    layout: _Layout | None = field(default=None, repr=False, compare=False)   # a per-device stage's


@dataclass
class ChangedInstruction:
    """An HLO instruction a pass removed (``side`` "-") or added ("+"), with the user's
    source line from its metadata."""

    side: str
    instruction: str
    source: str


@dataclass
class PassesReport:
    """The outcome of :func:`passes` (module docstring). ``first_change``: the run of the
    first stage that changes the values, ``before`` the run of the stage before it that
    keeps them; ``not_judged_from``: the first stage the interpreter could not run (no
    verdict from it on); ``compiled_differs``, where every stage keeps the values (None
    otherwise): whether XLA's compiled program's values differ all the same, beyond the
    noise and beyond what :func:`compare` explains op by op (``compiled_comparison``):
    then XLA's code generator, not a pass, computes something else."""

    stages: tuple
    distinct: int
    runs: list
    results: list                 # the original program's values on the interpreter
    compiled: list                # XLA's compiled program's values ([]: not known, _compiled_results)
    first_change: StageRun | None = None
    before: StageRun | None = None
    changed: list = field(default_factory=list)
    not_judged_from: StageRun | None = None
    every_stage: bool = False
    devices: int = 0              # a sharded program's devices (0: one)
    compiled_outputs: list = field(default_factory=list)   # per result, None or its Difference beyond the noise
    compiled_differs: bool | None = None
    compiled_comparison: Comparison | None = None   # si.compare's judgement, where the compiled values differ
    codegen: CodegenReport | None = None            # the flags searched, where the compiled values differ

    @property
    def ok(self) -> bool:
        """Every stage run keeps the values, none was left unjudged, and the compiled
        program's values are not shown to differ."""
        return self.first_change is None and self.not_judged_from is None and not self.compiled_differs

    def __str__(self) -> str:
        how = "every one" if self.every_stage else "bisected"
        on = f" for {self.devices} devices" if self.devices else ""
        lines = [f"XLA CPU{on}: {len(self.stages)} stages dumped, {self.distinct} distinct; {len(self.runs)} run on "
                 f"the interpreter ({how})"]
        if self.first_change is not None:
            lines += self._describe_change(self.first_change)
        elif self.not_judged_from is not None:
            run = self.not_judged_from
            lines.append(f"not judged from {run.stage.name} on: {run.reason}")
            earlier = [judged for judged in self.runs if judged.stage.order < run.stage.order]
            lines.append(f"the {len(earlier)} stage(s) judged before it keep the values" if earlier else "")
        else:
            lines.append("every pass keeps the values (within the original program's rounding noise)")
            lines.append(self._describe_compiled())
        return "\n".join(line for line in lines if line)

    def _describe_change(self, run: StageRun) -> list:
        lines = [f"first pass that changes the values: {run.stage.name}"]
        if run.stage.after == "pipeline-start" and run.stage.ran:
            lines.append(f"  (no pass's dump shows the change: it came after the stage before, in pass {run.stage.ran} "
                         "that ran next, whose own dump follows its inner pipelines, or between pipelines)")
        if self.before is not None:
            lines.append(f"  the stage before it ({self.before.stage.name}) keeps them")
        for index, output in enumerate(run.outputs):
            if output is None:
                continue
            lines.append(f"  result #{index}: {output.describe('after the pass')}")
            lines.append(f"    original: {summarize(self.results[index])}")
            if self.before is not None:
                lines.append(f"    before the pass: {summarize(self.before.results[index])}")
            lines.append(f"    after the pass: {summarize(run.results[index])}")
        if self.changed:
            lines.append("  instructions it changed (HLO):")
            lines += [f"    {c.side} {c.instruction}" + (f"    [{c.source}]" if c.source else "") for c in self.changed]
        return lines

    def _describe_compiled(self) -> str:
        if self.compiled_differs is None:
            return "XLA's compiled program's results were not read"
        if not self.compiled_differs:
            return "XLA's compiled program gives the same values (within the noise, or what compare explains)"
        lines = ["XLA's compiled program differs all the same (its code generator, not a pass):"]
        if self.compiled_comparison is not None:
            lines += ["  " + line for line in str(self.compiled_comparison).splitlines()]
        else:
            lines += [f"  result #{i}: {d.describe('compiled')}" for i, d in enumerate(self.compiled_outputs)
                      if d is not None]
        if self.codegen is not None:
            lines += ["XLA's flags, each compiled alone (codegen_options):"]
            lines += ["  " + line for line in str(self.codegen).splitlines()]
        return "\n".join(lines)


def passes(target: Any, *args: Any, function: str | None = None, every_stage: bool = False,
           search_flags: bool = True, tolerance: Any = None, **kwargs: Any) -> PassesReport:
    """Compile ``target`` with XLA's CPU pipeline, run the module after each pass on the
    interpreter with ``args``, and name the first pass after which it computes something
    else beyond the original program's rounding noise (module docstring). ``target`` and
    ``args`` as :func:`si.run <stablehlo_interp.run>` takes them; the program is ``@main``.
    ``search_flags``: where every pass keeps the values and the compiled program does not
    (one device), recompile it under each of XLA's candidate flags (``codegen_options``);
    ``tolerance``, as :func:`compare` takes it, for the compiled program's values (a stage's
    are judged by the noise alone)."""
    call = prepare(target, args, kwargs, function, platform="cpu" if is_jax_function(target) else None)
    if call.function != "main":
        raise InterpreterError(f"passes compiles a module's @main, not @{call.function}")
    if call.program.host_callbacks:
        raise InterpreterError("passes compiles the program in another process, where its host callbacks "
                               f"cannot be called ({EQUINOX_CHECKS})")
    devices = _Devices.of(call) if call.program.num_partitions > 1 else None
    judge = _NoiseJudge(call.program, call.arguments)
    stages = compile_pipeline(module_text(call.program), 1 if devices is None else devices.count)
    distinct = distinct_stages(stages)
    runs: dict[int, StageRun] = {}

    def run(position: int) -> StageRun:
        if position not in runs:
            runs[position] = _run_stage(distinct[position], call.arguments, judge, devices)
        return runs[position]

    first = _first_not_keeping(len(distinct), run, every_stage)
    report = _report(stages, distinct, runs, first, judge, every_stage, devices, tolerance)
    if report.compiled_differs and search_flags and devices is None:
        report.codegen = codegen_options(module_text(call.program), *call.arguments, tolerance=tolerance)
    return report


def _report(stages: tuple, distinct: list, runs: dict, first: int | None, judge: _NoiseJudge,
            every_stage: bool, devices: _Devices | None, tolerance: Any = None) -> PassesReport:
    last = runs.get(len(distinct) - 1)
    report = PassesReport(stages, len(distinct), [runs[p] for p in sorted(runs)], judge.expected,
                          _compiled_results(judge, devices, last), every_stage=every_stage,
                          devices=0 if devices is None else devices.count)
    if first is None:
        if not report.compiled:   # (XLA's results not read: compiled_differs stays None)
            return report
        report.compiled_outputs = judge.outputs(report.compiled, last.rerun if last else None,
                                                last.results if last else None)
        if any(d is not None for d in report.compiled_outputs) and devices is None:
            report.compiled_comparison = compare(judge.program, *judge.arguments, backend="cpu",
                                                 tolerance=tolerance)
        report.compiled_differs = any(d is not None for d in report.compiled_outputs) and (
            report.compiled_comparison is None or not report.compiled_comparison.explained)
        return report
    found = runs[first]
    if found.verdict == NOT_RUN:
        report.not_judged_from = found
        return report
    report.first_change = found
    if first > 0:
        report.before = runs.get(first - 1) or _run_stage(distinct[first - 1], judge.arguments, judge, devices)
        report.changed = changed_instructions(distinct[first - 1].text, found.stage.text)
    return report


def _compiled_results(judge: _NoiseJudge, devices: _Devices | None, last: StageRun | None) -> list:
    """XLA's compiled program's results; [] where they are not read: a program XLA does not
    run here (one that takes a token), or a sharded program whose last stage did not run
    as each device's program (its devices' parts are those XLA's program takes)."""
    try:
        if devices is None:
            return run_compiled(judge.arguments)
        if last is None or last.layout is None:
            return []
        return last.layout.global_results(run_compiled(last.layout.arguments, devices.count))
    except BackendError:
        return []


def _first_not_keeping(count: int, run, every_stage: bool) -> int | None:
    """The position of the first distinct stage that does not keep the values (None:
    all do). Bisected: the first stage and the last are run, then halves between the
    last known to keep and the first known not to."""
    if every_stage:
        return next((p for p in range(count) if run(p).verdict != KEEPS), None)
    if run(0).verdict != KEEPS:
        return 0
    if run(count - 1).verdict == KEEPS:
        return None
    good, bad = 0, count - 1
    while bad - good > 1:
        middle = (good + bad) // 2
        if run(middle).verdict == KEEPS:
            good = middle
        else:
            bad = middle
    return bad


def distinct_stages(stages: tuple) -> list:
    """The stages whose module differs from the one before (the first always): XLA's text
    of it, its header line aside, hashed."""
    distinct, last = [], None
    for stage in stages:
        digest = hashlib.sha256(stage.text.partition("\n")[2].encode()).digest()
        if digest != last:
            distinct.append(stage)
        last = digest
    return distinct


def _run_stage(stage: Stage, arguments: list, judge: _NoiseJudge, devices: _Devices | None) -> StageRun:
    """The stage translated, run on the interpreter (each device's program on the grid, after
    the SPMD partitioner) and judged; NOT_RUN, and why, where it cannot be run faithfully."""
    layout = None
    try:
        program = load(translate(stage, 1 if devices is None else devices.count))
        if devices is not None and program.num_partitions > 1:
            found = devices.layout(program)
            if isinstance(found, str):
                return StageRun(stage, NOT_RUN, reason=found)
            layout = found

            def rerun(listener=None) -> list:
                per_device = program.run_grid(layout.arguments, listeners=[listener] if listener else [])
                return layout.global_results(per_device)
        else:
            def rerun(listener=None) -> list:
                return program.run(*arguments, listeners=[listener] if listener else [])
        results = rerun()
    except TranslationError as why:
        return StageRun(stage, NOT_RUN, reason=str(why))
    except InterpreterError as why:
        return StageRun(stage, NOT_RUN, reason=f"the interpreter cannot run it: {why}")
    if len(results) != len(judge.expected):
        return StageRun(stage, NOT_RUN, reason=f"its translation returns {len(results)} results, the program "
                                               f"{len(judge.expected)}")
    outputs = judge.outputs(results, rerun)
    return StageRun(stage, KEEPS if all(d is None for d in outputs) else CHANGES, outputs, list(results),
                    rerun=rerun, layout=layout, program=program)


@dataclass
class _Layout:
    """Each device's part of a sharded program's arguments under the shardings of XLA's
    per-device program (its parameters' and output's HLO shardings), and how its results
    make the global ones."""

    arguments: list               # [d][i]
    result_types: tuple
    result_tilings: list

    def global_results(self, per_device: list) -> list:
        return assemble(self.result_types, self.result_tilings, per_device)


@dataclass
class _Devices:
    """A sharded program over ``count`` devices: its global arguments and types."""

    count: int
    arguments: list
    argument_types: tuple
    result_types: tuple

    @classmethod
    def of(cls, call) -> _Devices:
        program = call.program
        if program.num_replicas != 1:
            raise InterpreterError(f"passes compiles one replica; this program has {program.num_replicas}")
        function = program.runnable(call.function)
        return cls(program.num_partitions, list(call.arguments), tuple(function.arg_types),
                   tuple(function.result_types))

    def layout(self, program) -> _Layout | str:
        """The per-device ``program``'s :class:`_Layout`, or why its arguments or results are
        not the devices' shards of the global ones."""
        local = program.runnable("main")
        arg_tilings, result_tilings, _ = value_tilings(program.propagation, local, self.count)
        for what, (global_types, tilings, local_types) in {
                "argument": (self.argument_types, arg_tilings, local.arg_types),
                "result": (self.result_types, result_tilings, local.result_types)}.items():
            for device in range(self.count):
                for index, (shard, mine) in enumerate(zip(shard_types(global_types, tilings, device), local_types)):
                    if str(shard) != str(mine):
                        return (f"XLA's per-device program takes {what} #{index} as {mine}, device {device}'s shard "
                                f"of it under its sharding is {shard}")
        return _Layout(device_shards(self.arguments, arg_tilings, self.count), self.result_types, result_tilings)


class _NoiseJudge:
    """The original program's values on the interpreter, and the rounding noise around them
    (judge/bounds.py: the program run with every op moved within its bound), estimated at
    the first value that is not bit for bit the original's (an infinite or NaN element is
    kept only by itself or by what a noise run gave there: ``spread_allowance``).

    A stage's value beyond the original's noise is judged again by the stage's own noise
    (the stage run with every op moved within its bound, around its value): a pass that
    reorders a sum whose terms cancel makes a program whose noise is not the original's,
    and the values are kept when either program's noise covers the other's value."""

    def __init__(self, program, arguments: list):
        self.program, self.arguments = program, arguments
        self.expected = program.run(*arguments)
        self._runs: list | None = None

    def outputs(self, values: list, rerun: Callable[[Listener], list] | None = None,
                computed: list | None = None) -> list:
        """Per result, None (within the noise) or its :class:`Difference` (beyond it).
        ``rerun(listener)``: a stage on the interpreter, whose own noise around what it
        computes (``computed``; default ``values``, the stage's own) judges ``values`` again:
        a value beyond the original's noise is kept where the stage's noise reaches from its
        own value to both ``values`` and the original's."""
        outputs = [self._judge(self.expected[i], np.asarray(value), self._noise, i) for i, value in enumerate(values)]
        if rerun is None or all(d is None for d in outputs):
            return outputs
        computed = values if computed is None else computed
        runs = bounds.noise_runs(rerun, self.program.semantics, computed)

        def kept(i: int) -> bool:
            return all(self._judge(computed[i], np.asarray(other), lambda: runs, i) is None
                       for other in (values[i], self.expected[i]))

        return [d if d is None or not kept(i) else None for i, d in enumerate(outputs)]

    @staticmethod
    def _judge(expected, value: np.ndarray, noise, index: int) -> Difference | None:
        """``value`` against ``expected`` by the spread of result ``index`` in ``noise()``'s runs."""
        if isinstance(expected, (tuple, Token)):
            return None
        expected = np.asarray(expected)
        problem = mismatched_types(expected, value)
        if problem is not None or expected.tobytes() == value.tobytes():
            return problem
        bound, alternatives = bounds.spread_allowance(expected, [run[index] for run in noise()])
        return differing(expected, value, bounds.within(expected, value, bound, alternatives), bound)

    def _noise(self) -> list:
        if self._runs is None:
            self._runs = bounds.noise_runs(lambda listener: self.program.run(*self.arguments, listeners=[listener]),
                                           self.program.semantics, self.expected)
        return self._runs


# XLA's text of an instruction: "%name = type opcode(operands), attributes, metadata={...}".
_METADATA = re.compile(r",\s*metadata=\{([^{}]*)\}")
_STACK_FRAME = re.compile(r"stack_frame_id=(\d+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_SOURCE_LINE = re.compile(r'source_file="(?P<file>[^"]*)" source_line=(?P<line>\d+)')
FRAME_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")   # XLA's text's


def changed_instructions(before: str, after: str) -> list[ChangedInstruction]:
    """The HLO instructions a pass removed and added (the first :data:`SHOWN_CHANGES` of
    each side: :func:`instruction_changes`)."""
    removed, added = instruction_changes(before, after)
    return removed[:SHOWN_CHANGES] + added[:SHOWN_CHANGES]


def instruction_changes(before: str, after: str) -> tuple[list[ChangedInstruction], list[ChangedInstruction]]:
    """All the HLO instructions a pass removed, and all it added (their metadata, and
    whether they are their computation's ROOT, aside), with the user's source line each
    came from (its metadata's innermost stack frame)."""
    old, new = _instructions(before), _instructions(after)
    sources = {**_sources(before, old), **_sources(after, new)}
    old_keys, new_keys = list(old), list(new)
    matcher = difflib.SequenceMatcher(a=old_keys, b=new_keys, autojunk=False)
    removed, added = [], []
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag != "equal":
            removed += [ChangedInstruction("-", old[key][0], sources[key]) for key in old_keys[a0:a1]]
            added += [ChangedInstruction("+", new[key][0], sources[key]) for key in new_keys[b0:b1]]
    return removed, added


def _instructions(text: str) -> dict:
    """``{instruction without ROOT and metadata: (its line without metadata, its metadata)}``
    in the module's order."""
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith(("%", "ROOT %")) or " = " not in line:
            continue
        metadata = _METADATA.search(line)
        shown = without_metadata(line)
        found[shown.removeprefix("ROOT ")] = (shown, metadata.group(1) if metadata else "")
    return found


def _sources(text: str, instructions: dict) -> dict:
    """``{instruction: "file:line (function) op_name"}`` from the module's stack frame tables."""
    frames = stack_frames(text)
    sources = {}
    for line, (_, metadata) in instructions.items():
        name = _OP_NAME.search(metadata)
        where = describe_frame(metadata_frame(metadata, frames))
        sources[line] = " ".join(part for part in (where, name.group(1) if name else "") if part)
    return sources


def without_metadata(line: str) -> str:
    """A line of XLA's text without its instruction's ``metadata={...}``."""
    return _METADATA.sub("", line)


def op_name(line: str) -> str | None:
    """The JAX name of one line of XLA's text (its instruction's metadata's ``op_name``), or None."""
    metadata = _METADATA.search(line)
    name = _OP_NAME.search(metadata.group(1)) if metadata else None
    return name.group(1) if name else None


def instruction_frame(line: str, frames: dict) -> Frame | None:
    """The user's source frame of one line of XLA's text (:func:`metadata_frame` of its
    instruction's metadata), or None."""
    metadata = _METADATA.search(line)
    return metadata_frame(metadata.group(1), frames) if metadata else None


def metadata_frame(metadata: str, frames: dict) -> Frame | None:
    """The source frame an instruction's metadata names, or None: its innermost stack
    frame (among ``frames``: :func:`stack_frames`), as JAX's locations become; or its
    ``source_file`` and ``source_line``, as a module's file:line:column location becomes
    (a module written by hand, or loaded from a .mlir file without JAX's locations)."""
    frame = _STACK_FRAME.search(metadata)
    if frame is not None:
        return frames.get(int(frame.group(1)))
    source = _SOURCE_LINE.search(metadata)
    return Frame(None, source["file"], int(source["line"]), 0) if source else None


def stack_frames(text: str) -> dict[int, Frame]:
    """``{stack frame id: its innermost frame}`` of XLA's text (its FileNames,
    FunctionNames, FileLocations and StackFrames tables; the file's whole path)."""
    tables: dict = {}
    section = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in FRAME_TABLES:
            section = tables.setdefault(stripped, {})
        elif not stripped:
            section = None
        elif section is not None and stripped.split(" ", 1)[0].isdigit():
            key, _, value = stripped.partition(" ")
            section[int(key)] = value.strip('"')
    files, functions = tables.get("FileNames", {}), tables.get("FunctionNames", {})
    locations = {}
    for key, value in tables.get("FileLocations", {}).items():
        fields = dict(re.findall(r"(\w+)=(\d+)", value))
        locations[key] = Frame(functions.get(int(fields.get("function_name_id", 0))),
                               files.get(int(fields.get("file_name_id", 0)), "?"),
                               int(fields.get("line", 0)), int(fields.get("column", 0)))
    frames = {}
    for key, value in tables.get("StackFrames", {}).items():
        fields = dict(re.findall(r"(\w+)=(\d+)", value))
        location = locations.get(int(fields.get("file_location_id", 0)))
        if location is not None:
            frames[key] = location
    return frames
