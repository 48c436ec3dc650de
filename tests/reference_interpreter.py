"""The C++ StableHLO reference interpreter bundled in jaxlib, as a test oracle.

``stablehlo.eval_module`` aborts the whole process on anything it does not
support, so it runs in a child process that serves requests over a pipe; if the
child dies, the request is reported as :class:`ReferenceCrashed` and a fresh
child is started for the next one.
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
    from stablehlo_interp.ir.types import element_type_of

    element = element_type_of(array.dtype)
    return element, array.shape, _storage_bytes(array)


def _storage_bytes(array: np.ndarray) -> bytes:
    """Bytes as MLIR stores dense elements: one whole byte per sub-byte element."""
    from stablehlo_interp.ir.types import bit_width

    width = bit_width(array.dtype)
    if array.dtype == np.bool_:
        return np.ascontiguousarray(array, np.uint8).tobytes()
    if width < 8:
        return (np.ascontiguousarray(array).view(np.uint8) & ((1 << width) - 1)).tobytes()
    return np.ascontiguousarray(array).tobytes()


def _serve() -> None:
    from jax._src.interpreters import mlir as jax_mlir
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    from stablehlo_interp.ir.decode import load_quant_dialect

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            module_text, args = _receive(stdin)
        except EOFError:
            return
        try:
            context = jax_mlir.make_ir_context()
            load_quant_dialect(context)  # for !quant.uniform types
            stablehlo.register_interpreter_dialect(context)  # interpreter.run_parallel
            with context, ir.Location.unknown():
                module = ir.Module.parse(module_text)
                attrs = []
                for element, shape, raw in args:
                    dims = "".join(f"{d}x" for d in shape)
                    text = f'dense<"0x{raw.hex().upper()}"> : tensor<{dims}{element}>' if raw else \
                        f"dense<> : tensor<{dims}{element}>"
                    attrs.append(ir.Attribute.parse(text))
                results = stablehlo.eval_module(module, attrs)
                _send(stdout, ("ok", [str(r) for r in results]))
        except Exception as e:  # noqa: BLE001 - any failure of the C++ interpreter's bindings goes back to the parent as its message
            _send(stdout, ("error", f"{type(e).__name__}: {e}"))


if __name__ == "__main__":
    _serve()
