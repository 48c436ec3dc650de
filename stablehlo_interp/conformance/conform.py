"""Conformance testing of a backend with test files in StableHLO's format
(``stablehlo-interp conform``, ``si.conform``).

    report = si.conform(["tests/data/conform/"], backend="cpu")
    print(report.table())

For each test (a public function without arguments, as ``stablehlo-interp test``
finds them, conformance/testfile.py, and with its CHLO ops rewritten as StableHLO
where the file's RUN line asks for it, as there):

1. its check ops become results (ir/edit.py :func:`checks_as_results`): a backend
   cannot compile ``check.*`` ops or ``@check.*`` custom calls, so the test
   function returns the values they check instead, and a *judge* module applies
   the same checks (same attributes, same rules as ``stablehlo-interp test``) to
   values given as arguments;
2. the backend compiles and runs that program (backends/: a JAX platform,
   IREE, a command, your callable);
3. the judge checks the backend's values: **pass** or **fail**;
4. the interpreter runs the same program; the backend's checked values (the first
   operand of each check) are compared with the interpreter's, element by element,
   as ULP distances
   (:func:`~stablehlo_interp.engine.numerics.ulp_difference`, the rule of
   ``check.expect_close``), in a histogram;
5. for a failure, :func:`~stablehlo_interp.tools.compare.compare` (no tolerance) says
   what kind of difference the backend's values have (``difference_kind``: rounding
   noise, beyond the rounding bound of an op, unbounded) and finds the first op beyond
   its bound (judge/bounds.py).

Other verdicts: **backend error** (the backend cannot compile or run the
program), **cannot parse** (jaxlib's parser cannot read the module), and
**interpreter error** (this interpreter cannot load or run it: no verdict on the
backend). ``interpreter_passes`` says whether the interpreter's own values pass
the checks (``stablehlo-interp test``'s verdict).
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any
from dataclasses import asdict, dataclass, field

import ml_dtypes
import numpy as np

from ..errors import ParseError
from ..ir.edit import checks_as_results
from ..engine.numerics import ulp_difference
from ..program import Program
from ..backends import Backend, BackendError, resolve
from ..judge.bounds import NOISE, PRECISION
from ..tools.compare import compare
from . import junit
from .testfile import (disabled_reason, expand_paths, legalizes_chlo, location_in_file, outcome_of_error,
    program_of_part, split_modules)
from ..ir.child_process import ending, last_words
from ..ir.process_pool import ordered_map

PASS, FAIL, BACKEND_ERROR, CANNOT_PARSE, INTERPRETER_ERROR = (
    "pass", "fail", "backend error", "cannot parse", "interpreter error")
VERDICTS = (PASS, FAIL, BACKEND_ERROR, CANNOT_PARSE, INTERPRETER_ERROR)
# ULP distance buckets of the histogram; "non-finite": one side NaN or inf, the other not
# (or infinities of different signs); "differs": integers or booleans that are not equal.
BUCKETS = ("0", "1", "2-3", "4-15", "16-255", ">=256", "non-finite", "differs")
_BUCKET_EDGES = (0, 1, 2, 4, 16, 256)
_JUNIT_STATUS = {PASS: junit.PASSED, FAIL: junit.FAILURE, BACKEND_ERROR: junit.ERROR,
                 CANNOT_PARSE: junit.SKIPPED, INTERPRETER_ERROR: junit.SKIPPED}


@dataclass
class ConformResult:
    """The verdict on one test (or on a module that did not load: ``test`` None)."""

    file: str
    test: str | None
    line: int
    verdict: str
    message: str = ""
    checks: int = 0
    histogram: dict = field(default_factory=dict)   # bucket -> elements (backend vs interpreter)
    max_ulp: int | None = None                      # largest finite ULP distance to the interpreter
    interpreter_passes: bool | None = None
    divergence: str | None = None                   # the first divergent op, for a failure
    difference_kind: str | None = None              # for a failure: judge/bounds.py's NOISE, BEYOND or UNBOUNDED
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.file} @{self.test}" if self.test else f"{self.file} (module at line {self.line})"

    def report(self) -> str:
        text = f"{self.verdict.upper()} {self.name}" + (f": {self.message}" if self.message else "")
        if self.divergence:
            text += "\n" + self.divergence
        return text


@dataclass
class ConformReport:
    """Every result of a :func:`conform` run, with totals, a table, JSON and JUnit XML."""

    backend: str
    results: list = field(default_factory=list)
    settings: tuple = ()   # the backend's settings that change semantics (Backend.settings)

    def counts(self) -> dict:
        totals = dict.fromkeys(VERDICTS, 0)
        for result in self.results:
            totals[result.verdict] += 1
        return totals

    def histogram(self) -> dict:
        totals = dict.fromkeys(BUCKETS, 0)
        for result in self.results:
            for bucket, count in result.histogram.items():
                totals[bucket] += count
        return totals

    def summary(self) -> str:
        counts = ", ".join(f"{n} {v}" for v, n in self.counts().items() if n or v in (PASS, FAIL))
        histogram = "  ".join(f"{b}: {n}" for b, n in self.histogram().items() if n)
        settings = "".join(f"\n  setting: {sentence}" for sentence in self.settings)
        return (f"{self.backend}: {counts}{settings}\n"
                f"checked elements by ULP distance to the interpreter: {histogram or 'none'}")

    def table(self, everything: bool = False) -> str:
        """One row per test that did not pass (every test with ``everything``):
        verdict, max ULP distance to the interpreter, whether the interpreter's own
        values pass, the test; then the message, and the first divergent op."""
        rows = [f"{'verdict':<17} {'max ULP':>8} {'interp':>6}  test"]
        for result in self.results:
            if result.verdict == PASS and not everything:
                continue
            ulp = "-" if result.max_ulp is None else str(result.max_ulp)
            interp = {None: "-", True: "pass", False: "fail"}[result.interpreter_passes]
            rows.append(f"{result.verdict:<17} {ulp:>8} {interp:>6}  {result.name}")
            for line in filter(None, [result.message] + (result.divergence or "").splitlines()):
                rows.append(f"{'':<35}{line}")
        return "\n".join(rows + [self.summary()])

    def as_dicts(self) -> list[dict]:
        return [asdict(result) for result in self.results]

    def write_json(self, path) -> None:
        document = {"backend": self.backend, "settings": list(self.settings), "counts": self.counts(),
                    "histogram": self.histogram(), "results": self.as_dicts()}
        pathlib.Path(path).write_text(json.dumps(document, indent=1))

    def write_junit(self, path) -> None:
        junit.write(path, [junit.Case(r.file, r.test or r.name, _JUNIT_STATUS[r.verdict], r.seconds, r.report())
                           for r in self.results], f"stablehlo-interp conform --backend {self.backend}")


def conform(paths: str | os.PathLike | Iterable[str | os.PathLike], backend: Any = "cpu", jobs: int = 1,
            include_disabled: bool = False,
            progress: Callable[[list[ConformResult]], None] | None = None) -> ConformReport:
    """Run the tests of ``paths`` (files, or directories of ``*.mlir``) on ``backend``
    (what :func:`~stablehlo_interp.backends.resolve` takes: a JAX platform name,
    ``"iree"``, a :class:`~stablehlo_interp.backends.Backend`; it must pickle)
    and judge them (module docstring). Files run in ``jobs`` worker processes (at
    least one: a backend that aborts takes only its process down, and its file gets
    a backend error). ``progress``: called with each file's results as they come, in order."""
    files = [str(f) for f in expand_paths([paths] if isinstance(paths, (str, pathlib.Path)) else paths)]
    backend = resolve(backend)
    report = ConformReport(backend.name, settings=tuple(backend.settings))
    task = functools.partial(conform_file, backend=backend, include_disabled=include_disabled)
    crashed = functools.partial(_crashed, backend=backend, include_disabled=include_disabled)
    for results in ordered_map(task, files, jobs, on_crash=crashed):
        report.results.extend(results)
        if progress is not None:
            progress(results)
    return report


