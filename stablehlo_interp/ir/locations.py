"""Source locations of ops, as plain Python values.

JAX writes each op's location as ``loc("jit(f)/tanh"(callsite("f"("x.py":6:11)
at "<module>"("x.py":8:6))))``: a name (the primitive's path in the jaxpr) around
a call stack of Python frames. :class:`SourceLocation` keeps both; ``str()``
gives the form used in error messages and traces: ``x.py:6 (f) [jit(f)/tanh]``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Frame:
    function: str | None
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        return f"{where} ({self.function})" if self.function else where


@dataclass(frozen=True)
class SourceLocation:
    """Where an op came from.

    ``name`` is the op's name location (JAX: the primitive's path such as
    ``jit(f)/tanh``); ``frames`` is the Python call stack, innermost first.
    """

    name: str | None = None
    frames: tuple[Frame, ...] = ()

    @property
    def frame(self) -> Frame | None:
        """The innermost frame: the user's line that produced the op."""
        return self.frames[0] if self.frames else None

    @property
    def file_line(self) -> str | None:
        frame = self.frame
        return f"{frame.file}:{frame.line}" if frame else None

    def __bool__(self) -> bool:
        return bool(self.name or self.frames)

    def __str__(self) -> str:
        parts = []
        if self.frames:
            parts.append(str(self.frames[0]))
        if self.name:
            parts.append(f"[{self.name}]")
        return " ".join(parts) or "unknown location"


UNKNOWN = SourceLocation()
