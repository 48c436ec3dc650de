"""Breakpoints: stop at an op chosen by name or source line and look at its values.

    hit = si.break_at(f, x, at="log", condition=lambda hit: np.isnan(hit.results[0]).any())
    hit.operands, hit.results, hit.stack      # the values, and where the op ran

and an interactive, pdb-style prompt (:class:`Debugger`, ``si.debug(f, x)``)
that stops after each chosen op: print values, evaluate expressions, replace
a result, step, continue or quit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TextIO

import cmd
import sys
from dataclasses import dataclass

import numpy as np

from ..engine.run import Listener
from ..errors import StopExecution
from ..ir.locations import SourceLocation
from .region_calls import RegionCall, describe_stack, op_heading, op_label, region_calls, source_text
from ..ir.locations import describe_location
from .selection import matcher
from ..program import prepare
from ..judge.summary import summarize


@dataclass
class BreakHit:
    """An op at a breakpoint: its values (after it ran) and where it sits."""

    op: str
    location: SourceLocation
    stack: tuple[RegionCall, ...]
    operands: list
    results: list
    step: object

    def __str__(self) -> str:
        lines = op_heading(self.op, self.location)
        lines += [f"  operand #{i}: {summarize(v)}" for i, v in enumerate(self.operands)]
        lines += [f"  result #{i}: {summarize(v)}" for i, v in enumerate(self.results)]
        lines += ["  " + line for line in describe_stack(self.stack)]
        return "\n".join(lines)


def _hit(step, operands, results, stack) -> BreakHit:
    return BreakHit(op_label(step), step.info.location, region_calls(stack), list(operands), list(results), step)


class Breakpoint(Listener):
    """Calls ``action(hit)`` after each op that ``at`` selects and ``condition(hit)`` accepts.

    The default action stops the run (``StopExecution`` with the hit as its
    ``values``). An action may return a list to replace the op's results.
    """

    def __init__(self, at, condition=None, action=None):
        self.chosen = matcher(at)
        self.condition = condition
        self.action = action or _stop

    def after_op(self, step, operands, results, stack):
        if not self.chosen(step):
            return None
        hit = _hit(step, operands, results, stack)
        if self.condition is not None and not self.condition(hit):
            return None
        return self.action(hit)


def _stop(hit: BreakHit):
    raise StopExecution(f"breakpoint at {hit.op}", values=hit)


def break_at(target: Any, *args: Any, at: Any, condition: Callable[[BreakHit], bool] | None = None,
             function: str | None = None, **kwargs: Any) -> BreakHit | None:
    """Run until the first op ``at`` selects (and ``condition(hit)`` accepts); None if none did."""
    call = prepare(target, args, kwargs, function)
    try:
        call.run([Breakpoint(at, condition)])
    except StopExecution as stopped:
        if isinstance(stopped.values, BreakHit):
            return stopped.values
        raise
    return None


class Debugger(Listener, cmd.Cmd):
    """An interactive prompt that stops after ops: at breakpoints, or after every op when stepping.

    Commands: ``s``/``step`` (next op, into regions), ``n``/``next`` (next op
    at this depth or outside), ``c``/``continue`` (to the next breakpoint),
    ``b SELECTOR`` (add a breakpoint: op name, file:line or line), ``v``/``values``
    (operands and results), ``p EXPR`` (evaluate Python with ``operands``,
    ``results``, ``np`` and ``hit``), ``set N EXPR`` (replace result N),
    ``w``/``where`` (region calls), ``l``/``list`` (source line), ``q``/``quit``.
    """

    prompt = "(si) "

    def __init__(self, breakpoints=(), stdin=None, stdout=None):
        cmd.Cmd.__init__(self, stdin=stdin, stdout=stdout)
        self.use_rawinput = stdin is None
        self.selectors = [matcher(b) for b in breakpoints]
        self.stepping = not self.selectors   # without breakpoints, start by stepping
        self.next_depth: int | None = None
        self.hit: BreakHit | None = None
        self.replaced: list | None = None

    # -------------------------------------------------------------- listener
    def after_op(self, step, operands, results, stack):
        if not self._should_stop(step, stack):
            return None
        self.hit = _hit(step, operands, results, stack)
        self.replaced = None
        self.print(f"stopped after {self._position()}")
        self.cmdloop()
        return self.replaced

    def _should_stop(self, step, stack) -> bool:
        if self.stepping:
            return True
        if self.next_depth is not None and len(stack) <= self.next_depth:
            return True
        return any(chosen(step) for chosen in self.selectors)

    def _position(self) -> str:
        hit = self.hit
        where = describe_location(hit.location)
        calls = "".join(f" [{call.header}]" for call in hit.stack)
        return f"{hit.op}{calls}" + (f" at {where}" if where else "")

    # -------------------------------------------------------------- commands
    def print(self, text: str) -> None:
        self.stdout.write(text + "\n")

    def _resume(self, stepping: bool, next_depth: int | None) -> bool:
        self.stepping, self.next_depth = stepping, next_depth
        return True   # leaves cmdloop

    def do_step(self, arg) -> bool:
        return self._resume(True, None)

    def do_next(self, arg) -> bool:
        return self._resume(False, len(self.hit.stack))

    def do_continue(self, arg) -> bool:
        return self._resume(False, None)

    def do_break(self, arg) -> None:
        selector = int(arg) if arg.strip().isdigit() else arg.strip()
        self.selectors.append(matcher(selector))
        self.print(f"breakpoint {len(self.selectors)} at {arg.strip()}")

    def do_values(self, arg) -> None:
        hit = self.hit
        for index, value in enumerate(hit.operands):
            self.print(f"operand #{index}: {summarize(value)}")
        for index, value in enumerate(self._results()):
            self.print(f"result #{index}: {summarize(value)}")

    def do_p(self, arg) -> None:
        try:
            value = eval(arg, {"np": np}, self._names())  # noqa: S307 - the user's own prompt
        except Exception as error:  # noqa: BLE001 - report any mistake and stay at the prompt
            self.print(f"*** {type(error).__name__}: {error}")
            return
        self.print(repr(value))

    def do_set(self, arg) -> None:
        index, _, expression = arg.strip().partition(" ")
        try:
            results = list(self._results())
            old = np.asarray(results[int(index)])
            new = eval(expression, {"np": np}, self._names())  # noqa: S307 - the user's own prompt
            results[int(index)] = np.asarray(new, old.dtype).reshape(old.shape)
        except Exception as error:  # noqa: BLE001 - report any mistake and stay at the prompt
            self.print(f"*** {type(error).__name__}: {error}")
            return
        self.replaced = results
        self.print(f"result #{index} := {summarize(results[int(index)])}")

    def do_where(self, arg) -> None:
        for line in describe_stack(self.hit.stack)[::-1] or ["(entry function)"]:
            self.print(line)

    def do_list(self, arg) -> None:
        frame = self.hit.location.frame
        self.print(f"{describe_location(self.hit.location)}: {source_text(self.hit.location)}"
                   if frame else "(no source location)")

    def do_quit(self, arg) -> None:
        raise StopExecution("quit from the debugger", values=self.hit)

    def do_EOF(self, arg) -> None:
        self.print("")
        return self.do_quit(arg)

    do_s, do_n, do_c, do_b, do_v, do_w, do_l, do_q = (
        do_step, do_next, do_continue, do_break, do_values, do_where, do_list, do_quit)

    def precmd(self, line: str) -> str:
        if not self.use_rawinput:   # commands from a script: show them, as typed at the prompt
            self.stdout.write(line.rstrip("\n") + "\n")
        return line

    def default(self, line: str) -> None:
        self.print(f"*** unknown command {line.split()[0]!r} (help lists the commands)")

    def emptyline(self) -> None:
        return None

    def _results(self) -> list:
        return self.replaced if self.replaced is not None else self.hit.results

    def _names(self) -> dict:
        return {"operands": self.hit.operands, "results": self._results(), "hit": self.hit}


def debug(target: Any, *args: Any, breakpoints: Iterable[Any] = (), function: str | None = None,
          stdin: TextIO | None = None, stdout: TextIO | None = None, **kwargs: Any) -> list | None:
    """Run ``target`` under the interactive :class:`Debugger`; returns the outputs
    (None when the session quit)."""
    call = prepare(target, args, kwargs, function)
    debugger = Debugger(breakpoints, stdin=stdin, stdout=stdout or sys.stdout)
    try:
        return call.run([debugger])
    except StopExecution:
        return None
