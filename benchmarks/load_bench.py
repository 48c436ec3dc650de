"""Load time: a long chain of element-wise ops, and what the child parse costs.

``si.load`` of a straight chain of N element-wise ops (text), CPU time per op
(``time.process_time``: the machine is shared), next to the floor on jaxlib's
bindings measured on the same text in the same run: ``ir.Module.parse`` (which
verifies: ``verify``, MLIR's verifier alone, is part of it), a bare Python walk
over the ops (name, operands, result types), and the binding calls the compiler
makes per op (``binding_calls``: the bare walk's, plus whether the op has
attributes and its result's slot in a dict keyed by the values' hashes; the
chain is text that writes no location, which the compiler no longer reads: until
issue 14's third round these calls included each op's location, file, line and
column, 0.4 us per op, and the dict was keyed by the Value objects). ``floor``
is parse + those calls: what a loader that reads what ours reads pays the
bindings; ``Python`` is the rest of si.load, split into the run loop's program
and the releases (one pass since that round), the collector's pass over the new
plan, and the compile loop's own work. Target: at most 10 us per op at 10 000
and 100 000 ops, linear in N. The plan's memory (tracemalloc,
everything ``si.load`` allocates and keeps) is printed per op too; target: at
most 1 KiB per op.

Measured (four runs, load average 4.3-6.6 on the shared two-core machine, CPU
us per op; before = main at commit 1d70f73, run back to back with this in each
run): at 10 000 ops si.load takes 8.1-8.4 (before 9.0-9.5), at 100 000 8.8-9.5
(before 10.3-10.9); 1.35-1.44x parse + bare walk (before 1.32-1.62x),
1.19-1.30x the floor; 308-310 B per op (before 336-338). Where the time goes at
10 000 (100 000): parse 2.8-3.1 (3.5-3.9), of which verify 1.2; the compiler's
binding calls 3.4-3.6 (3.4-4.1); floor 6.35-6.55 (7.3-7.7); our Python 1.7-1.9
(1.45-1.8): the program and releases 0.42-0.47 (0.47-0.66 as two passes
before), the collector's pass 0.13-0.15 (0.22-0.28; before 0.3-0.45), the
compile loop's own work 1.15-1.4 (0.75-1.1: shared-runner keys and look-ups,
list appends). See benchmarks/RESULTS.md for where each
remaining us goes.

Then what parsing untrusted bytecode first in a child process costs a load.

``si.load(bytes)`` (and a bytecode file, or a ``jax.export.Exported``) parses
the bytecode first in a child process (stablehlo_interp/ir/first_parse.py),
because damaged bytecode can corrupt the heap of the process that parses it;
the device's bytecode from JAX is trusted and parsed here only. Measured for a
small and a large module (``jax.export`` bytes):

* the first untrusted load of the process, which starts the child;
* a load of trusted bytes (``sources.parse(data, trusted=True)``) next to the
  same load untrusted, and the child's check alone (pipe round trip and parse).

    python benchmarks/load_bench.py [--repeat R] [--sizes 10000,100000]
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
from jax import export
from jaxlib.mlir import ir

import stablehlo_interp as si
from stablehlo_interp.engine import passes
from stablehlo_interp.ir import first_parse, sources

from core_bench import elementwise_chain
from timing import best_time, format_time


def bare_walk(text: str):
    """The floor of a loader on the bindings: parse, then visit each op's name,
    operands and result types once."""
    module = ir.Module.parse(text)
    for operation in module.body.operations[0].regions[0].blocks[0].operations:
        operation = operation.operation
        (operation.name, tuple(operation.operands), [result.type for result in operation.results])
    return module


def binding_calls(text: str):
    """Parse, then make the binding calls the compiler makes for each op of the chain
    (program/compiler.py, _compile_block): its name, whether it has attributes, its
    result and the result's type, its operands' slots and its result's slot (in a dict
    keyed by the values' hashes). Nothing else: the chain is text that writes no
    location, so the compiler reads none (ir/sources.py, TextLocations). Until issue
    14's third round it read each op's location, file, line and column here (0.4 us
    per op), and the dict was keyed by the Value objects (each look-up compared
    them too, and the dict kept them all alive)."""
    module = ir.Module.parse(text)
    block = module.body.operations[0].regions[0].blocks[0]
    slots = {hash(argument): index for index, argument in enumerate(block.arguments)}
    slot_of = slots.get
    for operation in block.operations:
        operation = operation.operation
        if operation.name == "func.return":
            break
        len(operation.attributes)
        result = operation.result
        result.type  # noqa: B018 - reading the type is the work timed
        tuple(map(slot_of, map(hash, operation.operands)))
        slots[hash(result)] = len(slots)
    return module


def plan_bytes(text: str) -> int:
    """What a loaded program keeps (tracemalloc): allocated by si.load and still held."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    program = si.load(text)
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del program
    return kept


