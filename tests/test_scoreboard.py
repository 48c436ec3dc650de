"""The scoreboard (conformance/scoreboard.py): each backend's outcomes over StableHLO's files
as the conformance runner gives them, by op family, each failure with its finding; a column
from results recorded elsewhere (a TPU's, tests/data/tpu/conform.json)."""

from __future__ import annotations

import collections
import pathlib
import re

import pytest

from stablehlo_interp.conformance import scoreboard
from stablehlo_interp.conformance.conform import BACKEND_ERROR, FAIL, PASS, ConformResult, conform
from stablehlo_interp.conformance.testfile import expand_paths, run_files

ROOT = pathlib.Path(__file__).resolve().parent.parent
SUITE = ROOT.parent / "shared" / "stablehlo-tests"
TPU_RESULTS = ROOT / "tests" / "data" / "tpu" / "conform.json"
needs_suite = pytest.mark.skipif(not SUITE.is_dir(), reason="StableHLO's test files are not beside the project")
FILES = ["interpret/add.mlir", "interpret/ceil.mlir", "interpret/while.mlir"]


@pytest.mark.parametrize("verdict, message, expected", [
    (PASS, "", scoreboard.PASSED), (FAIL, "check failed", scoreboard.FAILED),
    (BACKEND_ERROR, "cannot compile: UNIMPLEMENTED", scoreboard.CANNOT_COMPILE),
    (BACKEND_ERROR, "crashed: signal 6", scoreboard.CRASH),
    (BACKEND_ERROR, "the process running this file died (e.g. the backend's compiler aborted", scoreboard.CRASH),
    (BACKEND_ERROR, "failed to run: out of memory", scoreboard.RUN_ERROR),
])
def test_each_verdict_is_one_outcome(verdict, message, expected):
    assert scoreboard.outcome(ConformResult("f.mlir", "t", 1, verdict, message)) == expected


@pytest.mark.parametrize("backend, failure, outcome, link", [
    ("tpu", "interpret/exponential.mlir @exp_f32: check.expect_almost_eq_const: 1 of 4 elements differ",
     scoreboard.FAILED, "findings.md#tpu-transcendentals"),
    ("tpu", "interpret/check.mlir @check_almost_eq: check.expect_almost_eq: 1 of 1 elements differ",
     scoreboard.FAILED, None),                       # "expect" is no exp
    ("cpu", 'interpret/all_gather.mlir @main: cannot compile: error: "-":10:38: operation being parsed with an '
     "unregistered dialect", scoreboard.CANNOT_COMPILE, "findings.md#interpreter-only-tests"),
    ("reference", "interpret/chlo/scan.mlir @scan_cumsum_1d: crashed: signal 6", scoreboard.CRASH,
     "findings.md#reference-chlo"),
    ("iree", "interpret/add.mlir @add_op_test_si2: failed to run: ValueError: Unsupported VM Buffer -> numpy dtype "
     "mapping", scoreboard.RUN_ERROR, "findings.md#iree-runtime-dtypes"),
    ("iree", "interpret/add.mlir @add_op_test_si2: failed to run: out of memory", scoreboard.RUN_ERROR, None),
    ("cpu", "interpret/cbrt.mlir @cbrt_op_test_c128: cannot compile: UNKNOWN: Expected element type in shape to be "
     "floating for cbrt operation; got C128", scoreboard.CANNOT_COMPILE, "conformance.md#xla-cannot-compile"),
    ("cpu", "interpret/quantized_ops.mlir @uniform_quantize: cannot compile: 'stablehlo.uniform_quantize' op can't be "
     "translated to XLA HLO", scoreboard.CANNOT_COMPILE, "findings.md#quantized-ops-not-translated"),
    ("reference", "interpret/printing.mlir @main: crashed: signal 6: LLVM ERROR: Unsupported op: interpreter.print",
     scoreboard.CRASH, "findings.md#reference-print"),
])
def test_a_failure_links_to_the_finding_that_explains_it(backend, failure, outcome, link):
    assert scoreboard.finding_for(backend, failure, outcome) == link


