"""``stablehlo-interp test`` as ``stablehlo-translate --interpret`` judges StableHLO's own
test files: interpreter.print / interpreter.probe / check.expect_serialized_eq, the
"cannot parse" and "disabled" verdicts, and the runner's options (-j, --junit-xml,
--verbose, the progress line). Expectations are hand-checked against the C++ tool's
formats (stablehlo/reference/Tensor.cpp, InterpreterOps.cpp, NumPy.cpp)."""

import io
import pathlib
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import ml_dtypes
import numpy as np

from oracles import legalized
from stablehlo_interp.cli import main
from stablehlo_interp.conformance.testfile import (CANNOT_PARSE, DISABLED, PASSED, FAILED, report, run_file, run_files,
    run_text)

PRINTS = """func.func @prints() {
  %s = stablehlo.constant dense<7> : tensor<ui8>
  %v = stablehlo.constant dense<[1, -2]> : tensor<2xi8>
  %m = stablehlo.constant dense<[[1.5, 2.0], [-3.0, 0.25]]> : tensor<2x2xf32>
  %b = stablehlo.constant dense<[true, false]> : tensor<2xi1>
  %c = stablehlo.constant dense<(1.0, -2.0)> : tensor<1xcomplex<f32>>
  %e = stablehlo.constant dense<> : tensor<2x0xi32>
  interpreter.print %s : tensor<ui8>
  interpreter.print %v : tensor<2xi8>
  interpreter.print %m : tensor<2x2xf32>
  interpreter.print %b : tensor<2xi1>
  interpreter.print %c : tensor<1xcomplex<f32>>
  interpreter.print %e : tensor<2x0xi32>
  func.return
}
"""

PRINTED = """tensor<ui8> {7}
tensor<2xi8> {
  [1, -2]
}
tensor<2x2xf32> {
  [
    [1.500000e+00, 2.000000e+00],
    [-3.000000e+00, 2.500000e-01]
  ]
}
tensor<2xi1> {
  [true, false]
}
tensor<1xcomplex<f32>> {
  [[1.000000e+00, -2.000000e+00]]
}
tensor<2x0xi32> {
  [
    [],
    []
  ]
}
"""


def test_print_writes_values_as_the_cpp_interpreter():
    printed = io.StringIO()
    outcomes = run_text(PRINTS, "p.mlir", printed=printed)
    assert [o.verdict for o in outcomes] == [PASSED]
    assert printed.getvalue() == PRINTED


PROBES = """func.func @probes_in_a_loop() {
  %zero = stablehlo.constant dense<0> : tensor<i64>
  %one = stablehlo.constant dense<1> : tensor<i64>
  %three = stablehlo.constant dense<3> : tensor<i64>
  %r:2 = stablehlo.while(%i = %zero, %sum = %zero) : tensor<i64>, tensor<i64>
  cond {
    %lt = stablehlo.compare LT, %i, %three : (tensor<i64>, tensor<i64>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %next = stablehlo.add %sum, %i : tensor<i64>
    %seen = interpreter.probe %next, probe_id = "sum" : tensor<i64>
    %i1 = stablehlo.add %i, %one : tensor<i64>
    stablehlo.return %i1, %seen : tensor<i64>, tensor<i64>
  }
  %h = stablehlo.constant dense<[1.5, -2.0]> : tensor<2xbf16>
  %h2 = interpreter.probe %h, probe_id = "half/0" : tensor<2xbf16>
  %two = stablehlo.constant dense<2> : tensor<i64>
  check.expect_serialized_eq %zero, probe_id = "sum" : tensor<i64>
  check.expect_serialized_eq %one, probe_id = "sum", iter = 1 : tensor<i64>
  check.expect_serialized_eq %three, probe_id = "sum", iter = 2 : tensor<i64>
  check.expect_serialized_eq %h, probe_id = "half/0" : tensor<2xbf16>
  func.return
}
"""


def test_probe_writes_npy_files_and_the_index_and_serialized_eq_reads_them(tmp_path):
    outcomes = run_text(PROBES, "probes.mlir", probe_directory=tmp_path)
    assert [(o.verdict, o.message) for o in outcomes] == [(PASSED, "")]
    index = (tmp_path / "index.csv").read_text().splitlines()
    assert index == [f"sum,tensor<i64>,{tmp_path / 'probe1.npy'}", f"sum,tensor<i64>,{tmp_path / 'probe2.npy'}",
                     f"sum,tensor<i64>,{tmp_path / 'probe3.npy'}",
                     f"half/0,tensor<2xbf16>,{tmp_path / 'probe4.npy'}"]
    assert [int(np.load(tmp_path / f"probe{n}.npy")) for n in (1, 2, 3)] == [0, 1, 3]   # 0, 0+1, 1+2
    bits = np.load(tmp_path / "probe4.npy")
    assert bits.dtype == np.uint16   # NumPy has no bf16: its bits, as the C++ tool saves them
    np.testing.assert_array_equal(bits.view(ml_dtypes.bfloat16), np.array([1.5, -2.0], ml_dtypes.bfloat16))


