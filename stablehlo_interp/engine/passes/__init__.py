"""Load-time passes over a region's steps (engine/plan.py holds the data they read and write).

A compiled block's :class:`~stablehlo_interp.engine.plan.StepColumns` become the
program the run loop reads (:class:`~stablehlo_interp.engine.plan.RunProgram`)
in two passes:

* ``flatten.py``: liveness and flattening, one walk from the last op back: each
  op's releases (the slots whose last use it is) and its entry in the run loop's
  program;
* ``folding.py``: foldable ops whose operands are all constants computed once, in
  program order, and left out of the program.

The compiler (program/compiler.py) and the engine's own region builders
(engine/quantized.py) give a Region its program with :func:`run_program`; a tool
that changed the runners of a region's steps makes it again with :func:`replan`.
"""

from __future__ import annotations

from ..plan import Region, RunProgram, StepColumns
from .flatten import flatten
from .folding import fold


def run_program(columns: StepColumns, outputs: tuple) -> RunProgram:
    """The run loop's program of a region's ``columns`` (their releases set on the way)."""
    entries, foldable = flatten(columns, outputs)
    return fold(entries, foldable, columns)


def replan(region: Region) -> None:
    """Make ``region``'s program again from its steps (after a tool changed their runners)."""
    region.set_program(run_program(StepColumns.of_steps(region.steps), region.outputs))
