"""Real programs (the zoo, tests/zoo/): a step on the interp device next to the same step on
XLA's CPU.

For each program of ``zoo.PROGRAMS`` (Flax, Optax, Equinox, Diffrax, NumPyro, Haiku, Keras):
the operations in its lowered module, the ops the interpreter executes in one step (loops
run their bodies many times), and the best time of a step on ``cpu`` and on ``interp``
(wall, and this process's CPU time, steadier on a shared machine), with their ratio and the
interpreter's cost per executed op. Compilation is outside the timings (one warm-up call).

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

import stablehlo_interp as si
from stablehlo_interp import device as interp_device

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from zoo import PROGRAMS, REAL_SIZES  # noqa: E402 - after tests/ is put on sys.path above

from timing import best_time, format_time  # noqa: E402 - after tests/ is put on sys.path above


class OpCounter(si.Listener):
    def __init__(self):
        self.ops = 0

    def after_op(self, step, operands, results, stack):
        self.ops += 1


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


def ops_executed(step, args) -> int:
    counter = OpCounter()
    interp_device.listeners.append(counter)
    try:
        jax.block_until_ready(step(*args))
    finally:
        interp_device.listeners.remove(counter)
    return counter.ops


def measure(name: str, repeat: int, sizes: dict) -> dict:
    program = PROGRAMS[name](**sizes)
    step = jax.jit(program.function)
    on = {platform: jax.device_put(program.args, jax.devices(platform)[0]) for platform in ("cpu", "interp")}
    times = {(platform, clock): best_time(lambda: jax.block_until_ready(step(*on[platform])), repeat, clock)
             for platform in on for clock in (time.perf_counter, time.process_time)}
    return {"name": name, "lowered": operations_in(program.lowered()), "executed": ops_executed(step, on["interp"]),
            "times": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", nargs="*", default=list(PROGRAMS), choices=list(PROGRAMS))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--size", choices=("test", "real"), default="test",
                        help="the zoo's test sizes, or REAL_SIZES (only the programs it sizes)")
    options = parser.parse_args()
    if options.size == "real":
        options.programs = [name for name in options.programs if name in REAL_SIZES]
    print(f"{'program':28} {'lowered':>8} {'executed':>9} {'cpu wall':>10} {'interp wall':>12} {'ratio':>7} "
          f"{'cpu CPU':>10} {'interp CPU':>11} {'ratio':>7} {'per op':>9}")
    for name in options.programs:
        row = measure(name, options.repeat, REAL_SIZES[name] if options.size == "real" else {})
        times = row["times"]
        wall = times["cpu", time.perf_counter], times["interp", time.perf_counter]
        cpu = times["cpu", time.process_time], times["interp", time.process_time]
        print(f"{name:28} {row['lowered']:8d} {row['executed']:9d} {format_time(wall[0]):>10} "
              f"{format_time(wall[1]):>12} {wall[1] / wall[0]:6.0f}x {format_time(cpu[0]):>10} "
              f"{format_time(cpu[1]):>11} {cpu[1] / max(cpu[0], 1e-9):6.0f}x "
              f"{format_time(cpu[1] / row['executed']):>9}")


if __name__ == "__main__":
    main()
