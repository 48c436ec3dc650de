"""StableHLO's own test programs: our load + run time against the C++ interpreter's.

The programs are StableHLO's interpreter tests and testdata (the
``stablehlo-tests`` directory next to the project, ``../shared/stablehlo-tests``;
set ``--tests`` to point elsewhere). Each test function becomes one program
whose checked values are its results: its check ops are taken out and the
values they compare are returned instead, its calls inlined, and the
function becomes ``@main`` (``ir/edit.py``'s ``checks_as_results``, what
``stablehlo-interp conform`` hands a backend). Both sides then run the same text:

* ours: ``si.load(text)`` and ``program.run()``;
* jaxlib's C++ reference interpreter: ``ir.Module.parse(text)`` and
  ``stablehlo.eval_module``, in a child process (it aborts the process on what
  it cannot do; the child is restarted after it). Timed twice: in a fresh
  context per program, as a caller does that parses each program on its own
  (tests/reference_interpreter.py; how issue 14 measured it), and in one
  context reused for all, its floor (``si.load`` reuses one context too).

Programs that either side cannot run are left out of the totals (and
counted). Printed: the totals over the programs both ran, their ratios
(target: at most 0.5x the C++ interpreter's time) and the medians per program.

    python benchmarks/suite_bench.py [--tests DIR] [--limit N] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import pickle
import statistics
import subprocess
import sys
import tempfile

from stablehlo_interp.ir.child_process import read, write   # the package's length-prefixed framing
from timing import best_time

DEFAULT_TESTS = pathlib.Path(__file__).resolve().parents[2] / "shared" / "stablehlo-tests"


# ------------------------------------------------------------------ the programs


def _tests_as_programs(text: str) -> list[tuple[str, str]]:
    """``(test name, program)`` for each test function of one split module: its
    checks turned into results and the function renamed @main, as `conform`
    hands them to a backend (ir/edit.py ``checks_as_results``)."""
    from stablehlo_interp import Program
    from stablehlo_interp.ir.edit import checks_as_results

    try:
        program = Program(text)
    except Exception:  # noqa: BLE001 - a module that does not load is no program
        return []
    source = program.module.operation.get_asm(enable_debug_info=True)
    tests = []
    for function in program.functions.values():
        if function.visibility == "private" or function.arg_types:
            continue
        try:
            tests.append((function.name, checks_as_results(source, function.name)[0]))
        except Exception:  # noqa: BLE001 - checks that cannot become results: no program
            continue
    return tests


def programs(directory: pathlib.Path, limit: int | None) -> list[tuple[str, str]]:
    """``(file:test, program text)`` for the test programs under ``directory``."""
    from stablehlo_interp.conformance.testfile import expand_paths, split_modules

    found = []
    for path in expand_paths([directory]):
        for first, part in split_modules(path.read_text(encoding="utf-8")):
            for test, program in _tests_as_programs(part):
                found.append((f"{path.relative_to(directory)}:{first}@{test}", program))
                if limit and len(found) >= limit:
                    return found
    return found


# ------------------------------------------------------------------ the C++ side


def _send(stream, payload) -> None:
    write(stream, pickle.dumps(payload))


def _receive(stream):
    return pickle.loads(read(stream))


def _child() -> None:
    """Time each program sent on stdin (parse + eval_module, best of ``repeat``, in a
    fresh context and in a reused one); answer ``(fresh seconds, reused seconds)``
    or None (it raised) per program. An abort ends the process."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    from stablehlo_interp.ir.sources import make_context

    reused = make_context()

    def evaluate(text, context) -> None:
        with context, ir.Location.unknown():
            stablehlo.eval_module(ir.Module.parse(text), [])

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            text, repeat = _receive(stdin)
        except EOFError:
            return
        try:
            fresh = best_time(lambda: evaluate(text, make_context()), repeat)
            _send(stdout, (fresh, best_time(lambda: evaluate(text, reused), repeat)))
        except Exception:  # noqa: BLE001 - a program it cannot run
            _send(stdout, None)


def reference_times(texts: list[str], repeat: int) -> list[tuple | None]:
    """The C++ interpreter's times per program, (fresh context, reused context)
    (None: it failed or aborted)."""
    times: list[tuple | None] = []
    child = None
    for text in texts:
        if child is None:
            child = subprocess.Popen([sys.executable, __file__, "--child"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            _send(child.stdin, (text, repeat))
            times.append(_receive(child.stdout))
        except (EOFError, BrokenPipeError, OSError):
            times.append(None)   # it aborted
            child.wait()
            child = None
    if child is not None:
        child.stdin.close()
        child.wait()
    return times


# ------------------------------------------------------------------ our side


def our_times(texts: list[str], repeat: int) -> list[float | None]:
    import stablehlo_interp as si

    times: list[float | None] = []
    for text in texts:
        try:
            times.append(best_time(lambda: si.load(text).run(), repeat))
        except Exception:  # noqa: BLE001 - a program we cannot run
            times.append(None)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=pathlib.Path, default=DEFAULT_TESTS,
                        help="StableHLO's test files (default: ../shared/stablehlo-tests from the project)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many programs")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per program (best kept)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        _child()
        return
    if not options.tests.is_dir():
        print(f"StableHLO's test programs are not here: {options.tests} does not exist.\n"
              "Point --tests at a checkout's stablehlo-tests directory (interpret/, testdata/); "
              "nothing was measured.")
        sys.exit(2)

    found = programs(options.tests.resolve(), options.limit)
    names, texts = [name for name, _ in found], [text for _, text in found]
    with tempfile.TemporaryDirectory() as probes:   # interpreter.probe writes its files where the run is
        os.chdir(probes)
        reference = reference_times(texts, options.repeat)
        ours = our_times(texts, options.repeat)
    both = [(o, r) for o, r in zip(ours, reference) if o is not None and r is not None]
    only_ours = sum(1 for o, r in zip(ours, reference) if o is not None and r is None)
    only_reference = [n for n, o, r in zip(names, ours, reference) if o is None and r is not None]
    print(f"{len(texts)} programs from {options.tests}: {len(both)} run by both, {only_ours} only by us, "
          f"{len(only_reference)} only by the C++ interpreter, "
          f"{len(texts) - len(both) - only_ours - len(only_reference)} by neither")
    for name in only_reference[:10]:
        print(f"  only the C++ interpreter runs {name}")
    if not both:
        return
    print(f"{'':<30}{'ours':>12}{'C++, fresh context':>22}{'C++, reused context':>22}")
    for label, pick in (("total load + run", sum), ("median per program", statistics.median)):
        ours_value = pick(o for o, _ in both)
        fresh, reused = pick(r[0] for _, r in both), pick(r[1] for _, r in both)
        print(f"{label:<30}{ours_value * 1e3:>9.2f} ms{fresh * 1e3:>11.2f} ms ({ours_value / fresh:.2f}x)"
              f"{reused * 1e3:>11.2f} ms ({ours_value / reused:.2f}x)")
    print("target: a total at most 0.5x the C++ interpreter's")

if __name__ == "__main__":
    main()
