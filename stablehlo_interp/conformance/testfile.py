"""Run test files written like StableHLO's interpreter tests (``stablehlo-interp test``).

A file is split at ``// -----`` lines into independent modules. In each module,
every public function without arguments is one test: it passes when it runs to
the end, and fails when a check op (``check.expect_eq`` ..., ops/check.py) finds
a mismatch or anything else goes wrong. Private functions and functions with
arguments are helpers, not tests; tests of collectives run helpers as a grid of
processes with ``interpreter.run_parallel`` (``programs = [[@f, @g], ...]``:
replicas by partitions; ops/collectives.py).

A file whose interpreting RUN line first pipes it through
``stablehlo-opt --chlo-pre-serialization-pipeline`` (or ``--chlo-legalize-to-stablehlo``)
has its CHLO ops rewritten as their StableHLO decomposition before it runs, as
upstream's interpreter sees them (ir/chlo_legalization.py); elsewhere CHLO ops
are evaluated directly (ops/chlo.py).

Verdicts besides passed and failed, counted apart:

* **cannot parse**: jaxlib's MLIR parser (or the check dialect's rewrite,
  ir/check_dialect.py) cannot read or verify a module, e.g. an op written as a
  newer StableHLO allows; the parser's message is the report. It does not stop
  the run, and does not make the run fail.
* **disabled**: upstream turned the file's interpreter RUN line off
  (``// RUN-DISABLED(reason) ... --interpret``, and no ``// RUN:`` line runs the
  interpreter). Not run unless ``include_disabled``; then its tests get verdicts
  as any other, marked ``disabled_upstream``.

``interpreter.print`` writes to the file's ``printed`` text; ``interpreter.probe``
writes to ``probe_directory`` (a fresh temporary directory per file by default),
each module starting a new index (ops/interpreter.py).
"""

from __future__ import annotations

import functools
import io
import pathlib
import re
import tempfile
import textwrap
import time
from dataclasses import dataclass, field

from ..engine.hostio import Instruments
from ..engine.run import RunContext
from ..errors import InterpreterError, OpError, ParseError
from ..ir import sources
from ..ir.chlo_legalization import legalize_chlo
from ..program import Program
from . import junit
from .progress import ProgressLine
from ..ir.process_pool import ordered_map

SPLIT_MARKER = re.compile(r"^\s*// -----")
_PARSER_LOCATION = re.compile(r'loc\("-":(\d+):(\d+)\)')  # in MLIR diagnostics
_CHECK_SYNTAX_LINE = re.compile(r"^line (\d+): ")  # check_dialect's errors
_RUN_LINE = re.compile(r"^\s*// RUN:(.*)$", re.MULTILINE)
_DISABLED_RUN_LINE = re.compile(r"^\s*// RUN-DISABLED(?:\(([^)]*)\))?:?(.*)$", re.MULTILINE)

PASSED, FAILED, CANNOT_PARSE, DISABLED = "passed", "failed", "cannot parse", "disabled"
VERDICTS = (PASSED, FAILED, CANNOT_PARSE, DISABLED)
_JUNIT_STATUS = {PASSED: junit.PASSED, FAILED: junit.FAILURE, CANNOT_PARSE: junit.SKIPPED, DISABLED: junit.SKIPPED}


@dataclass
class Outcome:
    """The verdict on one test, or on a whole split module that did not load, or
    on a whole file that is disabled.

    ``test`` is the function name (None for a module or a file); ``line`` is
    where the function (or the module) starts in ``file``.
    """

    file: str
    test: str | None
    line: int
    verdict: str
    op: str | None = None
    location: str | None = None
    message: str = ""
    disabled_upstream: bool = False

    @property
    def passed(self) -> bool:
        return self.verdict == PASSED

    @property
    def name(self) -> str:
        if self.test:
            return f"{self.file} @{self.test}"
        return self.file if self.verdict == DISABLED else f"{self.file} (module at line {self.line})"

    def report(self) -> str:
        """One line (continuation lines indented) for the test report."""
        label = self.verdict.upper()
        if self.passed:
            return f"{label} {self.name}"
        where = f" at {self.location}" if self.location else ""
        head = f"{self.op}{where}: " if self.op else ""
        first, _, rest = self.message.partition("\n")
        details = textwrap.indent(textwrap.dedent(rest), "    ")
        return f"{label} {self.name}: {head}{first}" + (f"\n{details}" if rest else "")


@dataclass
class FileResult:
    """The outcomes of one file, how long it took, and what ``interpreter.print`` wrote."""

    file: str
    outcomes: list = field(default_factory=list)
    seconds: float = 0.0
    printed: str = ""

    def count(self, verdict: str) -> int:
        return sum(o.verdict == verdict for o in self.outcomes)


