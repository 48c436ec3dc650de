"""Liveness and flattening: a region's steps as the run loop's entries, and each step's releases.

One walk from the last op back (walking twice cost a load 0.05 to 0.2 us more per
op: benchmarks/RESULTS.md, "What a load costs"). A slot not seen yet, nor one of the
region's outputs, is one that no later op uses: the op at hand is its last use
and releases it after it runs (its results that nobody uses too), so a long
program holds only what is live.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from ..plan import BINARY, BRANCH, CALL, GENERAL, SINGLE, TERNARY, UNARY, RegionCallRunner, Step, StepColumns
from .folding import FOLDABLE


def flatten(columns: StepColumns, outputs: tuple) -> tuple[list, list]:
    """The run loop's entries of ``columns``, in program order, and the foldable ops
    among them (``(op, operands, result, position of its entry from the end)``, last
    op first) for :func:`~stablehlo_interp.engine.passes.folding.fold`.

    Each op's releases go to ``columns.releases`` (and to ``Step.release`` of the
    steps made whole). An entry is ``(runner, operands, results, release, kind,
    step)`` (RunProgram): plain single-result ops (most of a program) get their
    result slot as a plain int, and unary ones their operand slot too, so the loop
    skips building argument lists; a call of a region (a variadic
    :class:`~stablehlo_interp.engine.plan.RegionCallRunner`) gets the region's index
    (CALL) or the function choosing it from the operand (BRANCH) in place of the runner; ``step`` is the op's Step, or its index for an op whose Step
    is made on demand. An op of 0-d values gets its runner for them (BuiltOp.scalar, Step.scalar) where it
    has one.
    """
    live = set(outputs)
    see = live.add
    entries: list[tuple] = []
    releases: list[tuple[int, ...]] = []
    foldable: list[tuple] = []
    append, append_release = entries.append, releases.append
    index = len(columns.ops)
    for op, operands, result in zip(reversed(columns.ops), reversed(columns.operands), reversed(columns.results)):
        index -= 1
        whole = type(op) is Step
        # liveness: the results nobody uses, then the operands (and captures) used last here
        used: Iterable[int]
        if whole:
            release = tuple(slot for slot in result if slot not in live)
            used = itertools.chain(*op.captures, operands)
        else:
            release = () if result in live else (result,)
            used = operands
        for slot in used:
            if slot not in live:
                see(slot)
                release += (slot,)
        if len(release) > 1:
            release = tuple(sorted(release))
        append_release(release)
        # flattening: the op's entry
        if whole:
            op.release = release
            if type(op.run) is RegionCallRunner and op.variadic and not op.execution:
                runner = op.run
                append((runner.index, operands, result, release, CALL, op) if runner.choose is None
                       else (runner.choose, operands[0], result, release, BRANCH, op))
                continue
            if op.regions or op.variadic or op.execution:
                if op.execution and op.regions and not op.info.regions_called:
                    op.unbound = (None,) * len(op.regions)
                append((op.scalar or op.run, operands, result, release, GENERAL, op))
                continue
            reference, result, run = op, result[0], op.run
        else:
            reference, run = index, op.scalar or op.run
        if op.info.name in FOLDABLE:
            foldable.append((op, operands, result, len(entries)))
        if len(operands) == 1:
            append((run, operands[0], result, release, UNARY, reference))
        elif len(operands) == 2:
            append((run, operands, result, release, BINARY, reference))
        elif len(operands) == 3:
            append((run, operands, result, release, TERNARY, reference))
        else:
            append((run, operands, result, release, SINGLE, reference))
    entries.reverse()
    releases.reverse()
    columns.releases = releases
    return entries, foldable
