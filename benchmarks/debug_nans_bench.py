"""What ``si.debug_nans`` costs a finite call (tools/debug_nans.py): a zoo training step
on XLA CPU, called in a loop as a training loop calls it, without and with the guard.

For each program: the step's CPU time per call (this process's, XLA's threads included:
on a busy machine, wall time measures the neighbours; best of ``--repeat`` loops of
``--calls`` calls, each waiting for its results, as the guard's check does), bare and under
``si.debug_nans()``, and their ratio (the target: at most 1.2x); then a training loop
whose step donates its parameters and optimizer state (the guard keeps a host copy of
each call's results: a later call's donated inputs).

    python benchmarks/debug_nans_bench.py [--programs NAME ...] [--calls N] [--repeat R] [--size real]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

# the sharded programs' 8 devices: XLA CPU's, set before jax is imported
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax

import stablehlo_interp as si

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from zoo import PROGRAMS, REAL_SIZES, SHARDED

from timing import best_time, format_time

DEFAULT = ("flax_linen_mlp", "flax_nnx_transformer_lm", "haiku_mlp", "sharded_flax_nnx_lm")
DONATING = "flax_linen_mlp"   # step(params, opt_state, key, inputs, labels) -> {"params", "opt_state", ...}


def repeated_calls(step, args, calls: int):
    """``calls`` calls of the step on the same arguments, each waited for."""

    def loop():
        for _ in range(calls):
            jax.block_until_ready(step(*args))

    return loop


def training_loop(step, host_args, calls: int, device=None):
    """``calls`` steps from ``host_args`` placed afresh on ``device`` (XLA CPU's first by
    default; the step donates them), each given the parameters and optimizer state the
    last returned."""

    def loop():
        params, opt_state, *rest = jax.device_put(host_args, device or jax.devices("cpu")[0])
        for _ in range(calls):
            out = step(params, opt_state, *rest)
            params, opt_state = out["params"], out["opt_state"]
            jax.block_until_ready(out)

    return loop


def per_call(loop_of, calls: int, repeat: int, clock=time.process_time) -> tuple[float, float]:
    """(bare, guarded) seconds per call of the loop ``loop_of()`` makes, timed by
    ``clock``: the best of ``repeat`` runs of each, taken in turn (a busy machine slows
    both alike)."""
    bare_loop, guarded_loop = loop_of(), loop_of()

    def guarded():
        with si.debug_nans():
            guarded_loop()

    bare_loop(), guarded()      # warm: compiled, and the guard's check compiled for these results
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for index, run in enumerate((bare_loop, guarded)):
            best[index] = min(best[index], best_time(run, 1, clock))
    return best[0] / calls, best[1] / calls


def program_and_args(name: str, real: bool):
    sizes = REAL_SIZES.get(name, {}) if real else {}
    if name in SHARDED:
        return SHARDED[name](**sizes).sharded("cpu")
    program = PROGRAMS[name](**sizes)
    return jax.jit(program.function), jax.device_put(program.args, jax.devices("cpu")[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", nargs="*", default=list(DEFAULT), choices=[*PROGRAMS, *SHARDED])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--size", choices=("test", "real"), default="test",
                        help="the zoo's test sizes, or REAL_SIZES where it sizes the program (a real training step)")
    options = parser.parse_args()
    print(f"{'program':34} {'bare call':>10} {'debug_nans':>11} {'ratio':>6}")
    for name in options.programs:
        step, args = program_and_args(name, options.size == "real")
        bare, guarded = per_call(lambda: repeated_calls(step, args, options.calls), options.calls, options.repeat)
        print(f"{name:34} {format_time(bare):>10} {format_time(guarded):>11} {guarded / bare:5.2f}x")
    if DONATING in options.programs:
        program = PROGRAMS[DONATING]()
        step = jax.jit(program.function, donate_argnums=(0, 1))

        bare, guarded = per_call(lambda: training_loop(step, program.args, options.calls), options.calls,
                                 options.repeat)
        print(f"{DONATING + ', donated loop':34} {format_time(bare):>10} {format_time(guarded):>11} "
              f"{guarded / bare:5.2f}x")


if __name__ == "__main__":
    main()