def split_modules(text: str) -> list[tuple[int, str]]:
    """``(first line, text)`` of each ``// -----`` separated part. Each part is
    padded with empty lines so that MLIR reports the file's own line numbers."""
    parts: list[tuple[int, list[str]]] = []
    start, current = 1, list[str]()
    for number, line in enumerate(text.split("\n"), start=1):
        if SPLIT_MARKER.match(line):
            parts.append((start, current))
            start, current = number + 1, []
        else:
            current.append(line)
    parts.append((start, current))
    return [(first, "\n" * (first - 1) + "\n".join(lines)) for first, lines in parts]


def disabled_reason(text: str) -> str | None:
    """Why upstream does not run the file with the interpreter, or None when it does
    (or when no RUN line says either way)."""
    if any("--interpret" in command for command in _RUN_LINE.findall(text)):
        return None
    for reason, command in _DISABLED_RUN_LINE.findall(text):
        if "--interpret" in command:
            return reason or "disabled"
    return None


_CHLO_LEGALIZING_OPTIONS = ("--chlo-pre-serialization-pipeline", "--chlo-legalize-to-stablehlo")


def legalizes_chlo(text: str) -> bool:
    """Whether the RUN line that interprets the file (or, in a disabled file, the
    disabled one) rewrites its CHLO ops as StableHLO first."""
    commands = [c for c in _RUN_LINE.findall(text) if "--interpret" in c] or \
        [c for _, c in _DISABLED_RUN_LINE.findall(text) if "--interpret" in c]
    return any(option in command for command in commands for option in _CHLO_LEGALIZING_OPTIONS)


def program_of_part(part: str, chlo_as_stablehlo: bool) -> Program:
    """One split module as a program; ``chlo_as_stablehlo``: its CHLO ops rewritten as
    StableHLO first (:func:`legalizes_chlo` of the file)."""
    if not chlo_as_stablehlo:
        return Program(part)
    sources.parse(part)   # a part that does not parse is "cannot parse", with or without the rewrite
    return Program(legalize_chlo(part))


def run_text(text: str, file: str, probe_directory=None, printed=None) -> list[Outcome]:
    """The outcomes of every test in ``text``. ``probe_directory``: where
    ``interpreter.probe`` writes (None: an error if a test probes); ``printed``: a
    text stream for ``interpreter.print`` (None: standard output)."""
    outcomes = []
    chlo_as_stablehlo = legalizes_chlo(text)
    for first, part in split_modules(text):
        try:
            program = program_of_part(part, chlo_as_stablehlo)
        except Exception as error:  # noqa: BLE001 - reported as this module's failure
            outcomes.append(outcome_of_error(file, None, first, error))
            continue
        instruments = Instruments(printed, probe_directory)   # a new probe index per module
        for function in program.functions.values():
            if function.visibility == "private" or function.arg_types:
                continue
            line = function.location.frame.line if function.location.frame else first
            try:
                program.execute(program.runnable(function.name), [], RunContext(instruments=instruments))
            except Exception as error:  # noqa: BLE001 - every failure is reported, none stops the run
                outcomes.append(outcome_of_error(file, function.name, line, error))
            else:
                outcomes.append(Outcome(file, function.name, line, PASSED))
    return outcomes


