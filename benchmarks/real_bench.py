"""Real programs (the zoo, tests/zoo/): a step on the interp device next to the same step on
XLA's CPU, and the interpreter's time set against the NumPy work its ops make.

For each program of ``zoo.PROGRAMS`` (Flax, Optax, Equinox, Diffrax, NumPyro, Haiku, Keras):
the operations in its lowered module, the ops the interpreter executes in one step (loops
run their bodies many times), and the best time of a step on ``cpu`` and on ``interp``
(wall, and this process's CPU time, steadier on a shared machine), with their ratio and the
interpreter's cost per executed op. Compilation is outside the timings (one warm-up call).

The second table is the floor (floor.py), all measured in the same run: one
observed step records each executed kernel (an op whose runner calls no region) with its
operands. Then:

* ``kernels``: those runners alone on their recorded operands, each timed on its second
  call (its operands in the caches), nothing around them: the NumPy work of the step,
  the floor of an interpreter that calls NumPy once per op;
* ``+ run loop``: what the run loop (engine/run.py) adds to them, fetching operands,
  storing results, releasing slots: the kernels as one straight-line program through
  the loop less the same kernels called back to back;
* ``+ rest``: the rest of the step, ``interp CPU`` less the above: ``while``, ``case``,
  ``func.call``, region calls (binding, environments, outputs), the work of ops with
  regions around their region calls, the device's call, and what the kernels cost in
  the step beyond their replay (their results live until their last use, other data in
  the caches). A program with next to no region call (the transformer LM) shows the
  size of that last part; the rest divided by the region calls bounds what each costs;

with the step's ``/ floor`` (``interp CPU / kernels``) and the costs per op run (the executed
ops less those folded at load, which only an observed run runs).

    python benchmarks/real_bench.py [--programs NAME ...] [--repeat R] [--size test|real]

``--size real`` builds the programs of ``zoo.REAL_SIZES`` at the size of a real training step
(the tests' sizes are small: there a step's time is mostly the interpreter's cost per op).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax

from stablehlo_interp import device as interp_device
from stablehlo_interp.device.runtime import device_semantics

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from zoo import PROGRAMS, REAL_SIZES

from floor import KernelRecorder, floor_of
from timing import best_time, format_time


def record_kernels(step_function, args) -> KernelRecorder:
    """The kernels of one observed step on the interp device (floor.py)."""
    recorder = KernelRecorder()
    interp_device.listeners.append(recorder)
    try:
        jax.block_until_ready(step_function(*args))
    finally:
        interp_device.listeners.remove(recorder)
    return recorder


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


def measure(name: str, repeat: int, sizes: dict) -> dict:
    program = PROGRAMS[name](**sizes)
    step = jax.jit(program.function)
    on = {platform: jax.device_put(program.args, jax.devices(platform)[0]) for platform in ("cpu", "interp")}
    times = {(platform, clock): best_time(lambda: jax.block_until_ready(step(*on[platform])), repeat, clock)
             for platform in on for clock in (time.perf_counter, time.process_time)}
    recorder = record_kernels(step, on["interp"])
    return {"name": name, "lowered": operations_in(program.lowered()), "executed": recorder.ops,
            "run": recorder.ops - recorder.folded, "kernels": len(recorder.kernels),
            "region calls": recorder.region_calls, "times": times,
            "floor": floor_of(recorder, repeat, device_semantics())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", nargs="*", default=list(PROGRAMS), choices=list(PROGRAMS))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--size", choices=("test", "real"), default="test",
                        help="the zoo's test sizes, or REAL_SIZES (only the programs it sizes)")
    options = parser.parse_args()
    if options.size == "real":
        options.programs = [name for name in options.programs if name in REAL_SIZES]
    rows = [measure(name, options.repeat, REAL_SIZES[name] if options.size == "real" else {})
            for name in options.programs]
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
    print("\nThe floor (kernels: each one's best time, floor.py; the rest CPU time; per op: per op run, the executed "
          "ones less those folded at load)")
    print(f"{'program':28} {'ops run':>8} {'kernels':>8} {'region calls':>13} {'interp CPU':>11} {'kernels':>10} "
          f"{'+ run loop':>11} {'+ rest':>10} {'/ floor':>8} {'kernel/op':>10} {'loop/op':>9} {'rest/op':>9}")
    for row in rows:
        interp = row["times"]["interp", time.process_time]
        kernels, loop = row["floor"]["kernels"], row["floor"]["run loop"]
        rest = interp - kernels - loop
        per_op = [part / row["run"] for part in (kernels, loop, rest)]
        print(f"{row['name']:28} {row['run']:8d} {row['kernels']:8d} {row['region calls']:13d} {format_time(interp):>11} "
              f"{format_time(kernels):>10} {format_time(loop):>11} {format_time(rest):>10} "
              f"{interp / kernels:7.2f}x {format_time(per_op[0]):>10} {format_time(per_op[1]):>9} "
              f"{format_time(per_op[2]):>9}")


if __name__ == "__main__":
    main()
