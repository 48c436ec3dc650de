"""A progress line for a long run on a terminal: the ops it has run so far and the
loop iterations it is in, rewritten in place, erased when the run ends.

    1,204,224 ops run; stablehlo.while at loop.mlir:4: body, iteration 401407

``stablehlo-interp run`` and ``trace`` show it when their standard error is a
terminal (docs/cli.md); a pipe or a file gets nothing.
"""

from __future__ import annotations

from typing import Any, TextIO

import shutil
import time

from ..engine.run import Listener
from .region_calls import region_calls

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
        width = shutil.get_terminal_size().columns - 1
        self.out.write("\r\033[K" + text[:width])
        self.out.flush()
        self.shown = True

    def finish(self) -> None:
        """Erase the line, if one was shown."""
        if self.shown:
            self.out.write("\r\033[K")
            self.out.flush()
            self.shown = False

    def __enter__(self) -> "RunProgress":
        return self

    def __exit__(self, *exception: object) -> None:
        self.finish()
