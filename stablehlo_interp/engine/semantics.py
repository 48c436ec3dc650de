"""Where the spec leaves behaviour to the implementation, or XLA departs from it.

A run follows one of two *semantics* (carried on its RunContext):

* ``"spec"``: the StableHLO spec, as the C++ reference interpreter reads it. The
  default of ``si.run``, ``Program.run`` and ``stablehlo-interp run``/``test``.
* ``"xla"``: what XLA does on every backend, which JAX relies on (a scatter
  window that hangs partly outside the operand is dropped whole, for JAX's
  ``mode="drop"``/``"fill"``). The default of the JAX device ``interp``.

Where the spec says nothing (integer division by zero, float -> integer
``convert`` out of range, ...) both do what XLA does. Every such place is a
:class:`Rule`; an op that meets one while a listener watches reports it
(``Execution.report``) and listeners receive a :class:`Report`
(``Listener.on_report``): ``si.portability`` collects them. docs/semantics.md
lists the rules in a table that tests/test_semantics.py keeps in step with
:data:`RULES`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentError
from ..ir.locations import SourceLocation

SPEC = "spec"
XLA = "xla"
SEMANTICS = (SPEC, XLA)


def semantics_named(name: str) -> str:
    """``name`` if it is a semantics (``"spec"`` or ``"xla"``), else an ArgumentError."""
    if name not in SEMANTICS:
        raise ArgumentError(f"semantics must be one of {', '.join(map(repr, SEMANTICS))}, got {name!r}")
    return name


@dataclass(frozen=True)
class Rule:
    """One place where a program's result depends on who runs it."""

    name: str
    spec: str   # what the spec (and semantics="spec") does
    xla: str    # what XLA does (and semantics="xla")


RULES = {rule.name: rule for rule in (
    Rule("scatter-window-out-of-bounds",
         "updates the elements of an update window that fall inside the operand, skips the others",
         "skips the whole window when any element of it falls outside (JAX's mode='drop' and 'fill' rely on it)"),
    Rule("scatter-duplicate-indices",
         "several updates of one element apply in an implementation-defined order",
         "its own order; with a body that is not associative and commutative (float sums, a plain "
         "replacement) the result depends on it"),
    Rule("gather-start-clamped",
         "clamps each start index so that the slice lies inside the operand",
         "the same; reported because the slice read is not the one the index asked for"),
    Rule("integer-division-by-zero",
         "no value (the C++ reference interpreter aborts)",
         "x / 0 = -1 (all bits set), x % 0 = x"),
    Rule("integer-division-overflow",
         "no value for the signed minimum divided by -1 (the C++ reference interpreter aborts)",
         "INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0"),
    Rule("float-to-integer-out-of-range",
         "not yet specified for values outside the integer type and NaN (spec issue #180)",
         "saturates to the type's minimum or maximum; NaN gives 0"),
    Rule("shift-out-of-range",
         "does not say what a shift by a negative amount or by the bit width or more gives",
         "0, or all sign bits for shift_right_arithmetic"),
)}


@dataclass(frozen=True)
class Report:
    """A run met ``rule`` at an op: its name and location, what happened
    (``detail``), the run's semantics and the enclosing regions (``stack``, a
    RegionStack: ``stack.process`` is the process)."""

    rule: Rule
    op: str
    location: SourceLocation
    detail: str
    semantics: str
    stack: tuple = ()

    def __str__(self) -> str:
        process = getattr(self.stack, "process", None)
        where = f" ({process})" if process is not None and process.grid.size > 1 else ""
        return f"{self.location}: {self.op}{where}: {self.rule.name}: {self.detail}"
