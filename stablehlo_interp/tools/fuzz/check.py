"""One generated program on the interpreter and on a backend: agreement, or an
:class:`Outcome` that says what went wrong, where and why.

The interpreter runs first; an error there is our own finding (a generated
program is well typed, so the interpreter must run it; an op it does not
support is reported apart). Then the backend: a program it cannot compile, a
crash, or a failure to run is a finding about it. Then the results: equal bit
for bit (any NaN equals any NaN: the spec leaves NaN's payload open), else
:func:`~stablehlo_interp.tools.compare.compare` judges every op by its own
rounding bound on the backend's operands (judge/bounds.py), and the first op
beyond it is the finding. A signed zero is a value (IEEE 754, which the spec's
float ops follow): a -0 where the interpreter has +0, or the reverse, is a
finding even where compare's bounds see none.

A check has a deadline (``timeout`` seconds, for the interpreter's run, the
backend's compile and run and the comparison together): a program that has not
finished by then (a ``while`` whose condition stays true) is a ``timed out``
outcome naming the side that was running. The deadline is a ``SIGALRM`` in the
thread that checks (the process's main thread: a campaign's worker or
:class:`IsolatedCheck`'s child), so the engine's run loop carries no clock of its
own; a backend stuck in native code, where no signal handler runs, is ended by
:class:`IsolatedCheck` killing its child.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import signal
import threading
import time
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ...errors import InterpreterError, OpError, UnsupportedOpError
from ...ir.types import element_type_of
from ...program import load
from ...backends import BackendCompileError, BackendCrash, BackendError
from ...backends.jax import JaxBackend, _compile
from ...judge.bounds import BEYOND
from ..compare import compare
from .generate import kind

INTERPRETER_ERROR = "interpreter error"
UNSUPPORTED = "unsupported by the interpreter"
COMPILE_FAILURE = "cannot compile"
CRASH = "crashed"
RUN_FAILURE = "failed to run"
WRONG_TYPE = "a result of another type"
SIGNED_ZERO = "signed zero"
TIMEOUT = "timed out"
PROCESS_DIED = "the process running the backend died (a signal, an abort)"
# Seconds a check of one program may take by default (a generated program takes well under one).
DEFAULT_TIMEOUT = 60.0
# Seconds past the deadline before IsolatedCheck kills a child whose alarm did not end the check.
GRACE = 5.0
# Causes that are the interpreter's to answer for, and the backend's.
OURS = (INTERPRETER_ERROR, UNSUPPORTED)


@dataclass(frozen=True)
class Outcome:
    """A finding on one program: its ``cause`` (one of the names above, or a rounding
    verdict of judge/bounds.py with what differs: ``beyond its bound: NaN``), the op
    it is about and that op's result element type when known, and the details."""

    cause: str
    op: str | None = None
    element_type: str | None = None
    detail: str = ""
    where: tuple | None = None   # the first element where the first differing result differs

    def same_as(self, other: "Outcome | None") -> bool:
        """Whether ``other`` shows the same thing (what the reducer keeps)."""
        if other is None or other.cause != self.cause:
            return False
        if self.op and other.op and self.op != other.op:
            return False
        if self.element_type and other.element_type and self.element_type != other.element_type:
            return False
        if self.cause in (COMPILE_FAILURE, CRASH, RUN_FAILURE, INTERPRETER_ERROR, TIMEOUT):
            return message_stem(self.detail) == message_stem(other.detail)
        return True

    @property
    def ours(self) -> bool:
        return self.cause in OURS


def message_stem(message: str) -> str:
    """The first line of a message without its numbers, types and locations."""
    line = next((line for line in message.splitlines() if line.strip()), "")
    line = re.sub(r"tensor<[^>]*>|loc\([^)]*\)|%\w+|\d+", "#", line)
    return line[:80]


class Timings(dict):
    """Seconds spent per phase of a campaign (added up over programs)."""

    def add(self, phase: str, seconds: float) -> None:
        self[phase] = self.get(phase, 0.0) + seconds


class _Expired(BaseException):
    """The deadline's alarm (a BaseException: no ``except Exception`` between the alarm
    and :func:`check` takes it for the program's own error)."""


class _Deadline:
    """``SIGALRM`` after ``seconds`` raises :class:`_Expired` in this (the main) thread;
    ``side`` is what was running. No deadline off the main thread, where Python
    delivers no signals, nor for ``seconds=None``."""

    def __init__(self, seconds: float | None):
        self.seconds, self.side = seconds, "the interpreter"
        self.armed = seconds is not None and threading.current_thread() is threading.main_thread()

    def __enter__(self):
        if self.armed:
            self.previous = signal.signal(signal.SIGALRM, self._expire)
            self.started = time.monotonic()
            self.outer, _ = signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exception) -> None:
        """Disarm, and give back an alarm that was pending before (pytest-timeout's, a
        caller's) with what is left of its time."""
        if self.armed:
            self.armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
            if self.outer:
                signal.setitimer(signal.ITIMER_REAL, max(self.outer - (time.monotonic() - self.started), 1e-3))

    def _expire(self, signum, frame) -> None:
        if self.armed:
            raise _Expired

    def outcome(self) -> Outcome:
        return Outcome(TIMEOUT, None, None, f"{self.side} did not finish in {self.seconds:g} s")


