"""The stablehlo-interp command: ``run`` and ``test`` (files in tests/data/)."""

import io
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
import stablehlo_interp as si
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


@pytest.mark.parametrize("argv, message", [
    (["-i", "[1, 2, 3]"], "@main takes 2 arguments (tensor<3xf32>, tensor<f32>); --input gave 1"),
    (["-f", "twice"], "@twice takes 1 argument (tensor<2xbf16>); --input gave 0"),
    (["-i", "[1, 2]", "-i", "1"], "argument %x of @main: expected tensor<3xf32>, got an array of shape (2,)"),
    (["-i", "[[1, 2, 3]]", "-i", "1"], "argument %x of @main: expected tensor<3xf32>, got an array of shape (1, 3)"),
    (["-i", "[1, 2, 3]", "-i", "zero"], "--input 'zero' is neither a .npy/.npz file nor a Python literal"),
    (["-i", "missing.npy"], "cannot load missing.npy"),
    (["-i", "[1, 2, 3]", "-i", "'a'"], "--input \"'a'\" is not a value of tensor<f32>: str is not a number"),
    (["-f", "nothing"], "no function @nothing in the module (functions: @main, @twice)"),
    (["-i", "[1, 2, 3]", "-i", "1", "-i", "2"], "too many --input values: @main takes 2 arguments"),
])
def test_run_errors(capsys, tmp_path, argv, message):
    """Every input the command cannot take is exit status 2, as argparse's errors are."""
    path = tmp_path / "add.mlir"
    path.write_text(ADD)
    code, out, err = cli(capsys, "run", path, *argv)
    assert code == 2 and out == ""
    assert err.startswith(f"stablehlo-interp run: error: {message}")


def test_npz_arguments_by_the_names_the_text_gives(capsys, tmp_path):
    """A module written by hand names its arguments (%x, %y): an archive's keys x and y
    give them by name, in whatever order they were saved."""
    path = tmp_path / "add.mlir"
    path.write_text(ADD)
    np.savez(tmp_path / "named.npz", y=np.float32(0.5), x=np.array([1, 2, 3], np.float32))
    status, out, _ = cli(capsys, "run", path, "-i", tmp_path / "named.npz")
    assert status == 0 and out.startswith("result #0: tensor<3xf32>\n[1.5 2.5 3.5]\n")


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
    assert status == 2 and "cannot read" in err


def test_parse_errors_name_the_file(capsys, tmp_path):
    """MLIR's parser calls the text it is handed ``-``; the message names the file, as
    ``FILE:LINE:COL: message`` (the undeclared %q on line 3, column 22; a verifier's
    complaint about line 2 with its note)."""
    path = tmp_path / "bad.mlir"
    path.write_text(ADD.replace("%1 = stablehlo.add %x, %0", "%1 = stablehlo.add %x, %q"))
    for command in ("run", "trace", "compare"):
        status, out, err = cli(capsys, command, path, "-i", "[1, 2, 3]", "-i", "1")
        assert status == 2 and out == ""
        assert err == (f"stablehlo-interp {command}: error: cannot parse MLIR text in {path}:\n"
                       f"  {path}:3:26: use of undeclared SSA value name\n")
    path.write_text(ADD.replace("  %c = ", '  %unused = "stablehlo.add"(%x, %x) : (tensor<3xf32>, tensor<3xf32>) '
                                           "-> tensor<4xf32>\n  %c = "))
    status, _, err = cli(capsys, "run", path, "-i", "[1, 2, 3]", "-i", "1")
    lines = err.splitlines()
    assert status == 2 and lines[1].startswith(f"  {path}:4:13: 'stablehlo.add' op requires the same shape")
    assert lines[2].startswith(f"    note: {path}:4:13: see current operation: ")


CHECKED = """func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  check.expect_eq_const %x, dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  return %x : tensor<3xf32>
}
"""


