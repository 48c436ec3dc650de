"""XLA's optimized program as the explorer draws its graphs (``xla_stages=True``): in the
shape of the StableHLO graph's data (page_data.py), so that the page draws both with the
same code.

* The entry computation is a section (region ``"xr0"``): its parameters are the region's
  inputs, each other instruction a step (``"x<line>"``: its line in the XLA panel), its
  ROOT the region's return.
* A fusion is a group (``"xg<k>"``, as the page's groups of ops) whose items are its fused
  computation's instructions: a fused ``parameter(k)`` is the fusion's operand ``k``,
  and the fusion's value is its fused root's.
* The computations a ``while``, ``conditional`` or ``call`` runs are regions inside its
  step (XLA's flatten-call-graph gives each its own caller); the computations an
  instruction applies to elements (a reduction's ``to_apply``, a sort's comparator) are
  named in the text panel only.
* A computation with more than ``MAX_ITEMS`` items is cut into parts (groups.py).

Each step is given, where the interpreter can say it honestly, the StableHLO op whose
value it shows (``"v"``: a step id of the page): the one op of the page with the
instruction's JAX name (its metadata's ``op_name``; a module's own ops have none), its
source line and its result's type (among several, the one of the instruction's own
operation, a bitcast, copy or reshape counting as its operand's), run once, and taken by
no other instruction. Elsewhere ``"w"`` says why there is none (an index in the graph's
``reasons``). The value is the interpreter's of that StableHLO op: a pass that changed
the values (the passes list marks it) makes XLA's own differ.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from .groups import GroupBuilder
from .hlo_text import COMPUTATION_HEADER, INSTRUCTION, OPERAND
from .xla_values import StageValues, stage_values
from .type_texts import xla_type_text

_LAYOUT = re.compile(r"\{[^{}]*\}")
_CONTROL = re.compile(r"\b(?:body|condition|calls|true_computation|false_computation|branch_computations)="
                      r"(?P<names>\{[^}]*\}|%[\w.\-]+)")
_CALL = re.compile(r"\bto_apply=(?P<names>%[\w.\-]+)")
_KIND = re.compile(r"\bkind=(?P<kind>\w+)")
_INDEX = re.compile(r"\bindex=(?P<index>\d+)")


class _Instruction:
    """One instruction of XLA's text: its line in the panel, name, shape (layouts left
    out), opcode, operands' names, the computations it runs (a fusion's, a loop's...), its
    parameter number (a ``parameter``'s), a ``get-tuple-element``'s index and a
    ``constant``'s literal."""

    def __init__(self, line: int, match: re.Match):
        self.line, self.name, self.root = line, match["name"], bool(match["root"])
        self.shape = _LAYOUT.sub("", match["shape"])
        self.opcode = match["opcode"]
        operands, attributes = _split_operands(match["rest"])
        self.operands = OPERAND.findall(operands)
        control = _CALL if self.opcode == "call" else _CONTROL      # (a call's computation is its to_apply)
        self.called = [name for found in control.finditer(attributes) for name in OPERAND.findall(found["names"])]
        self.number = int(operands) if self.opcode == "parameter" and operands.strip().isdigit() else None
        kind, index = _KIND.search(attributes), _INDEX.search(attributes)
        self.kind = kind["kind"] if kind else None
        self.index = int(index["index"]) if index else None          # a get-tuple-element's
        self.literal = operands.strip() if self.opcode == "constant" else None


def _split_operands(rest: str) -> tuple[str, str]:
    """``rest`` (what follows ``opcode(``) as its operands and its attributes: up to the
    parenthesis that closes the operands (a tuple shape may hold some)."""
    depth = 0
    for index, char in enumerate(rest):
        if char in "({[":
            depth += 1
        elif char in ")}]":
            if depth == 0:
                return rest[:index], rest[index + 1:]
            depth -= 1
    return rest, ""


def computations(lines: list[str]) -> tuple[dict[str, list[_Instruction]], str | None]:
    """``{computation: its instructions}`` of XLA's text (as the panel shows it, a line a
    string), and the entry computation's name."""
    found: dict[str, list[_Instruction]] = {}
    current, entry = None, None
    for index, text in enumerate(lines):
        header = COMPUTATION_HEADER.match(text.strip())
        if header:
            current = found.setdefault(header["name"], [])
            entry = header["name"] if header["entry"] else entry
            continue
        if text.strip() == "}":
            current = None
            continue
        match = INSTRUCTION.match(text)
        if match and current is not None:
            current.append(_Instruction(index, match))
    return found, entry


def xla_graph(lines: list[dict], frames: list, names: list, page_steps: dict, runs: Counter,
              files: Any, values: bool, run: Any = None, keep: Callable[[Any], dict] | None = None) -> dict | None:
    """The graph data of XLA's program (module docstring) from the panel's ``lines``
    (``text``, ``keys``), each line's own source frame (``frames``: ``[file, line]`` or
    None) and JAX name (``names``); ``page_steps`` the page's StableHLO steps and ``runs``
    how many times each ran, for the values; ``values``: False where the page's values
    are not those of XLA's program's ops (a sharded program: XLA's is each device's).
    ``run``: the passes report's run of this stage, whose values each instruction shows
    (``"run"``, kept by ``keep``; else ``"rw"``, why not: :mod:`.xla_values`). None where
    the text has no entry computation."""
    found, entry = computations([line["text"] for line in lines])
    if entry is None:
        return None
    builder = _Builder(found, frames, GroupBuilder(files, prefix="xg"))
    section = builder.region(entry, f"XLA CPU · ENTRY %{entry}", None)
    matches = _ValueMatcher(page_steps, runs, values)
    for step in builder.steps.values():
        step.update(matches.of(names[step["l"]], frames[step["l"]], step["t"], _computing(step, builder.steps)))
    _one_instruction_an_op(builder.steps, page_steps)
    stage = stage_values(run, found, entry, keep) if keep is not None else StageValues(missing="not asked for")
    for step in builder.steps.values():
        step.update(stage.of(step["l"]))
    for group in builder.groups.groups.values():
        root = builder.steps.get(group.pop("root", None))
        if "xla" in group:        # a fusion's value is its fused root's
            group.update({key: root[key] for key in ("v", "w") if key in root} if root else
                         {"w": "its fused root is not an instruction of its own"})
            group.update(stage.of(group["xla"]))
    return _compact({"sections": [section], "regions": builder.regions, "steps": builder.steps,
                     "groups": builder.groups.page_groups()})


def _compact(graph: dict) -> dict:
    """The graph as the page keeps it (a large program's has ten thousand steps): a step
    without its id and region (the page reads them from its key and its region's steps),
    nor the fields it does not have (``group``, ``f``, ``r``); a fusion without a path
    (the page writes it from its title, ``kind`` and size) nor the empty fields of the
    page's groups; each reason there is no value (``w``, ``rw``) an index in ``reasons``."""
    reasons: dict[str, int] = {}
    for item in [*graph["steps"].values(), *graph["groups"].values()]:
        for key in ("w", "rw"):
            if key in item:
                item[key] = reasons.setdefault(item[key], len(reasons))
    for step in graph["steps"].values():
        for key in ("id", "region"):
            del step[key]
        for key in ("group", "f", "r"):
            if not step[key]:
                del step[key]
    for group in graph["groups"].values():
        for key in ("where", "file", "pass"):
            if group[key] is None:
                del group[key]
        if "xla" in group:
            del group["path"]
    graph["reasons"] = list(reasons)
    return graph


def _one_instruction_an_op(steps: dict, page_steps: dict) -> None:
    """Where several instructions take their value from one StableHLO op (an op XLA
    expanded into instructions of the same name, line and type), none does: which one
    computes the op's value is not known."""
    taking = Counter(step["v"] for step in steps.values() if "v" in step)
    for step in steps.values():
        step_op = step.get("v")
        if taking.get(step_op, 0) > 1:
            op = page_steps[step.pop("v")]["name"]
            step["w"] = (f"{taking[step_op]} instructions of XLA's program have the JAX name, line and type of {op}: "
                         "which one computes its value is not known")


class _ValueMatcher:
    """The StableHLO op of the page whose value an XLA instruction shows (module docstring)."""

    def __init__(self, page_steps: dict, runs: Counter, values: bool):
        self.page_steps, self.runs, self.values = page_steps, runs, values
        self.named: dict[str | None, list[str]] = {}       # JAX name (None: none, a module's own) -> steps
        for sid, step in page_steps.items():
            self.named.setdefault(step["jax"] or None, []).append(sid)

    def of(self, name: str | None, frame: list | None, shape: str, computing: str) -> dict:
        """``{"v": step id}``, or ``{"w": why there is none}``; among several ops of the
        name, line and type, the one of operation ``computing`` (StableHLO's name of it)."""
        if not self.values:
            return {"w": "XLA's program here is each device's, as XLA's partitioner made it: no op of the page computes its values"}
        if not name and frame is None:
            return {"w": "its metadata names no JAX op and no source line: no StableHLO op to take a value from"}
        wanted = xla_type_text(shape)
        found = [sid for sid in self.named.get(name or None, ())
                 if self.page_steps[sid]["types"] == [wanted]
                 and (frame is None or [self.page_steps[sid]["file"], self.page_steps[sid]["line"]] == frame)]
        if len(found) > 1:
            found = [sid for sid in found if self.page_steps[sid]["op"] == computing] or found
        named = (f"the JAX name {name}" if name else "no JAX name") + (" at its line" if frame is not None else "")
        if not found:
            return {"w": f"no StableHLO op of the page has {named} and a result {wanted}"}
        if len(found) > 1:
            return {"w": f"{len(found)} StableHLO ops of the page have {named} and a result "
                         f"{wanted}: no single one to take a value from"}
        runs = self.runs.get(found[0], 0)
        if runs != 1:
            return {"w": f"its StableHLO op ({self.page_steps[found[0]]['name']}) ran {runs} times: no single value"}
        return {"v": found[0]}


_KEEPS_ELEMENTS = ("bitcast", "copy", "reshape")      # instructions whose value is their operand's, reshaped
_STABLEHLO_NAMES = {"dot": "dot_general", "broadcast": "broadcast_in_dim"}


def _computing(step: dict, steps: dict) -> str:
    """The StableHLO operation that computes a step's elements: its own (``stablehlo.add``
    for ``add``), or for a bitcast, copy or reshape, its operand's."""
    while step["op"] in _KEEPS_ELEMENTS and step["o"] and step["o"][0] in steps:
        step = steps[step["o"][0]]
    return "stablehlo." + _STABLEHLO_NAMES.get(step["op"], step["op"].replace("-", "_"))


class _Builder:
    """Regions, steps and groups (module docstring) of the computations reached from one."""

    def __init__(self, found: dict, frames: list, groups: GroupBuilder):
        self.found, self.frames, self.groups = found, frames, groups
        self.regions: dict[str, dict] = {}
        self.steps: dict[str, dict] = {}
        self.drawn: set[str] = set()        # the computations drawn (each once)

    def region(self, computation: str, title: str, owner: str | None) -> str:
        rid = f"xr{len(self.regions)}"
        self.drawn.add(computation)
        instructions = self.found[computation]
        parameters = sorted((i for i in instructions if i.number is not None), key=lambda i: i.number)
        inputs = [{"id": f"{rid}i{k}", "name": f"%{i.name}", "type": i.shape} for k, i in enumerate(parameters)]
        root = next((i for i in instructions if i.root), instructions[-1] if instructions else None)
        ret: dict[str, Any] = {"id": f"{rid}o", "types": [root.shape] if root else [], "sources": []}
        entry: dict[str, Any] = {"id": rid, "title": title, "owner": owner, "inputs": inputs, "steps": [], "ret": ret}
        self.regions[rid] = entry
        nodes = {i.name: node["id"] for i, node in zip(parameters, inputs)}
        items = self._items(instructions, nodes, rid, None)
        ret["sources"] = [[nodes[root.name], 0]] if root and root.name in nodes else []
        entry["items"] = self.groups.split(items, rid, self.steps)
        return rid

    def _items(self, instructions: list, nodes: dict, rid: str, group: str | None) -> list[str]:
        """The steps and fusions (groups) of ``instructions``, in order; ``nodes`` maps each
        instruction's name to the node holding its value (filled as they come)."""
        items = []
        for instruction in instructions:
            if instruction.number is not None:
                continue                   # a parameter: an input, or a fusion's operand
            fused = instruction.called[0] if instruction.opcode == "fusion" and instruction.called else None
            if fused is not None and fused in self.found and fused not in self.drawn:
                items.append(self._fusion(instruction, fused, nodes, rid, group))
                continue
            sid = f"x{instruction.line}"
            frame = self.frames[instruction.line]
            self.steps[sid] = {"id": sid, "region": rid, "group": group, "l": instruction.line,
                               "op": instruction.opcode, "name": instruction.name, "t": instruction.shape,
                               "f": frame, "o": [nodes[name] for name in instruction.operands if name in nodes],
                               "r": []}
            nodes[instruction.name] = sid
            self.regions[rid]["steps"].append(sid)
            items.append(sid)
            for called in instruction.called:
                if called in self.found and called not in self.drawn:
                    self.steps[sid]["r"].append(self.region(called, f"%{called}", sid))
        return items

    def _fusion(self, instruction: _Instruction, fused: str, nodes: dict, rid: str, parent: str | None) -> str:
        """A fusion's group: its fused instructions, each fused parameter standing for the
        fusion's operand; the fusion's value is its fused root's."""
        self.drawn.add(fused)
        inner = self.found[fused]
        operands = [nodes.get(name) for name in instruction.operands]
        inner_nodes = {i.name: operands[i.number] for i in inner
                       if i.number is not None and i.number < len(operands) and operands[i.number] is not None}
        gid = self.groups.add(rid, parent, f"%{instruction.name}")
        items = self._items(inner, inner_nodes, rid, gid)
        self.groups.fill(gid, items, self.steps)
        group = self.groups.groups[gid]
        group.update({"xla": instruction.line, "t": instruction.shape, "kind": instruction.kind})
        root = next((i for i in inner if i.root), inner[-1] if inner else None)
        if root is not None and root.name in inner_nodes:
            nodes[instruction.name] = group["root"] = inner_nodes[root.name]
        return gid
