"""Where an op runs: the chain of region calls around it, as plain data.

The run loop hands listeners a stack of :class:`~stablehlo_interp.engine.run.RegionFrame`;
tools keep :class:`RegionCall` records instead (no reference to the plan) and
print them as ``stablehlo.while at model.py:8 (f): body, iteration 2``.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass

from ..ir.locations import Frame, SourceLocation, describe_location
from ..ir.value_names import result_names as written_result_names

# Names of the regions of ops that have several (or a meaningful one).
_REGION_NAMES = {
    "stablehlo.while": ("cond", "body"),
    "stablehlo.if": ("true branch", "false branch"),
    "stablehlo.select_and_scatter": ("select", "scatter"),
    "stablehlo.sort": ("comparator",),
}
# Ops whose regions run once per op: their call number says nothing.
_CALLED_ONCE = ("stablehlo.if", "stablehlo.case", "func.call", "stablehlo.composite",
                "stablehlo.custom_call", "stablehlo.optimization_barrier")


@dataclass(frozen=True)
class RegionCall:
    """One active region call: the op that owns the region, which region, which call.

    ``call`` counts the calls of that region of that op from 0; for
    ``stablehlo.while`` it is the loop iteration. ``vectorized`` marks a region
    that its op runs once on whole tensors instead of element by element.
    """

    op: str
    step: int
    location: SourceLocation
    region: str
    call: int
    vectorized: bool = False

    @property
    def call_text(self) -> str:
        """``iteration 2``, ``call 5``, or '' when the region runs once per op."""
        if self.op in _CALLED_ONCE:
            return ""
        return f"{'iteration' if self.op == 'stablehlo.while' else 'call'} {self.call}"

    @property
    def header(self) -> str:
        """``body, iteration 2`` / ``@closed_call`` / ``body, vectorized``."""
        parts = [self.region] + [p for p in (self.call_text,) if p]
        if self.vectorized:
            parts.append("vectorized")
        return ", ".join(parts)

    def __str__(self) -> str:
        where = f" at {describe_location(self.location)}" if self.location else ""
        if self.region.startswith("@"):   # a called function: ``func.call @f at ...``
            details = ", ".join(p for p in (self.call_text, "vectorized" if self.vectorized else "") if p)
            return f"{self.op} {self.region}{where}" + (f": {details}" if details else "")
        return f"{self.op}{where}: {self.header}"


def region_calls(stack) -> tuple[RegionCall, ...]:
    """The listener's stack of RegionFrames as RegionCall records, outermost first."""
    return tuple(RegionCall(frame.step.info.name, frame.step.index, frame.step.info.location,
                            region_name(frame.step, frame.region_index), frame.call, frame.vectorized)
                 for frame in stack)


def region_name(step, index: int) -> str:
    """``body``, ``cond``, ``true branch``, ``branch 2``, ``@callee`` ..."""
    kind = step.regions[index].kind
    if kind.is_function_body:  # the body of a called function
        return kind.name
    names = _REGION_NAMES.get(step.info.name)
    if names and index < len(names):
        return names[index]
    if step.info.name == "stablehlo.case":
        return f"branch {index}"
    return "body" if len(step.regions) == 1 else f"region {index}"


def op_label(step) -> str:
    """The op's name, with the function it calls: ``func.call @closed_call``."""
    callee = step.info.attributes.get("callee") or step.info.attributes.get("decomposition")
    return f"{step.info.name} @{callee}" if isinstance(callee, str) else step.info.name


def result_names(step) -> tuple[str, ...]:
    """The names the module's text gives the op's results (``%m``; ``%r#0, %r#1`` for
    ``%r:2 = ...``), or () (ir/value_names.py)."""
    return written_result_names(step.info.location, step.info.name, len(step.info.result_types))


def source_text(location: SourceLocation | None) -> str:
    """The Python line an op came from, stripped ('' when the file is not readable)."""
    return line_text(location.frame if location else None)


def line_text(frame: Frame | None) -> str:
    """The line of source a frame points at, stripped ('' for None or an unreadable file)."""
    return linecache.getline(frame.file, frame.line).strip() if frame else ""


def op_heading(title: str, location: SourceLocation | None) -> list[str]:
    """``title at file:line (function)`` and, when readable, ``  source: <the line>``."""
    where = describe_location(location)
    lines = [title + (f" at {where}" if where else "")]
    text = source_text(location)
    if text:
        lines.append(f"  source: {text}")
    return lines


def describe_stack(calls) -> list[str]:
    """``inside ...`` lines, innermost first, as in error messages."""
    return [f"inside {call}" for call in reversed(calls)]
