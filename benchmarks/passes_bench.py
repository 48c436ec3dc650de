"""XLA CPU's whole pipeline on a zoo training step, pass by pass (``si.passes``): the time
from the function to the verdict, target under 2 minutes on two cores.

For each program: the stages XLA dumped (every pass that changed the module), the distinct
ones, how many the interpreter ran (bisected, and with ``--every-stage`` each distinct one),
the verdict, and the wall time of the whole ``si.passes`` call: lowering, XLA's compile
with its dumps and each stage's translation (both in the child process), the original
program's run and its noise where a value differs, each stage's run and judgement.

    python benchmarks/passes_bench.py [--programs NAME ...] [--every-stage]

A sharded program of ``zoo.SHARDED`` compiles for its 8 devices (host devices here), and
its stages after the SPMD partitioner run each device's program on the interpreter's grid.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import stablehlo_interp as si  # after the host devices are asked for (the sharded programs)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from zoo import PROGRAMS, SHARDED  # after tests/ is put on sys.path above

from timing import format_time

TARGET_SECONDS = 120.0
DEFAULT_PROGRAMS = ["flax_nnx_transformer_lm", "flax_linen_mlp"]


def verdict(report) -> str:
    if report.first_change is not None:
        return f"changed by {report.first_change.stage.name}"
    if report.not_judged_from is not None:
        return f"not judged from {report.not_judged_from.stage.name}"
    return "every pass keeps" + (", compiled differs" if report.compiled_differs else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", nargs="*", default=DEFAULT_PROGRAMS,
                        choices=[n for n, b in PROGRAMS.items() if not b.slow] + list(SHARDED))
    parser.add_argument("--every-stage", action="store_true", help="also run every distinct stage")
    options = parser.parse_args()

    print(f"{'program':26} {'mode':11} {'stages':>7} {'distinct':>8} {'run':>5} {'wall':>9} {'target':>7}  verdict")
    for name in options.programs:
        program = (PROGRAMS | SHARDED)[name]()
        function, args = program.sharded("cpu") if program.mesh else (program.function, program.args)
        for every_stage in (False, True) if options.every_stage else (False,):
            start = time.perf_counter()
            report = si.passes(function, *args, every_stage=every_stage)
            wall = time.perf_counter() - start
            mode = "every stage" if every_stage else "bisected"
            print(f"{name:26} {mode:11} {len(report.stages):>7} {report.distinct:>8} {len(report.runs):>5} "
                  f"{format_time(wall):>9} {'met' if wall < TARGET_SECONDS else 'MISSED':>7}  {verdict(report)}")


if __name__ == "__main__":
    main()