def _crashed(path: str, backend: Backend, include_disabled: bool) -> list[ConformResult]:
    """The results of a file whose worker process died, from one more run in a child
    that keeps its stderr: its verdict then carries why (an XLA CHECK's fatal line),
    or, where the child ends well this time, its results."""
    with tempfile.TemporaryDirectory() as folder:
        answer = pathlib.Path(folder) / "results.pickle"
        answer.write_bytes(pickle.dumps((path, backend, include_disabled)))
        done = subprocess.run([sys.executable, "-c", _CONFORM_ALONE, str(answer)], capture_output=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, sys.path))})
        if done.returncode == 0:
            return pickle.loads(answer.read_bytes())
    why = last_words(done.stderr.decode("utf-8", "replace"))
    return [ConformResult(path, None, 1, BACKEND_ERROR, f"the process running this file died ({ending(done.returncode)})"
                          + (f": {why}" if why else ""))]


# A child's run of one file: reads (path, backend, include_disabled) from the file it is
# given and writes the file's results there.
_CONFORM_ALONE = """if True:
    import pathlib, pickle, sys
    from stablehlo_interp.conformance.conform import conform_file
    answer = pathlib.Path(sys.argv[1])
    path, backend, include_disabled = pickle.loads(answer.read_bytes())
    answer.write_bytes(pickle.dumps(conform_file(path, backend, include_disabled)))
"""


