"""The backends of conform, compare and fuzz (stablehlo_interp/backends/): one
protocol; IREE against NumPy and hand-checked values; the command contract with a tiny
Python script as the tool; compile failures and crashes are verdicts with the backend's
message."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap

import numpy as np
import pytest

from stablehlo_interp.cli import main
from stablehlo_interp.conformance.conform import BACKEND_ERROR, PASS, conform_file
from stablehlo_interp.backends import (Backend, BackendCompileError, BackendCrash, BackendError, CommandBackend,
    InterpreterBackend, IreeBackend, JaxBackend, resolve)

needs_iree = pytest.mark.skipif(
    importlib.util.find_spec("iree") is None or importlib.util.find_spec("iree.runtime") is None,
    reason="IREE is not installed (pip install 'stablehlo-interp[iree]')")

ADD_F64 = """func.func @main(%a: tensor<3xf64>, %b: tensor<3xf64>) -> tensor<3xf64> {
  %0 = stablehlo.add %a, %b : tensor<3xf64>
  return %0 : tensor<3xf64>
}"""
ADD_I32 = ADD_F64.replace("f64", "i32")
TRIANGULAR_SOLVE = """func.func @main(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %0 = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = true, unit_diagonal = false,
      transpose_a = #stablehlo<transpose NO_TRANSPOSE>} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}"""


def test_every_backend_follows_the_protocol():
    def mine(module_text, args):
        return [np.zeros(1)]

    for backend in (resolve("cpu"), resolve("iree:vmvx"), resolve(mine), CommandBackend("tool {mlir}"),
                    InterpreterBackend(), resolve("reference")):
        assert isinstance(backend, Backend), backend
    assert (resolve("iree:vmvx").target, resolve("iree").target, resolve("iree").name) == ("vmvx", "llvm-cpu",
                                                                                             "iree:llvm-cpu")
    assert resolve(mine).name == "mine" and resolve(mine).settings == ()
    assert resolve(mine)("", [])[0].tolist() == [0.0]
    assert isinstance(resolve("cpu"), JaxBackend)
    with pytest.raises(ValueError, match="IREE's compiler"):
        resolve("cpu", ["--xla_flag"])


def test_a_jax_platform_runs_f64_and_i64_as_written_whatever_jax_x64_says():
    """With JAX's x64 off, device_put makes an f64 argument f32: the backend must hand XLA the
    module's types (it failed to run, "expected f64[2] but got f32[2]", a false verdict)."""
    import jax

    text = textwrap.dedent("""\
        func.func @main(%a: tensor<2xf64>, %b: tensor<2xi64>) -> (tensor<2xf64>, tensor<2xi64>) {
          %0 = stablehlo.add %a, %a : tensor<2xf64>
          %1 = stablehlo.multiply %b, %b : tensor<2xi64>
          return %0, %1 : tensor<2xf64>, tensor<2xi64>
        }""")
    a, b = np.array([1e300, 1.0000000001]), np.array([2**40, -3], np.int64)
    with jax.enable_x64(False):
        doubled, squared = JaxBackend("cpu")(text, [a, b])
    assert doubled.dtype == np.float64 and squared.dtype == np.int64
    np.testing.assert_array_equal(doubled, [2e300, 2.0000000002])       # exact in f64, inf/2.0 in f32
    np.testing.assert_array_equal(squared, [2**80 % 2**64, 9])           # 2**80 wraps to 0 in i64


def test_iree_flags_replace_the_defaults_of_the_same_name_and_settings_say_what_is_in_effect():
    default = IreeBackend()
    assert default.flags == ("--iree-input-demote-f64-to-f32=false", "--iree-llvmcpu-target-cpu=host")
    assert default.settings[0] == ("f64 (and complex<f64>) runs as written (--iree-input-demote-f64-to-f32=false; "
                                   "IREE's default demotes)")
    demoting = IreeBackend(flags=["--iree-input-demote-f64-to-f32=true", "--iree-input-demote-i64-to-i32"])
    assert demoting.flags == ("--iree-llvmcpu-target-cpu=host", "--iree-input-demote-f64-to-f32=true",
                              "--iree-input-demote-i64-to-i32")
    assert demoting.settings[:2] == (
        "f64 (and complex<f64>) is computed in f32 (--iree-input-demote-f64-to-f32=true, IREE default)",
        "i64 is computed in i32 (--iree-input-demote-i64-to-i32=true)")


@needs_iree
def test_iree_runs_f64_as_written_and_integers_wrap():
    a, b = np.array([1.0, 2.0, 1e300]), np.array([1e-15, 2.0**-60, 1e300])
    (total,) = resolve("iree")(ADD_F64, [a, b])
    assert total.dtype == np.float64
    np.testing.assert_array_equal(total, a + b)   # IEEE f64: 1 + 1e-15 is not 1, 1e300 + 1e300 is finite
    assert total[0] != 1.0 and np.isfinite(total[2])
    big = np.array([2**31 - 1, -7, -2**31], np.int32)
    (wrapped,) = resolve("iree")(ADD_I32, [big, np.array([1, 2, -1], np.int32)])
    assert wrapped.tolist() == [-2**31, -5, 2**31 - 1]   # the spec's two's complement wrap-around


@needs_iree
def test_iree_f64_demotion_computes_in_f32_and_returns_the_module_types():
    a, b = np.array([1.0, 2.0, 1e300]), np.array([1e-15, 2.0**-60, 1e300])
    (total,) = resolve("iree", ["--iree-input-demote-f64-to-f32=true"])(ADD_F64, [a, b])
    assert total.dtype == np.float64   # widened back to the module's type
    with np.errstate(over="ignore"):   # 1e300 is inf in f32
        expected = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float64)
    np.testing.assert_array_equal(total, expected)
    assert total.tolist()[:2] == [1.0, 2.0] and total[2] == np.inf


