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


class SourceLocation:
    """Where an op came from (a value: equal locations compare and hash equal).

    ``name`` is the op's name location (JAX: the primitive's path such as
    ``jit(f)/tanh``); ``frames`` is the Python call stack, innermost first.
    """

    __slots__ = ("name", "_frames", "_line")

    def __init__(self, name: str | None = None, frames: tuple[Frame, ...] = ()):
        self.name = name
        self._frames = tuple(frames)
        self._line = None

    @classmethod
    def at_line(cls, file: str, line: int, column: int) -> "SourceLocation":
        """The location of a line of MLIR text (``file:line:col``, no name): the common
        case of a load, made at the cost of a tuple; its Frame is made when asked for."""
        location = cls.__new__(cls)
        location.name = None
        location._frames = None
        location._line = (file, line, column)
        return location

    @property
    def frames(self) -> tuple[Frame, ...]:
        if self._frames is None:
            self._frames = (Frame(None, *self._line),)
        return self._frames

    @property
    def frame(self) -> Frame | None:
        """The innermost frame: the user's line that produced the op."""
        frames = self.frames
        return frames[0] if frames else None

    @property
    def file_line(self) -> str | None:
        frame = self.frame
        return f"{frame.file}:{frame.line}" if frame else None

    def __eq__(self, other) -> bool:
        if not isinstance(other, SourceLocation):
            return NotImplemented
        return (self.name, self.frames) == (other.name, other.frames)

    def __hash__(self) -> int:
        return hash((self.name, self.frames))

    def __repr__(self) -> str:
        return f"SourceLocation(name={self.name!r}, frames={self.frames!r})"

    def __bool__(self) -> bool:
        return bool(self.name or self._line or self._frames)

    def __str__(self) -> str:
        parts = []
        if self.frames:
            parts.append(str(self.frames[0]))
        if self.name:
            parts.append(f"[{self.name}]")
        return " ".join(parts) or "unknown location"


def describe_location(location: SourceLocation | None) -> str:
    """``model.py:8 (f)``: the innermost Python frame, file name without directories
    ('' when the location has no Python frame)."""
    return describe_frame(location.frame if location else None)


def describe_frame(frame: Frame | None) -> str:
    """``model.py:8 (f)``: a frame, its file name without directories ('' for None)."""
    if frame is None:
        return ""
    where = f"{frame.file.rsplit('/', 1)[-1]}:{frame.line}"
    return f"{where} ({frame.function})" if frame.function else where


UNKNOWN = SourceLocation()
