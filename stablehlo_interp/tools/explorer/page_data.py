"""What the explorer page shows, as JSON-ready data.

One run observed by the existing listeners (:class:`~..trace.TraceRecorder`
with values, :class:`~..nonfinite.NonFiniteTracer`) gives the
values; the plan gives the graphs; the module text, the jaxpr and the Python
files give the three text panels. Everything is linked by ids:

* a step (one op of the plan) is ``"s<k>"``, numbered in program order;
* a region (a function's body or an op's region) is ``"r<k>"``;
* a Python line is a file index and a line number.

A call prepared per device (sharding/per_device.py) shows the per-device program:
its graphs and text are that program's, every record names its device (``"d"``),
``devices`` holds each device's arguments and, from a
:class:`~..traffic.CollectiveTraffic`, the bytes each device sent and received at
each collective (per op, with how many times each device ran it, and on each
collective's record, ``"tx"``); a per-device comparison's findings (the op that made
each result that differs, per device) are the divergence overlay's ``findings``.

Which line of the module text an op is on: the text is parsed again (without
locations, so MLIR gives each op the position of its own line) and compiled
into a second plan of the same shape; the two plans are walked side by side.
"""

from __future__ import annotations

import inspect
import linecache
import re
import sys
from collections import Counter

import numpy as np

from ...engine.grid import COLLECTIVES
from ...errors import OpError
from ...ir.types import Token
from ...program import load
from ..compare import PerDeviceComparison, compare_call
from ..nonfinite import run_traced, run_traced_per_device
from ..region_calls import op_label, region_name
from ...judge.summary import summarize, type_text
from ..trace import TraceRecorder
from ...sharding.traffic import CollectiveTraffic
from .groups import GroupBuilder, outer_frames, scope_of
from .type_texts import type_text_of
from .xla_stages import stage_data

FULL_ELEMENTS = 1024          # values with at most this many elements are kept whole (shown on demand)
FULL_TEXT_BUDGET = 4_000_000  # characters of whole values per page; later values keep their summary only
MAX_RECORDS = 20_000          # executed ops per page; a longer run keeps its first ones
_JAXPR_SOURCE = re.compile(r"^(?P<code>.*?)\s+# (?P<file>\S.*?):(?P<line>\d+)(?::\d+)? \((?P<function>.*)\)$")


def collect(call, target=None, *, backend=None, tolerance=None, listeners=(),
            every_op: bool = False, xla_stages: bool = False) -> tuple[dict, object, dict]:
    """The page data for one prepared call; also the trace and the overlays' reports
    (``{"nonfinite": NonFiniteOrigins | None, "comparison": Comparison | None, "traffic": ...,
    "passes": PassesReport | None}``). ``listeners`` also watch the run; ``every_op`` asks
    compare for each op's finding; ``xla_stages`` adds XLA CPU's optimized program and its
    passes (``data["xla"]``: :mod:`.xla_stages`)."""
    recorder, nonfinite = _FirstValuesRecorder(), None
    partitioned = call.partitioned
    traffic = CollectiveTraffic() if partitioned is not None else None
    if call.arguments is not None:      # else the structure only
        try:
            if partitioned is not None:
                nonfinite = run_traced_per_device(call, [recorder, traffic, *listeners])[1]
            else:
                nonfinite = run_traced(call, [recorder, *listeners])[1]
        except OpError as error:      # an op that failed: the page shows the run up to it
            recorder.trace.error = error
    trace = recorder.trace
    files = _Files()
    program = call.program if partitioned is None else partitioned.local
    graph = _Graph(program, call.function, files, _function_lines(target))
    hlo_text, hlo_lines = _module_text(program, graph)
    arguments = call.arguments or []
    records, full_values = _records(trace, graph, arguments if partitioned is None else [])
    data = {
        "title": call.program.name or "module",
        "function": call.function,
        "jaxpr": _jaxpr_lines(call.traced, files),
        "stablehlo": hlo_text.splitlines(),
        "regions": graph.regions,
        "groups": graph.groups,
        "sections": graph.sections,
        "steps": graph.steps,
        "records": records,
        "full_values": full_values,
        "ran": call.arguments is not None,
        "error": None if trace.error is None else str(trace.error),
        "overlays": {},
    }
    for sid, line in hlo_lines.items():
        data["steps"][sid]["hlo"] = line
    if partitioned is not None:
        data["devices"] = _devices(partitioned, arguments, trace, traffic, graph, records, full_values)
    reports = {"nonfinite": nonfinite, "comparison": None, "traffic": traffic, "passes": None}
    if xla_stages:
        runs = Counter(graph.step_ids.get(id(record.step)) for record in trace.records)
        data["xla"], reports["passes"] = stage_data(call, files, data["steps"], runs,
                                                    keep=lambda value: _value(value, full_values))
    if nonfinite is not None:
        number = _nonfinite_record(trace, nonfinite)
        data["overlays"]["nonfinite"] = {"record": number, "text": str(nonfinite), "label": nonfinite.op}
    if backend is not None and call.arguments is not None:
        comparison = compare_call(call, backend, tolerance, every_op=every_op)
        reports["comparison"] = comparison
        overlay = {"record": None, "text": str(comparison), "ok": comparison.ok}
        if isinstance(comparison, PerDeviceComparison):   # the devices whose results differ
            overlay["devices"] = [device for device, differences in enumerate(comparison.outputs)
                                  if any(d is not None for d in differences)]
            overlay["findings"] = _device_findings(comparison, graph, records, trace)
            overlay["record"] = next((f["record"] for f in overlay["findings"] if f["record"] is not None), None)
        elif comparison.divergence is not None:
            overlay["record"] = _divergent_record(trace, comparison.divergence)
        data["overlays"]["divergence"] = overlay
    data["files"] = files.panel(_function_lines(target))
    return data, trace, reports