def test_serialized_eq_failures_name_the_probe_and_iteration(tmp_path):
    wrong = PROBES.replace('check.expect_serialized_eq %three, probe_id = "sum", iter = 2',
                           'check.expect_serialized_eq %two, probe_id = "sum", iter = 2')
    (outcome,) = run_text(wrong, "w.mlir", probe_directory=tmp_path)
    assert outcome.verdict == FAILED and outcome.op == "check.expect_serialized_eq"
    assert outcome.message == "probe 'sum', iteration 2: 1 of 1 elements differ; first: 3 (actual) vs 2 (expected)"
    missing = PROBES.replace("iter = 2", "iter = 3")
    (outcome,) = run_text(missing, "m.mlir", probe_directory=tmp_path)
    assert outcome.message == "probe 'sum' saved 3 values; there is no iteration 3"
    typed = PROBES.replace('check.expect_serialized_eq %h, probe_id = "half/0" : tensor<2xbf16>',
                           'check.expect_serialized_eq %zero, probe_id = "half/0" : tensor<i64>')
    (outcome,) = run_text(typed, "t.mlir", probe_directory=tmp_path)
    assert outcome.message == "probe 'half/0' saved a tensor<2xbf16>, the check expects tensor<i64>"


def test_serialized_eq_reads_files_the_cpp_tool_wrote(tmp_path):
    """The C++ tool saves i64 as '<u8' and complex<f32> as '<f8' (NumPy.cpp): the bytes count."""
    np.save(tmp_path / "probe1.npy", np.array([-1, 5], np.int64).view(np.uint64))
    np.save(tmp_path / "probe2.npy", np.array([1 - 2j], np.complex64).view(np.float64))
    (tmp_path / "index.csv").write_text(f"a,tensor<2xi64>,{tmp_path / 'probe1.npy'}\n"
                                        f"b,tensor<1xcomplex<f32>>,{tmp_path / 'probe2.npy'}\n")
    text = """func.func @reads() {
  %a = stablehlo.constant dense<[-1, 5]> : tensor<2xi64>
  %b = stablehlo.constant dense<(1.0, -2.0)> : tensor<1xcomplex<f32>>
  check.expect_serialized_eq %a, probe_id = "a" : tensor<2xi64>
  check.expect_serialized_eq %b, probe_id = "b" : tensor<1xcomplex<f32>>
  func.return
}"""
    assert [o.verdict for o in run_text(text, "r.mlir", probe_directory=tmp_path)] == [PASSED]


UNPARSABLE = """func.func @fine() {
  func.return
}
// -----
func.func @broken() {
  %0 = stablehlo.constant dense<1> : tensor<i32>
  %1 = stablehlo.add %0 : tensor<i32>
  func.return
}
"""


def test_a_module_the_parser_cannot_read_is_cannot_parse_not_failed(tmp_path, capsys):
    path = tmp_path / "unparsable.mlir"
    path.write_text(UNPARSABLE)
    first, second = run_file(path).outcomes
    assert first.verdict == PASSED
    assert second.verdict == CANNOT_PARSE and second.test is None and second.line == 5
    assert second.message == f"cannot parse MLIR text:\n  {path}:7:24: expected ','"
    assert main(["test", str(path)]) == 0      # counted apart: not a failure
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"CANNOT PARSE {path} (module at line 5): cannot parse MLIR text:"
    assert out[-1] == "1 passed, 0 failed, 1 cannot parse"


DISABLED_FILE = """// RUN-DISABLED(inaccurate) stablehlo-opt -inline %s | stablehlo-translate --interpret
// RUN: stablehlo-opt %s > %t.1
func.func @main() {
  %0 = stablehlo.constant dense<2> : tensor<i32>
  check.expect_eq_const %0, dense<2> : tensor<i32>
  func.return
}
"""