@needs_iree
def test_iree_that_cannot_compile_is_a_verdict_with_its_message(tmp_path):
    with pytest.raises(BackendCompileError) as caught:
        resolve("iree")(TRIANGULAR_SOLVE, [np.eye(2, dtype=np.float32)] * 2)
    assert "failed to legalize operation 'stablehlo.triangular_solve'" in caught.value.message
    assert caught.value.backend == "iree:llvm-cpu" and "Invoked with" not in caught.value.message
    path = tmp_path / "solve.mlir"
    path.write_text(textwrap.dedent("""\
        func.func @solve() {
          %a = stablehlo.constant dense<[[2.0, 0.0], [1.0, 1.0]]> : tensor<2x2xf32>
          %0 = "stablehlo.triangular_solve"(%a, %a) {left_side = true, lower = true, unit_diagonal = false,
              transpose_a = #stablehlo<transpose NO_TRANSPOSE>} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
          check.expect_almost_eq_const %0, dense<[[1.0, 0.0], [0.0, 1.0]]> : tensor<2x2xf32>
          func.return
        }
        """))
    (result,) = conform_file(str(path), "iree")
    assert result.verdict == BACKEND_ERROR
    assert result.message.startswith("cannot compile: ") and "stablehlo.triangular_solve" in result.message


@needs_iree
def test_an_iree_compiler_that_dies_is_a_crash_and_the_next_program_runs():
    """IREE 3.13's iree-compile dies of SIGFPE on a complex<f64> constant that is not a splat
    (docs/findings.md); the child process that asked goes on."""
    constant = """func.func @main() -> tensor<2xcomplex<f64>> {
      %c = stablehlo.constant dense<[(1.0, 2.0), (3.0, -4.0)]> : tensor<2xcomplex<f64>>
      return %c : tensor<2xcomplex<f64>>
    }"""
    with pytest.raises(BackendCrash) as caught:
        resolve("iree")(constant, [])
    assert caught.value.message.startswith("iree-compile died of signal 8")
    (total,) = resolve("iree")(ADD_I32, [np.array([1, 2, 3], np.int32)] * 2)
    assert total.tolist() == [2, 4, 6]
    never_compiled = ADD_I32.replace("3xi32", "7xi32")   # the child keeps the programs it compiled
    with pytest.raises(BackendCrash, match="iree-compile timed out after 0.001 s"):
        IreeBackend(compile_timeout=0.001)(never_compiled, [np.arange(7, dtype=np.int32)] * 2)


