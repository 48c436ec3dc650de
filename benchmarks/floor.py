"""The floor of a run: the NumPy work its executed ops make, timed in the same process.

A :class:`KernelRecorder` listening to one observed run records each executed *kernel*
(an op whose runner calls no region: everything but ``while``, ``case``, ``func.call``, a
reduce or sort calling its body ...; the ops inside those regions are kernels themselves)
with its operands, leaving out the ops that an unobserved run does not run (folded at
load). :func:`floor_of` then times the kernels called back to back on their recorded
operands, nothing around them (the floor of an interpreter that calls NumPy once per op),
and the same kernels as one straight-line program through the run loop (engine/run.py).
What a real run costs beyond that is the regions' (while, case, calls, region calls) and
what its kernels cost beyond their replay (results alive until their last use, caches).
Used by real_bench.py and core_bench.py.
"""

from __future__ import annotations

import time

import stablehlo_interp as si
from stablehlo_interp.engine.passes.folding import FOLDABLE
from stablehlo_interp.engine.plan import BINARY, GENERAL, SINGLE, UNARY, RunProgram, StepColumns
from stablehlo_interp.engine.run import Execution, RunContext, _leading_arguments, _run_steps, numpy_warnings_off
from stablehlo_interp.engine.semantics import SPEC
from timing import best_time


def calls_regions(step) -> bool:
    """Whether the step's runner calls its regions (so the ops inside are the work)."""
    return bool(step.regions) and step.info.regions_called


class KernelRecorder(si.Listener):
    """Counts the executed ops and records each kernel (see the module's docstring) with
    its operands, and counts the region calls. An op that the unobserved run leaves out
    (folded at load, engine/passes/folding.py: a foldable op of constants made in its
    region) is counted in ``folded``, not recorded."""

    def __init__(self):
        self.ops = 0
        self.folded = 0
        self.kernels: list = []
        self.constant_slots: dict = {}   # region call (its stack) -> the slots folded there

    def after_op(self, step, operands, results, stack):
        self.ops += 1
        constants = self.constant_slots.setdefault(tuple(stack), set())
        if (step.info.name in FOLDABLE and not step.info.has_quantized_types
                and all(slot in constants for slot in step.operands)):
            constants.update(step.results)
            self.folded += 1
        elif not calls_regions(step):
            self.kernels.append((step, list(operands)))

    @property
    def region_calls(self) -> int:
        return len(self.constant_slots) - (() in self.constant_slots)


def kernel_calls(kernels: list, execution: Execution):
    """The recorded kernels as ``(runner, arguments)``, what each would be given in a run."""
    return [(step.run, (*_leading_arguments(step, execution, []), *operands)) for step, operands in kernels]


def straight_line(kernels: list):
    """The recorded kernels as one straight-line region program: (program, its environment).
    Each operand has its own slot, filled in; each result its own, released once stored."""
    env: list = []
    entries = []
    for step, operands in kernels:
        slots = tuple(range(len(env), len(env) + len(operands)))
        env.extend(operands)
        results = tuple(range(len(env), len(env) + len(step.results)))
        env.extend([None] * len(step.results))
        if step.variadic or step.execution or step.regions:
            entries.append((step.run, slots, results, results, GENERAL, step))
        elif len(slots) == 1:
            entries.append((step.run, slots[0], results[0], results, UNARY, step))
        elif len(slots) == 2:
            entries.append((step.run, slots, results[0], results, BINARY, step))
        else:
            entries.append((step.run, slots, results[0], results, SINGLE, step))
    return RunProgram(entries, StepColumns()), env


def warm_kernel_time(calls: list, repeat: int) -> float:
    """The floor: each kernel called twice on its operands and the second call timed alone
    (``perf_counter`` around it, less what the clock costs around a call of nothing), the
    best of ``repeat`` kept per kernel, summed. Each kernel meets its operands in the
    caches, as a run's ops meet what the op before them made; the best of a few drops
    the time another process took the core."""
    clock = time.perf_counter
    best = [float("inf")] * len(calls)
    nothing = float("inf")
    with numpy_warnings_off():
        for _ in range(repeat):
            for index, (run, arguments) in enumerate(calls):
                run(*arguments)
                start = clock()
                run(*arguments)
                elapsed = clock() - start
                if elapsed < best[index]:
                    best[index] = elapsed
            for _ in range(1000):
                start = clock()
                _ = tuple()
                nothing = min(nothing, clock() - start)
    return sum(best) - nothing * len(calls)


def floor_of(recorder: KernelRecorder, repeat: int, semantics: str = SPEC) -> dict:
    """The recorded kernels' floor (:func:`warm_kernel_time`), and what the run loop adds
    to them: the same kernels as one straight-line program through the run loop less the
    kernels called back to back (each best of ``repeat`` in CPU time; both replays hold
    every operand of the run at once, so their kernels meet colder caches than a run's),
    under ``semantics``."""
    execution = Execution(RunContext(semantics=semantics))
    calls = kernel_calls(recorder.kernels, execution)
    program, env = straight_line(recorder.kernels)

    def kernels_alone():
        with numpy_warnings_off():
            for run, arguments in calls:
                run(*arguments)

    def through_run_loop():
        with numpy_warnings_off():
            _run_steps(program, env, (), lambda _: None, execution, None, ())

    loop = best_time(through_run_loop, repeat, time.process_time) - best_time(kernels_alone, repeat, time.process_time)
    return {"kernels": warm_kernel_time(calls, repeat), "run loop": loop}
