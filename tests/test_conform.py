"""The conformance runner (conformance/conform.py, ``stablehlo-interp conform``) with XLA CPU
as the backend under test; expectations are hand-checked."""

import functools
import io
import json
import os
import pathlib
import sys
import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest

import stablehlo_interp as si
from stablehlo_interp.cli import main
from stablehlo_interp.conformance.conform import (BACKEND_ERROR, CANNOT_PARSE, FAIL, INTERPRETER_ERROR, PASS,
    conform, conform_file)
from stablehlo_interp.backends import resolve
from stablehlo_interp.ir.process_pool import ordered_map
from stablehlo_interp.ir.edit import checks_as_results
from stablehlo_interp.engine.numerics import ulp_difference
from stablehlo_interp.judge.bounds import BEYOND, NOISE

TESTS = """func.func @adds() {
  %0 = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %1 = stablehlo.add %0, %0 : tensor<2xf32>
  check.expect_eq_const %1, dense<[2.0, 4.0]> : tensor<2xf32>
  %2 = stablehlo.constant dense<[2.0, 4.0000005]> : tensor<2xf32>
  stablehlo.custom_call @check.expect_close(%1, %2) {has_side_effect = true} : (tensor<2xf32>, tensor<2xf32>) -> ()
  func.return
}
func.func private @helper() -> tensor<i32> {
  %0 = stablehlo.constant dense<3> : tensor<i32>
  return %0 : tensor<i32>
}
func.func @main() {
  %0 = func.call @helper() : () -> tensor<i32>
  check.expect_eq_const %0, dense<4> : tensor<i32>
  func.return
}
"""


def test_checks_become_results_and_a_judge_module_applies_them():
    program_text, judge_text, actual = checks_as_results(TESTS, "adds")
    assert actual == [0, 1]   # expect_eq_const checks result 0; expect_close result 1 against result 2
    program, judge = si.load(program_text), si.load(judge_text)
    assert list(program.functions) == ["main"]   # @adds, renamed; the other test and its helper dropped
    values = program.run()
    np.testing.assert_array_equal(values[0], [2.0, 4.0])          # expect_eq_const: its one operand
    np.testing.assert_array_equal(values[1], [2.0, 4.0])          # expect_close: actual, expected
    np.testing.assert_array_equal(values[2], np.array([2.0, 4.0000005], np.float32))
    judge.run(*values)
    wrong = [np.array([2.0, 4.0001], np.float32), values[1], values[2]]
    try:
        judge.run(*wrong)
    except si.OpError as error:
        assert error.op_name == "check.expect_eq_const" and error.location.frame.line == 4
    else:
        raise AssertionError("the judge passed a wrong value")
    main_text, _, actual = checks_as_results(TESTS, "main")   # calls are inlined first
    assert actual == [0] and "func.call" not in main_text.split("func.func private")[0]


def test_verdicts_on_xla_cpu(tmp_path):
    path = tmp_path / "t.mlir"
    path.write_text(TESTS)
    adds, fails = conform_file(str(path), "cpu")
    assert (adds.test, adds.verdict, adds.checks, adds.interpreter_passes) == ("adds", PASS, 2, True)
    assert adds.histogram == {"0": 4} and adds.max_ulp == 0   # 2 + 2 checked elements, all equal
    assert (fails.test, fails.verdict, fails.interpreter_passes) == ("main", FAIL, False)
    assert fails.message == (f"check.expect_eq_const at {path}:15:3: 1 of 1 elements differ; "
                             "first: 3 (actual) vs 4 (expected)")
    assert fails.histogram == {"0": 1}   # the backend agrees with the interpreter: the test is wrong


FLUSHES = """func.func @main() {
  %x = stablehlo.constant dense<[1.0e-39, 3.0]> : tensor<2xf32>
  %y = stablehlo.constant dense<[1.5, 1.0]> : tensor<2xf32>
  %b:2 = stablehlo.optimization_barrier %x, %y : tensor<2xf32>, tensor<2xf32>
  %m = stablehlo.multiply %b#0, %b#1 : tensor<2xf32>
  check.expect_eq_const %m, dense<[1.5e-39, 3.0]> : tensor<2xf32>
  func.return
}
"""


def test_a_denormal_flushed_by_xla_cpu_is_found_at_its_op(tmp_path):
    """XLA CPU computes with subnormals flushed to zero; the spec (IEEE 754) keeps them:
    1e-39 * 1.5 = 1.5e-39, a subnormal f32. The barrier keeps XLA from folding the
    constants (its constant folder keeps subnormals)."""
    path = tmp_path / "flush.mlir"
    path.write_text(FLUSHES)
    (result,) = conform_file(str(path), "cpu")
    assert (result.verdict, result.interpreter_passes) == (FAIL, True)
    assert result.message == (f"check.expect_eq_const at {path}:6:3: 1 of 2 elements differ; first at "
                              "index [0]: 0.0 (actual) vs 1.5e-39 (expected)")
    assert result.histogram == {"0": 1, ">=256": 1}
    assert result.divergence.startswith(f"first divergent op: stablehlo.multiply (op #3 of the entry function) "
                                        f"at {path}:5:8\n")
    assert result.difference_kind == BEYOND   # a flushed subnormal is no rounding noise


