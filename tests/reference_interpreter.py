"""The C++ StableHLO reference interpreter bundled in jaxlib, as a test oracle.

``stablehlo.eval_module`` aborts the whole process on anything it does not
support, so it runs in a child process that serves requests over a pipe; if the
child dies, the request is reported as :class:`ReferenceCrashed` and a fresh
child is started for the next one. The evaluation is the package's
(backends/reference_child.py, ``--backend reference``); this oracle adds a deadline
after which a hung child counts as such.
"""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np

from child_deadline import Deadline
from stablehlo_interp.ir.child_process import read, write   # the package's length-prefixed framing

# How long one evaluation may take before the child counts as hung.
REPLY_SECONDS = 300


class ReferenceCrashed(RuntimeError):
    pass


class ReferenceError_(RuntimeError):
    pass


class ReferenceHung(RuntimeError):
    pass


def _send(stream, payload) -> None:
    write(stream, pickle.dumps(payload))


def _receive(stream):
    return pickle.loads(read(stream))


class ReferenceInterpreter:
    """Client: ``evaluate(module_text, args) -> list of ndarrays``."""

    def __init__(self):
        self._process = None

    def _start(self):
        self._process = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL)

    def evaluate(self, module_text: str, args) -> list:
        if self._process is None or self._process.poll() is not None:
            self._start()
        request = (module_text, [_encode(np.asarray(a)) for a in args])
        with Deadline(self._process, REPLY_SECONDS) as deadline:
            try:
                _send(self._process.stdin, request)
                status, payload = _receive(self._process.stdout)
            except (EOFError, BrokenPipeError, OSError):
                self._process = None
                if deadline.expired:
                    raise ReferenceHung(f"the C++ reference interpreter did not answer within {REPLY_SECONDS} s "
                                        f"(killed); the module:\n{module_text[:3000]}") from None
                raise ReferenceCrashed("the C++ reference interpreter aborted on this module") from None
        if status != "ok":
            raise ReferenceError_(payload)
        from stablehlo_interp.ir.decode import parse_elements_text

        return [parse_elements_text(text) for text in payload]

    def close(self):
        if self._process is not None:
            self._process.stdin.close()
            self._process.wait(timeout=10)
            self._process = None


def _encode(array: np.ndarray):
    from stablehlo_interp.backends.reference_child import encode_argument

    return encode_argument(array)


def _serve() -> None:
    from stablehlo_interp.backends.reference_child import evaluate

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            module_text, args = _receive(stdin)
        except EOFError:
            return
        try:
            _send(stdout, ("ok", evaluate(module_text, args)))
        except Exception as e:  # noqa: BLE001 - any failure of the C++ interpreter's bindings goes back to the parent as its message
            _send(stdout, ("error", f"{type(e).__name__}: {e}"))


if __name__ == "__main__":
    _serve()
