"""Real programs (the zoo, tests/zoo/): a step on the interp device next to the same step on
XLA's CPU, and the interpreter's time set against the NumPy work its ops make.

For each program of ``zoo.PROGRAMS`` (Flax, Optax, Equinox, Diffrax, NumPyro, Haiku, Keras):
the operations in its lowered module, the ops the interpreter executes in one step (loops
run their bodies many times), and the best time of a step on ``cpu`` and on ``interp``
(wall, and this process's CPU time, steadier on a shared machine), with their ratio and the
interpreter's cost per executed op. Compilation is outside the timings (one warm-up call).

The second table is the floor, in CPU time, all measured in the same run. One observed step
records each executed *kernel* (an op whose runner calls no region: everything but
``while``, ``case``, ``func.call``, a reduce or sort calling its body ...; the ops inside
those regions are kernels themselves) with its operands. Then:

* ``kernels``: those runners called back to back on their recorded operands, nothing
  around them: the NumPy work of the step, the floor of an interpreter that calls NumPy
  once per op;
* ``+ run loop``: the same kernels as one straight-line program through the run loop
  (engine/run.py), which adds fetching operands, storing results, releasing slots;
* ``+ regions``: the rest of the step, ``interp CPU`` less the above: ``while``, ``case``,
  ``func.call``, region calls (binding, environments, outputs), the work of ops with
  regions around their region calls, and the device's call;

with the step's ``/ floor`` (``interp CPU / kernels``) and the costs per op run (the executed
ops less those folded at load, which only an observed run runs).

    python benchmarks/real_bench.py [--programs NAME ...] [--repeat R]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax

import stablehlo_interp as si
from stablehlo_interp import device as interp_device
from stablehlo_interp.device.runtime import device_semantics
from stablehlo_interp.engine.passes.folding import FOLDABLE
from stablehlo_interp.engine.plan import BINARY, GENERAL, SINGLE, UNARY, RunProgram, StepColumns
from stablehlo_interp.engine.run import Execution, RunContext, _leading_arguments, _run_steps

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from zoo import PROGRAMS  # noqa: E402 - after tests/ is put on sys.path above

from timing import best_time, format_time  # noqa: E402 - after tests/ is put on sys.path above


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


def record_kernels(step_function, args) -> KernelRecorder:
    recorder = KernelRecorder()
    interp_device.listeners.append(recorder)
    try:
        jax.block_until_ready(step_function(*args))
    finally:
        interp_device.listeners.remove(recorder)
    return recorder


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


def floor_of(recorder: KernelRecorder, repeat: int) -> dict:
    execution = Execution(RunContext(semantics=device_semantics()))
    calls = kernel_calls(recorder.kernels, execution)
    program, env = straight_line(recorder.kernels)

    def kernels_alone():
        with si.engine.run.numpy_warnings_off():
            for run, arguments in calls:
                run(*arguments)

    def through_run_loop():
        with si.engine.run.numpy_warnings_off():
            _run_steps(program, env, (), lambda _: None, execution, None, ())

    return {"kernels": best_time(kernels_alone, repeat, time.process_time),
            "run loop": best_time(through_run_loop, repeat, time.process_time)}


def operations_in(lowered) -> int:
    """Every operation of the lowered module, nested ones included (the module's own aside)."""
    from jaxlib.mlir import ir

    count = 0

    def visit(operation):
        nonlocal count
        count += 1
        return ir.WalkResult.ADVANCE

    lowered.compiler_ir("stablehlo").operation.walk(visit)
    return count - 1


def measure(name: str, repeat: int) -> dict:
    program = PROGRAMS[name]()
    step = jax.jit(program.function)
    on = {platform: jax.device_put(program.args, jax.devices(platform)[0]) for platform in ("cpu", "interp")}
    times = {(platform, clock): best_time(lambda: jax.block_until_ready(step(*on[platform])), repeat, clock)
             for platform in on for clock in (time.perf_counter, time.process_time)}
    recorder = record_kernels(step, on["interp"])
    return {"name": name, "lowered": operations_in(program.lowered()), "executed": recorder.ops,
            "run": recorder.ops - recorder.folded, "kernels": len(recorder.kernels),
            "region calls": recorder.region_calls, "times": times,
            "floor": floor_of(recorder, repeat)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", nargs="*", default=list(PROGRAMS), choices=list(PROGRAMS))
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    rows = [measure(name, options.repeat) for name in options.programs]
    print(f"{'program':28} {'lowered':>8} {'executed':>9} {'cpu wall':>10} {'interp wall':>12} {'ratio':>7} "
          f"{'cpu CPU':>10} {'interp CPU':>11} {'ratio':>7} {'per op':>9}")
    for row in rows:
        times = row["times"]
        wall = times["cpu", time.perf_counter], times["interp", time.perf_counter]
        cpu = times["cpu", time.process_time], times["interp", time.process_time]
        print(f"{row['name']:28} {row['lowered']:8d} {row['executed']:9d} {format_time(wall[0]):>10} "
              f"{format_time(wall[1]):>12} {wall[1] / wall[0]:6.0f}x {format_time(cpu[0]):>10} "
              f"{format_time(cpu[1]):>11} {cpu[1] / max(cpu[0], 1e-9):6.0f}x "
              f"{format_time(cpu[1] / row['executed']):>9}")
    print("\nThe floor (CPU time; per op: per op run, the executed ones less those folded at load)")
    print(f"{'program':28} {'ops run':>8} {'kernels':>8} {'region calls':>13} {'interp CPU':>11} {'kernels':>10} "
          f"{'+ run loop':>11} {'+ regions':>10} {'/ floor':>8} {'kernel/op':>10} {'loop/op':>9} {'regions/op':>11}")
    for row in rows:
        interp = row["times"]["interp", time.process_time]
        kernels, loop = row["floor"]["kernels"], row["floor"]["run loop"]
        per_op = [part / row["run"] for part in (kernels, loop - kernels, interp - loop)]
        print(f"{row['name']:28} {row['run']:8d} {row['kernels']:8d} {row['region calls']:13d} {format_time(interp):>11} "
              f"{format_time(kernels):>10} {format_time(loop - kernels):>11} {format_time(interp - loop):>10} "
              f"{interp / kernels:7.2f}x {format_time(per_op[0]):>10} {format_time(per_op[1]):>9} "
              f"{format_time(per_op[2]):>11}")


if __name__ == "__main__":
    main()
