"""The readable form of a trace.

One line per op: its name (indented by nesting; after the names the module's text gives its
results, ``%m = stablehlo.multiply``), the summary of its results,
and the source line it came from when that changes (``OpRecord.where``: for an op
with no Python frame of its own, the line of the op around it, or why there is
none). The ops of a region call sit under a header (``body, iteration 3``); when
an op calls its regions many times, only the first ``head`` and the last ``tail``
calls are shown and the ones between are folded into one line. With
``sources=True`` (what ``explain`` prints) ops are grouped under the Python
source line they came from instead.
"""

from __future__ import annotations

from collections import defaultdict

from ..ir.locations import describe_frame
from .region_calls import line_text

INDENT = "  "
VALUE_COLUMN = 36   # where result summaries start, unless the op's name is longer


def render(trace, *, head: int = 2, tail: int = 1, sources: bool = False) -> str:
    children: dict = defaultdict(list)
    for record in trace.records:
        children[record.parent].append(record)
    writer = _Writer(sources)
    processes = sorted({record.process for record in children[None]}, key=lambda p: -1 if p is None else p)
    for process in processes:   # a grid's run: each process's ops under its heading
        depth = 0 if process is None else 1
        if process is not None:
            writer.note(0, f"{trace.process_name} {process}:")
            writer.last_location = None
        for record in children[None]:
            if record.process == process:
                _emit_op(record, depth, children, writer, head, tail)
    if trace.error is not None:
        writer.lines.append(f"error: {trace.error}")
    return "\n".join(writer.lines)


class _Writer:
    def __init__(self, sources: bool):
        self.sources = sources
        self.lines: list[str] = []
        self.last_location: str | None = None

    def op(self, depth: int, record) -> None:
        where = record.where
        if self.sources and record.frame is not None:
            where = describe_frame(record.frame)   # an op that takes its call's line: under that line
        if record.op == "stablehlo.constant" and self.sources:
            where = ""   # JAX puts literals at the jit call site: keep them under the current line
        names = "" if self.sources else ", ".join(record.names)   # explain shows the line that names them
        label = INDENT * depth + (f"{names} = " if names else "") + record.label
        if self.sources and where and where != self.last_location:
            text = line_text(record.frame)
            self.lines.append(f"{INDENT * depth}── {where}{f': {text}' if text else ''}")
        values = "(did not finish)" if record.results is None else ", ".join(map(str, record.results))
        line = f"{label.ljust(VALUE_COLUMN - 1)} {values}"
        if not self.sources and where and where != self.last_location:
            line += f"  # {where}"
        if where:
            self.last_location = where
        self.lines.append(line.rstrip())

    def note(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)


def _emit_op(record, depth: int, children, writer: _Writer, head: int, tail: int) -> None:
    writer.op(depth, record)
    groups = _region_calls(children[record.number])
    if not groups:
        return
    calls = sorted({call.call for call, _ in groups})
    shown = set(calls[:head]) | set(calls[len(calls) - tail:] if tail else ())
    folded = [c for c in calls if c not in shown]
    if len(folded) < 2:
        shown, folded = set(calls), []
    folded_noted = False
    for call, records in groups:
        if call.call in shown:
            inner = depth + 1
            if not call.region.startswith("@"):   # a called function: its op line says which
                writer.note(depth + 1, call.header)
                inner = depth + 2
            for child in records:
                _emit_op(child, inner, children, writer, head, tail)
        elif not folded_noted:
            folded_noted = True
            writer.note(depth + 1, _fold_note(call, folded, groups, children))


def _region_calls(records) -> list:
    """The records of one op's regions, grouped by region call, in order."""
    groups: list = []
    for record in records:
        call = record.stack[-1]
        if groups and groups[-1][0] == call:
            groups[-1][1].append(record)
        else:
            groups.append((call, [record]))
    return groups


def _fold_note(call, folded: list, groups, children) -> str:
    folded_set = set(folded)
    folded_groups = [(c, records) for c, records in groups if c.call in folded_set]
    ops = sum(_subtree_size(r, children) for _, records in folded_groups for r in records)
    word = "iterations" if call.op == "stablehlo.while" else "calls"
    regions: defaultdict[str, int] = defaultdict(int)
    for c, _ in folded_groups:
        regions[c.region] += 1
    made_of = ", ".join(f"{count} × {region}" for region, count in regions.items())
    return f"⋯ {word} {folded[0]}–{folded[-1]} folded ({made_of}; {ops} ops)"


def _subtree_size(record, children) -> int:
    return 1 + sum(_subtree_size(child, children) for child in children[record.number])
