"""Fuzzing throughput: generated programs per second on the interpreter side, and
where a campaign's time goes.

1. The interpreter side alone, in this process: ``--programs`` programs of the
   campaign's generator (``si.tools.fuzz.generate``), each generated, loaded
   (the MLIR parse, first in the child process that reads untrusted text) and
   run. Printed: programs per second, and the seconds per program of generation,
   load (with the child's parse) and run (wall time: the machine is shared,
   compare ratios).
2. A campaign against a backend (``--backend``, default XLA CPU) of
   ``--campaign`` programs with ``-j`` workers: the wall time, and the seconds
   its phases took summed over the workers: generation, the interpreter, the
   backend's compile and run (one phase for backends that do both in one call:
   IREE, a command), the comparison (``compare``'s op-by-op search, only for
   programs whose results differ) and the reduction of the findings.

Target: the interpreter side is not what bounds a campaign against a compiler.
Measured (two shared cores, another campaign running beside it, 2026-12-03):
the interpreter side runs 30 programs per second (load 30 ms a program, most
of it the parse in the child process; generation 3 ms; the run 0.5 ms: the
programs are small); a campaign of 30 programs against XLA CPU with -j 2 ran
0.5 programs per second: XLA's compile 0.5 s a program (21% of the summed
time), our interpreter and the comparison 7% each, XLA's run under 1%, and the
reduction of the 2 findings 64% (each candidate is a compile, and a finding's
reduction starts a child process). Again with the 92 ops (2026-12-04, the machine
loaded by other work): the interpreter side 160 programs per second (load 4.5 ms,
generation 1.4 ms, run 0.3 ms); a campaign of 40 programs against XLA CPU, -j 2,
0.9 programs per second: the reduction of 5 findings 73% of the summed time, XLA's
compile 15%, the comparison 7%, our interpreter 4%.
"""

from __future__ import annotations

import argparse
import time

import stablehlo_interp as si
from stablehlo_interp.tools.fuzz.campaign import fuzz, program_seed
from stablehlo_interp.tools.fuzz.generate import generate


def interpreter_side(count: int, seed: int) -> None:
    spent = {"generation": 0.0, "load": 0.0, "run": 0.0}
    failed = 0
    start = time.perf_counter()
    for index in range(count):
        t0 = time.perf_counter()
        generated = generate(program_seed(seed, index))
        t1 = time.perf_counter()
        try:
            program = si.load(generated.text)
            t2 = time.perf_counter()
            program.run(*generated.arguments)
        except si.InterpreterError:
            failed += 1   # an op the interpreter does not support (reduce_precision of f8 types)
            t2 = time.perf_counter()
        t3 = time.perf_counter()
        spent["generation"] += t1 - t0
        spent["load"] += t2 - t1
        spent["run"] += t3 - t2
    wall = time.perf_counter() - start
    print(f"interpreter side: {count} programs in {wall:.2f} s wall, {count / wall:.1f} programs/s "
          f"({failed} stopped at an unsupported op)")
    print(f"{'phase':<12}{'s/program':>15}")
    for phase, seconds in spent.items():
        print(f"{phase:<12}{seconds / count:>15.4f}")


def campaign(backend: str, count: int, seed: int, jobs: int) -> None:
    report = fuzz(backend, seed=seed, count=count, jobs=jobs)
    total = sum(report.timings.values())
    print(f"\ncampaign against {report.backend}: {count} programs, -j {jobs}: {report.seconds:.1f} s wall, "
          f"{report.programs_per_second:.2f} programs/s; {report.agreed} agree, {len(report.findings)} findings")
    print(f"{'phase':<28}{'s (summed)':>12}{'share':>8}")
    for phase, seconds in sorted(report.timings.items(), key=lambda item: -item[1]):
        print(f"{phase:<28}{seconds:>12.2f}{seconds / total:>8.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=200, help="programs for the interpreter side")
    parser.add_argument("--campaign", type=int, default=40, help="programs of the campaign (0: none)")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args()
    interpreter_side(args.programs, args.seed)
    if args.campaign:
        campaign(args.backend, args.campaign, args.seed, args.jobs)


if __name__ == "__main__":
    main()
