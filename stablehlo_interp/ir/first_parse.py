"""A first parse of untrusted MLIR bytecode in a child process.

MLIR's bytecode reader (and StableHLO's portable-artifact reader, which is the
same reader for the VHLO dialect) can corrupt the heap on damaged input: a few
flipped bytes give ``invalid dialect index`` followed by ``free(): corrupted
unsorted chunks`` and an abort. And bytecode that parses may hold names that
are not UTF-8 (an op's location name, a file name), which abort the process in
jaxlib's conversion to ``str`` when read. Nothing in this process could catch
either, so bytes from a file or a caller are parsed first by a child process,
which also reads every name the load will read (op and attribute names,
attributes, locations); only bytes the child read cleanly are parsed here. A
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

OK, ERROR = b"o", b"e"  # the child's reply: a status byte, then its error message or its bytecode


class ChildProcess:
    """A persistent child process (``python -m <module>``) that answers each request it is
    sent: a status byte (OK or ERROR), then its error message or its answer. ``crashed``
    begins the ModuleError raised when a request kills it; the next request starts a
    fresh child."""

    def __init__(self, module: str, crashed: str):
        self._module = module
        self._crashed = crashed
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def request(self, data: bytes) -> bytes:
        """The child's answer to ``data``; its error message or a crash as a ModuleError."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._process = subprocess.Popen([sys.executable, "-m", self._module],
                                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                 stderr=subprocess.DEVNULL)
            try:
                write(self._process.stdin, data)
                status, message = self._process.stdout.read(1), read(self._process.stdout)
            except (EOFError, BrokenPipeError, OSError):
                returncode = self._process.wait()
                how = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
                raise ModuleError(f"{self._crashed} ({how})") from None
            except BaseException:  # KeyboardInterrupt mid-exchange: the child's reply would answer the next request
                self._process.kill()
                self._process.wait()
                raise
        if status == ERROR:
            raise ModuleError(message.decode("utf-8"))
        return message


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


_CHILD = ChildProcess(f"{__package__}.first_parse_child",
                      "cannot load the module: reading it killed the child process that reads untrusted "
                      "input first, as damaged bytecode or a name that is not UTF-8 does")


def check_in_child(data: bytes) -> bytes:
    """Raise a ModuleError unless ``data`` parses cleanly in the child process; return
    the module as bytecode the child wrote. Reading damaged bytecode is not always
    deterministic (a run under load once read in the child what then aborted this
    process), so this process reads only what MLIR's own writer made."""
    return _CHILD.request(data)
