"""What ``si.debug_nans`` costs a finite call on an accelerator (JAX's default device: run it
where one is, e.g. the TPU the device tool lends): zoo training steps called in a loop,
each waited for, bare and guarded, and a training loop whose step donates its parameters
and optimizer state; wall time per call (the accelerator's machine is not shared), best
of five loops of 100 calls. benchmarks/debug_nans_bench.py is the same on XLA CPU, in
CPU time.

    python benchmarks/debug_nans_tpu_bench.py
"""

import argparse
import pathlib
import sys
import time

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from zoo import PROGRAMS, REAL_SIZES

from debug_nans_bench import DONATING, per_call, repeated_calls, training_loop

PROGRAMS_AND_SIZES = ("flax_linen_mlp", "flax_nnx_transformer_lm", "flax_nnx_transformer_lm:real",
                      f"{DONATING}:donated")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", nargs="*", default=list(PROGRAMS_AND_SIZES),
                        help=f"zoo programs, NAME:real for its real size, {DONATING}:donated for the donating loop")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    device = jax.devices()[0]
    for entry in options.programs:
        name, _, size = entry.partition(":")
        try:
            program = PROGRAMS[name](**(REAL_SIZES.get(name, {}) if size == "real" else {}))
            if size == "donated":
                step = jax.jit(program.function, donate_argnums=(0, 1))
                loop_of = lambda: training_loop(step, program.args, options.calls, device)   # noqa: E731
            else:
                step, args = jax.jit(program.function), jax.device_put(program.args, device)
                loop_of = lambda: repeated_calls(step, args, options.calls)   # noqa: E731
            bare, guarded = (seconds * 1e6 for seconds in
                             per_call(loop_of, options.calls, options.repeat, time.perf_counter))
            print(f"{name:28} {size or 'test':7} on {device.device_kind}: bare {bare:9.1f} us  "
                  f"guarded {guarded:9.1f} us  {guarded / bare:.2f}x", flush=True)
        except Exception as error:  # noqa: BLE001 - a line for each program, whatever happens
            print(f"{name} failed: {type(error).__name__}: {str(error)[:300]}", flush=True)


if __name__ == "__main__":
    main()