class _FirstValuesRecorder(TraceRecorder):
    """The trace, with the values of the ops that start among the first MAX_RECORDS
    (the page keeps no more; a long run keeps only the summaries of the rest)."""

    def __init__(self):
        super().__init__(values=True)

    def before_op(self, step, operands, stack) -> None:
        super().before_op(step, operands, stack)
        self.keep_values = len(self.trace.records) <= MAX_RECORDS


class _Files:
    """The Python files the locations name, each with the lines they point at."""

    def __init__(self):
        self.paths: list[str] = []
        self.lines: list[set] = []

    def index(self, path: str, line: int) -> int:
        if path not in self.paths:
            self.paths.append(path)
            self.lines.append(set())
        position = self.paths.index(path)
        self.lines[position].add(line)
        return position

    def panel(self, function_lines) -> list[dict]:
        """Per file: its shown name, its path and its lines (the function's whole source
        and each line an op or equation came from; ``None`` marks a gap)."""
        if function_lines is not None:
            path, first, last = function_lines
            for line in range(first, last + 1):
                self.index(path, line)
        names = [path.rsplit("/", 1)[-1] for path in self.paths]
        panels = []
        for path, wanted, name in zip(self.paths, self.lines, names):
            shown, previous = [], None
            for line in sorted(wanted):
                if previous is not None and line > previous + 1:
                    shown.append(None)
                shown.append([line, linecache.getline(path, line).rstrip("\n")])
                previous = line
            panels.append({"name": name if names.count(name) == 1 else path, "path": path, "lines": shown})
        return panels


def _function_lines(target) -> tuple[str, int, int] | None:
    """(file, first line, last line) of a Python function's source, if it has one."""
    function = inspect.unwrap(target) if callable(target) else None
    function = getattr(function, "__wrapped__", function)
    if not inspect.isfunction(function):
        return None
    try:
        lines, first = inspect.getsourcelines(function)
    except (OSError, TypeError):
        return None
    return function.__code__.co_filename, first, first + len(lines) - 1