def test_disabled_files_are_reported_and_run_only_when_asked(tmp_path, capsys):
    disabled = tmp_path / "off.mlir"
    disabled.write_text(DISABLED_FILE)
    enabled = tmp_path / "on.mlir"   # an interpreter RUN line wins over a disabled one
    enabled.write_text(DISABLED_FILE.replace("// RUN: stablehlo-opt %s > %t.1",
                                             "// RUN: stablehlo-translate --interpret %s"))
    (outcome,) = run_file(disabled).outcomes
    assert (outcome.verdict, outcome.message) == (DISABLED, "RUN-DISABLED(inaccurate) upstream")
    assert [o.verdict for o in run_file(enabled).outcomes] == [PASSED]
    assert main(["test", str(disabled), str(enabled)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"DISABLED {disabled}: RUN-DISABLED(inaccurate) upstream", "1 passed, 0 failed, 1 disabled"]
    assert main(["test", str(disabled), "--include-disabled"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"disabled upstream, but passing here (1): {disabled}", "1 passed, 0 failed"]


def _suite(tmp_path) -> list[pathlib.Path]:
    """Four one-test files (the third fails) and one that cannot be parsed."""
    files = []
    for number in range(4):
        path = tmp_path / f"f{number}.mlir"
        expected = 5 if number == 2 else 2
        path.write_text(f"""func.func @adds() {{
  %0 = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
  %1 = stablehlo.add %0, %0 : tensor<2xi32>
  %2 = stablehlo.constant dense<[{expected}, 4]> : tensor<2xi32>
  interpreter.print %2 : tensor<2xi32>
  check.expect_eq %1, %2 : tensor<2xi32>
  func.return
}}
""")
        files.append(path)
    (tmp_path / "f4.mlir").write_text(UNPARSABLE)
    return files + [tmp_path / "f4.mlir"]


def test_parallel_runs_give_the_same_report_in_the_same_order(tmp_path, capsys):
    files = _suite(tmp_path)
    one = [(r.file, [(o.verdict, o.message) for o in r.outcomes], r.printed) for r in run_files(files)]
    two = [(r.file, [(o.verdict, o.message) for o in r.outcomes], r.printed)
           for r in run_files(files, jobs=2)]
    assert one == two
    assert [v for _, outcomes, _ in one for v, _ in outcomes] == [PASSED, PASSED, FAILED, PASSED, PASSED,
                                                                  CANNOT_PARSE]
    outputs = []
    for jobs in ("1", "2"):
        assert main(["test", *map(str, files), "--verbose", "-j", jobs]) == 1
        outputs.append(re.sub(r"\d+\.\d\d s", "T s", capsys.readouterr().out))
    assert outputs[0] == outputs[1]
    lines = outputs[0].splitlines()
    assert lines[:5] == [f"PASSED {files[0]} @adds", "  | tensor<2xi32> {", "  |   [2, 4]", "  | }",
                         f"  {files[0]}: T s"]
    assert lines[-1] == "4 passed, 1 failed, 1 cannot parse"


def test_junit_xml(tmp_path, capsys):
    files = _suite(tmp_path)
    xml_path = tmp_path / "report.xml"
    assert main(["test", *map(str, files), "--junit-xml", str(xml_path)]) == 1
    capsys.readouterr()
    root = ElementTree.parse(xml_path).getroot()
    assert (root.tag, root.get("tests"), root.get("failures"), root.get("skipped")) == ("testsuites", "6", "1", "1")
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [str(f) for f in files]
    failure = suites[2].find("testcase/failure")
    assert failure.get("message").startswith(f"FAILED {files[2]} @adds: check.expect_eq at {files[2]}:6:3:")
    assert suites[4].find("testcase/skipped").get("message") == \
        f"CANNOT PARSE {files[4]} (module at line 5): cannot parse MLIR text:"


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_line_only_on_a_terminal(tmp_path):
    files = _suite(tmp_path)[:2]
    terminal, pipe = _Terminal(), io.StringIO()
    report(run_files(files), terminal, total_files=2)
    report(run_files(files), pipe, total_files=2)
    assert "[1/2] 1 passed, 0 failed ...\r\033[K" in terminal.getvalue()
    assert terminal.getvalue().endswith("\r\033[K2 passed, 0 failed\n")
    assert pipe.getvalue() == "2 passed, 0 failed\n"


_ENDLESS = """func.func @spins() {
  %zero = stablehlo.constant dense<0> : tensor<i64>
  %one = stablehlo.constant dense<1> : tensor<i64>
  %0 = stablehlo.while(%i = %zero) : tensor<i64>
    cond {
      %c = stablehlo.compare GE, %i, %zero : (tensor<i64>, tensor<i64>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %n = stablehlo.add %i, %one : tensor<i64>
      stablehlo.return %n : tensor<i64>
    }
  func.return
}
"""


def test_a_file_whose_worker_is_killed_fails_alone_and_the_others_go_on(tmp_path):
    """A worker killed from outside (as the kernel's out-of-memory killer does) while it runs
    a file that never ends: that file fails, run again alone and killed again; the next
    file still gets its verdict."""
    import multiprocessing
    import os
    import signal
    import threading

    endless = tmp_path / "endless.mlir"
    endless.write_text(_ENDLESS)
    files = [endless, _suite(tmp_path)[0]]
    first_result = threading.Event()

    def kill_workers():
        while not first_result.wait(0.5):
            for worker in multiprocessing.active_children():
                os.kill(worker.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_workers, daemon=True)
    killer.start()
    results = run_files(files, jobs=2)
    died = next(results)
    first_result.set()
    killer.join(timeout=60)
    rest = list(results)
    assert died.file == str(endless) and [o.verdict for o in died.outcomes] == [FAILED]
    assert "worker process running this file died" in died.outcomes[0].message
    assert [(r.file, [o.verdict for o in r.outcomes]) for r in rest] == [(str(files[1]), [PASSED])]


# chlo.digamma next to its zeros 1.4616, -0.5041 and -5.6672: XLA CPU's values, which jaxlib's C++
# reference interpreter also gives for CHLO's StableHLO decomposition (bit for bit); SciPy's
# exact digamma is up to 1637 ULP away from them.
DIGAMMA_TEST = """{run_line}
func.func @main() {{
  %x = stablehlo.constant dense<[1.460501, 1.4658601, -0.5052296, -5.6650467]> : tensor<4xf32>
  %y = chlo.digamma %x : tensor<4xf32> -> tensor<4xf32>
  %xla = stablehlo.constant dense<[-0.0010949969, 0.0040838122, -0.010250866, 0.027443767]> : tensor<4xf32>
  stablehlo.custom_call @check.expect_close(%y, %xla) {{has_side_effect = true}} : (tensor<4xf32>, tensor<4xf32>) -> ()
  return
}}
"""
CHLO_PIPELINE_RUN = "// RUN: stablehlo-opt --chlo-pre-serialization-pipeline -inline %s | stablehlo-translate --interpret"
PLAIN_RUN = "// RUN: stablehlo-opt -inline %s | stablehlo-translate --interpret"


def test_chlo_ops_run_as_their_stablehlo_decomposition_where_the_run_line_asks(reference):
    (outcome,) = run_text(DIGAMMA_TEST.format(run_line=CHLO_PIPELINE_RUN), "digamma.mlir")
    assert outcome.verdict == PASSED, outcome.report()
    # without the pipeline, chlo.digamma is evaluated directly (SciPy), hundreds of ULP away
    (outcome,) = run_text(DIGAMMA_TEST.format(run_line=PLAIN_RUN), "digamma.mlir")
    assert outcome.verdict == FAILED and "ULP difference outside [0, 3]" in outcome.message
    # the decomposition as the C++ reference interpreter evaluates it
    text = ("func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  %y = chlo.digamma %x : tensor<4xf32> -> tensor<4xf32>\n  return %y : tensor<4xf32>\n}\n")
    x = np.array([1.460501, 1.4658601, -0.5052296, -5.6650467], np.float32)
    (expected,) = reference.evaluate(legalized(text), [x])
    np.testing.assert_array_equal(expected, np.array([-0.0010949969, 0.0040838122, -0.010250866, 0.027443767],
                                                     np.float32))


def test_a_chlo_decomposition_that_kills_its_process_fails_the_test_only(tmp_path):
    """jaxlib's legalization crashes on chlo.broadcast_next_after of complex operands
    (its verifier lets them through): the rewrite runs in a child process, so the
    test fails with what happened and the run goes on (the test command runs here
    in a child of its own, so that a regression cannot take pytest down)."""
    complex_next_after = (f"{CHLO_PIPELINE_RUN}\nfunc.func @main() {{\n"
                          "  %x = stablehlo.constant dense<(1.0, 2.0)> : tensor<complex<f32>>\n"
                          "  %y = chlo.broadcast_next_after %x, %x : (tensor<complex<f32>>, tensor<complex<f32>>)"
                          " -> tensor<complex<f32>>\n  return\n}\n")
    (tmp_path / "next_after.mlir").write_text(complex_next_after)
    (tmp_path / "digamma.mlir").write_text(DIGAMMA_TEST.format(run_line=CHLO_PIPELINE_RUN))
    done = subprocess.run([sys.executable, "-m", "stablehlo_interp", "test", str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "1 passed, 1 failed"
    assert re.search(r"FAILED .*next_after.mlir .*CHLO's decomposition into StableHLO killed the child process "
                     r"that ran it \(signal \d+", done.stdout), done.stdout
