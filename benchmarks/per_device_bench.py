"""The zoo's sharded programs (tests/zoo/sharded.py, 8 devices on a 2x4 data x model mesh):
a step run device by device, next to the global run and XLA's CPU, in one run.

For each program: the ops of its global module and of its per-device program, the ops the
interpreter executes in a step (the per-device run: summed over the 8 devices), and the best
time of a step

* ``cpu``: XLA's CPU with 8 host devices (``jax.jit`` with the program's shardings);
* ``global``: the interpreter's global program (``si.run``'s form: ``Call.run``), once;
* ``per device``: each device's partitioned program on the process grid
  (``Call.run_devices``: the 8 processes one after the other, collectives between them);

wall time and this process's CPU time, and the per-device run's ratio to the other two.
Loading and Shardy's partitioning (in a child process) are outside the timings.

    python benchmarks/per_device_bench.py [--programs NAME ...] [--repeat R] [--size test|real]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax  # after the host devices are asked for

import stablehlo_interp as si
from stablehlo_interp.program import prepare

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from zoo import REAL_SIZES, SHARDED  # after tests/ is put on sys.path above

from timing import best_time, format_time


class OpCounter(si.Listener):
    def __init__(self):
        self.ops = 0

    def after_op(self, step, operands, results, stack):
        self.ops += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", nargs="*", default=list(SHARDED), choices=list(SHARDED))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size", choices=("test", "real"), default="test",
                        help="the tests' sizes, or zoo.REAL_SIZES")
    options = parser.parse_args()

    print(f"{'program':24} {'ops':>13} {'run':>13}  {'cpu':>17} {'global':>17} {'per device':>17}  "
          f"{'/ global':>11} {'/ cpu':>11}")
    print(f"{'':24} {'global/local':>13} {'global/devs':>13}  {'wall, CPU':>17} {'wall, CPU':>17} {'wall, CPU':>17}  "
          f"{'wall, CPU':>11} {'wall, CPU':>11}")
    for name in options.programs:
        sizes = REAL_SIZES.get(name, {}) if options.size == "real" else {}
        program = SHARDED[name](**sizes)
        step, args = program.sharded("cpu")
        call = prepare(step, args, per_device=True)
        partitioned = call.per_device_program()
        count_global, count_devices = OpCounter(), OpCounter()
        call.program.run(*call.arguments, function=call.function, listeners=[count_global])
        call.run_devices([count_devices])
        local_ops = sum(1 for _ in partitioned.local.function(call.function).region.steps)
        global_ops = sum(1 for _ in call.program.function(call.function).region.steps)
        times = {}
        for clock in (time.perf_counter, time.process_time):
            times["cpu", clock] = best_time(lambda step=step, args=args: jax.block_until_ready(step(*args)), options.repeat, clock)
            times["global", clock] = best_time(
                lambda call=call: call.program.run(*call.arguments, function=call.function), options.repeat, clock)
            times["per device", clock] = best_time(lambda call=call: call.run_devices(), options.repeat, clock)
        cells = [f"{format_time(times[kind, time.perf_counter])}, {format_time(times[kind, time.process_time])}"
                 for kind in ("cpu", "global", "per device")]
        ratios = [f"{times['per device', clock] / times[kind, clock]:.1f}x"
                  for kind in ("global", "cpu") for clock in (time.perf_counter, time.process_time)]
        print(f"{name:24} {f'{global_ops}/{local_ops}':>13} {f'{count_global.ops}/{count_devices.ops}':>13}  "
              f"{cells[0]:>17} {cells[1]:>17} {cells[2]:>17}  {ratios[0] + ', ' + ratios[1]:>11} "
              f"{ratios[2] + ', ' + ratios[3]:>11}")


if __name__ == "__main__":
    main()
