"""Every benchmark in benchmarks/ runs to the end at a tiny size and prints its table.

The targets are judged by a person reading the ratios (benchmarks/*.py); what a test
can hold is that each benchmark still runs: they drive the bindings in ways the
library does not (suite_bench edits modules), and one that crashes measures nothing.
"""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(script: str, *options: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *options], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("script, options, rows", [
    ("core_bench.py", ["--skip-reference", "--repeat", "1"],
     ["(a) 2000 elementwise ops", "(b) 128x128 matmul+tanh+reduce", "(c) while loop, 10000 iterations"]),
    ("fuzz_bench.py", ["--programs", "5", "--campaign", "2", "-j", "1"], ["programs/s", "backend compile"]),
    ("device_bench.py", ["--calls", "10", "--repeat", "1"],
     ["trivial jitted call", "eager op x + x", "device_put + read back", "jitted call, 12 ops"]),
    ("load_bench.py", ["--repeat", "1", "--sizes", "100"], ["\n100 ", "large (600 ops)"]),
    ("ops_bench.py", ["--repeat", "1", "--reference-timeout", "1"], ["conv", "sort", "MLP"]),
    ("real_bench.py", ["--programs", "haiku_mlp", "--repeat", "1"], ["\nhaiku_mlp "]),
    ("sharding_bench.py", ["--batch", "16", "--features", "4", "--hidden", "8", "--outputs", "2", "--repeat", "1"],
     ["\ncpu ", "\ninterp "]),
    ("per_device_bench.py", ["--programs", "sharded_shard_map_mlp", "--repeat", "1"], ["\nsharded_shard_map_mlp "]),
    ("passes_bench.py", ["--programs", "flax_linen_mlp"], ["\nflax_linen_mlp "]),
    ("scalar_bench.py", ["--rounds", "1", "--repeat", "1", "--iterations", "100", "--programs", "optimistix_bfgs_logistic"],
     ["(c) while loop, per executed op", "\noptimistix_bfgs_logistic "]),
    ("debug_nans_bench.py", ["--programs", "flax_linen_mlp", "--calls", "3", "--repeat", "1"],
     ["\nflax_linen_mlp ", "donated loop"]),
    ("debug_nans_tpu_bench.py", ["--programs", "flax_linen_mlp", "flax_linen_mlp:donated", "--calls", "2",
                                 "--repeat", "1"],
     ["flax_linen_mlp               test    on cpu: bare", "flax_linen_mlp               donated on cpu: bare"]),
])
def test_benchmark_runs(script, options, rows):
    printed = _run(script, *options)
    for row in rows:
        assert row in printed, f"{script} printed no {row.strip()!r} row:\n{printed}"


SUITE_FILE = """\
// RUN: stablehlo-translate --interpret -split-input-file %s

module {
  func.func public @main() -> tensor<i1> {
    %0 = call @inputs() : () -> tensor<2xf32>
    %1 = stablehlo.constant dense<[2.0, 4.0]> : tensor<2xf32>
    %2 = stablehlo.add %0, %0 : tensor<2xf32>
    %3 = stablehlo.custom_call @check.eq(%1, %2) : (tensor<2xf32>, tensor<2xf32>) -> tensor<i1>
    return %3 : tensor<i1>
  }
  func.func private @inputs() -> tensor<2xf32> {
    %0 = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}

// -----

func.func @multiply() {
  %0 = stablehlo.constant dense<[1, 2, 3]> : tensor<3xi32>
  %1 = stablehlo.multiply %0, %0 : tensor<3xi32>
  check.expect_eq_const %1, dense<[1, 4, 9]> : tensor<3xi32>
  func.return
}
"""


def test_suite_bench_turns_public_mains_and_returned_checks_into_programs(tmp_path):
    """A testdata-style @main (public, returning its check's i1, calling a private
    helper) and an interpreter-test function both become programs both sides run.
    The first once crashed the benchmark: it erased the check while the return
    still used its result."""
    (tmp_path / "cases.mlir").write_text(SUITE_FILE)
    printed = _run("suite_bench.py", "--tests", str(tmp_path), "--repeat", "1")
    assert f"2 programs from {tmp_path}: 2 run by both, 0 only by us" in printed, printed
