"""The interp JAX device: cost of a call, next to the same call on XLA's CPU.

Measures, per call, on ``cpu`` and on ``interp``:

* a trivial jitted call (``jax.jit(lambda v: v + 1)`` on a scalar), whose cost
  on interp is jaxlib's C API path, 12 PJRT calls (two enter Python: Execute
  and Buffer_Destroy; the rest are native fast paths) and one interpreted
  ``stablehlo.add``; target: under 20 us;
* an eager op (``x + x``: JAX dispatches it as a small jitted program);
* a host-to-device transfer and its read-back (``device_put`` + ``np.asarray``);
* a slightly larger jitted function (a dozen ops) to show the per-op share.

Each figure is the best of ``--repeat`` batches of ``--calls`` calls. Wall time
is what a user sees; CPU time (this process, all threads) is steadier on a
shared machine.

    python benchmarks/device_bench.py [--calls N] [--repeat R]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import jax
import jax.numpy as jnp


def per_call(fn, calls: int, repeat: int) -> tuple[float, float]:
    """Best (wall, cpu) microseconds per call over ``repeat`` batches of ``calls`` calls."""
    for _ in range(min(calls, 200)):
        fn()
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls) / calls * 1e6, min(cpus) / calls * 1e6


def cases(device):
    scalar = jax.device_put(np.float32(1.0), device)
    vector = jax.device_put(np.arange(16, dtype=np.float32), device)
    host = np.arange(1024, dtype=np.float32)
    increment = jax.jit(lambda v: v + 1)
    dozen_ops = jax.jit(lambda v: jnp.tanh(jnp.sin(v) * 2 + jnp.cos(v) / 3).sum() - v.max() + v.min())
    return {
        "trivial jitted call": lambda: increment(scalar),
        "eager op x + x": lambda: vector + vector,
        "device_put + read back": lambda: np.asarray(jax.device_put(host, device)),
        "jitted call, 12 ops": lambda: dozen_ops(vector),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()

    cpu, interp = jax.devices("cpu")[0], jax.devices("interp")[0]
    results = {name: [per_call(fn, options.calls, options.repeat)] for name, fn in cases(cpu).items()}
    for name, fn in cases(interp).items():
        results[name].append(per_call(fn, options.calls, options.repeat))

    print(f"{'per call (us)':<26}{'cpu wall':>10}{'interp wall':>13}{'cpu cpu':>10}{'interp cpu':>12}"
          f"{'ratio':>8}")
    for name, ((cpu_wall, cpu_cpu), (interp_wall, interp_cpu)) in results.items():
        print(f"{name:<26}{cpu_wall:>10.1f}{interp_wall:>13.1f}{cpu_cpu:>10.1f}{interp_cpu:>12.1f}"
              f"{interp_wall / cpu_wall:>7.1f}x")
    trivial_wall = results["trivial jitted call"][1][0]
    verdict = "meets" if trivial_wall < 20 else "misses"
    print(f"\ntrivial jitted call on interp: {trivial_wall:.1f} us ({verdict} the 20 us target)")


if __name__ == "__main__":
    main()