def run_file(path, include_disabled: bool = False, probe_directory=None) -> FileResult:
    """Run one test file. ``probe_directory``: where probes go (default: a temporary
    directory, removed afterwards)."""
    path = pathlib.Path(path)
    started = time.perf_counter()
    result = FileResult(str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        result.outcomes = [Outcome(str(path), None, 1, FAILED, message=f"cannot read the file: {error}")]
        return result
    reason = disabled_reason(text)
    if reason is not None and not include_disabled:
        result.outcomes = [Outcome(str(path), None, 1, DISABLED, message=f"RUN-DISABLED({reason}) upstream",
                                   disabled_upstream=True)]
        return result
    printed = io.StringIO()
    if probe_directory is None:
        with tempfile.TemporaryDirectory(prefix="stablehlo-interp-probes-") as directory:
            result.outcomes = run_text(text, str(path), directory, printed)
    else:
        pathlib.Path(probe_directory).mkdir(parents=True, exist_ok=True)
        result.outcomes = run_text(text, str(path), probe_directory, printed)
    for outcome in result.outcomes:
        outcome.disabled_upstream = reason is not None
    result.printed = printed.getvalue()
    result.seconds = time.perf_counter() - started
    return result


def run_files(files, include_disabled: bool = False, probe_directory=None, jobs: int = 1):
    """Yield the :class:`FileResult` of each file, in the order of ``files``;
    ``jobs > 1`` runs that many worker processes (the same verdicts and order).
    Files that run at the same time must not share a probe index: with ``jobs > 1``
    each file's probes go to a subdirectory of ``probe_directory`` named after it,
    and a file whose worker process dies (killed, out of memory) fails alone: the
    other files go on."""
    task = functools.partial(_run_file_task, include_disabled=include_disabled, probe_directory=probe_directory,
                             own_directory=jobs > 1)
    yield from ordered_map(task, [str(f) for f in files], jobs, on_crash=_worker_died if jobs > 1 else None)


def _worker_died(path: str) -> FileResult:
    return FileResult(path, [Outcome(path, None, 1, FAILED, message="the worker process running this file died "
                                     "(twice: it was run again alone); run the file with -j 1 to see why")])


def _run_file_task(path: str, include_disabled: bool, probe_directory, own_directory: bool) -> FileResult:
    if probe_directory is not None and own_directory:
        probe_directory = pathlib.Path(probe_directory) / pathlib.Path(path).stem
    return run_file(path, include_disabled, probe_directory)


def expand_paths(paths) -> list[pathlib.Path]:
    """The files to run: each path, or the ``*.mlir`` files under a directory (sorted)."""
    files = []
    for path in map(pathlib.Path, paths):
        files.extend(sorted(path.rglob("*.mlir")) if path.is_dir() else [path])
    return files


def outcome_of_error(file: str, test: str | None, line: int, error: BaseException) -> Outcome:
    """The verdict on a test (or a module) that raised ``error``: cannot parse for a
    parse error, else failed, with the op, its location in ``file`` and the reason."""
    if isinstance(error, OpError):
        lines = [error.reason]
        for name, location, detail in error.enclosing:
            where = f" at {location_in_file(location, file)}" if location else ""
            lines.append(f"inside {name}{where}{f' ({detail})' if detail else ''}")
        return Outcome(file, test, line, FAILED, error.op_name, location_in_file(error.location, file),
                       "\n".join(lines))
    if isinstance(error, InterpreterError):
        message = _PARSER_LOCATION.sub(lambda m: f"{file}:{m.group(1)}:{m.group(2)}", str(error))
        message = _CHECK_SYNTAX_LINE.sub(lambda m: f"{file}:{m.group(1)}: ", message)
        return Outcome(file, test, line, CANNOT_PARSE if isinstance(error, ParseError) else FAILED,
                       message=message)
    return Outcome(file, test, line, FAILED, message=f"internal error: {type(error).__name__}: {error}")


def location_in_file(location, file: str) -> str | None:
    """An op's location; text parsed from a string is ``-`` to MLIR: name the file."""
    if not location:
        return None
    frame = location.frame
    if frame is not None and frame.file == "-":
        return f"{file}:{frame.line}:{frame.column}"
    return str(location)


# ------------------------------------------------------------------ the report


def report(results, out, *, total_files: int, verbose: bool = False, junit_path=None) -> dict:
    """Print each file's report as its result arrives (failures, cannot-parse and
    disabled always; passes and times with ``verbose``), a progress line while
    ``out`` is a terminal, then the totals; write JUnit XML if asked. Returns the
    count of each verdict."""
    totals = dict.fromkeys(VERDICTS, 0)
    cases, disabled_passing = [], []
    progress = ProgressLine(out, total_files)
    for result in results:
        progress.clear()
        for outcome in result.outcomes:
            totals[outcome.verdict] += 1
            if verbose or not outcome.passed:
                out.write(outcome.report() + "\n")
            cases.append(junit.Case(outcome.file, outcome.test or outcome.name, _JUNIT_STATUS[outcome.verdict],
                                    text=outcome.report()))
        if cases:
            cases[-1].seconds = result.seconds
        if result.printed and verbose:
            out.write(textwrap.indent(result.printed, "  | "))
        if verbose:
            out.write(f"  {result.file}: {result.seconds:.2f} s\n")
        ran_disabled = [o for o in result.outcomes if o.disabled_upstream and o.verdict != DISABLED]
        if ran_disabled and all(o.passed for o in ran_disabled):
            disabled_passing.append(result.file)
        progress.file_done(f"{totals[PASSED]} passed, {totals[FAILED]} failed")
        out.flush()
    progress.clear()
    if disabled_passing:
        out.write(f"disabled upstream, but passing here ({len(disabled_passing)}): "
                  + ", ".join(disabled_passing) + "\n")
    out.write(summary_line(totals) + "\n")
    if junit_path:
        junit.write(junit_path, cases, "stablehlo-interp test")
    return totals


def summary_line(totals: dict) -> str:
    """``7 passed, 0 failed`` and, when there are any, the cannot-parse and disabled counts."""
    parts = [f"{totals[PASSED]} passed", f"{totals[FAILED]} failed"]
    parts += [f"{totals[v]} {v}" for v in (CANNOT_PARSE, DISABLED) if totals[v]]
    return ", ".join(parts)
