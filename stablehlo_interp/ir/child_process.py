"""A persistent child process for MLIR work that may abort the process doing it.

Some of what jaxlib's C++ does can kill its process on input it does not expect
(MLIR's bytecode reader on damaged bytes, Shardy's passes on programs they were not
written for), and nothing in Python can catch an abort. Such work runs in a child
(``python -m <module>``) that reads length-prefixed requests from its stdin and
answers each with a status byte and a length-prefixed payload. The child lives as
long as this process (started at the first request, guarded by a lock, ended at
exit); a child that dies is replaced at the next request.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from typing import IO, cast

OK, ERROR, EXPIRED = b"o", b"e", b"t"  # a reply's status byte: its payload is the answer, an error
# message, or the seconds a forked computation had before it was killed (serve's fork_each)


class ChildDied(Exception):
    """The child ended while answering; ``how`` says how ("signal 6", "exit status 1"),
    ``last_words`` is the last line it wrote to stderr (an LLVM or Abseil check's message)."""

    def __init__(self, how: str, last_words: str):
        super().__init__(f"{how}: {last_words}" if last_words else how)
        self.how, self.last_words = how, last_words


class ChildProcess:
    """The child running ``python -m module`` (a module that serves with :func:`read`
    and :func:`write` until its stdin closes). ``environment``: variables set for the
    child over this process's own (read when a child starts), e.g. ``XLA_FLAGS``, which
    XLA reads once, when JAX first initializes its backends."""

    def __init__(self, module: str, environment: dict[str, str] | None = None):
        self._module = module
        self._environment = dict(environment or {})
        self._process: subprocess.Popen | None = None
        self._stderr: IO[bytes] | None = None   # the running child's stderr, a temporary file
        self._lock = threading.Lock()
        atexit.register(self.close)

    def ask(self, request: bytes, timeout: float | None = None) -> tuple[bytes, bytes]:
        """Send ``request``; return the child's ``(status, payload)``. Raises
        :class:`ChildDied` when the child ends before it answers, or when it has not
        answered within ``timeout`` seconds (it is killed then)."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._end()   # (the pipes and stderr of one that died)
                self._stderr = tempfile.TemporaryFile()
                self._process = subprocess.Popen([sys.executable, "-m", self._module],
                                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                 stderr=self._stderr, env={**os.environ, **self._environment})
            stdin, stdout = cast(IO[bytes], self._process.stdin), cast(IO[bytes], self._process.stdout)   # (PIPEs)
            expired, deadline = threading.Event(), None
            if timeout is not None:
                deadline = threading.Timer(timeout, _expire, (self._process, expired))
                deadline.start()
            try:
                write(stdin, request)
                return stdout.read(1), read(stdout)
            except (EOFError, BrokenPipeError, OSError):
                returncode = self._process.wait()
                how = f"timed out after {timeout:g} s" if expired.is_set() else ending(returncode)
                raise ChildDied(how, self._last_words()) from None
            except BaseException:  # KeyboardInterrupt mid-exchange: the child's reply would answer the next request
                self._process.kill()
                self._process.wait()
                raise
            finally:
                if deadline is not None:
                    deadline.cancel()

    def close(self) -> None:
        """End the child (its stdin closes: :func:`serve` returns) and close its pipes;
        the next request starts another. At exit, a request still in progress on
        another thread leaves the child to end with this process."""
        if self._lock.acquire(timeout=1):
            try:
                self._end()
            finally:
                self._lock.release()

    def _end(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            for pipe in (process.stdin, process.stdout):
                try:
                    cast(IO[bytes], pipe).close()   # (PIPEs)
                except OSError:   # (a child that died: its stdin's last bytes cannot be flushed)
                    pass
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _last_words(self) -> str:
        stderr = cast(IO[bytes], self._stderr)   # (a child was started: its stderr is open)
        stderr.seek(0, 2)
        stderr.seek(max(0, stderr.tell() - 65536))
        return last_words(stderr.read().decode("utf-8", "replace"))


def ending(returncode: int) -> str:
    """How a process that ended with ``returncode`` ended: "signal 6", "exit status 1"."""
    return f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"


def last_words(stderr: str) -> str:
    """The fatal line of an Abseil or LLVM check in a dead process's ``stderr`` where it
    wrote one (``F1206 ... Check failed: ...``, before its stack trace), else its last line."""
    lines = [line.strip() for line in stderr.splitlines()]
    fatal = [line for line in lines if _FATAL_LOG.match(line) or "Check failed" in line]
    return fatal[-1] if fatal else next((line for line in reversed(lines) if line), "")


# Abseil's fatal log line: "F1206 06:16:38.756437   24249 file.cc:586] message".
_FATAL_LOG = re.compile(r"^F\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ")


def _expire(process: subprocess.Popen, expired: threading.Event) -> None:
    """A request's time is up: say so, then kill the child (its pipe ends the wait)."""
    expired.set()
    process.kill()


def write(stream, data: bytes) -> None:
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def read(stream) -> bytes:
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError
    (size,) = struct.unpack("<Q", header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return data


def serve(compute: Callable[[bytes], bytes], reported: tuple[type[Exception], ...] = (),
          describe: Callable[[Exception], str] = str,
          fork_each: Callable[[bytes], float] | None = None) -> None:
    """The child's loop, until stdin closes: each request's reply is OK and
    ``compute(request)``, or ERROR and ``describe(error)`` when ``compute`` raises one
    of ``reported`` (any other exception ends the child: the parent gets ChildDied).

    ``fork_each``: compute each reply in a process forked for it, given
    ``fork_each(request)`` seconds, so that no request sees what an earlier one did to
    the heap (MLIR's bytecode reader can corrupt it on damaged bytes, report a clean
    error, and abort only at a later request; in a fresh heap the same bytes can make
    it loop). A fork that dies ends this child the same way; one that has not replied
    in time is killed, and the reply is EXPIRED with the seconds it had. For children
    that hold no threads and no state between requests."""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            request = read(requests)
        except EOFError:
            return
        answer = functools.partial(_reply, compute, request, reported, describe)
        status, payload = answer() if fork_each is None else _reply_of_a_fork(answer, fork_each(request))
        replies.write(status)
        write(replies, payload)


def _reply(compute: Callable[[bytes], bytes], request: bytes, reported: tuple[type[Exception], ...],
           describe: Callable[[Exception], str]) -> tuple[bytes, bytes]:
    try:
        return OK, compute(request)
    except reported as error:
        return ERROR, describe(error).encode("utf-8")


def _reply_of_a_fork(answer: Callable[[], tuple[bytes, bytes]], seconds: float) -> tuple[bytes, bytes]:
    """``answer()`` computed in a forked process within ``seconds``; this process ends
    as that one did when it dies before replying (by its signal, or with its status)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:   # the fork: reply through the pipe, then end without this process's exit work
        os.close(read_end)
        try:
            status, payload = answer()
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(status)
                write(pipe, payload)
        except BaseException:  # noqa: BLE001 - an exception not reported: the fork's death says so
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        try:
            if not select.select([pipe], [], [], seconds)[0]:
                os.kill(pid, signal.SIGKILL)
                return EXPIRED, f"{seconds:g}".encode()
            return pipe.read(1), read(pipe)
        except EOFError:
            pass
        finally:
            _, wait_status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(wait_status):
        signal.signal(os.WTERMSIG(wait_status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(wait_status))
    sys.exit(os.waitstatus_to_exitcode(wait_status) or 1)