def test_exit_status_classes(capsys, tmp_path, monkeypatch):
    """0 did its work; 1 a finding (a check failed as the program ran, results differ);
    2 bad input (argparse's, an input, the module); 3 could not do it: an op the
    interpreter lacks, a backend that failed, a bug of the interpreter's (with its traceback)."""
    path = tmp_path / "checked.mlir"
    path.write_text(CHECKED)
    assert cli(capsys, "run", path, "-i", "[1, 2, 3]")[0] == 0
    status, out, _ = cli(capsys, "trace", path, "-i", "[1, 2, 4]")
    assert status == 1 and out.endswith(": 1 of 3 elements differ; first at index [2]: 4.0 (actual) vs 3.0 (expected)\n")
    status, _, err = cli(capsys, "run", path, "-i", "[1, 2, 4]")
    assert status == 1 and err.startswith(f"stablehlo-interp run: check.expect_eq_const at {path}:2")
    path.write_text(CHECKED.replace("return %x", "%y = stablehlo.custom_call @no_such_target(%x) : "
                                                 "(tensor<3xf32>) -> tensor<3xf32>\n  return %y"))
    status, _, err = cli(capsys, "run", path, "-i", "[1, 2, 3]")
    assert status == 3 and "custom call target 'no_such_target' is not implemented" in err
    add = tmp_path / "add.mlir"
    add.write_text(ADD)
    status, _, err = cli(capsys, "compare", add, "-i", "[1, 2, 3]", "-i", "1", "--backend-command", "false")
    assert status == 3 and err == "stablehlo-interp compare: false crashed: exit status 1\n"
    status, _, err = cli(capsys, "compare", add, "-i", "[1, 2, 3]", "-i", "1", "--backend", "nosuch")
    assert status == 2 and err.startswith("stablehlo-interp compare: error: --backend nosuch: Unknown backend nosuch")
    with pytest.raises(SystemExit) as exit:   # argparse's own
        main(["run", str(add), "--no-such-option"])
    assert exit.value.code == 2 and "unrecognized arguments: --no-such-option" in capsys.readouterr().err
    from stablehlo_interp import cli as command

    monkeypatch.setattr(command, "_format", lambda value: 1 / 0)
    status, _, err = cli(capsys, "run", add, "-i", "[1, 2, 3]", "-i", "1")
    assert status == 3
    assert err.startswith("stablehlo-interp run: internal error (a bug: please report it with this message)\n"
                          "Traceback (most recent call last):\n")
    assert err.endswith("ZeroDivisionError: division by zero\n")


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

NATIVE_LOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w.]+:\d+\] .*$", re.MULTILINE)
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


def _native_lines(code: str, **environment: str) -> list[str]:
    """The messages of the native log lines a Python program writes (with no logging level
    of the user's, unless given)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(environment, PYTHONPATH=str(ROOT))
    stderr = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                            check=True).stderr
    return [line.split("] ", 1)[1] for line in NATIVE_LOG_LINE.findall(stderr)]


@pytest.fixture(scope="module")
def native_logging() -> list[str]:
    """What the native libraries log as JAX starts its backends when asked for everything
    (jaxlib 0.10: a dozen INFO lines of PJRT's, one per device of the interp plugin's eight)."""
    return _native_lines("import jax; jax.devices()", TF_CPP_MIN_LOG_LEVEL="0")


def test_importing_the_package_leaves_jax_s_logging_as_it_is(native_logging):
    """The package loads jaxlib (its MLIR bindings) after JAX, which sets the libraries'
    level first: a program that imports it logs what it logs without it."""
    assert _native_lines("import stablehlo_interp, jax; jax.devices()") == _native_lines("import jax; jax.devices()")


@pytest.mark.parametrize("launcher", ["module", "console script"])
def test_no_native_logging_unless_verbose(tmp_path, launcher, native_logging):
    """The command shows the native libraries' logging only with -v: then all of it."""
    compare = ["compare", EXAMPLES / "scale_add.mlir", "-i", "[1, 2, 3]", "-i", "0.5", "--backend", "cpu"]
    quiet = _command(tmp_path, launcher, *compare)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == "the interpreter and cpu agree on all 2 results\n"
    assert NATIVE_LOG_LINE.search(quiet.stderr) is None, quiet.stderr
    verbose = _command(tmp_path, launcher, "-v", *compare)
    assert verbose.returncode == 0 and verbose.stdout == quiet.stdout
    assert all(message in verbose.stderr for message in native_logging)
    assert ("Addressable PjRt-IFRT device: InterpDevice(id=7)" in verbose.stderr) == bool(native_logging)


# ------------------------------------------------------------ progress on a terminal

LOOP = """func.func @main(%n: tensor<i32>) -> tensor<i32> {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %r:2 = stablehlo.while(%i = %zero, %acc = %zero) : tensor<i32>, tensor<i32>
    cond {
      %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %next = stablehlo.add %i, %one : tensor<i32>
      %sum = stablehlo.add %acc, %i : tensor<i32>
      stablehlo.return %next, %sum : tensor<i32>, tensor<i32>
    }
  return %r#1 : tensor<i32>
}
"""