@needs_suite
def test_a_test_file_counts_under_the_family_of_the_op_it_tests():
    family = {name: scoreboard.family_of(str(SUITE / name)) for name in (
        "interpret/add.mlir", "interpret/while.mlir", "interpret/sort.mlir", "testdata/abs_float64_20_20.mlir",
        "testdata/acosh_float32_20_20_chlo.mlir", "testdata/scatter_add_bfloat16_2_3_bfloat16_2_1_3.mlir")}
    assert family == {"interpret/add.mlir": "elementwise", "interpret/while.mlir": "control_flow",
                      "interpret/sort.mlir": "sorting", "testdata/abs_float64_20_20.mlir": "elementwise",
                      "testdata/acosh_float32_20_20_chlo.mlir": "chlo",
                      "testdata/scatter_add_bfloat16_2_3_bfloat16_2_1_3.mlir": "indexing"}


@needs_suite
def test_the_page_counts_what_each_backend_did_and_links_the_tpus_failures():
    files = [SUITE / name for name in FILES]
    page = scoreboard.build(files, [("cpu", "cpu"), ("tpu", f"results:{TPU_RESULTS}")], command="the command")
    totals = {row[0]: row[1:] for row in re.findall(r"^\| (\w+) \| ([^\n]*) \|$", page.split("## Totals")[1]
                                                    .split("Outcomes:")[0], re.MULTILINE)}

    def counted(backend: str) -> dict:
        cells = [int(cell) for cell in totals[backend][0].split(" | ")]
        return dict(zip((*scoreboard.OUTCOMES, "tests", "files"), cells))

    # the interpreter's column is stablehlo-interp test's verdicts over the same files
    tested = collections.Counter(outcome.verdict for result in run_files(expand_paths(files))
                                 for outcome in result.outcomes)
    assert counted("interpreter")[scoreboard.PASSED] == tested["passed"] and counted("interpreter")["files"] == 3
    # the cpu's column is conform's report, outcome by outcome
    report = collections.Counter(scoreboard.outcome(r) for r in conform(files, "cpu").results)
    assert {o: counted("cpu")[o] for o in scoreboard.OUTCOMES} == {o: report[o] for o in scoreboard.OUTCOMES}
    # the TPU's recorded verdicts, of these files only (its sample, conform_files.txt, left add.mlir out):
    # ceil of a subnormal flushed, linked to its finding
    sampled = set((TPU_RESULTS.parent / "conform_files.txt").read_text().split())
    tpu = counted("tpu")
    assert tpu["files"] == len(sampled & set(FILES)) == 2 and tpu[scoreboard.FAILED] >= 2
    assert re.search(r"\*\*fail\*\*, \d+ test\(s\) — \[finding\]\(findings\.md#tpu-subnormals\):\n"
                     r"(  \* .*\n)*  \* `interpret/ceil\.mlir` @ceil_op_test_f32:", page)
    assert "| elementwise |" in page and "| control_flow |" in page
    assert "```bash\nthe command\n```" in page and "jax 0.10.2" in page
    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', (ROOT / "docs" / "findings.md").read_text()))
    for link in set(re.findall(r"\(findings\.md#([\w-]+)\)", page)):
        assert link in anchors


def test_every_finding_the_scoreboard_names_is_in_the_docs():
    docs = ROOT / "docs"
    for _, _, _, link in scoreboard.FINDINGS:
        page, _, anchor = link.partition("#")
        text = (docs / page).read_text()
        headings = {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                    for line in text.splitlines() if line.startswith("#")}
        assert f'<a id="{anchor}"></a>' in text or anchor in headings, link


def test_the_page_says_the_command_that_made_it_however_the_cli_was_started(tmp_path, monkeypatch):
    """The commands' block holds the command as typed, whether the CLI was started as
    ``stablehlo-interp`` or as ``python -m stablehlo_interp`` (argv[0] then is __main__.py)."""
    from stablehlo_interp.cli import main

    page = tmp_path / "board.md"
    arguments = ["conform", "--scoreboard", str(page), str(ROOT / "examples" / "conform" / "arithmetic.mlir")]
    monkeypatch.setattr("sys.argv", [str(ROOT / "stablehlo_interp" / "__main__.py"), *arguments])
    assert main() == 0
    assert f"```bash\nstablehlo-interp conform --scoreboard {page} {ROOT}/examples/conform/arithmetic.mlir\n```" \
        in page.read_text()
