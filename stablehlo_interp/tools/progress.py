"""A progress line for a long run on a terminal, rewritten in place, erased when the
run ends: for a trace (whose listeners see every op), the ops run so far and the loop
iteration it is in; for a plain run, the iterations of the loops it is in.

    1,204,224 ops run; stablehlo.while at loop.mlir:4: body, iteration 401407
    stablehlo.while at loop.mlir:4: 401,408 iterations

``stablehlo-interp trace`` and ``run`` show them when their standard error is a
terminal (docs/cli.md); a pipe or a file gets nothing.
"""

from __future__ import annotations

from typing import Any, TextIO

import shutil
import threading
import time

from ..engine.run import Listener
from .region_calls import region_calls
from ..ir.locations import describe_location

FIRST_AFTER = 1.0   # seconds before the first line: a short run shows none
EVERY = 0.25        # seconds between updates
CHECK_CLOCK = 256   # ops between looks at the clock


class RunProgress(Listener):
    """Writes the progress line to ``out`` while the run lasts; call :meth:`finish`
    (or use it as a context manager) to erase it."""

    def __init__(self, out: TextIO, clock=time.monotonic) -> None:
        self.out = out
        self.clock = clock
        self.ops = 0
        self.shown = False
        self._next = clock() + FIRST_AFTER

    def before_op(self, step: Any, operands: list, stack: Any) -> None:
        self.ops += 1
        if self.ops % CHECK_CLOCK == 0 and self.clock() >= self._next:
            self._next = self.clock() + EVERY
            self._show(self.line(stack))

    def line(self, stack: Any) -> str:
        """``N ops run`` and the innermost loop the run is in, with its iteration."""
        loops = [call for call in region_calls(stack) if call.op == "stablehlo.while"]
        return f"{self.ops:,} ops run" + (f"; {loops[-1]}" if loops else "")

    def _show(self, text: str) -> None:
        _write(self.out, text)
        self.shown = True

    def finish(self) -> None:
        """Erase the line, if one was shown."""
        if self.shown:
            _write(self.out, "")
            self.shown = False

    def __enter__(self) -> "RunProgress":
        return self

    def __exit__(self, *exception: object) -> None:
        self.finish()


def _write(out: TextIO, text: str) -> None:
    """Rewrite the line (cut to the terminal's width: a line that wraps is not rewritten)."""
    out.write("\r\033[K" + text[:shutil.get_terminal_size().columns - 1])
    out.flush()


def _describe_op(info: Any) -> str:
    """``stablehlo.while at loop.mlir:4``."""
    where = describe_location(info.location) if info.location else ""
    return f"{info.name} at {where}" if where else info.name


class LoopProgress:
    """The progress line of a run that no listener watches (``stablehlo-interp run``):
    a thread reads the loops the run is in (``loops``, the list to hand the run:
    engine/run.py RunContext.loops) and writes the innermost one's iterations, as
    ``stablehlo.while at loop.mlir:4: 401,407 iterations``, with those around it
    before it. A listener would slow the run down fourfold (an observed run); this
    costs the run a count per iteration."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.loops: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="progress line")
        self.shown = False

    def line(self) -> str:
        """The loops the run is in, outermost first ('' when none)."""
        return "; ".join(f"{_describe_op(loop.info)}: {loop.iterations:,} iterations" for loop in list(self.loops))

    def _watch(self) -> None:
        if self._stop.wait(FIRST_AFTER):
            return
        while not self._stop.is_set():
            text = self.line()
            if text:
                _write(self.out, text)
                self.shown = True
            self._stop.wait(EVERY)

    def __enter__(self) -> "LoopProgress":
        self._thread.start()
        return self

    def __exit__(self, *exception: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.shown:
            _write(self.out, "")