def _terminal_until(argv, update: re.Pattern, updates: int = 2) -> list[tuple]:
    """Run the command with standard error on a pseudo-terminal, read what it writes there
    until ``update`` has matched ``updates`` times (the runs here would last for hours), stop
    it: the matches."""
    import pty

    primary, secondary = pty.openpty()
    child = subprocess.Popen([sys.executable, "-m", "stablehlo_interp", *map(str, argv)], stdout=subprocess.DEVNULL,
                             stderr=secondary, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    os.close(secondary)
    terminal = ""
    try:
        while len(update.findall(terminal)) < updates and child.poll() is None:
            terminal += os.read(primary, 4096).decode()
    finally:
        child.kill()
        child.wait(timeout=60)
        os.close(primary)
    found = update.findall(terminal)
    assert len(found) >= updates, terminal
    return found


def test_trace_shows_its_progress_on_a_terminal(tmp_path):
    """A long trace writes ``N ops run`` and the loop's iteration to a terminal, rewritten in place."""
    path = tmp_path / "loop.mlir"
    path.write_text(LOOP)
    update = re.compile(r"\r\x1b\[K([\d,]+) ops run; stablehlo.while at loop.mlir:4: (?:cond|body), iteration (\d+)(?=\r)")
    updates = [(int(ops.replace(",", "")), int(i)) for ops, i in _terminal_until(["trace", path, "-i", 10**9], update)]
    # each iteration runs cond (1 op) and body (2 ops), after the 2 constants; counted as an op starts
    assert all(3 * i + 3 <= ops <= 3 * i + 6 for ops, i in updates), updates
    assert updates[1][0] > updates[0][0]


def test_run_shows_its_loops_iterations_on_a_terminal(tmp_path):
    """A long run (no listener: each op is not seen) writes the iterations of the loop it is in."""
    path = tmp_path / "loop.mlir"
    path.write_text(LOOP)
    update = re.compile(r"\r\x1b\[Kstablehlo.while at loop.mlir:4: ([\d,]+) iterations(?=\r)")
    iterations = [int(i.replace(",", "")) for i in _terminal_until(["run", path, "-i", 10**9], update)]
    assert 0 < iterations[0] < iterations[1] < 10**9


class _Stream(io.StringIO):
    def __init__(self, terminal: bool):
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


def test_progress_only_on_a_terminal(monkeypatch):
    from stablehlo_interp import cli as command
    from stablehlo_interp.tools.progress import LoopProgress, RunProgress

    for kind in (RunProgress, LoopProgress):
        monkeypatch.setattr(sys, "stderr", _Stream(terminal=False))
        with command._progress(kind) as progress:
            assert progress is None
        monkeypatch.setattr(sys, "stderr", _Stream(terminal=True))
        with command._progress(kind) as progress:
            assert isinstance(progress, kind) and progress.out is sys.stderr


def test_loop_progress_names_the_loops_outermost_first(tmp_path):
    """What the run keeps of its open loops (RunContext.loops), as the line shows it."""
    from stablehlo_interp.engine.run import OpenLoop
    from stablehlo_interp.tools.progress import LoopProgress

    path = tmp_path / "loop.mlir"
    path.write_text(LOOP)
    (step,) = [s for s in si.load(path).function("main").region.steps if s.info.name == "stablehlo.while"]
    line = LoopProgress(_Stream(terminal=True))
    assert line.line() == ""
    outer, inner = OpenLoop(step.info), OpenLoop(step.info)
    outer.iterations, inner.iterations = 3, 12345
    line.loops += [outer, inner]
    assert line.line() == "stablehlo.while at loop.mlir:4: 3 iterations; stablehlo.while at loop.mlir:4: 12,345 iterations"


def test_a_run_counts_the_iterations_of_its_loops_when_asked(tmp_path):
    """RunContext.loops: each while's OpenLoop is there while it runs, with its iterations."""
    path = tmp_path / "loop.mlir"
    path.write_text(LOOP)
    seen = []

    class Watch(si.Listener):   # what another thread would read, looked at from the loop's body
        def before_op(self, step, operands, stack):
            if step.info.name == "stablehlo.add":
                seen.append([(loop.info.name, loop.iterations) for loop in loops])

    loops: list = []
    assert si.load(path).run(np.int32(3), loops=loops, listeners=[Watch()])[0] == 0 + 1 + 2
    assert seen == [[("stablehlo.while", 1)]] * 2 + [[("stablehlo.while", 2)]] * 2 + [[("stablehlo.while", 3)]] * 2
    assert loops == []


def test_progress_line_is_rewritten_in_place_and_erased():
    """With a clock that moves as told: nothing in the first second, then an update each
    quarter second (looked at every 256 ops), erased by finish."""
    from stablehlo_interp.tools import progress as module

    now = [0.0]
    out = _Stream(terminal=True)
    line = module.RunProgress(out, clock=lambda: now[0])
    for _ in range(1024):
        line.before_op(None, [], ())
    assert out.getvalue() == ""
    now[0] = 1.0
    for _ in range(256):
        line.before_op(None, [], ())
    assert out.getvalue() == "\r\x1b[K1,280 ops run"
    for _ in range(512):   # the clock stands still: no update
        line.before_op(None, [], ())
    now[0] = 1.25
    for _ in range(256):
        line.before_op(None, [], ())
    line.finish()
    assert out.getvalue() == "\r\x1b[K1,280 ops run\r\x1b[K2,048 ops run\r\x1b[K"