class _Graph:
    """The plan as graphs: one section per function, op regions nested in their op."""

    def __init__(self, program, entry: str, files: _Files, function_lines=None):
        self.files = files
        self.regions: dict[str, dict] = {}
        self.steps: dict[str, dict] = {}
        self.step_ids: dict[int, str] = {}      # id(step) -> sid
        self.locations: dict[str, object] = {}  # sid -> its location (None: none)
        self.sections: list[str] = []
        self.functions = {name: function for name, function in program.functions.items()
                          if function.region is not None}
        for name in sorted(self.functions, key=lambda name: name != entry):   # the entry function first
            function = self.functions[name]
            arguments = [{"name": given or f"%arg{k}", "type": type_text_of(t)}
                         for k, (given, t) in enumerate(zip(function.arg_names, function.region.arg_types))]
            rid = self._region(function.region, f"@{name}", None, arguments)
            self.sections.append(rid)
            self.regions[rid]["input_summary"] = names_summary(function.arg_names)
            if any(function.result_names):
                self.regions[rid]["ret"]["names"] = list(function.result_names)
                self.regions[rid]["ret"]["summary"] = names_summary(function.result_names)
        self.groups = self._group(function_lines)

    def _group(self, function_lines) -> dict[str, dict]:
        """Each region's ops grouped by scope (:mod:`.groups`); ``function_lines``: where
        the jitted function is (its frames are the first kept)."""
        outer = outer_frames(self.locations.values(), function_lines)
        scopes = {sid: scope_of(location, outer) for sid, location in self.locations.items()}
        builder = GroupBuilder(self.files)
        for rid, region in self.regions.items():
            operands = {sid: [operand[0] for operand in self.steps[sid]["operands"]
                              if operand is not None and self.steps.get(operand[0], {}).get("region") == rid]
                        for sid in region["steps"]}
            builder.group(region, scopes, operands, self.steps)
        return builder.page_groups()

    def _region(self, region, title: str, owner: str | None, inputs: list[dict]) -> str:
        """The region's entry: its inputs (captured values, with ``from`` naming their
        producer outside, then arguments), its steps, its edges (producer, consumer,
        type) and its return (``sources``: the producer of each result); nested
        regions first. A producer is ``[node id, which of its results]``."""
        rid = f"r{len(self.regions)}"
        inputs = [dict(node, id=f"{rid}i{k}") for k, node in enumerate(inputs)]
        entry = {"id": rid, "title": title, "owner": owner, "inputs": inputs, "steps": [], "edges": [],
                 "ret": {"id": f"{rid}o", "types": [type_text_of(t) for t in region.output_types]}}
        self.regions[rid] = entry
        # slot -> (producing node, its type, which result of the node: 0 for an input)
        producers = {slot: (node["id"], node["type"], 0) for slot, node in enumerate(inputs)}
        for step in region.steps:
            sid = self._step(step, rid)
            entry["steps"].append(sid)
            self.steps[sid]["operands"] = [list(producers[slot][::2]) if slot in producers else None
                                           for slot in step.operands]
            for slot in dict.fromkeys(step.operands):
                if slot in producers:
                    entry["edges"].append([producers[slot][0], sid, producers[slot][1]])
            for index, (slot, declared) in enumerate(zip(step.results, step.info.result_types)):
                producers[slot] = (sid, type_text_of(declared), index)
            for index, (inner, captures) in enumerate(zip(step.regions, step.captures)):
                if inner.kind.is_function_body:
                    continue                      # a called function: its own section
                captured = [{"name": f"outer value {k}", "type": producers[slot][1] if slot in producers else "?",
                             "from": list(producers[slot][::2]) if slot in producers else None}
                            for k, slot in enumerate(captures)]
                arguments = [{"name": f"%arg{k}", "type": type_text_of(t)} for k, t in enumerate(inner.arg_types)]
                self.steps[sid]["regions"].append(
                    self._region(inner, region_name(step, index), sid, captured + arguments))
        for slot in dict.fromkeys(region.outputs):
            if slot in producers:
                entry["edges"].append([producers[slot][0], entry["ret"]["id"], producers[slot][1]])
        entry["ret"]["sources"] = [list(producers[slot][::2]) if slot in producers else None
                                   for slot in region.outputs]
        return rid

    def _step(self, step, rid: str) -> str:
        sid = f"s{len(self.steps)}"
        self.step_ids[id(step)] = sid
        location = self.locations[sid] = step.info.location
        frame = location.frame if location else None
        callee = next((inner.kind.function for inner in step.regions if inner.kind.is_function_body), None)
        self.steps[sid] = {
            "id": sid, "region": rid, "name": op_label(step), "op": step.info.name,
            "file": self.files.index(frame.file, frame.line) if frame else None,
            "line": frame.line if frame else None,
            "function": frame.function if frame else None,
            "jax": location.name if location else None,
            "types": [type_text_of(t) for t in step.info.result_types],
            "regions": [], "calls": callee, "hlo": None,
        }
        return sid


_PATH_PART = re.compile(r"\[[^\]]*\]|\.[^.\[]+|[^.\[]+")
SUMMARY_NAMES = 6     # at most this many names in a summary of many values' names