def test_backend_errors_cannot_parse_and_interpreter_errors(tmp_path):
    path = tmp_path / "odd.mlir"
    path.write_text("""func.func @prints() {
  %0 = stablehlo.constant dense<1> : tensor<i32>
  interpreter.print %0 : tensor<i32>
  check.expect_eq_const %0, dense<1> : tensor<i32>
  func.return
}
// -----
func.func @broken() {
  %0 = stablehlo.add : tensor<i32>
  func.return
}
// -----
func.func @nested() {
  %0 = stablehlo.constant dense<1> : tensor<i32>
  %1 = "stablehlo.case"(%0) ({
    check.expect_eq_const %0, dense<1> : tensor<i32>
    stablehlo.return %0 : tensor<i32>
  }) : (tensor<i32>) -> tensor<i32>
  func.return
}
""")
    prints, broken, nested = conform_file(str(path), "cpu")
    assert prints.verdict == BACKEND_ERROR and "interpreter.print" in prints.message
    assert (broken.verdict, broken.test, broken.line) == (CANNOT_PARSE, None, 8)
    assert nested.verdict == INTERPRETER_ERROR
    assert nested.message == "check.expect_eq_const inside a region of @nested: only checks of the function " \
                             "itself can become results"


def test_the_command_writes_a_table_json_and_junit(tmp_path, capsys):
    good, flush = tmp_path / "a.mlir", tmp_path / "b.mlir"
    good.write_text(TESTS.split("func.func private")[0])
    flush.write_text(FLUSHES)
    json_path, xml_path = tmp_path / "r.json", tmp_path / "r.xml"
    status = main(["conform", str(tmp_path), "--backend", "cpu", "-j", "2", "--json", str(json_path),
                   "--junit-xml", str(xml_path)])
    out = capsys.readouterr().out.splitlines()
    assert status == 1
    assert out[0] == "verdict            max ULP interp  test"
    subnormal_steps = int(ulp_difference(np.float32(0), np.float32(1e-39) * np.float32(1.5)))   # 0 vs 1.5e-39
    assert out[1] == f"fail              {subnormal_steps:>8}   pass  {flush} @main"
    assert out[-2:] == ["cpu: 1 pass, 1 fail",
                        "checked elements by ULP distance to the interpreter: 0: 5  >=256: 1"]
    document = json.loads(json_path.read_text())
    assert document["counts"] == {"pass": 1, "fail": 1, "backend error": 0, "cannot parse": 0,
                                  "interpreter error": 0}
    assert [(r["test"], r["verdict"]) for r in document["results"]] == [("adds", "pass"), ("main", "fail")]
    root = ElementTree.parse(xml_path).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "1", "0")


def _dies_on_two(item):
    if item == 2:
        os._exit(3)   # as a backend's compiler that aborts
    return item * 10


def test_an_item_that_kills_its_process_is_reported_and_the_others_go_on():
    results = list(ordered_map(_dies_on_two, [1, 2, 3, 4], jobs=2, on_crash=lambda item: f"crashed {item}"))
    assert results == [10, "crashed 2", 30, 40]


def _counts_and_dies_on_two(folder, item):
    with open(os.path.join(folder, str(item)), "a") as tries:
        tries.write("x")
    return _dies_on_two(item)


@pytest.mark.parametrize("jobs", [1, 2])
def test_with_one_worker_the_item_that_killed_it_is_known_and_not_run_again(tmp_path, jobs):
    """Each try of a crashing item starts a process, which opens the backend's device again
    (a TPU: seconds); with several workers the culprit is not known and is run alone."""
    task = functools.partial(_counts_and_dies_on_two, str(tmp_path))
    results = list(ordered_map(task, [1, 2, 3], jobs=jobs, on_crash=lambda item: f"crashed {item}"))
    assert results == [10, "crashed 2", 30]
    tries = len((tmp_path / "2").read_text())
    assert tries == 1 if jobs == 1 else tries >= 2


