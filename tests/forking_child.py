"""A child process for tests/test_load.py that serves with ``fork_each``: a request
``loop`` never ends, ``abort`` aborts, ``count`` answers how many requests this
process has counted (a fork's count is lost with it), anything else is echoed."""

from __future__ import annotations

import os

from stablehlo_interp.ir.child_process import serve

_counted = 0


def _answer(request: bytes) -> bytes:
    global _counted
    _counted += 1
    if request == b"loop":
        while True:
            pass
    if request == b"abort":
        os.abort()
    return str(_counted).encode() if request == b"count" else request


if __name__ == "__main__":
    serve(_answer, fork_each=lambda request: 2.0)