@needs_iree
def test_iree_compiles_a_program_once():
    """The child keeps the programs it compiled (a stepped loop runs its cond and body at
    every iteration): compiled once, the program runs again under a compile timeout no
    compile meets."""
    program = ADD_I32.replace("3xi32", "6xi32")
    arguments = [np.arange(6, dtype=np.int32)] * 2
    assert resolve("iree")(program, arguments)[0].tolist() == [0, 2, 4, 6, 8, 10]
    assert IreeBackend(compile_timeout=0.001)(program, arguments)[0].tolist() == [0, 2, 4, 6, 8, 10]


# ------------------------------------------------------------------ the command backend

TOOL = """\
import pathlib, sys
import numpy as np

mlir, inputs, outputs = sys.argv[1], sys.argv[2:-1], pathlib.Path(sys.argv[-1])
text = pathlib.Path(mlir).read_text()
if "stablehlo.add" not in text:
    print("only stablehlo.add: cannot compile " + text.split()[0], file=sys.stderr)
    sys.exit(3)
a, b = (np.load(path) for path in inputs)
np.save(outputs / "result_0.npy", a + b)
np.save(outputs / "result_1.npy", np.array(len(inputs)))
"""


@pytest.fixture
def tool(tmp_path):
    path = tmp_path / "tool.py"
    path.write_text(TOOL)
    return f"{sys.executable} {path} {{mlir}} {{inputs}} {{outputs}}"


def test_a_command_gets_the_mlir_and_npy_inputs_and_its_npy_outputs_are_the_results(tool):
    backend = CommandBackend(tool, name="adder")
    total, count = backend(ADD_I32, [np.array([1, 2, 3], np.int32), np.array([10, 20, 30], np.int32)])
    assert total.dtype == np.int32 and total.tolist() == [11, 22, 33] and count == 2
    assert backend.name == "adder" and CommandBackend(tool).name == f"{sys.executable.rsplit('/', 1)[-1]} tool.py"


def test_a_command_that_exits_3_cannot_compile(tool):
    with pytest.raises(BackendCompileError, match="only stablehlo.add: cannot compile func.func"):
        CommandBackend(tool)(ADD_I32.replace("stablehlo.add", "stablehlo.subtract"), [np.zeros(3, np.int32)] * 2)


