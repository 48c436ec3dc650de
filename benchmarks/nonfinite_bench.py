"""What the NaN search costs on a long loop (si.find_nonfinite, tools/nonfinite.py).

A ``fori_loop`` of N iterations whose body runs 11 element-wise ops on f32[SIZE],
run four ways in CPU time (best of ``--repeat``): plain (``program.run``), observed
by an empty Listener (the observed run loop every tool pays), with the
``NonFiniteTracer`` of the default answer, and with the ``NonFiniteFinder`` of
``mode="first"``. Twice: on finite data (every op's results are checked, nothing is
recorded), and with a NaN carried from the argument through every iteration (the
worst case: every op records where its NaN came from). Also the memory the
tracer holds after the run (``tracemalloc``: what it allocated and still keeps).

    python benchmarks/nonfinite_bench.py [--iterations N] [--size SIZE] [--repeat R]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np

import stablehlo_interp as si
from stablehlo_interp.program import prepare
from stablehlo_interp.tools.nonfinite import NonFiniteFinder, NonFiniteTracer, entry_region

from timing import best_time, format_time


def loop(x, iterations):
    def body(i, v):
        return jnp.tanh(v * 1.01 + jnp.sin(v)) * 0.9 + jnp.log(jnp.abs(v) + 1.0)
    return jax.lax.fori_loop(0, iterations, body, x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    finite = np.linspace(-1, 1, args.size, dtype=np.float32)
    carried = finite.copy()
    carried[0] = np.nan
    for label, x in (("finite", finite), ("NaN carried", carried)):
        call = prepare(jax.jit(lambda v: loop(v, args.iterations)), (x,), {}, None)
        region = entry_region(call)
        times = {
            "plain": best_time(lambda: call.run([]), args.repeat, time.process_time),
            "observed": best_time(lambda: call.run([si.Listener()]), args.repeat, time.process_time),
            "tracer": best_time(lambda: _traced(call, region), args.repeat, time.process_time),
            "first": best_time(lambda: call.run([NonFiniteFinder(stop=False)]), args.repeat, time.process_time),
        }
        tracemalloc.start()
        tracer = NonFiniteTracer(region)
        outputs = call.run([tracer])
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        report = tracer.report(call.arguments, outputs)
        print(f"{label}, {args.iterations} iterations on f32[{args.size}]: "
              + ", ".join(f"{name} {format_time(value)}" for name, value in times.items())
              + f"; tracer/observed {times['tracer'] / times['observed']:.2f}x, tracer/plain "
              f"{times['tracer'] / times['plain']:.1f}x; held after the run {held / 1e6:.1f} MB; "
              f"origins: {None if report is None else [origin.op for origin in report.origins]}")


def _traced(call, region):
    """One run with the default answer's listener, and its report."""
    tracer = NonFiniteTracer(region)
    return tracer.report(call.arguments, call.run([tracer]))


if __name__ == "__main__":
    main()
