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
                raise ModuleError(f"cannot load MLIR bytecode: reading it killed the child process that reads "
                                  f"untrusted bytecode first ({how}): the bytecode is damaged") from None
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


def _read_everything(module) -> None:
    """Read each string of ``module`` that loading it reads: the op and attribute
    names, the attributes and the locations of ops and block arguments."""
    from jaxlib.mlir import ir

    from .decode import decode_location, decode_op_attributes

    def visit(operation):
        operation.name
        decode_location(operation.location)
        try:
            decode_op_attributes(operation)
        except RuntimeError:   # a name that is not UTF-8: reported by _serve
            raise
        except Exception:  # noqa: BLE001 - an attribute the load rejects clearly: not this check's concern
            pass
        for region in operation.regions:
            for block in region.blocks:
                for argument in block.arguments:
                    decode_location(argument.location)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


def _serve() -> None:
    from .sources import parse_bytes

    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            data = _read(requests)
        except EOFError:
            return
        try:
            _read_everything(parse_bytes(data))
            replies.write(_OK)
            _write(replies, b"")
        except ModuleError as error:
            replies.write(_ERROR)
            _write(replies, str(error).encode("utf-8"))
        except RuntimeError as error:  # nanobind's "conversion error": a name that is not UTF-8
            cause = str(error).strip().splitlines()[-1]   # the walk wraps it with the callback's traceback
            replies.write(_ERROR)
            _write(replies, f"cannot load MLIR bytecode: a name in it is not valid UTF-8 ({cause})".encode("utf-8"))


if __name__ == "__main__":
    _serve()