def check(text: str, arguments: list, backend, timings: Timings | None = None,
          timeout: float | None = None) -> Outcome | None:
    """None when the backend agrees with the interpreter on ``text`` run on ``arguments``
    (or differs by rounding noise alone); else the :class:`Outcome`. ``timeout``: the
    check's deadline in seconds (module docstring), None for none."""
    timings = Timings() if timings is None else timings
    deadline = _Deadline(timeout)
    try:
        with deadline:
            return _check(text, arguments, backend, timings, deadline)
    except _Expired:
        return deadline.outcome()


def _check(text: str, arguments: list, backend, timings: Timings, deadline: _Deadline) -> Outcome | None:
    start = time.perf_counter()
    try:
        ours = load(text).run(*arguments)
    except UnsupportedOpError as error:
        return Outcome(UNSUPPORTED, error.op_name, None, error.reason)
    except OpError as error:
        return Outcome(INTERPRETER_ERROR, error.op_name, None, f"{type(error).__name__}: {error}")
    except Exception as error:  # noqa: BLE001 - any failure on a well-typed program is our bug
        return Outcome(INTERPRETER_ERROR, None, None, f"{type(error).__name__}: {error}")
    finally:
        timings.add("interpreter", time.perf_counter() - start)
    deadline.side = f"the backend ({backend.name})"
    try:
        theirs = _run_backend(backend, text, arguments, timings)
    except BackendCompileError as error:
        return Outcome(COMPILE_FAILURE, None, None, error.message)
    except BackendCrash as error:
        return Outcome(CRASH, None, None, error.message)
    except BackendError as error:
        return Outcome(RUN_FAILURE, None, None, error.message)
    except Exception as error:  # noqa: BLE001 - a user's backend that raised: it failed to run
        return Outcome(RUN_FAILURE, None, None, f"{type(error).__name__}: {error}")
    deadline.side = "the comparison"
    start = time.perf_counter()
    try:
        return _judge(text, arguments, backend, ours, theirs)
    finally:
        timings.add("comparison", time.perf_counter() - start)


def _run_backend(backend, text: str, arguments: list, timings: Timings) -> list:
    """The backend's results; XLA's compile timed apart from its run (its compile is cached)."""
    if isinstance(backend, JaxBackend):
        start = time.perf_counter()
        try:
            _compile(backend.platform, text, ())   # the key JaxBackend's own call uses
        except Exception:  # noqa: BLE001 - the backend's call below says it as a verdict
            pass
        timings.add("backend compile", time.perf_counter() - start)
        phase = "backend run"
    else:
        phase = "backend (compile and run)"
    start = time.perf_counter()
    try:
        return [np.asarray(value) for value in backend(text, arguments)]
    finally:
        timings.add(phase, time.perf_counter() - start)


def _judge(text: str, arguments: list, backend, ours: list, theirs: list) -> Outcome | None:
    if len(theirs) != len(ours):
        return Outcome(WRONG_TYPE, None, None, f"{len(theirs)} results, the interpreter's {len(ours)}")
    for index, (a, b) in enumerate(zip(ours, theirs)):
        a = np.asarray(a)
        if a.shape != b.shape or a.dtype != b.dtype:
            return Outcome(WRONG_TYPE, None, element_type_of(a.dtype),
                           f"result #{index}: {b.dtype}{list(b.shape)}, the interpreter's {a.dtype}{list(a.shape)}")
    unequal = [i for i, (a, b) in enumerate(zip(ours, theirs)) if not identical(np.asarray(a), b)]
    if not unequal:
        return None
    where = tuple(int(i) for i in np.argwhere(~same_elements(np.asarray(ours[unequal[0]]), theirs[unequal[0]]))[0])
    try:
        comparison = compare(text, *arguments, backend=backend, tolerance=(0.0, 0.0))
    except (InterpreterError, BackendError) as error:   # a prefix the backend could not run: judge the results
        comparison = None
        note = f" (no op-by-op search: {error})"
    else:
        note = ""
    if comparison is not None and comparison.divergence is not None:
        divergence = comparison.divergence
        ours_value, theirs_value = np.asarray(divergence.ours), np.asarray(divergence.theirs)
        return Outcome(f"{divergence.kind}: {what_differs(ours_value, theirs_value)}", divergence.op,
                       element_type_of(ours_value.dtype), divergence.describe(backend.name), where)
    first = unequal[0]
    a, b = np.asarray(ours[first]), theirs[first]
    what = what_differs(a, b)
    if what == SIGNED_ZERO:
        return Outcome(SIGNED_ZERO, None, element_type_of(a.dtype), f"result #{first}: {describe_elements(a, b)}",
                       where)
    if comparison is not None and comparison.noise_only:
        return None
    return Outcome(f"{BEYOND}: {what}", None, element_type_of(a.dtype),
                   f"result #{first}: {describe_elements(a, b)}{note}", where)


