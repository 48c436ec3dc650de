"""A sampled mutation check of the suite on the op modules (issue 30): can the tests
that cover stablehlo_interp/ops/ fail when the code is wrong?

Cosmic Ray (the `test` extra) makes every mutant of a module that its core operators
allow (an arithmetic, comparison or unary operator replaced, a number moved by one,
True/False and and/or swapped, a loop that runs zero times, a decorator removed ...);
this script takes a seeded sample of them per module and runs each, one at a time, in
a copy of the work tree's tracked files, against the test selection that covers that
module (SELECTIONS: files and a -k expression, stopping at the first failure, the slow
tests' share 0), with a deadline per mutant of a few times the selection's unmutated
run. A mutant is killed when a test fails or the deadline passes; one the tests pass
is a survivor: an equivalent mutant or a check to add (CONTRIBUTING.md lists the
survivors judged equivalent). Prints one JSON line per mutant (with its diff), then
the share killed per module.

Cosmic Ray rather than mutmut 3: it runs any command per mutant in a directory of our
choosing, under a deadline, which lets each module take only its own tests; mutmut 3
first runs the whole suite to map tests to functions, more than the suite's budget.

    python tests/mutation_sample.py [--per-module 20] [--seed 0] [MODULE ...]
"""
import argparse
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time

from cosmic_ray.commands.init import init
from cosmic_ray.mutating import mutate_and_test
from cosmic_ray.testing import run_tests
from cosmic_ray.work_db import use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent

# op module -> (test files, -k expression or None): the tests that exercise the module's
# code. Too narrow a selection makes false survivors: each entry names every test file
# that checks the module's ops against an oracle.
SELECTIONS = {
    "bitwise.py": (["tests/test_elementwise.py"],
                   "shifts or popcnt or wrap_around or op_matches_xla_and_reference or random_integer"),
    "comparison.py": (["tests/test_elementwise.py"], "compare or total_order or select_and_clamp"),
    "elementwise.py": (["tests/test_elementwise.py"], None),
    "numerics.py": (["tests/test_check_dialect.py"], None),
    "conversion.py": (["tests/test_conversion.py"], None),
    "shape.py": (["tests/test_shape_ops.py"], None),
    "sorting.py": (["tests/test_sort.py"], None),
    # (the "xla" accumulation order: test_accumulation.py)
    "reduction.py": (["tests/test_reduction.py", "tests/test_accumulation.py"], None),
    # (clamped_starts is gather's semantics watch and in_whole_windows scatter's "xla"
    # semantics, both checked in test_semantics.py)
    "indexing.py": (["tests/test_indexing.py", "tests/test_semantics.py"],
                    "not test_semantics or gather or scatter"),
    "fft.py": (["tests/test_fft.py"], None),
    "chlo.py": (["tests/test_chlo.py"], None),
    "convolution.py": (["tests/test_convolution.py"], None),
    # (the spec's accumulation order of dot_general: test_accumulation.py)
    "linalg.py": (["tests/test_linalg.py", "tests/test_accumulation.py"], None),
    "random.py": (["tests/test_random.py"], None),
    "normalization.py": (["tests/test_normalization.py"], None),
    "quantization.py": (["tests/test_quantization.py"], None),
    "dynamic.py": (["tests/test_dynamic.py"], None),
    # (async_start/async_done are tested around a collective)
    "control_flow.py": (["tests/test_control_flow.py", "tests/test_collectives.py"], "not test_collectives or async"),
    "lapack.py": (["tests/test_lapack.py"], None),
    # (senders_and_receivers serves sharding/traffic.py, tested per device)
    "collectives.py": (["tests/test_collectives.py", "tests/test_per_device.py"], "not per_device or collective"),
    # the folds and casts the op families share
    "support.py": (["tests/test_reduction.py", "tests/test_accumulation.py", "tests/test_elementwise.py"], None),
    "xla_cpu_schedule.py": (["tests/test_accumulation.py"], None),
    "check.py": (["tests/test_check_dialect.py"], None),
    "interpreter.py": (["tests/test_check_dialect.py", "tests/test_testfile.py"], None),
    "io.py": (["tests/test_io.py"], None),
    "structure.py": (["tests/test_control_flow.py"], "tuple or token"),
    "shardy.py": (["tests/test_shard_map.py", "tests/test_sharding.py"], None),
    "sharding_calls.py": (["tests/test_custom_calls.py"], "harding"),
    "host_callback.py": (["tests/test_host_callbacks.py"], None),
    "custom_partitioning.py": (["tests/test_custom_partitioning.py"], None),
}
# Cosmic Ray's core operators that take no arguments (VariableReplacer and
# VariableInserter need a variable named in a config, and insert random numbers).
OPERATORS: dict = {}


