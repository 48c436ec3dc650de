"""The stablehlo-interp command: ``run`` and ``test`` (files in tests/data/)."""

import os
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from oracles import run_xla
from stablehlo_interp.cli import main
from stablehlo_interp.conformance.testfile import run_text, split_modules

DATA = pathlib.Path(__file__).parent / "data"
PASSING, FAILING = DATA / "checks_pass.mlir", DATA / "checks_fail.mlir"

ADD = """func.func @main(%x: tensor<3xf32>, %y: tensor<f32>) -> (tensor<3xf32>, tensor<i32>) {
  %0 = stablehlo.broadcast_in_dim %y, dims = [] : (tensor<f32>) -> tensor<3xf32>
  %1 = stablehlo.add %x, %0 : tensor<3xf32>
  %c = stablehlo.constant dense<7> : tensor<i32>
  return %1, %c : tensor<3xf32>, tensor<i32>
}
func.func @twice(%x: tensor<2xbf16>) -> tensor<2xbf16> {
  %0 = stablehlo.add %x, %x : tensor<2xbf16>
  return %0 : tensor<2xbf16>
}
"""


def cli(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


# --------------------------------------------------------------------- test


def test_passing_file(capsys):
    status, out, _ = cli(capsys, "test", PASSING, "--verbose")
    assert status == 0
    lines = out.splitlines()
    assert lines[-1] == "7 passed, 0 failed"
    assert f"PASSED {PASSING} @while_loop" in lines
    assert f"PASSED {PASSING} @main" in lines        # testdata style: public @main only
    assert not any("@inputs" in line or "@triple.impl" in line for line in lines)


def test_failing_file_reports_each_failure_and_goes_on(capsys):
    status, out, _ = cli(capsys, "test", FAILING)
    assert status == 1
    lines = out.splitlines()
    f = str(FAILING)
    assert lines[-1] == "2 passed, 5 failed, 2 cannot parse"
    assert not any(line.startswith("PASSED") for line in lines)  # listed only with --verbose
    expected = [
        f"FAILED {f} @wrong_value: check.expect_eq_const at {f}:12:3: 1 of 3 elements differ; "
        "first at index [2]: 9 (actual) vs 10 (expected)",
        f"FAILED {f} @too_far_apart: check.expect_almost_eq at {f}:19:3: tolerance 0.0001: "
        "1 of 1 elements differ; first: 1.0 (actual) vs 1.001 (expected)",
        f"FAILED {f} @fails_in_iteration_two: check.expect_eq_const at {f}:35:5: 1 of 1 elements differ; "
        "first: False (actual) vs True (expected)",
        f"    inside stablehlo.while at {f}:27:8 (region 1, call 2)",
        f"CANNOT PARSE {f} (module at line 44): cannot parse MLIR text:",
        f"    {f}:48:25: expected SSA operand",
        f"FAILED {f} (module at line 53): stablehlo.custom_call at {f}:56:8: custom call target "
        "'no_such_target' is not implemented (register one with stablehlo_interp.register_custom_call)",
        f"CANNOT PARSE {f} (module at line 61): {f}:64: cannot parse check.expect_eq: missing ': type'",
        f"FAILED {f} @custom_call_check_eq_fails: stablehlo.custom_call @check.eq at {f}:73:8: "
        "tolerance 0.0001: 1 of 2 elements differ; first at index [1]: 2.0 (actual) vs 2.5 (expected)",
    ]
    assert lines[:-1] == expected


def test_directory_and_missing_files(capsys, tmp_path):
    status, out, _ = cli(capsys, "test", DATA)
    assert status == 1 and out.splitlines()[-1] == "9 passed, 5 failed, 2 cannot parse"
    status, out, _ = cli(capsys, "test", PASSING, tmp_path / "missing.mlir")
    assert status == 1
    assert out.splitlines()[-1] == "7 passed, 1 failed"
    assert f"FAILED {tmp_path / 'missing.mlir'} (module at line 1): cannot read the file" in out
    status, _, err = cli(capsys, "test", tmp_path)
    assert status == 2 and "no .mlir files" in err


def test_split_keeps_line_numbers():
    text = "a\n// -----\nb\nc\n  // ----- trailing words\nd"
    assert split_modules(text) == [(1, "a"), (3, "\n\nb\nc"), (6, "\n\n\n\n\nd")]


def test_internal_errors_are_reported_not_raised():
    """An op implementation that crashes fails its test; the run goes on."""

    text = """func.func @first() {
  %a = stablehlo.constant dense<1.0> : tensor<f32>
  %b = stablehlo.custom_call @crashes(%a) : (tensor<f32>) -> tensor<f32>
  func.return
}
func.func @second() {
  func.return
}"""

    def builder(info):
        return lambda x: 1 / 0

    from stablehlo_interp.engine import registry

    with registry.replaced(custom_calls={"crashes": builder}):
        first, second = run_text(text, "m.mlir")
    assert not first.passed and first.op == "stablehlo.custom_call" and first.location == "m.mlir:3:8"
    assert "ZeroDivisionError" in first.message
    assert second.passed


# ---------------------------------------------------------------------- run


def test_run_with_literal_inputs_and_output(capsys, tmp_path):
    path = tmp_path / "add.mlir"
    path.write_text(ADD)
    out_path = tmp_path / "out.npz"
    status, out, _ = cli(capsys, "run", path, "--input", "[1, 2, 3]", "--input", "0.5", "--output", out_path)
    assert status == 0
    assert out == "result #0: tensor<3xf32>\n[1.5 2.5 3.5]\nresult #1: tensor<i32>\n7\n"
    saved = np.load(out_path)
    np.testing.assert_array_equal(saved["result_0"], np.array([1.5, 2.5, 3.5], np.float32))
    assert saved["result_1"].dtype == np.int32 and saved["result_1"] == 7


def test_run_with_npy_npz_and_raw_bf16(capsys, tmp_path):
    path = tmp_path / "add.mlir"
    path.write_text(ADD)
    x, y = np.array([1, 2, 3], np.float32), np.float32(-1)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    np.savez(tmp_path / "xy.npz", x, y)                 # arr_0, arr_1
    outputs = []
    for inputs in [["x.npy", "y.npy"], ["xy.npz"], ["x.npy", "-1"]]:
        status, out, _ = cli(capsys, "run", path, *[a for i in inputs for a in ("-i", tmp_path / i
                                                                                 if "." in i else i)])
        assert status == 0
        outputs.append(out)
    assert outputs[0] == outputs[1] == outputs[2]
    assert "[0. 1. 2.]" in outputs[0]
    # NumPy saves bf16 as raw 2-byte values: they are viewed as the argument's type.
    np.save(tmp_path / "b.npy", np.array([1.5, -2], ml_dtypes.bfloat16))
    status, out, _ = cli(capsys, "run", path, "--function", "twice", "-i", tmp_path / "b.npy")
    assert status == 0 and out == "result #0: tensor<2xbf16>\n[3 -4]\n"


@pytest.mark.parametrize("argv, status, message", [
    (["-i", "[1, 2, 3]"], 2, "@main takes 2 arguments (tensor<3xf32>, tensor<f32>); --input gave 1"),
    (["-i", "[1, 2]", "-i", "1"], 1, "argument #0 of @main: expected tensor<3xf32>, got shape 2"),
    (["-i", "[1, 2, 3]", "-i", "zero"], 2, "--input 'zero' is neither a .npy/.npz file nor a Python literal"),
    (["-i", "missing.npy"], 2, "cannot load missing.npy"),
    (["-i", "[1, 2, 3]", "-i", "'a'"], 2, "is not a value of tensor<f32>"),
    (["-f", "nothing"], 1, "no function @nothing in the module (functions: @main, @twice)"),
    (["-i", "[1, 2, 3]", "-i", "1", "-i", "2"], 2, "too many --input values: @main takes 2"),
])
def test_run_errors(capsys, tmp_path, argv, status, message):
    path = tmp_path / "add.mlir"
    path.write_text(ADD)
    code, out, err = cli(capsys, "run", path, *argv)
    assert code == status and out == ""
    assert message in err


def test_run_integer_literal_must_fit(capsys, tmp_path):
    path = tmp_path / "i8.mlir"
    path.write_text("func.func @main(%x: tensor<2xi8>) -> tensor<2xi8> {\n  return %x : tensor<2xi8>\n}")
    assert cli(capsys, "run", path, "-i", "[1, -128]")[0] == 0
    status, _, err = cli(capsys, "run", path, "-i", "[1, 300]")
    assert status == 2 and "does not fit tensor<2xi8>" in err
    status, _, err = cli(capsys, "run", path, "-i", "[1.5, 2]")
    assert status == 2 and "does not fit" in err


def test_run_missing_file(capsys, tmp_path):
    status, _, err = cli(capsys, "run", tmp_path / "none.mlir")
    assert status == 1 and "cannot read" in err


def test_run_a_jax_program_like_xla(tmp_path):
    """A lowered JAX function saved as text (with its argument names), run through
    `python -m stablehlo_interp`, inputs given by name."""
    def f(x, n):
        return jax.lax.fori_loop(0, n, lambda i, a: jnp.roll(a, 1) * 2 + i, x)

    x, n = np.arange(5, dtype=np.int32), np.int32(3)
    path = tmp_path / "f.mlir"
    path.write_text(jax.jit(f).lower(x, n).as_text(debug_info=True))
    np.savez(tmp_path / "in.npz", n=n, x=x)
    result = subprocess.run([sys.executable, "-m", "stablehlo_interp", "run", path, "-i", tmp_path / "in.npz",
                             "-o", tmp_path / "out.npz"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("result #0 (result): tensor<5xi32>\n")
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["result_0"], run_xla(f, x, n)[0])


def test_console_script_and_module_entry_point():
    script = pathlib.Path(sys.executable).parent / "stablehlo-interp"
    commands = [[sys.executable, "-m", "stablehlo_interp"]] + ([[str(script)]] if script.exists() else [])
    for command in commands:
        result = subprocess.run(command + ["test", PASSING, FAILING], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 1
        assert result.stdout.splitlines()[-1] == "9 passed, 5 failed, 2 cannot parse"
        result = subprocess.run(command + ["--version"], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and result.stdout.startswith("stablehlo-interp ")


# ----------------------------------------------------------- docs/cli.md examples

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples" / "cli"


def test_documented_examples(capsys):
    status, out, _ = cli(capsys, "run", EXAMPLES / "scale_add.mlir", "--input", "[1, 2, 3]", "--input", "0.5")
    assert status == 0 and out == "result #0: tensor<3xf32>\n[1.5 2.  2.5]\nresult #1: tensor<f32>\n6.\n"
    status, out, _ = cli(capsys, "run", EXAMPLES / "scale_add.mlir", "--function", "wrap",
                         "--input", "[0, 27, 28, -128]")
    assert status == 0 and out == "result #0: tensor<4xi8>\n[ 100  127 -128  -28]\n"
    status, out, _ = cli(capsys, "test", EXAMPLES / "suite.mlir")
    assert status == 0 and out == "4 passed, 0 failed\n"


def test_backend_suite_example():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import backend_suite
    finally:
        sys.path.pop(0)
    text = "\n// -----\n".join(backend_suite.case_module(name, fn, inputs)
                                for name, (fn, inputs) in backend_suite.CASES.items())
    outcomes = run_text(text, "backend_suite.mlir")
    assert [o.test for o in outcomes] == list(backend_suite.CASES)
    assert all(o.passed for o in outcomes), [o.report() for o in outcomes if not o.passed]
    # A wrong backend result is caught: check one result against the inputs instead.
    broken = text.replace("check.expect_eq %r#0, %e0", "check.expect_eq %r#0, %x0", 1)
    assert [o.passed for o in run_text(broken, "b.mlir")].count(False) == 1


# ------------------------------------------------------------ native logging

NATIVE_LOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w.]+:\d+\] ", re.MULTILINE)
ROOT = pathlib.Path(__file__).resolve().parent.parent


def _command(tmp_path, launcher: str, *argv) -> subprocess.CompletedProcess:
    """The command run as users run it, with no logging level of their own: ``python -m``,
    or a console script like the one pip writes (its file named ``stablehlo-interp``)."""
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environment["PYTHONPATH"] = str(ROOT)
    if launcher == "module":
        command = [sys.executable, "-m", "stablehlo_interp"]
    else:
        script = tmp_path / "stablehlo-interp"
        script.write_text("import sys\nfrom stablehlo_interp.cli import main\nsys.exit(main())\n")
        command = [sys.executable, str(script)]
    return subprocess.run(command + [str(a) for a in argv], capture_output=True, text=True, timeout=120,
                          env=environment)


@pytest.mark.parametrize("launcher", ["module", "console script"])
def test_no_native_logging_unless_verbose(tmp_path, launcher):
    """PJRT logs a dozen INFO lines when JAX starts its backends (the interp device's
    eight among them): the command shows them only with -v."""
    compare = ["compare", EXAMPLES / "scale_add.mlir", "-i", "[1, 2, 3]", "-i", "0.5", "--backend", "cpu"]
    quiet = _command(tmp_path, launcher, *compare)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == "the interpreter and cpu agree on all 2 results\n"
    assert NATIVE_LOG_LINE.search(quiet.stderr) is None, quiet.stderr
    verbose = _command(tmp_path, launcher, "-v", *compare)
    assert verbose.returncode == 0 and verbose.stdout == quiet.stdout
    assert "InterpDevice(id=7)" in verbose.stderr and NATIVE_LOG_LINE.search(verbose.stderr)
