"""What ``si.debug_nans`` costs a finite call on an accelerator (JAX's default device: run it
where one is, e.g. the TPU the device tool lends): zoo training steps called in a loop,
each waited for, bare and guarded; wall time per call (the accelerator's machine is not
shared), best of five loops of 100 calls. benchmarks/debug_nans_bench.py is the same on
XLA CPU, in CPU time.

    python benchmarks/debug_nans_tpu_bench.py
"""

import argparse
import pathlib
import sys

import jax

import stablehlo_interp as si

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from zoo import PROGRAMS, REAL_SIZES

from timing import best_time


def per_call(step, args, calls: int = 100, repeat: int = 5) -> tuple[float, float]:
    """(bare, guarded) microseconds per call: the best of ``repeat`` loops of ``calls``
    calls each, bare and guarded taken in turn."""

    def loop():
        for _ in range(calls):
            jax.block_until_ready(step(*args))

    def guarded():
        with si.debug_nans():
            loop()

    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for index, run in enumerate((loop, guarded)):
            best[index] = min(best[index], best_time(run, 1))
    return best[0] / calls * 1e6, best[1] / calls * 1e6


PROGRAMS_AND_SIZES = ("flax_linen_mlp", "flax_nnx_transformer_lm", "flax_nnx_transformer_lm:real")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", nargs="*", default=list(PROGRAMS_AND_SIZES),
                        help="zoo programs, NAME:real for its real size")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    device = jax.devices()[0]
    for entry in options.programs:
        name, _, size = entry.partition(":")
        try:
            program = PROGRAMS[name](**(REAL_SIZES.get(name, {}) if size == "real" else {}))
            args = jax.device_put(program.args, device)
            bare, guarded = per_call(jax.jit(program.function), args, options.calls, options.repeat)
            print(f"{name:28} {size or 'test':4} on {device.device_kind}: bare {bare:9.1f} us  "
                  f"guarded {guarded:9.1f} us  {guarded / bare:.2f}x", flush=True)
        except Exception as error:  # noqa: BLE001 - a line for each program, whatever happens
            print(f"{name} failed: {type(error).__name__}: {str(error)[:300]}", flush=True)


if __name__ == "__main__":
    main()