def test_a_command_that_dies_or_hangs_is_a_crash(tmp_path):
    aborts = tmp_path / "aborts.py"
    aborts.write_text("import os, sys\nprint('about to abort', file=sys.stderr)\nos.abort()\n")
    with pytest.raises(BackendCrash) as caught:
        CommandBackend([sys.executable, str(aborts), "{mlir}"])(ADD_I32, [])
    assert caught.value.message == "signal 6: about to abort"
    with pytest.raises(BackendCrash, match="timed out after 0.5 s"):
        CommandBackend([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)(ADD_I32, [])
    with pytest.raises(BackendCrash, match="cannot start"):
        CommandBackend(str(tmp_path / "no-such-tool"))(ADD_I32, [])
    with pytest.raises(BackendCrash, match="(?s)exit status 1: .*ZeroDivisionError"):
        CommandBackend([sys.executable, "-c", "1/0"])(ADD_I32, [])


def test_unreadable_results_are_a_backend_error(tmp_path):
    writes = [sys.executable, "-c", "import sys, pathlib; (pathlib.Path(sys.argv[1]) / 'result_0.npy')"
                                    ".write_text('not npy')", "{outputs}"]
    with pytest.raises(BackendError, match="cannot read result_0.npy"):
        CommandBackend(writes)(ADD_I32, [])


def test_conform_with_a_command_judges_its_values_and_reports_its_crash(tmp_path, tool, capsys):
    tests = tmp_path / "tests.mlir"
    tests.write_text(textwrap.dedent("""\
        func.func @adds() {
          %a = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
          %0 = stablehlo.add %a, %a : tensor<2xi32>
          check.expect_eq_const %0, dense<[2, 4]> : tensor<2xi32>
          func.return
        }
        func.func @subtracts() {
          %a = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
          %0 = stablehlo.subtract %a, %a : tensor<2xi32>
          check.expect_eq_const %0, dense<0> : tensor<2xi32>
          func.return
        }
        """))
    adds, subtracts = conform_file(str(tests), CommandBackend(tool))
    # the tool's a + b of no inputs fails: it is given none (the tests take no arguments)
    assert adds.verdict == BACKEND_ERROR and adds.message.startswith("crashed: exit status 1")
    assert subtracts.verdict == BACKEND_ERROR and subtracts.message.startswith("cannot compile: only stablehlo.add")
    echo = tmp_path / "echo.py"   # a tool that runs the program's constants: @adds' doubled [1, 2]
    echo.write_text("import sys, pathlib, numpy as np\n"
                    "np.save(pathlib.Path(sys.argv[1]) / 'result_0.npy', np.array([2, 4], np.int32))\n")
    report_path = tmp_path / "report.json"
    status = main(["conform", str(tests), "--backend-command", f"{sys.executable} {echo} {{outputs}}",
                   "--json", str(report_path)])
    document = json.loads(report_path.read_text())
    assert [r["verdict"] for r in document["results"]] == [PASS, "fail"]
    assert document["backend"] == f"{sys.executable.rsplit('/', 1)[-1]} echo.py"
    assert status == 1 and "1 pass, 1 fail" in capsys.readouterr().out


NEGATIVE_POWER = ADD_F64.replace("stablehlo.add", "stablehlo.power")
COMPLEX_MINIMUM_MAXIMUM = """\
func.func @main(%a: tensor<2xcomplex<f32>>, %b: tensor<2xcomplex<f32>>) -> (tensor<2xcomplex<f32>>, tensor<2xcomplex<f32>>) {
  %0 = stablehlo.minimum %a, %b : tensor<2xcomplex<f32>>
  %1 = stablehlo.maximum %a, %b : tensor<2xcomplex<f32>>
  return %0, %1 : tensor<2xcomplex<f32>>, tensor<2xcomplex<f32>>
}"""


@needs_iree
def test_iree_power_of_a_negative_base_is_nan():
    """IEEE 754's pow (NumPy's): (-2)^2 = 4, (-3)^3 = -27 (docs/findings.md: IREE's NaN)."""
    import stablehlo_interp as si

    for dtype in (np.float64, np.float32):
        text = NEGATIVE_POWER.replace("f64", {np.float64: "f64", np.float32: "f32"}[dtype])
        arguments = [np.array([-2, -3, 2], dtype), np.array([2, 3, 0.5], dtype)]
        expected = np.power(*arguments)
        assert np.array_equal(si.load(text).run(*arguments)[0], expected) and expected[0] == 4
        (theirs,) = resolve("iree")(text, arguments)
        assert np.isnan(theirs[:2]).all() and abs(theirs[2] - expected[2]) <= 2 * np.spacing(expected[2])


@needs_iree
def test_iree_complex_minimum_and_maximum_compare_real_parts_only():
    """Spec (minimum, maximum): complex numbers in lexicographic order, real part
    first, -0 = 0; the expected pairs are picked by hand (docs/findings.md)."""
    import stablehlo_interp as si

    a = np.array([1.5 + 7.5j, complex(0, 1.5)], np.complex64)
    b = np.array([1.5 + 2.5j, complex(-0.0, 2.5)], np.complex64)
    smallest, largest = si.load(COMPLEX_MINIMUM_MAXIMUM).run(a, b)
    assert smallest.tolist() == [b[0], a[1]] and largest.tolist() == [a[0], b[1]]
    assert np.signbit(largest[1].real)
    theirs = resolve("iree")(COMPLEX_MINIMUM_MAXIMUM, [a, b])
    assert theirs[0].tolist() == [a[0], a[1]] and theirs[1].tolist() == [a[0], a[1]]


EXP_F32 = """func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.exponential %a : tensor<3xf32>
  return %0 : tensor<3xf32>
}"""


def test_a_recorded_backend_plays_back_what_was_recorded_and_refuses_the_rest(tmp_path):
    from stablehlo_interp.backends import RecordedBackend, RecordingBackend

    x = np.array([0.5, 1.0, 2.0], np.float32)
    recording = RecordingBackend(JaxBackend("cpu"), tmp_path, command="the test")
    live = recording(EXP_F32, [x])
    with pytest.raises(BackendCompileError):
        recording("func.func @main() -> () { stablehlo.bogus }", [])
    played = resolve(f"recorded:{tmp_path}")
    assert isinstance(played, RecordedBackend) and isinstance(played, Backend)
    assert played.name == "cpu" and played.platform == "cpu"
    assert np.array_equal(played(EXP_F32, [x])[0], live[0]) and played(EXP_F32, [x])[0].dtype == np.float32
    assert "played back" in played.settings[-1] and "jax 0.10.2" in played.settings[-1]
    assert json.loads((tmp_path / "recording.json").read_text())["command"] == "the test"
    with pytest.raises(BackendCompileError):   # the refusal, as the backend gave it
        played("func.func @main() -> () { stablehlo.bogus }", [])
    with pytest.raises(BackendError, match="not recorded"):   # other arguments: another answer
        played(EXP_F32, [x + 1])
    with pytest.raises(BackendError, match="not recorded"):   # the same values as f64: another answer
        played(EXP_F32, [x.astype(np.float64)])


def test_a_recording_keeps_each_value_of_its_own_dtype(tmp_path):
    """bf16, f8 and i4 values (ml_dtypes: raw bytes to NumPy's format) come back as they went."""
    import ml_dtypes

    from stablehlo_interp.backends import RecordingBackend

    text = EXP_F32.replace("tensor<3xf32>", "tensor<3xbf16>")
    x = np.array([0.5, 1.0, 2.0], ml_dtypes.bfloat16)
    live = RecordingBackend(JaxBackend("cpu"), tmp_path)(text, [x])
    (played,) = resolve(f"recorded:{tmp_path}")(text, [x])
    assert played.dtype == live[0].dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(played.view(np.uint16), live[0].view(np.uint16))
    (key,) = [path.stem for path in tmp_path.glob("*.mlir")]
    from stablehlo_interp.backends.recorded import load_values

    (argument,) = load_values(tmp_path / f"{key}.arguments.npz")
    assert argument.dtype == x.dtype and argument.tolist() == x.tolist()


def test_a_folder_without_a_recording_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="no recording"):
        resolve(f"recorded:{tmp_path}")


