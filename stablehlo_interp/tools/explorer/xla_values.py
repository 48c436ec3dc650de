"""The values of XLA's optimized program as the interpreter computes it (``xla_stages=True``):
:func:`~..passes.passes` runs XLA's last stage on the interpreter, translated back to
StableHLO (a fusion an ``mhlo.fusion`` whose region holds its fused instructions); run
again with a recorder, each op's value is that of the instruction it was translated from.

The translation's ops are lined up with XLA's instructions computation by computation (a
fusion's with its region, a loop's condition and body with the ``while``'s regions, a
called computation with the called function's body), its tuples aside (the translation
has none: a ``tuple`` and a ``get-tuple-element`` are no op of it). Each op is its
instruction's operation (``dot`` a ``dot_general``...) with its result's types, and the
two computations hold the same of each: in order where the orders agree, else (the
translator orders ops its own way) by their dataflow, from the parameters on: an op is
an instruction's where it is the only op of the instruction's operation and types that
takes what the instruction's operands were lined up with (where several do, a constant
is told apart by its value, a fusion by the operations it fuses; else none is paired,
nor what depends on it). An instruction not paired gives no value (it says why), nor
does one run more than once (in a loop's body), one whose value is a tuple, or a
program XLA partitioned (each device's).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..trace import TraceRecorder
from .type_texts import type_text_of, xla_type_text

# XLA's opcodes whose op in the translation is named otherwise ("-" is "_" in all; an
# ``if`` is counted as a ``case``)
_TRANSLATED = {"dot": "dot_general", "broadcast": "broadcast_in_dim", "conditional": "case",
               "clz": "count_leading_zeros"}
_TUPLES = ("tuple", "get-tuple-element")
NOT_LINED_UP = "the interpreter's run of XLA's program could not be lined up with its instructions here"
A_TUPLE = "its value is a tuple, or a tuple's element: the translation back to StableHLO has no tuples"


@dataclass
class StageValues:
    """Per line of XLA's panel, the value its instruction computed on the interpreter
    (``values``: the page's value entries) or why there is none (``reasons``; ``missing``:
    why there is none for any)."""

    values: dict[int, dict] = field(default_factory=dict)
    reasons: dict[int, str] = field(default_factory=dict)
    missing: str | None = None

    def of(self, line: int) -> dict:
        """``{"run": value}``, or ``{"rw": why there is none}``."""
        if line in self.values:
            return {"run": self.values[line]}
        return {"rw": self.reasons.get(line) or self.missing or NOT_LINED_UP}


def stage_values(run: Any, found: dict, entry: str, keep: Callable[[Any], dict]) -> StageValues:
    """The values of the instructions of XLA's computations ``found`` (xla_graph.computations)
    from the passes report's ``run`` of the last stage (None: not run), each kept as the
    page keeps values (``keep``)."""
    if run is None or run.program is None or run.rerun is None:
        return StageValues(missing=f"the interpreter did not run XLA's optimized program"
                                   f"{': ' + run.reason if run is not None and run.reason else ''}")
    if run.layout is not None:
        return StageValues(missing="XLA's program here is each device's: its devices' values are not shown")
    recorder = TraceRecorder(values=True)
    run.rerun(recorder)
    records = defaultdict(list)
    for record in recorder.trace.records:
        records[id(record.step)].append(record)
    function = run.program.functions.get("main")
    lined: dict[int, Any] = {}       # XLA line -> the translated step
    if function is not None and function.region is not None:
        _LineUp(found, records, lined).computation(entry, function.region, 0)
    values = StageValues()
    for instructions in found.values():
        for instruction in instructions:
            step = lined.get(instruction.line)
            if instruction.number is not None:
                continue
            ran = records.get(id(step), []) if step is not None else []
            if instruction.opcode in _TUPLES or instruction.shape.startswith("("):
                values.reasons[instruction.line] = A_TUPLE
            elif step is None:
                values.reasons[instruction.line] = NOT_LINED_UP
            elif len(ran) != 1 or ran[0].values is None:
                values.reasons[instruction.line] = (f"it ran {len(ran)} times in the interpreter's run of XLA's "
                                                    "program: no single value")
            else:
                values.values[instruction.line] = keep(ran[0].values[0])
    return values


class _LineUp:
    """Pairs XLA's instructions with the translation's steps (module docstring), in
    ``lined``; ``records``: the run's records of each step (a constant's value)."""

    def __init__(self, found: dict, records: dict, lined: dict):
        self.found, self.records, self.lined = found, records, lined

    def computation(self, computation: str, region: Any, captured: int) -> None:
        """Pairs the instructions of ``computation`` with the steps of ``region`` (whose first
        ``captured`` inputs are values of the region around), and those of the computations
        they run with theirs."""
        every = self.found.get(computation, [])
        instructions = [i for i in every if i.number is None and i.opcode not in _TUPLES]
        steps = list(region.steps)
        ours, theirs = [_instruction_key(i) for i in instructions], [_step_key(s) for s in steps]
        if Counter(ours) != Counter(theirs):
            return
        pairs = list(zip(instructions, steps)) if ours == theirs else self._by_dataflow(every, steps, captured)
        for instruction, step in pairs:
            self.lined[instruction.line] = step
            inner = [(index, r) for index, r in enumerate(step.regions) if not r.kind.is_function_body]
            called = inner or [(index, r) for index, r in enumerate(step.regions)]
            if len(called) == len(instruction.called):
                for name, (index, inner_region) in zip(instruction.called, called):
                    self.computation(name, inner_region, len(step.captures[index]) if inner else 0)

    def _by_dataflow(self, every: list, steps: list, captured: int) -> list:
        """The pairs whose operands are known pairs (or the same parameters), each the one
        step of its operation and types taking them; where several do, a constant by its
        value, a fusion (or a loop...) by the operations its computations hold. Repeated
        until no more are found."""
        known: dict[str, list] = {}        # an instruction's name -> what its value (each tuple element) is
        arguments = 0                      # (a tuple parameter's elements are the block's arguments, flat)
        for parameter in sorted((i for i in every if i.number is not None), key=lambda i: i.number):
            count = len(_elements(parameter.shape))
            known[parameter.name] = [("arg", arguments + k) for k in range(count)]
            arguments += count
        producers: dict[int, tuple] = {}   # a slot of the region -> (its step's id, which result)
        for step in steps:
            for index, slot in enumerate(step.results):
                producers[slot] = (id(step), index)
        free = defaultdict(list)
        for step in steps:
            free[_step_key(step)].append(step)
        pending = [i for i in every if i.number is None]
        pairs, found = [], True
        while found:
            found = False
            for instruction in list(pending):
                value = self._value_of(instruction, known, free, producers, captured)
                if value is None:
                    continue
                pending.remove(instruction)
                found = True
                known[instruction.name] = value[0]
                if value[1] is not None:
                    pairs.append((instruction, value[1]))
        return pairs

    def _value_of(self, instruction: Any, known: dict, free: dict, producers: dict,
                  captured: int) -> tuple[list, Any] | None:
        """What ``instruction``'s value is (each element), and the step it pairs with (None
        for a tuple's), once its operands are known; None while they are not, or where no
        single step takes them."""
        if not all(name in known for name in instruction.operands):
            return None
        operands = [value for name in instruction.operands for value in known[name]]
        if instruction.opcode == "tuple":
            return operands, None
        if instruction.opcode == "get-tuple-element":
            element = known[instruction.operands[0]][instruction.index or 0] if instruction.operands else None
            return ([element], None) if element is not None else None
        options = [step for step in free[_instruction_key(instruction)]
                   if [_slot_value(slot, producers, captured) for slot in step.operands] == operands]
        if instruction.opcode == "constant" and len(options) > 1:
            options = [step for step in options if _same_literal(instruction.literal, self.records.get(id(step)))]
        if instruction.called and len(options) > 1:      # fusions of the same operands: by what they fuse
            options = [step for step in options if self._same_bodies(instruction, step)]
        if len(options) != 1:
            return None
        (step,) = options
        free[_instruction_key(instruction)].remove(step)
        return [(id(step), index) for index in range(len(step.results))], step


    def _same_bodies(self, instruction: Any, step: Any) -> bool:
        """Whether the computations an instruction runs hold the operations and types the
        step's regions hold."""
        regions = [r for r in step.regions if not r.kind.is_function_body] or list(step.regions)
        return len(regions) == len(instruction.called) and all(
            Counter(_instruction_key(i) for i in self.found.get(name, ()) if i.number is None and i.opcode not in _TUPLES)
            == Counter(_step_key(inner) for inner in region.steps) for name, region in zip(instruction.called, regions))


