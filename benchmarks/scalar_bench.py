"""Programs of many tiny ops (issue 42), side by side with another checkout in one run.

Samplers, ODE solvers and line searches execute long loops of 0-d and tiny ops:
their time is the interpreter's cost per op. Rows:

* ``(c) while loop``: core_bench's row (c), a loop of four 0-d ops, per executed op
  (target: 0.25 us);
* the zoo's programs of that kind (tests/zoo/: NUTS, Diffrax's saved steps, Optimistix's
  BFGS, whose backtracking Armijo line search is a loop of 0-d tests), one call of
  ``Program.run`` each.

Each checkout runs in a child process of its own (``--against`` names the other one,
e.g. a worktree of main), the children alternating round by round on the same
machine; each time is the best process CPU time of the rounds (steadier than wall
time on a shared machine). The zoo's programs are this checkout's.

    python benchmarks/scalar_bench.py [--against CHECKOUT] [--rounds N] [--repeat R]
        [--programs NAME ...] [--iterations N]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

from timing import best_time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
PROGRAMS = ["numpyro_nuts_regression", "equinox_diffrax_saved_steps", "optimistix_bfgs_logistic"]
LOOP = "(c) while loop, per executed op"


def measure(checkout: pathlib.Path, programs: list[str], repeat: int, iterations: int) -> dict:
    """The rows' times with the interpreter of ``checkout`` (run in a child: its package first on the path)."""
    sys.path[:0] = [str(checkout), str(HERE), str(ROOT / "tests")]
    import jax
    import numpy as np

    import stablehlo_interp as si
    from core_bench import while_loop
    from zoo import PROGRAMS as ZOO

    assert pathlib.Path(si.__file__).resolve().is_relative_to(checkout.resolve()), si.__file__
    # (64-bit types stay off, as the zoo's users run its programs: tests/test_zoo.py)
    loop = si.load(while_loop(iterations))
    times = {LOOP: best_time(lambda: loop.run(np.float32(1)), repeat, time.process_time) / (4 * iterations)}
    for name in programs:
        program = ZOO[name]()
        loaded = si.load(program.lowered())
        args = [np.asarray(leaf) for leaf in jax.tree.leaves(program.args)]
        times[name] = best_time(lambda: loaded.run(*args), repeat, time.process_time)
    return times


def run_child(checkout: pathlib.Path, options: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", str(checkout), "--repeat", str(options.repeat),
               "--iterations", str(options.iterations), "--programs", *options.programs]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=checkout,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def format_seconds(seconds: float) -> str:
    return f"{seconds * 1e6:.3f} us" if seconds < 1e-4 else f"{seconds * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", type=pathlib.Path, help="another checkout to time side by side")
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs of each checkout")
    parser.add_argument("--repeat", type=int, default=3, help="calls timed per round")
    parser.add_argument("--iterations", type=int, default=10000, help="iterations of the while loop")
    parser.add_argument("--programs", nargs="*", default=PROGRAMS)
    parser.add_argument("--child", type=pathlib.Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(measure(options.child, options.programs, options.repeat, options.iterations)))
        return
    checkouts = [ROOT] + ([options.against] if options.against else [])
    best: list[dict] = [{} for _ in checkouts]
    for _ in range(options.rounds):
        for times, checkout in zip(best, checkouts):
            for row, seconds in run_child(checkout, options).items():
                times[row] = min(seconds, times.get(row, seconds))
    header = f"{'program':36} {'this':>12}" + (f" {'against':>12} {'speedup':>8}" if options.against else "")
    print(header)
    print("-" * len(header))
    for row, seconds in best[0].items():
        line = f"{row:36} {format_seconds(seconds):>12}"
        if options.against:
            other = best[1][row]
            line += f" {format_seconds(other):>12} {other / seconds:>7.2f}x"
        print(line)


if __name__ == "__main__":
    main()
