"""A first parse of untrusted MLIR bytecode in a child process.

MLIR's bytecode reader (and StableHLO's portable-artifact reader, which is the
same reader for the VHLO dialect) can corrupt the heap on damaged input: a few
flipped bytes give ``invalid dialect index`` followed by ``free(): corrupted
unsorted chunks`` and an abort. And bytecode that parses may hold names that
are not UTF-8 (an op's location name, a file name), which abort the process in
jaxlib's conversion to ``str`` when read. Nothing in this process could catch
either, so bytes from a file or a caller are parsed first by a child process
(child_process.py), which also reads every name the load will read (op and
attribute names, attributes, locations); only bytes the child read cleanly are
parsed here. Each check runs in a process the child forks for it, so damage one
input does to the heap cannot reach a later check (the reader can corrupt the
heap, report a clean error and abort only later; in a fresh heap the same bytes
can make it loop, so a check has ``seconds_to_read`` seconds). A parse error is
reported from the child's diagnostics; a child killed by the input becomes a
:class:`~stablehlo_interp.errors.ModuleError` and the next check starts a fresh
child. Bytecode JAX hands the ``interp`` device is
trusted and skips this (see :func:`stablehlo_interp.ir.sources.parse`).

The child costs a Python start once, then a fork, a pipe round trip and a second
parse per check (``benchmarks/load_bench.py`` measures it).
"""

from __future__ import annotations

from ..errors import ModuleError
from .child_process import ERROR, EXPIRED, ChildDied, ChildProcess

_CHILD = ChildProcess(f"{__package__}.first_parse_child")


def check_in_child(data: bytes) -> bytes:
    """Raise a ModuleError unless ``data`` parses cleanly in the child process; return
    the module as bytecode the child wrote. Reading damaged bytecode is not always
    deterministic (a run under load once read in the child what then aborted this
    process), so this process reads only what MLIR's own writer made."""
    try:
        status, message = _CHILD.ask(data)
    except ChildDied as death:
        raise ModuleError(f"cannot load the module: reading it killed the child process that reads "
                          f"untrusted input first ({death.how}), as damaged bytecode or a name that is not "
                          "UTF-8 does") from None
    if status == EXPIRED:
        raise ModuleError(f"cannot load the module: reading it did not end within {message.decode()} s, "
                          "as damaged bytecode can make MLIR's reader loop")
    if status == ERROR:
        raise ModuleError(message.decode("utf-8"))
    return message