def _slot_value(slot: int, producers: dict, captured: int) -> tuple:
    """What a slot of a translated region holds: a step's result, an input of the region
    (``("arg", k)``, the block's own, after the ``captured`` values of the region around)."""
    return producers.get(slot, ("arg", slot - captured) if slot >= captured else ("captured", slot))


def _same_literal(literal: str | None, records: list | None) -> bool:
    """Whether a constant's value (its only run's) is XLA's literal (a scalar's: ``2``,
    ``-inf``, ``true``)."""
    if literal is None or not records or records[0].values is None:
        return False
    value = np.asarray(records[0].values[0])
    if value.size != 1:
        return False
    written = {"true": 1.0, "false": 0.0}.get(literal)
    try:
        number = written if written is not None else float(literal)
    except ValueError:
        return False
    return bool(number == value.item() or (np.isnan(number) and np.isnan(value.item())))


def _instruction_key(instruction: Any) -> tuple:
    """An instruction's operation, as the translation names it, and its result's types."""
    operation = _TRANSLATED.get(instruction.opcode, instruction.opcode.replace("-", "_"))
    return operation, tuple(xla_type_text(element) for element in _elements(instruction.shape))


def _step_key(step: Any) -> tuple:
    """A translated op's operation (an ``if`` counted as a ``case``) and its results' types."""
    operation = step.info.name.split(".", 1)[-1]
    return "case" if operation == "if" else operation, tuple(type_text_of(t) for t in step.info.result_types)


def _elements(shape: str) -> list[str]:
    """The arrays of an XLA shape: itself, or a tuple's elements (``(s32[], f32[4])``)."""
    if not shape.startswith("("):
        return [shape]
    elements, depth, start = [], 0, 1
    for index, char in enumerate(shape):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        if (char == "," and depth == 1) or (char == ")" and depth == 0):
            elements.append(shape[start:index].strip())
            start = index + 1
    return [element for element in elements if element]