class _AbortingBackend:
    """A backend whose compiler CHECK-fails (as XLA's does) on programs with a multiply."""
    name, settings = "aborting", ()

    def __call__(self, module_text, args):
        if "stablehlo.multiply" in module_text:
            sys.stderr.write("F1206 07:00:00.000000   42 compiler.cc:7] Check failed: fusible(multiply)\n"
                             "*** Check failure stack trace: ***\n    @ 0x7f00 (unknown)\n")
            sys.stderr.flush()
            os.abort()
        return resolve("cpu")(module_text, args)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_file_that_kills_the_backend_says_why_and_the_others_go_on(tmp_path, jobs):
    """The file is run once more in a child that keeps its stderr: its verdict names the
    signal and the fatal CHECK line (not the stack trace after it)."""
    fine = tmp_path / "a_fine.mlir"
    program = ("func.func @main() {{\n  %0 = stablehlo.constant dense<2.0> : tensor<f32>\n"
               "  %1 = stablehlo.{op} %0, %0 : tensor<f32>\n"
               "  check.expect_eq_const %1, dense<4.0> : tensor<f32>\n  func.return\n}}\n")
    fine.write_text(program.format(op="add"))
    fatal = tmp_path / "b_fatal.mlir"
    fatal.write_text(program.format(op="multiply"))
    report = conform([fine, fatal], _AbortingBackend(), jobs=jobs)
    assert [(pathlib.Path(r.file).name, r.verdict) for r in report.results] == \
        [("a_fine.mlir", PASS), ("b_fatal.mlir", BACKEND_ERROR)]
    assert report.results[1].message == ("the process running this file died (signal 6): F1206 07:00:00.000000"
                                         "   42 compiler.cc:7] Check failed: fusible(multiply)")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_command_shows_a_progress_line_on_a_terminal_only(tmp_path, monkeypatch):
    good = tmp_path / "a.mlir"
    good.write_text(TESTS.split("func.func private")[0])
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(["conform", str(good), "--backend", "cpu"]) == 0
    shown = terminal.getvalue()
    assert shown.startswith("\r\033[K[1/1] 1 pass, 0 fail ...\r\033[Kverdict ")
    assert shown.endswith("cpu: 1 pass, 0 fail\nchecked elements by ULP distance to the interpreter: 0: 4\n")


def test_chlo_ops_are_rewritten_as_stablehlo_where_the_run_line_asks(tmp_path):
    """As `stablehlo-interp test` does (tests/test_testfile.py): the interpreter's verdict
    is the decomposition's, and the backend runs the same program."""
    from test_testfile import CHLO_PIPELINE_RUN, DIGAMMA_TEST, PLAIN_RUN

    for run_line, interpreter_passes in ((CHLO_PIPELINE_RUN, True), (PLAIN_RUN, False)):
        path = tmp_path / "digamma.mlir"
        path.write_text(DIGAMMA_TEST.format(run_line=run_line))
        (result,) = conform_file(str(path), "cpu")
        assert (result.verdict, result.interpreter_passes) == (PASS, interpreter_passes), run_line


RECURSIVE = """func.func private @f(%x: tensor<i32>) -> tensor<i32> {
  %0 = func.call @f(%x) : (tensor<i32>) -> tensor<i32>
  return %0 : tensor<i32>
}
func.func @main() {
  %c = stablehlo.constant dense<1> : tensor<i32>
  %0 = func.call @f(%c) : (tensor<i32>) -> tensor<i32>
  check.expect_eq_const %0, dense<1> : tensor<i32>
  func.return
}
"""


def test_a_recursive_function_is_an_interpreter_error_not_a_hang(tmp_path):
    """Its calls are inlined for the backend: a chain that never ends stops at
    INLINE_ROUNDS (it inlined forever, its memory growing, before)."""
    path = tmp_path / "recursive.mlir"
    path.write_text(RECURSIVE)
    (result,) = conform_file(str(path), "cpu")
    assert result.verdict == INTERPRETER_ERROR
    assert "cannot inline the module's calls: they are nested more than 64 deep" in result.message


def test_a_failure_by_rounding_noise_is_classified_as_such(tmp_path):
    """XLA CPU's tanh is an approximation within 3 ULP: tanh(0.1) is 0.099667988717556 there,
    0.0996679961681366 (correctly rounded) here, 1 ULP apart. A test that expects the
    correctly rounded value bit for bit fails on XLA, by what the rounding bound allows."""
    path = tmp_path / "tanh.mlir"
    path.write_text("""func.func @tanh_exactly() {
  %x = stablehlo.constant dense<0.1> : tensor<f32>
  %b = stablehlo.optimization_barrier %x : tensor<f32>
  %t = stablehlo.tanh %b : tensor<f32>
  check.expect_eq_const %t, dense<0.0996679961681366> : tensor<f32>
  func.return
}
""")
    (result,) = conform_file(str(path), "cpu")
    assert (result.verdict, result.interpreter_passes, result.max_ulp) == (FAIL, True, 1)
    assert result.difference_kind == NOISE
    assert result.divergence.startswith("every op is within its rounding bound")