class IsolatedCheck:
    """:func:`check` in a child process (spawned on first use, kept for the next
    checks): a backend that kills its process (XLA CPU on an integer division it
    folds, say) makes a ``crashed`` outcome here, and the next check starts a new child.
    ``timeout``: each check's deadline; a child that has not answered :data:`GRACE`
    seconds after it (a backend stuck in native code) is killed, a ``timed out`` outcome."""

    def __init__(self, timeout: float | None = DEFAULT_TIMEOUT):
        self.timeout = timeout
        self.pool: concurrent.futures.ProcessPoolExecutor | None = None
        self.pid = 0   # the child's

    def __call__(self, text: str, arguments: list, backend, timings: Timings | None = None) -> Outcome | None:
        import multiprocessing
        from concurrent.futures.process import BrokenProcessPool

        if self.pool is None:
            self.pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            self.pid = self.pool.submit(os.getpid).result()
        future = self.pool.submit(_check_here, text, arguments, backend, self.timeout)
        try:
            outcome, spent = future.result(None if self.timeout is None else self.timeout + GRACE)
        except BrokenProcessPool:
            self.close()
            return Outcome(CRASH, None, None, PROCESS_DIED)
        except concurrent.futures.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.close()
            return Outcome(TIMEOUT, None, None, f"the check did not finish in {self.timeout:g} s "
                                                f"(its process was killed {GRACE:g} s later)")
        for phase, seconds in spent.items():
            if timings is not None:
                timings.add(phase, seconds)
        return outcome

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def _check_here(text: str, arguments: list, backend, timeout: float | None) -> tuple:
    timings = Timings()
    return check(text, arguments, backend, timings, timeout), dict(timings)


def identical(ours: np.ndarray, theirs: np.ndarray) -> bool:
    """Equal bit for bit, but any NaN equals any NaN (empty arrays are identical)."""
    return bool(same_elements(ours, theirs).all())


def _exact(dtype) -> bool:
    """Integers and booleans (int4 and uint4 too, which NumPy does not call integers)."""
    return kind(element_type_of(dtype)) in ("si", "ui", "b")


def same_elements(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    if _exact(ours.dtype):
        return np.asarray(ours == theirs)
    wide, other = _widened(ours), _widened(theirs)
    parts = [(wide.real, other.real), (wide.imag, other.imag)] if wide.dtype.kind == "c" else [(wide, other)]
    same = np.ones(ours.shape, bool)
    for a, b in parts:
        same &= ((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b))
    return same


def _widened(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind == "c":
        return values.astype(np.complex128)
    try:
        return values.astype(np.float64)
    except (TypeError, ValueError):
        return values.view(f"u{values.dtype.itemsize}")


def what_differs(ours: np.ndarray, theirs: np.ndarray) -> str:
    """What the first differing element shows: ``NaN``, ``infinity``, ``subnormal``
    (either side's value, or one side's zero where the other has a subnormal),
    ``signed zero``, ``integer`` or ``value``."""
    same = same_elements(ours, theirs)
    if same.all():
        return "value"
    index = tuple(np.argwhere(~same)[0])
    if _exact(ours.dtype):
        return "integer"
    a, b = complex(_widened(ours)[index]), complex(_widened(theirs)[index])
    if any(np.isnan(x.real) or np.isnan(x.imag) for x in (a, b)):
        return "NaN"
    if any(np.isinf(x.real) or np.isinf(x.imag) for x in (a, b)):
        return "infinity"
    if a == b:
        return SIGNED_ZERO
    real = np.empty(0, ours.dtype).real.dtype
    tiny = float(ml_dtypes.finfo(real).smallest_normal)
    if any(0 < abs(part) < tiny for x in (a, b) for part in (x.real, x.imag)):
        return "subnormal"
    return "value"


def describe_elements(ours: np.ndarray, theirs: np.ndarray, count: int = 3) -> str:
    """The first ``count`` differing elements: index, the interpreter's value and the backend's."""
    differing = np.argwhere(~same_elements(ours, theirs))[:count]
    parts = [f"at {tuple(int(i) for i in index)}: interpreter {ours[tuple(index)]!r}, "
             f"backend {theirs[tuple(index)]!r}" for index in differing]
    return "; ".join(parts) or "no element differs"
