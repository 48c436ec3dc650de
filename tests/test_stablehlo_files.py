"""StableHLO's own interpreter tests, run through ``stablehlo-interp test``.

The files are ``../shared/stablehlo-tests`` beside the project (``interpret/``,
``testdata/``; the environment variable STABLEHLO_TESTS_DIR points elsewhere).
What is expected of each is what upstream expects of ``stablehlo-translate
--interpret``, read from the files themselves, independently of our runner:

* a file whose ``// RUN:`` lines interpret it: every test in it passes;
* a file whose interpreting RUN line upstream disabled (``// RUN-DISABLED(reason)``
  and no ``// RUN:`` line with ``--interpret``): not run, verdict disabled;
* the modules in KNOWN_DIFFERENCES: the verdict given there, for the reason given;
  the files in KNOWN_WITHOUT_TESTS: no verdict, for the reason given.

Any other verdict, a file without verdicts, or a verdict for a file that is not
there fails the test. The whole directory runs (about 1770 tests, 25 s with
``-j 2`` on the project's two cores), well within the default suite's budget.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
TESTS_DIRECTORY = pathlib.Path(os.environ.get("STABLEHLO_TESTS_DIR", REPO.parent / "shared" / "stablehlo-tests")).resolve()

# (file, the JUnit case's name) -> (expected status, why it differs from upstream's)
KNOWN_DIFFERENCES = {
    ("interpret/collective_broadcast.mlir", "interpret/collective_broadcast.mlir (module at line 226)"):
        ("cannot parse", "collective_broadcast with several operands: newer StableHLO than jaxlib 0.10.2's parser"),
    ("interpret/collective_broadcast.mlir", "interpret/collective_broadcast.mlir (module at line 255)"):
        ("cannot parse", "collective_broadcast with several results: newer StableHLO than jaxlib 0.10.2's parser"),
    ("interpret/collective_reduce.mlir", "interpret/collective_reduce.mlir (module at line 1)"):
        ("cannot parse", "collective_reduce: an op jaxlib 0.10.2's StableHLO dialect does not have"),
}
# files upstream runs in a way that gives `stablehlo-interp test` no test to run, and why
KNOWN_WITHOUT_TESTS = {
    "interpret/api_input_arguments.mlir": "its one function takes arguments: upstream passes them with --args and "
                                          "FileChecks what it prints; only functions without arguments are tests here",
}

_RUN_INTERPRET = re.compile(r"^\s*// RUN:.*--interpret", re.MULTILINE)
_DISABLED_INTERPRET = re.compile(r"^\s*// RUN-DISABLED.*--interpret", re.MULTILINE)


def _upstream_runs(text: str) -> bool:
    """Whether upstream's lit runs ``stablehlo-translate --interpret`` on the file."""
    if _RUN_INTERPRET.search(text):
        return True
    assert _DISABLED_INTERPRET.search(text), "a test file with no interpreting RUN line, disabled or not"
    return False


def _verdicts(junit_path: pathlib.Path) -> list[tuple[str, str, str]]:
    """``(file relative to the directory, case name, verdict)`` from the runner's JUnit XML
    (a name can repeat: each of a file's modules can have its @main):
    passed, failure, error, or a skipped case's verdict (cannot parse, disabled)."""
    verdicts = []
    for case in ElementTree.parse(junit_path).iter("testcase"):
        file = pathlib.Path(case.get("classname")).relative_to(TESTS_DIRECTORY).as_posix()
        name = case.get("name").replace(f"{TESTS_DIRECTORY}/", "")
        detail = next(iter(case), None)
        if detail is None:
            verdict = "passed"
        elif detail.tag == "skipped":
            message = detail.get("message")   # the report's first line: the verdict in capitals, the name ...
            verdict = next((v for v in ("cannot parse", "disabled") if message.startswith(v.upper() + " ")), message)
        else:
            verdict = detail.tag
        verdicts.append((file, name, verdict))
    return verdicts


@pytest.mark.timeout(900)
def test_stablehlo_test_files_get_upstreams_verdicts(tmp_path):
    if not TESTS_DIRECTORY.is_dir():
        pytest.skip(f"StableHLO's test files are not here: {TESTS_DIRECTORY} does not exist (a checkout's "
                    "stablehlo-tests directory beside the project, or STABLEHLO_TESTS_DIR, runs them)")
    files = sorted(TESTS_DIRECTORY.rglob("*.mlir"))
    assert files, f"no *.mlir file under {TESTS_DIRECTORY}"
    junit_path = tmp_path / "report.xml"
    run = subprocess.run([sys.executable, "-m", "stablehlo_interp", "test", "-j", "2", "--junit-xml", str(junit_path),
                          str(TESTS_DIRECTORY)], cwd=tmp_path, capture_output=True, text=True, timeout=840)
    assert junit_path.exists(), f"no report (exit status {run.returncode}):\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
    verdicts = _verdicts(junit_path)

    runs_upstream = {f.relative_to(TESTS_DIRECTORY).as_posix(): _upstream_runs(f.read_text(encoding="utf-8"))
                     for f in files}
    unexpected = []
    for file, name, verdict in verdicts:
        if file not in runs_upstream:
            unexpected.append(f"{file} {name}: {verdict}, for a file that is not in the directory")
            continue
        expected = ("passed" if runs_upstream[file] else "disabled", "upstream's RUN line")
        expected = KNOWN_DIFFERENCES.get((file, name), expected)
        if verdict != expected[0]:
            unexpected.append(f"{file} {name}: {verdict}, expected {expected[0]} ({expected[1]})")
    judged = {file for file, _, _ in verdicts}
    unexpected += [f"{file}: no verdict" for file in runs_upstream if file not in judged | KNOWN_WITHOUT_TESTS.keys()]
    unexpected += [f"{file}: verdicts, expected none ({why})" for file, why in KNOWN_WITHOUT_TESTS.items()
                   if file in judged or file not in runs_upstream]
    unexpected += [f"{file} {name}: no verdict, expected {status} ({why})"
                   for (file, name), (status, why) in KNOWN_DIFFERENCES.items()
                   if (file, name) not in {(f, n) for f, n, _ in verdicts}]
    assert not unexpected, f"{len(unexpected)} verdicts differ from upstream's:\n" + "\n".join(unexpected[:50]) + \
        f"\n(the runner's output ends:)\n{run.stdout[-2000:]}"
    passed = sum(verdict == "passed" for _, _, verdict in verdicts)
    assert passed > 1000, f"only {passed} tests passed: the runner found fewer tests than StableHLO's files hold"
    assert run.returncode == 0, run.stdout[-3000:]
