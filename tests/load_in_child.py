"""Load and run untrusted sources in a child process, counting deaths by signal.

:class:`ChildLoader` keeps a child that runs ``si.run(source, *args)`` on each
case of a batch in turn, announcing each case before it starts; if the child
dies, the announced case is the one that killed it, and a fresh child goes on
from the next case. Each case ends as an :class:`Outcome`: ``"ran"``, the name of
the exception class it raised, ``"CaseTimeout"`` for a case that ran past
:data:`SECONDS_PER_CASE` (damaged loop bounds run long), or ``"signal N"``
(``"exit N"``) for a death.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from child_deadline import Deadline
from stablehlo_interp.ir.child_process import read, write   # the package's length-prefixed framing

SECONDS_PER_CASE = 3
# The parent's limit for each message, past the child's own per case (a hang in C code,
# which the child's alarm cannot end).
SECONDS_PER_MESSAGE = 120


class ChildHung(RuntimeError):
    pass


@dataclass
class Outcome:
    label: str
    result: str          # "ran", an exception class name, "signal N" or "exit N"
    message: str = ""
    clear: bool = False  # ran, ran too long, or raised one of our errors (an si.InterpreterError)

    @property
    def died(self) -> bool:
        return self.result.startswith(("signal", "exit"))


def _send(stream, payload) -> None:
    write(stream, pickle.dumps(payload))


def _receive(stream):
    return pickle.loads(read(stream))


class ChildLoader:
    """``load_all([(label, source, args), ...]) -> [Outcome, ...]``, one per case."""

    def __init__(self):
        self._process = None
        self._stderr = None

    def _start(self) -> None:
        self._stderr = tempfile.TemporaryFile()
        self._process = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._stderr)

    def load_all(self, cases) -> list[Outcome]:
        outcomes: list[Outcome] = []
        while len(outcomes) < len(cases):
            outcomes.extend(self._load_batch(cases[len(outcomes):]))
        return outcomes

    def _load_batch(self, cases) -> list[Outcome]:
        if self._process is None or self._process.poll() is not None:
            self._start()
        outcomes, started = [], None
        try:
            _send(self._process.stdin, [(source, args) for _, source, args in cases])
            while True:
                with Deadline(self._process, SECONDS_PER_MESSAGE) as deadline:
                    try:
                        message = _receive(self._process.stdout)
                    except EOFError:
                        if deadline.expired:
                            self._process.wait()
                            label = cases[started][0] if started is not None else "(before the first case)"
                            raise ChildHung(f"the child sent nothing for {SECONDS_PER_MESSAGE} s (killed) during "
                                            f"case {label}; its stderr:\n{self._stderr_tail()}") from None
                        raise
                if message[0] == "start":
                    started = message[1]
                elif message[0] == "done":
                    outcomes.append(Outcome(cases[started][0], *message[1:]))
                    started = None
                else:
                    return outcomes
        except (EOFError, BrokenPipeError, OSError):
            returncode = self._process.wait(timeout=60)
            died = f"signal {-returncode}" if returncode < 0 else f"exit {returncode}"
            killer = started if started is not None else len(outcomes)
            outcomes.append(Outcome(cases[killer][0], died, self._stderr_tail()))
            return outcomes

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")[-1000:]

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.stdin.close()
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=60)


class CaseTimeout(Exception):
    pass


def _time_out(signum, frame):
    raise CaseTimeout(f"still running after {SECONDS_PER_CASE} s")


def _serve() -> None:
    import signal

    import stablehlo_interp as si

    signal.signal(signal.SIGALRM, _time_out)
    try:  # start the child that parses untrusted bytecode first now, not in the first case's time
        si.load(b"ML\xefR")
    except si.ModuleError:
        pass

    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            cases = _receive(requests)
        except EOFError:
            return
        for index, (source, args) in enumerate(cases):
            _send(replies, ("start", index))
            signal.alarm(SECONDS_PER_CASE)
            try:
                si.run(source, *args)
                outcome = ("ran", "", True)
            except Exception as error:  # noqa: BLE001 - the outcome names whatever was raised
                outcome = (type(error).__name__, str(error), isinstance(error, (si.InterpreterError, CaseTimeout)))
            finally:
                signal.alarm(0)
            _send(replies, ("done", *outcome))
        _send(replies, ("end",))


if __name__ == "__main__":
    _serve()