def names_summary(names) -> str | None:
    """What values named by their pytree paths are, in a few names: the distinct
    prefixes of their paths at the first depth where they differ (``params, opt_state,
    inputs, labels`` for 34 arguments; ``result['grads'], result['loss']`` for results);
    None when a value has no name or the prefixes are as many as the values."""
    if not names or not all(names):
        return None
    paths = [_PATH_PART.findall(name) for name in names]
    for depth in range(1, max(map(len, paths)) + 1):
        prefixes = list(dict.fromkeys("".join(path[:depth]) for path in paths))
        if len(prefixes) > 1:
            break
    if len(prefixes) == len(names):
        return None
    more = f" and {len(prefixes) - SUMMARY_NAMES} more" if len(prefixes) > SUMMARY_NAMES else ""
    return ", ".join(prefixes[:SUMMARY_NAMES]) + more


def _module_text(program, graph: _Graph) -> tuple[str, dict]:
    """The module's text (large constants elided) and the line of each step in it."""
    shown = program.module.operation.get_asm(large_elements_limit=16)
    full = program.module.operation.get_asm()
    located = load(full, host_callbacks=program.host_callbacks)   # each op's location is now its line in ``full``
    if len(shown.splitlines()) != len(full.splitlines()):
        shown = full
    lines = {}

    def walk(ours, theirs):
        for step, twin in zip(ours.steps, theirs.steps):
            frame = twin.info.location.frame
            if frame is not None:
                lines[graph.step_ids[id(step)]] = frame.line
            for inner, inner_twin in zip(step.regions, twin.regions):
                if not inner.kind.is_function_body:
                    walk(inner, inner_twin)

    for name, function in graph.functions.items():
        twin = located.functions.get(name)
        if twin is not None and twin.region is not None:
            walk(function.region, twin.region)
    return shown, lines


def _jaxpr_lines(traced, files: _Files) -> list[dict] | None:
    """The jaxpr as lines, each equation's with the Python line it came from. An
    equation's first line carries it; its other lines (parameters, a nested jaxpr's
    frame, the closing ``]``) are indented deeper and take it with ``continues``."""
    if traced is None:
        return None
    text = traced.jaxpr.jaxpr.pretty_print(source_info=True, name_stack=False)
    lines, open_equations = [], []     # (indentation, source) of the equations around
    for raw in text.splitlines():
        match = _JAXPR_SOURCE.match(raw)
        code = (match["code"] if match else raw).rstrip()
        indentation = len(code) - len(code.lstrip())
        closing = code.lstrip().startswith("]")
        while open_equations and (open_equations[-1][0] > indentation or
                                  (open_equations[-1][0] == indentation and (match or not closing))):
            open_equations.pop()
        if match is not None:
            line = int(match["line"])
            source = {"file": files.index(match["file"], line), "line": line, "function": match["function"]}
            open_equations.append((indentation, source))
            lines.append({"text": code, **source})
        elif open_equations:
            lines.append({"text": code, **open_equations[-1][1], "continues": True})
        else:
            lines.append({"text": code})
    return lines


def _records(trace, graph: _Graph, arguments) -> tuple[dict, list[str]]:
    """Each executed op: its step, the op whose region it ran in, the call, its values;
    and the whole values' texts (a value's ``full`` is its index there)."""
    full_values = _FullValues()
    kept = []
    for record in trace.records[:MAX_RECORDS]:
        sid = graph.step_ids.get(id(record.step))
        if sid is None:       # a step of a refined copy (shape-polymorphic program): not drawn
            continue
        if record.results is None:
            results = None
        elif record.values is None:      # closed after the recorder stopped keeping values
            results = [{"t": summary.type, "s": str(summary), "full": None} for summary in record.results]
        else:
            results = [_value(value, full_values) for value in record.values]
        kept.append({"n": record.number, "s": sid, "p": record.parent,
                     "c": record.stack[-1].call if record.stack else None, "res": results, "d": record.process})
    arguments = [_value(value, full_values) for value in arguments]
    return {"ops": kept, "total": len(trace.records), "arguments": arguments}, full_values


