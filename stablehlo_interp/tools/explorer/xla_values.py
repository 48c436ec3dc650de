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
translator orders ops its own way) only the instructions whose operation and types no
other has. A computation that does not line up so gives no values (its instructions say
why), nor does an instruction run more than once (in a loop's body), one whose value is
a tuple, or a program XLA partitioned (each device's).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
        return StageValues(missing="XLA's program here is each device's: its values are not shown")
    recorder = TraceRecorder(values=True)
    run.rerun(recorder)
    records = defaultdict(list)
    for record in recorder.trace.records:
        records[id(record.step)].append(record)
    function = run.program.functions.get("main")
    lined: dict[int, Any] = {}       # XLA line -> the translated step
    if function is not None and function.region is not None:
        _line_up(entry, function.region, found, lined)
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


def _line_up(computation: str, region: Any, found: dict, lined: dict) -> None:
    """Pairs the instructions of ``computation`` (its parameters aside) with the steps of
    the translation's ``region``, and those of the computations they run with theirs, where
    they line up (module docstring)."""
    instructions = [i for i in found.get(computation, ()) if i.number is None and i.opcode not in _TUPLES]
    steps = list(region.steps)
    ours, theirs = [_instruction_key(i) for i in instructions], [_step_key(s) for s in steps]
    if Counter(ours) != Counter(theirs):
        return
    if ours == theirs:
        pairs = list(zip(instructions, steps))
    else:
        alone = {key for key, count in Counter(ours).items() if count == 1}
        step_of = {key: step for key, step in zip(theirs, steps) if key in alone}
        pairs = [(i, step_of[key]) for i, key in zip(instructions, ours) if key in alone]
    for instruction, step in pairs:
        lined[instruction.line] = step
        inner = [r for r in step.regions if not r.kind.is_function_body] or list(step.regions)
        if len(inner) == len(instruction.called):
            for called, inner_region in zip(instruction.called, inner):
                _line_up(called, inner_region, found, lined)


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
