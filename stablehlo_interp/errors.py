"""Exceptions raised by the interpreter.

Every error that concerns one op names the op, its source location (JAX records
the user's Python ``file:line`` in each op's MLIR location) and, when the op sits
inside a region, the chain of enclosing ops.
"""

from __future__ import annotations

from typing import Any


def counted(number: int, noun: str) -> str:
    """A count in a message: ``1 argument``, ``2 arguments``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


class InterpreterError(Exception):
    """Base class of every error raised by stablehlo_interp."""


class ModuleError(InterpreterError):
    """The module could not be parsed, deserialized or verified."""


class ParseError(ModuleError):
    """The text is not a module MLIR's parser (jaxlib's) can read and verify, or a
    check op's custom syntax is malformed; ``stablehlo-interp test`` reports it as
    "cannot parse", apart from failures."""


class ArgumentError(InterpreterError, TypeError):
    """The arguments given to a function do not match its signature."""


class OpError(InterpreterError):
    """An error tied to one op: at load time (unsupported op, bad attribute) or at run time.

    Attributes:
      op_name: e.g. ``"stablehlo.divide"``.
      location: a :class:`~stablehlo_interp.ir.locations.SourceLocation` (or None; this
        ground floor of the house names no type of the floors above it).
      reason: what went wrong, without the op prefix.
      enclosing: list of ``(op_name, location, detail)`` of the ops whose regions
        contain this op, innermost first (filled in as the error propagates).
    """

    def __init__(self, op_name: str, location: Any, reason: str) -> None:
        self.op_name = op_name
        self.location = location
        self.reason = reason
        self.enclosing: list[tuple[str, Any, str]] = []
        super().__init__(reason)

    def add_enclosing(self, op_name: str, location: Any, detail: str = "") -> None:
        self.enclosing.append((op_name, location, detail))

    def __str__(self) -> str:
        where = f" at {self.location}" if self.location else ""
        lines = [f"{self.op_name}{where}: {self.reason}"]
        for name, location, detail in self.enclosing:
            where = f" at {location}" if location else ""
            lines.append(f"  inside {name}{where}{f' ({detail})' if detail else ''}")
        return "\n".join(lines)


class UnsupportedOpError(OpError, NotImplementedError):
    """The op (or custom-call target, or op configuration) is not implemented."""


class OpExecutionError(OpError):
    """An op failed while it ran; the original exception is ``__cause__``."""


class StopExecution(InterpreterError):
    """Raised by a listener to stop the run; ``run`` re-raises it to the caller.

    ``values`` may carry whatever the listener wants to hand back (e.g. the
    values seen at a breakpoint).
    """

    def __init__(self, message: str = "execution stopped by a listener", values: Any = None) -> None:
        super().__init__(message)
        self.values = values