def conform_file(path: str, backend="cpu", include_disabled: bool = False) -> list[ConformResult]:
    """The results of one file's tests on ``backend`` (as for :func:`conform`; none for a file
    whose interpreter RUN line upstream disabled, unless ``include_disabled``)."""
    backend = resolve(backend)
    text = pathlib.Path(path).read_text(encoding="utf-8")
    if disabled_reason(text) is not None and not include_disabled:
        return []
    results = []
    chlo_as_stablehlo = legalizes_chlo(text)   # the program the file's RUN line interprets
    for first, part in split_modules(text):
        started = time.perf_counter()
        try:
            program = program_of_part(part, chlo_as_stablehlo)
        except Exception as error:  # noqa: BLE001 - reported as this module's verdict
            verdict = CANNOT_PARSE if isinstance(error, ParseError) else INTERPRETER_ERROR
            results.append(ConformResult(path, None, first, verdict, _message(path, error)))
            continue
        source = program.module.operation.get_asm(enable_debug_info=True)
        for function in program.functions.values():
            if function.visibility == "private" or function.arg_types:
                continue
            line = function.location.frame.line if function.location.frame else first
            result = _conform_test(path, source, function.name, line, backend)
            result.seconds = time.perf_counter() - started
            started = time.perf_counter()
            results.append(result)
    return results


def _conform_test(path: str, source: str, function: str, line: int, backend: Backend) -> ConformResult:
    result = ConformResult(path, function, line, INTERPRETER_ERROR)
    try:
        program_text, judge_text, actual = checks_as_results(source, function)
        result.checks = len(actual)
        program, judge = Program(program_text), Program(judge_text)
        ours = program.run()
    except Exception as error:  # noqa: BLE001 - no verdict on the backend without the interpreter's values
        result.message = _message(path, error)
        return result
    try:
        theirs = backend(program_text, [])
    except Exception as error:  # noqa: BLE001 - the backend could not compile or run it (a user's raises anything)
        result.verdict = BACKEND_ERROR
        said = (f"{error.kind}: {error.message}" if isinstance(error, BackendError)
                else f"{type(error).__name__}: {error}")
        result.message = " ".join(said.split())[:500]
        return result
    result.histogram, result.max_ulp = _ulp_histogram([ours[i] for i in actual], [theirs[i] for i in actual])
    result.interpreter_passes = _passes(judge, ours) is None
    failure = _passes(judge, theirs)
    result.verdict = PASS if failure is None else FAIL
    if failure is not None:
        result.message = _message(path, failure)
        result.difference_kind, result.divergence = _first_divergence(program_text, backend, path)
    return result


def _passes(judge: Program, values) -> Exception | None:
    try:
        judge.run(*values)
    except Exception as error:  # noqa: BLE001 - a check failure, or the values do not fit the checks
        return error
    return None


def _message(path: str, error: Exception) -> str:
    outcome = outcome_of_error(path, None, 0, error)
    where = f" at {outcome.location}" if outcome.location else ""
    head = f"{outcome.op}{where}: " if outcome.op else ""
    return head + outcome.message.replace("\n", "; ")


def _ulp_histogram(ours, theirs) -> tuple[dict, int | None]:
    histogram = dict.fromkeys(BUCKETS, 0)
    largest = None
    for a, b in zip(ours, theirs):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            histogram["differs"] += int(a.size)
            continue
        if not _is_float(a.dtype):   # integers and booleans: equal or not
            equal = a == b
            histogram["0"] += int(equal.sum())
            histogram["differs"] += int((~equal).sum())
            continue
        parts = (a.real, b.real, a.imag, b.imag) if a.dtype.kind == "c" else (a, b)
        finite = np.ones(a.shape, bool)
        for x in parts:
            finite &= np.isfinite(x)
        distance = ulp_difference(b, a)
        nonfinite_mismatch = ~finite & (distance > 0)
        histogram["non-finite"] += int(nonfinite_mismatch.sum())
        finite_distances = distance[finite | (distance == 0)]
        counts = np.histogram(finite_distances.astype(np.float64), bins=(*_BUCKET_EDGES, np.inf))[0]
        for bucket, count in zip(BUCKETS, counts):
            histogram[bucket] += int(count)
        if finite.any():
            top = int(distance[finite].max())
            largest = top if largest is None else max(largest, top)
    return {b: n for b, n in histogram.items() if n}, largest


def _is_float(dtype) -> bool:
    if dtype.kind == "c":
        return True
    try:
        ml_dtypes.finfo(dtype)
    except ValueError:
        return False
    return True


def _first_divergence(program_text: str, backend: Backend, path: str) -> tuple[str | None, str | None]:
    """The kind of the backend's difference (None when unknown) and its description."""
    try:
        comparison = compare(program_text, backend=backend, tolerance=(0.0, 0.0))
    except Exception as error:  # noqa: BLE001 - the search is extra information, not the verdict
        return None, f"(no divergence search: {type(error).__name__}: {error})"
    if comparison.ok:
        return None, ("the backend's values are the interpreter's: "
                      "the test's expectation does not hold under the interpreter either")
    if comparison.divergence is None:
        return (NOISE if comparison.noise_only else PRECISION if comparison.explained else None), comparison.note
    text = comparison.divergence.describe(backend.name)
    where = location_in_file(comparison.divergence.location, path)
    text = text.replace(f" at {comparison.divergence.location}", f" at {where}", 1) if where else text
    return comparison.divergence.kind, text