def _devices(partitioned, arguments, trace, traffic, graph, records, full_values) -> dict:
    """A per-device run's page data: each device's arguments (its shards), and per
    collective op how many times each device ran it and the bytes it sent and received
    (summed over those runs: :mod:`~...sharding.traffic`'s definition, a device sends
    the operands it hands over and receives the results); each collective's record
    gets its own as ``"tx"``. The traffic's
    transfers are in the order each process ran its collectives, as the records are."""
    count = partitioned.num_devices
    shards = partitioned.shards(arguments) if arguments else [[] for _ in range(count)]
    kept = {entry["n"]: entry for entry in records["ops"]}
    collectives = {}
    for device in range(count):
        runs = [record for record in trace.records if record.process == device and record.op in COLLECTIVES]
        transfers = [transfer for transfer in traffic.transfers if transfer.process == device]
        for record, transfer in zip(runs, transfers):
            sid = graph.step_ids.get(id(record.step))
            entry = collectives.setdefault(sid, {"s": sid, "label": transfer.label, "op": transfer.op,
                                                 "runs": [0] * count, "sent": [0] * count, "received": [0] * count})
            entry["runs"][device] += 1
            entry["sent"][device] += transfer.sent
            entry["received"][device] += transfer.received
            if record.number in kept:
                kept[record.number]["tx"] = [transfer.sent, transfer.received]
    return {"count": count, "arguments": [[_value(value, full_values) for value in device] for device in shards],
            "collectives": list(collectives.values())}


class _FullValues(list):
    """The whole values' texts kept, up to ``FULL_TEXT_BUDGET`` characters."""

    size = 0

    def keep(self, array) -> int | None:
        """The index of the array's text, or None once the budget is spent."""
        if self.size >= FULL_TEXT_BUDGET:
            return None
        self.append(np.array2string(array, threshold=sys.maxsize, max_line_width=100, separator=" "))
        self.size += len(self[-1])
        return len(self) - 1


def _value(value, full_values: _FullValues) -> dict:
    """A value's type, summary, and (small values, while the budget lasts) the index of
    its whole text in ``full_values``."""
    entry = {"t": type_text(value), "s": str(summarize(value)), "full": None}
    if isinstance(value, (tuple, Token)):
        return entry
    array = np.asarray(value)
    if array.size <= FULL_ELEMENTS:
        entry["full"] = full_values.keep(array)
    return entry


def _nonfinite_record(trace, report) -> int | None:
    """The number of the record of the report's first origin (None for an argument); of
    a per-device report, the first device's, on the device that made it."""
    devices = getattr(report, "devices", None)
    if devices is not None:
        report = report.first
        if report is None:
            return None
    for record in trace.records[:MAX_RECORDS]:
        if (record.label == report.op and record.location == report.location and record.stack == report.stack
                and (devices is None or record.process == report.process)
                and record.results is not None and any(r.nonfinite for r in record.results)):
            return record.number
    return None


def _device_findings(comparison, graph: _Graph, records: dict, trace) -> list[dict]:
    """A per-device comparison's findings on the graph: for each device whose results
    differ, the first divergent op of its program where the search found one (first), then
    for each of its results that differs, the op of the entry function that made the result
    (``s``; None for a result that is an argument); each with that op's record on the
    device (``record``; None where the page kept none), what it is (``result``) and how it
    differs."""
    sources = graph.regions[graph.sections[0]]["ret"]["sources"]
    top_level = {(entry["s"], entry["d"]): entry["n"] for entry in records["ops"] if entry["p"] is None}
    step_of_record = {entry["n"]: entry["s"] for entry in records["ops"]}
    findings = []
    for device, found in sorted(comparison.divergence_per_device.items()):
        if found is not None:
            number = _divergent_record(trace, found, process=device)
            findings.append({"d": device, "s": step_of_record.get(number), "record": number,
                             "result": "its first divergent op",
                             "text": f"{found.kind}: {found.difference.describe(comparison.backend)}"})
    for device, differences in enumerate(comparison.outputs):
        for index, difference in enumerate(differences):
            if difference is None:
                continue
            source = sources[index] if index < len(sources) else None
            sid = source[0] if source is not None and source[0] in graph.steps else None
            name = comparison.result_names[index] if index < len(comparison.result_names) else f"result #{index}"
            findings.append({"d": device, "s": sid, "record": top_level.get((sid, device)), "result": name,
                             "text": difference.describe(comparison.backend)})
    return findings


def _divergent_record(trace, divergence, process: int | None = None) -> int | None:
    """The record of the divergent op (of device ``process``'s run, for a per-device one).
    ``compare`` counts the ops of the entry function with its calls inlined: here, the ops
    outside regions other than called functions'."""
    position = 0
    for record in trace.records[:MAX_RECORDS]:
        if process is not None and record.process != process:
            continue
        if any(call.op != "func.call" for call in record.stack) or record.op == "func.call":
            continue
        if position == divergence.position:
            return record.number if record.label == divergence.op else None
        position += 1
    return None
