"""The names a module's text gives its values (``%m``, ``%r:2``, ``%x`` of ``@main(%x: ...)``).

MLIR keeps no value names: its parser numbers values and its printer writes
``%0``, ``%arg0``. A module written by hand names them, and its locations point
into its text (``file:line:col``: an op where its line starts, a block argument at
its ``%``), so the names are read back from there, through ``linecache`` as source
lines are. A module JAX lowered points its ops at Python lines, and text given as a
string has no file (MLIR's ``-``): they give no names. Nor do the names MLIR's printer
makes (``%0``, ``%arg0``), which text it wrote (``lowered.as_text()``, a fuzzer's
program) holds: they number values, as ``#0`` does.
"""

from __future__ import annotations

import functools
import linecache
import re

from .locations import SourceLocation

# A line of MLIR text up to an op's location: the results it names, ``=`` and the op's
# name where the location points past it (``%s = stablehlo.reduce(`` for the short form of
# reduce). Results: ``%m``, ``%r:2``, ``%a, %b`` (MLIR's LangRef: op-result-list).
_WRITTEN_RESULTS = re.compile(r"^\s*((?:%[\w$.-]+(?::\d+)?\s*,\s*)*%[\w$.-]+(?::\d+)?)\s*=\s*\"?([\w.]*)\"?\s*$")
_WRITTEN_ARGUMENT = re.compile(r"%[\w$.-]+(?=\s*:)")
_PRINTERS_NAME = re.compile(r"%(?:arg)?\d+")


def result_names(location: SourceLocation | None, op: str, results: int) -> tuple[str, ...]:
    """The names of the ``results`` results of the op named ``op`` at ``location``, as the
    text writes them: ``%m``; ``%r#0, %r#1`` for ``%r:2 = ...``; () where it names none."""
    frame = location.frame if location else None
    if frame is None or frame.column is None or not results:
        return ()
    return _results_in(linecache.getline(frame.file, frame.line)[:frame.column - 1], op, results)


def argument_name(location: SourceLocation | None) -> str | None:
    """The name the text gives the block argument at ``location`` (``%x``), or None."""
    frame = location.frame if location else None
    if frame is None or frame.column is None:
        return None
    match = _WRITTEN_ARGUMENT.match(linecache.getline(frame.file, frame.line), frame.column - 1)
    return match.group() if match and not _PRINTERS_NAME.fullmatch(match.group()) else None


def refresh(file_name: str | None) -> None:
    """Read ``file_name`` again where it is read from (a module loaded from it: the text may
    have changed since the last load in this process)."""
    if file_name:
        linecache.checkcache(file_name)


@functools.lru_cache(maxsize=4096)
def _results_in(text: str, op: str, results: int) -> tuple[str, ...]:
    """The names of the results of ``op`` that ``text``, its line up to its location, gives."""
    match = _WRITTEN_RESULTS.match(text)
    # the op's name as written, if the location is past it (func.call is written "call")
    if match is None or match.group(2) not in ("", op, op.partition(".")[2]):
        return ()
    names: list[str] = []
    for group in match.group(1).split(","):
        name, _, count = group.strip().partition(":")
        if _PRINTERS_NAME.fullmatch(name):
            return ()
        names += [f"{name}#{index}" for index in range(int(count))] if count else [name]
    return tuple(names) if len(names) == results else ()