def test_compare_judges_ops_whose_operand_is_a_tuple():
    """A backend's value taken out of a tuple differs: the get_tuple_element's tuple operand
    (the interpreter's: a backend shows no tuples) has no ULP to move (the search stopped
    with a ValueError on a TPU's answers)."""
    import stablehlo_interp as si

    text = """func.func @main(%a: tensor<3xf32>, %b: tensor<2xf32>) -> tensor<3xf32> {
  %e = stablehlo.exponential %a : tensor<3xf32>
  %t = stablehlo.tuple %e, %b : tuple<tensor<3xf32>, tensor<2xf32>>
  %x = stablehlo.get_tuple_element %t[0] : (tuple<tensor<3xf32>, tensor<2xf32>>) -> tensor<3xf32>
  return %x : tensor<3xf32>
}"""

    def exp_one_ulp_up(info):
        return lambda x: np.nextafter(np.exp(x), np.float32(np.inf))

    wrong = InterpreterBackend(ops={"stablehlo.exponential": exp_one_ulp_up}, name="exp one ULP up")
    comparison = si.compare(text, np.ones(3, np.float32), np.ones(2, np.float32), backend=wrong, tolerance=(0, 0))
    assert not comparison.ok and comparison.kinds == ["rounding noise"]
    assert comparison.ops["rounding noise"] == 2   # the exponential, and the value taken out of the tuple


def test_the_cpp_reference_interpreter_as_a_backend_gives_the_specs_values_and_its_refusals():
    """StableHLO's own reference interpreter (``--backend reference``): the values of a spec
    rule XLA's CPU departs from (a shift past the bit width is 0), and a CHLO op it does not
    implement as a verdict, in its child process, after which the next program runs."""
    backend = resolve("reference")
    shift = """func.func @main(%a: tensor<3xi32>, %b: tensor<3xi32>) -> tensor<3xi32> {
  %0 = stablehlo.shift_left %a, %b : tensor<3xi32>
  return %0 : tensor<3xi32>
}"""
    (values,) = backend(shift, [np.array([1, 1, -1], np.int32), np.array([3, 32, 40], np.int32)])
    assert values.tolist() == [8, 0, 0] and values.dtype == np.int32
    with pytest.raises(BackendError):
        backend("""func.func @main(%a: tensor<f32>) -> tensor<f32> {
  %0 = chlo.erf %a : tensor<f32> -> tensor<f32>
  return %0 : tensor<f32>
}""", [np.float32(0.5)])
    (again,) = backend(ADD_I32, [np.array([1, 2, 3], np.int32), np.array([2**31 - 1, 0, 0], np.int32)])
    assert again.tolist() == [-2**31, 2, 3]
