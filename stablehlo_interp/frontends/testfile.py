"""Run test files written like StableHLO's interpreter tests (``stablehlo-interp test``).

A file is split at ``// -----`` lines into independent modules. In each module,
every public function without arguments is one test: it passes when it runs to
the end, and fails when a check op (``check.expect_eq`` ..., ops/check.py) finds
a mismatch or anything else goes wrong. A module that does not load (parse or
verifier error, unsupported op) is one failure; it does not stop the run.
Private functions and functions with arguments are helpers, not tests; tests of
collectives run helpers as a grid of processes with ``interpreter.run_parallel``
(``programs = [[@f, @g], ...]``: replicas by partitions; ops/collectives.py).
"""

from __future__ import annotations

import pathlib
import re
import textwrap
from dataclasses import dataclass

from ..errors import InterpreterError, OpError
from ..program import Program

SPLIT_MARKER = re.compile(r"^\s*// -----")
_PARSER_LOCATION = re.compile(r'loc\("-":(\d+):(\d+)\)')  # in MLIR diagnostics
_CHECK_SYNTAX_LINE = re.compile(r"^line (\d+): ")  # check_dialect's errors


@dataclass
class Outcome:
    """The result of one test, or the failure of a whole split module to load.

    ``test`` is the function name (None for a module that did not load);
    ``line`` is where the function (or the module) starts in ``file``.
    """

    file: str
    test: str | None
    line: int
    passed: bool
    op: str | None = None
    location: str | None = None
    message: str = ""

    @property
    def name(self) -> str:
        return f"{self.file} @{self.test}" if self.test else f"{self.file} (module at line {self.line})"

    def report(self) -> str:
        """One line (continuation lines indented) for the test report."""
        if self.passed:
            return f"PASSED {self.name}"
        where = f" at {self.location}" if self.location else ""
        head = f"{self.op}{where}: " if self.op else ""
        first, _, rest = self.message.partition("\n")
        details = textwrap.indent(textwrap.dedent(rest), "    ")
        return f"FAILED {self.name}: {head}{first}" + (f"\n{details}" if rest else "")


def split_modules(text: str) -> list[tuple[int, str]]:
    """``(first line, text)`` of each ``// -----`` separated part. Each part is
    padded with empty lines so that MLIR reports the file's own line numbers."""
    parts, start, current = [], 1, []
    for number, line in enumerate(text.split("\n"), start=1):
        if SPLIT_MARKER.match(line):
            parts.append((start, current))
            start, current = number + 1, []
        else:
            current.append(line)
    parts.append((start, current))
    return [(first, "\n" * (first - 1) + "\n".join(lines)) for first, lines in parts]


def run_text(text: str, file: str) -> list[Outcome]:
    outcomes = []
    for first, part in split_modules(text):
        try:
            program = Program(part)
        except Exception as error:  # noqa: BLE001 - reported as this module's failure
            outcomes.append(_failure(file, None, first, error))
            continue
        for function in program.functions.values():
            if function.visibility == "private" or function.arg_types:
                continue
            line = function.location.frame.line if function.location.frame else first
            try:
                program.run(function=function.name)
            except Exception as error:  # noqa: BLE001 - every failure is reported, none stops the run
                outcomes.append(_failure(file, function.name, line, error))
            else:
                outcomes.append(Outcome(file, function.name, line, True))
    return outcomes


def run_file(path) -> list[Outcome]:
    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return [Outcome(str(path), None, 1, False, message=f"cannot read the file: {error}")]
    return run_text(text, str(path))


def expand_paths(paths) -> list[pathlib.Path]:
    """The files to run: each path, or the ``*.mlir`` files under a directory (sorted)."""
    files = []
    for path in map(pathlib.Path, paths):
        files.extend(sorted(path.rglob("*.mlir")) if path.is_dir() else [path])
    return files


def _failure(file: str, test: str | None, line: int, error: BaseException) -> Outcome:
    if isinstance(error, OpError):
        lines = [error.reason]
        for name, location, detail in error.enclosing:
            where = f" at {_where(location, file)}" if location else ""
            lines.append(f"inside {name}{where}{f' ({detail})' if detail else ''}")
        return Outcome(file, test, line, False, error.op_name, _where(error.location, file), "\n".join(lines))
    if isinstance(error, InterpreterError):
        message = _PARSER_LOCATION.sub(lambda m: f"{file}:{m.group(1)}:{m.group(2)}", str(error))
        message = _CHECK_SYNTAX_LINE.sub(lambda m: f"{file}:{m.group(1)}: ", message)
        return Outcome(file, test, line, False, message=message)
    return Outcome(file, test, line, False, message=f"internal error: {type(error).__name__}: {error}")


def _where(location, file: str) -> str | None:
    """An op's location; text parsed from a string is ``-`` to MLIR: name the file."""
    if not location:
        return None
    frame = location.frame
    if frame is not None and frame.file == "-":
        return f"{file}:{frame.line}:{frame.column}"
    return str(location)