def copy_of_work_tree(root):
    """The tracked files as they are in the work tree (edits not yet committed included)."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPOSITORY, capture_output=True, check=True).stdout
    tar = subprocess.run(["tar", "-c", "--null", "-T", "-"], cwd=REPOSITORY, input=names, capture_output=True,
                         check=True).stdout
    subprocess.run(["tar", "-x", "-C", root], input=tar, check=True)


def selection_command(module):
    files, keywords = SELECTIONS[module]
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *files]
    return " ".join(command + (["-k", f"'{keywords}'"] if keywords else []))


def known_equivalent(mutation, lines):
    """`elementwise=True` turned False: the op still runs, without the whole-tensor path
    for the regions made of it (engine/regions.py), so no result can tell."""
    line, column = mutation.start_pos
    return mutation.operator_name == "core/ReplaceTrueWithFalse" and lines[line - 1][:column].endswith("elementwise=")


def sample(module, count, seed, session):
    """A seeded sample of the module's mutants (the same for the same source and seed)."""
    path = f"stablehlo_interp/ops/{module}"
    lines = pathlib.Path(path).read_text().splitlines()
    with use_db(session) as db:
        init([pathlib.Path(path)], db, OPERATORS)
        items = sorted((item for item in db.work_items if not known_equivalent(item.mutations[0], lines)),
                       key=lambda item: (item.mutations[0].operator_name, item.mutations[0].occurrence))
    return random.Random(f"{seed}:{module}").sample(items, min(count, len(items)))


def run_module(module, count, seed, root):
    command = selection_command(module)
    start = time.time()
    outcome, output = run_tests(command, 900)
    baseline = time.time() - start
    if outcome != TestOutcome.SURVIVED:   # the unmutated code must pass, or every mutant looks killed
        print(json.dumps(dict(module=module, baseline="failed", output=output[-2000:])), flush=True)
        return None
    deadline = 3 * baseline + 30
    killed = survived = 0
    for item in sample(module, count, seed, f"{root}/.session-{module}.sqlite"):
        start = time.time()
        result = mutate_and_test(item.mutations, command, deadline)
        if result.worker_outcome != WorkerOutcome.NORMAL or result.test_outcome == TestOutcome.INCOMPETENT:
            continue   # no mutation possible there, or the mutant does not compile: not a test of the tests
        mutation = item.mutations[0]
        killed += result.is_killed
        survived += not result.is_killed
        tail = (result.output or "").strip().splitlines()[-1:] or [""]
        print(json.dumps(dict(module=module, line=mutation.start_pos[0], operator=mutation.operator_name,
                              occurrence=mutation.occurrence, killed=result.is_killed,
                              seconds=round(time.time() - start), tail=tail[0], diff=result.diff)), flush=True)
    total = killed + survived
    print(json.dumps(dict(module=module, killed=killed, mutants=total, baseline_seconds=round(baseline),
                          share=round(killed / total, 2) if total else None)), flush=True)
    return killed, total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", default=list(SELECTIONS), help="op modules (default: all mapped)")
    parser.add_argument("--per-module", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        copy_of_work_tree(root)
        os.chdir(root)   # Cosmic Ray mutates the module in place and runs the tests here
        os.environ.update(PYTHONPATH=root, STABLEHLO_INTERP_SLOW_ROTATION="0")
        found = subprocess.run([sys.executable, "-c", "import stablehlo_interp; print(stablehlo_interp.__file__)"],
                               capture_output=True, text=True, check=True).stdout
        assert found.startswith(root), f"the tests would import {found}, not the copy's mutants"
        shares = {module: run_module(module, args.per_module, args.seed, root) for module in args.modules}
    for module, share in shares.items():
        print(f"{module:18} " + (f"{share[0]:3} of {share[1]:3} killed" if share else "baseline failed"))


if __name__ == "__main__":
    main()
