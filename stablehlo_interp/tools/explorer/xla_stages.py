"""XLA's stages on the explorer page (``si.explore(..., xla_stages=True)``): the program
XLA CPU's pipeline made of the module (its last stage: fusions and all), linked to the
user's lines, and the passes that changed it, the one that changed the values marked.

The capture is :func:`~..passes.passes`'s (XLA's own dumps of every pass, in a child
process: backends/xla_passes.py), run on the page's own module and arguments: its
report judges each stage it ran on the interpreter. A module drawn without arguments
gets the stages without verdicts.

A sharded program's optimized program is each device's: its collectives, with the bytes
each device sends and receives there, are listed (``collectives``: :mod:`.xla_collectives`).

Each line of the optimized program is linked as a jaxpr line is, by the Python lines it
computes: an instruction's own (its metadata's stack frame) and, for a fusion (or a
call), those of every instruction of the computation it calls, so a line's click lights
up the fusion that computes it.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from ...backends.errors import BackendError
from ...backends.xla_passes import compile_pipeline
from ...errors import InterpreterError
from ...program.calls import Call
from ..compare import module_text
from .hlo_text import COMPUTATION_HEADER
from .xla_collectives import collectives
from .xla_graph import xla_graph
from ..passes import (FRAME_TABLES, PassesReport, SHOWN_CHANGES, distinct_stages, instruction_changes,
                      instruction_frame, op_name, passes, stack_frames, without_metadata)

_CALLS = re.compile(r"\bcalls=%(?P<name>[\w.\-]+)")


def stage_data(call: Call, files: Any, page_steps: dict, runs: Counter,
               keep: Callable[[Any], dict]) -> tuple[dict, PassesReport | None]:
    """The page's ``xla`` entry for a prepared call (``files``: the page's Python files, a
    ``page_data._Files``; ``page_steps``: its StableHLO steps, ``runs`` how many times each
    ran, and ``keep`` how the page keeps a value, for the values the graph shows:
    :mod:`.xla_graph`), and the passes report (None without arguments, or where XLA's
    stages could not be had: then the entry's ``error`` says why)."""
    try:
        if call.arguments is None:
            report = None
            stages = compile_pipeline(module_text(call.program), call.program.num_partitions)
        else:
            report = passes(call.program, *call.arguments, function=call.function, search_flags=False)
            stages = report.stages
    except (InterpreterError, BackendError) as why:
        return {"error": f"{type(why).__name__}: {why}"}, None
    distinct = distinct_stages(stages)
    last = distinct[-1]
    lines, frames, names = _linked_lines(last.text, files)
    devices = call.program.num_partitions
    data = {"stage": last.name, "stages": len(stages), "lines": lines,
            "passes": _passes(distinct, report), "report": None if report is None else str(report),
            "graph": xla_graph(lines, frames, names, page_steps, runs, files, values=devices == 1,
                               run=_last_run(report, last), keep=keep),
            "back": stages_back(distinct)}
    if devices > 1:        # XLA's per-device program: its collectives and their bytes
        data["collectives"] = collectives([line["text"] for line in data["lines"]], devices)
    return data, report


def _last_run(report: PassesReport | None, last: Any) -> Any:
    """The report's run of the last stage (None: not run)."""
    return next((run for run in report.runs if run.stage.order == last.order), None) if report else None


def _passes(distinct: list, report: PassesReport | None) -> list[dict]:
    """Each distinct stage after the first (a pass, or a pipeline's start, that changed the
    module): its name (and the pass's alone), how many instructions it removed and added,
    the first of them with their source, the verdict where the report ran it (and why it
    could not run it), and ``values`` where it is the first that changed the values."""
    verdicts = {run.stage.order: run for run in report.runs} if report is not None else {}
    first = report.first_change.stage.order if report is not None and report.first_change else None
    entries = []
    for before, stage in zip(distinct, distinct[1:]):
        removed, added = instruction_changes(before.text, stage.text)
        run = verdicts.get(stage.order)
        entries.append({
            "name": stage.name, "pass": stage.after if stage.after != "pipeline-start" else stage.name,
            "removed": len(removed), "added": len(added),
            "changes": [[c.side, c.instruction, c.source] for c in removed[:SHOWN_CHANGES] + added[:SHOWN_CHANGES]],
            "verdict": None if run is None else run.verdict, "reason": None if run is None else run.reason or None,
            "values": stage.order == first,
        })
    return entries


def _linked_lines(text: str, files) -> tuple[list[dict], list, list]:
    """The stage's text as the page shows it (its frame tables and metadata left out), each
    line with the Python lines it computes (``keys``: ``[file, line]``, its own first); and
    per line, its instruction's own ``[file, line]`` (or None) and JAX name (its metadata's
    ``op_name``, or None)."""
    frames = stack_frames(text)
    shown: list[dict] = []
    own: list = []
    names: list = []
    callees: list[str | None] = []    # the computation each line calls
    inside: dict[str, list] = {}      # computation -> its instructions' lines
    calls: dict[str, list] = {}       # computation -> the computations its instructions call
    computation = None
    for raw in _panel_lines(text):
        stripped = raw.strip()
        header = COMPUTATION_HEADER.match(stripped)
        if header:
            computation = header["name"]
        frame = instruction_frame(raw, frames)
        keys = [[files.index(frame.file, frame.line), frame.line]] if frame is not None else []
        called = _CALLS.search(raw)
        callee = called["name"] if called else None
        if computation is not None:
            inside.setdefault(computation, []).extend(keys)
            if callee:
                calls.setdefault(computation, []).append(callee)
        shown.append({"text": without_metadata(raw).rstrip(), "keys": keys})
        own.append(keys[0] if keys else None)
        names.append(op_name(raw))
        callees.append(callee)
        if stripped == "}":
            computation = None
    for entry, callee in zip(shown, callees):
        for key in _called_keys(callee, inside, calls):
            if key not in entry["keys"]:
                entry["keys"].append(key)
    return shown, own, names


def _panel_lines(text: str) -> Iterator[str]:
    """The lines of XLA's text the panel shows: its frame tables left out, one blank line
    between its parts."""
    in_table, blank = False, True
    for raw in text.splitlines():
        stripped = raw.strip()
        in_table = stripped in FRAME_TABLES or (in_table and bool(stripped))
        if in_table or (not stripped and blank):
            continue
        blank = not stripped
        yield raw


def stages_back(distinct: list) -> list[list]:
    """How to step back through the passes from the last stage the panel shows: per pass
    (each distinct stage after the first), the hunks that turn the text after it into the
    text before it, as the panel shows both (metadata left out): ``[start, count, lines]``,
    the ``count`` lines from line ``start`` of the text after the pass (those it added or
    changed) that were ``lines`` before it; in order (undone from the last)."""
    texts = [[without_metadata(raw).rstrip() for raw in _panel_lines(stage.text)] for stage in distinct]
    steps = []
    for before, after in zip(texts, texts[1:]):
        matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
        steps.append([[b0, b1 - b0, before[a0:a1]] for tag, a0, a1, b0, b1 in matcher.get_opcodes() if tag != "equal"])
    return steps


def _called_keys(callee: str | None, inside: dict, calls: dict) -> list:
    """The Python lines of the instructions of computation ``callee`` and of those it calls."""
    keys, pending, seen = [], [callee] if callee else [], set()
    while pending:
        name = pending.pop()
        if name not in seen:
            seen.add(name)
            keys += inside.get(name, [])
            pending += calls.get(name, [])
    return keys
