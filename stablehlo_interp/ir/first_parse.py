"""A first parse of untrusted MLIR bytecode in a child process.

MLIR's bytecode reader (and StableHLO's portable-artifact reader, which is the
same reader for the VHLO dialect) can corrupt the heap on damaged input: a few
flipped bytes give ``invalid dialect index`` followed by ``free(): corrupted
unsorted chunks`` and an abort, which nothing in this process could catch.
So bytes from a file or a caller are parsed first by a child process that
serves one parse at a time; only bytes it parsed cleanly are parsed here. A
parse error is reported from the child's diagnostics; a child killed by the
input becomes a :class:`~stablehlo_interp.errors.ModuleError` and the next
check starts a fresh child. Bytecode JAX hands the ``interp`` device is trusted
and skips this (see :func:`stablehlo_interp.ir.sources.parse`).

The child lives as long as this process (one per process, started at the first
check, guarded by a lock): it costs a Python start once, then a pipe round trip
and a second parse per check (``benchmarks/load_bench.py`` measures it).
"""

from __future__ import annotations

import struct
import subprocess
import sys
import threading

from ..errors import ModuleError

_OK, _ERROR = b"o", b"e"


class _ParseChild:
    def __init__(self):
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def check(self, data: bytes) -> None:
        """Parse ``data`` in the child; raise the ModuleError the parse gives, or one for a crash."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._process = subprocess.Popen(
                    [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL)
            try:
                _write(self._process.stdin, data)
                status, message = self._process.stdout.read(1), _read(self._process.stdout)
            except (EOFError, BrokenPipeError, OSError):
                returncode = self._process.wait()
                how = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
                raise ModuleError(f"cannot parse MLIR bytecode: the parser crashed on it ({how} in the child "
                                  "process that parses untrusted bytecode first)") from None
            except BaseException:  # KeyboardInterrupt mid-exchange: the child's reply would answer the next check
                self._process.kill()
                self._process.wait()
                raise
        if status == _ERROR:
            raise ModuleError(message.decode("utf-8"))


def _write(stream, data: bytes) -> None:
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _read(stream) -> bytes:
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError
    data = stream.read(struct.unpack("<Q", header)[0])
    if len(data) < struct.unpack("<Q", header)[0]:
        raise EOFError
    return data


_CHILD = _ParseChild()


def check_in_child(data: bytes) -> None:
    """Raise a ModuleError unless ``data`` parses cleanly in the child process."""
    _CHILD.check(data)


def _serve() -> None:
    from .sources import parse_bytes

    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            data = _read(requests)
        except EOFError:
            return
        try:
            parse_bytes(data)
            replies.write(_OK)
            _write(replies, b"")
        except ModuleError as error:
            replies.write(_ERROR)
            _write(replies, str(error).encode("utf-8"))


if __name__ == "__main__":
    _serve()