def python_parts(text: str, repeat: int, clock) -> tuple:
    """Seconds of two parts of a load that are ours, not the bindings': the run loop's
    program and the releases, made in one pass from the loaded region's columns
    (engine/passes: liveness and flattening, then folding), and the collector's pass
    over the new plan (the compile pauses it; its next young-generation pass visits
    every object the compile made)."""
    region = si.load(text).function("main").region

    def collector_pass():
        gc.disable()
        program = si.load(text)
        start = clock()
        gc.collect(0)
        elapsed = clock() - start
        gc.enable()
        del program
        return elapsed

    gc.disable()   # (as while a module compiles)
    program = best_time(lambda: passes.run_program(region.columns, region.outputs), repeat, clock)
    gc.enable()
    return program, min(collector_pass() for _ in range(repeat))


def chain_loads(sizes, repeat: int) -> None:
    cpu = time.process_time   # this process's time: the machine is shared
    context = sources.make_context()
    print("CPU time per op, best of the repeats. parse: ir.Module.parse, which verifies (verify: MLIR's verifier")
    print("alone, part of parse); bare walk: name, operands, result types of each op; binding calls: those the")
    print("compiler makes per op (binding_calls); floor: parse + binding calls, what a loader that reads what ours")
    print("reads pays the bindings; Python: si.load - floor. Target: si.load <= 10 us per op.")
    parts = []
    print(f"{'chain of N ops':<16}{'parse':>10}{'verify':>10}{'bare walk':>11}{'binding calls':>15}{'floor':>10}"
          f"{'si.load':>10}{'Python':>10}{'load/floor':>12}{'load/(parse+walk)':>19}{'plan memory':>13}")
    for n in sizes:
        text = elementwise_chain(n)
        with context:
            parse = best_time(lambda: ir.Module.parse(text), repeat, cpu) / n
            parse_and_walk = best_time(lambda: bare_walk(text), repeat, cpu) / n
            floor = best_time(lambda: binding_calls(text), repeat, cpu) / n
            module = ir.Module.parse(text)
            verify = best_time(module.operation.verify, repeat, cpu) / n
            del module
        load = best_time(lambda: si.load(text), repeat, cpu) / n
        memory = plan_bytes(text) / n
        print(f"{n:<16}{format_time(parse):>10}{format_time(verify):>10}{format_time(parse_and_walk - parse):>11}"
              f"{format_time(floor - parse):>15}{format_time(floor):>10}{format_time(load):>10}"
              f"{format_time(load - floor):>10}{load / floor:>11.2f}x{load / parse_and_walk:>18.2f}x"
              f"{memory:>10.0f} B")
        parts.append((n, load - floor, *(part / n for part in python_parts(text, repeat, cpu))))
    print("Python per op (si.load - floor), of which: the run loop's program and the releases (one pass), the")
    print("collector's pass over the new plan, and the rest (the compile loop's own work: shared-runner keys and")
    print("look-ups, list appends, the function's declaration, the Region):")
    for n, python, program, collector in parts:
        print(f"{n:<16}{format_time(python):>10} = program and releases {format_time(program)}"
              f" + collector {format_time(collector)} + rest {format_time(python - program - collector)}")
    print()


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
    parser.add_argument("--sizes", default="10000,100000", help="chain lengths, comma-separated")
    options = parser.parse_args()

    chain_loads([int(n) for n in options.sizes.split(",")], max(1, options.repeat // 10))

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
