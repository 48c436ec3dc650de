"""What parsing untrusted bytecode first in a child process costs a load.

``si.load(bytes)`` (and a bytecode file, or a ``jax.export.Exported``) parses
the bytecode first in a child process (stablehlo_interp/ir/first_parse.py),
because damaged bytecode can corrupt the heap of the process that parses it;
the device's bytecode from JAX is trusted and parsed here only. Measured for a
small and a large module (``jax.export`` bytes):

* the first untrusted load of the process, which starts the child;
* a load of trusted bytes (``sources.parse(data, trusted=True)``) next to the
  same load untrusted, and the child's check alone (pipe round trip and parse).

    python benchmarks/load_bench.py [--repeat R]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import export

import stablehlo_interp as si
from stablehlo_interp.ir import first_parse, sources

from timing import best_time, format_time


def _many_ops(x):
    for i in range(200):
        x = jnp.sin(x) * (i + 1) + x
    return x


def modules() -> dict[str, bytes]:
    x = np.ones((3, 4), np.float32)
    return {name: bytes(export.export(jax.jit(function))(x).mlir_module_serialized)
            for name, function in [("small (2 ops)", lambda a: a * 2 + 1), ("large (600 ops)", _many_ops)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    options = parser.parse_args()

    data = modules()
    start = time.perf_counter()
    si.load(data["small (2 ops)"])
    print(f"first untrusted load of the process (starts the child): {format_time(time.perf_counter() - start)}\n")

    print(f"{'module':<18}{'bytes':>8}{'trusted load':>15}{'untrusted load':>17}{'child check':>14}{'cost':>8}")
    for name, bytecode in data.items():
        trusted = best_time(lambda: si.load(sources.parse(bytecode, trusted=True)), options.repeat)
        untrusted = best_time(lambda: si.load(bytecode), options.repeat)
        check = best_time(lambda: first_parse.check_in_child(bytecode), options.repeat)
        print(f"{name:<18}{len(bytecode):>8}{format_time(trusted):>15}{format_time(untrusted):>17}"
              f"{format_time(check):>14}{untrusted / trusted:>7.2f}x")


if __name__ == "__main__":
    main()
