"""The child process of iree.py: compiles each module it is sent with IREE's
compiler and runs its ``@main`` with IREE's runtime (either may abort: only this
process dies).

A request is a pickled ``(module_text, target, driver, flags, args, timeout)``; the reply is
OK with the pickled list of results, or ERROR with ``kind:message`` (a :class:`Refused`),
``kind`` "compile", "crash" (the compiler died of a signal or timed out) or "run".

The last :data:`COMPILED_KEPT` programs compiled are kept: a loop stepped on IREE
(tools/loops.py) runs its cond and body once per iteration, and compiling each again
took a second a run.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess

import numpy as np

from ..errors import ModuleError
from ..ir.child_process import serve
from ..ir.types import dtype_of

_CONFIGS: dict = {}   # driver -> iree.runtime.Config: one device per driver for the child's life
COMPILED_KEPT = 16
_COMPILED: dict = {}  # (module_text, target, flags) -> flatbuffer, the least recently used first


class Refused(Exception):
    """The compiler's or the runtime's refusal: ``kind`` (compile, crash, run) and its message."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}:{message}")


def _answer(request: bytes) -> bytes:
    import iree.runtime

    module_text, target, driver, flags, args, timeout = pickle.loads(request)
    key = (module_text, target, tuple(flags))
    flatbuffer = _COMPILED.pop(key, None)
    if flatbuffer is None:
        failure, flatbuffer = _compile(module_text, target, flags, timeout)
        if failure is not None:
            raise Refused(*failure)
    _COMPILED[key] = flatbuffer
    while len(_COMPILED) > COMPILED_KEPT:
        del _COMPILED[next(iter(_COMPILED))]
    try:
        if driver not in _CONFIGS:
            _CONFIGS[driver] = iree.runtime.Config(driver)
        context = iree.runtime.SystemContext(config=_CONFIGS[driver])
        vm_module = iree.runtime.VmModule.copy_buffer(context.instance, flatbuffer)
        context.add_vm_module(vm_module)
        main = context.modules[vm_module.name]["main"]   # the VM module is named as the MLIR module (or "module")
        declared = declared_input_types(main.vm_function.reflection.get("iree.abi.declaration", ""))
        returned = main(*(_as_declared(np.asarray(value), declared, index) for index, value in enumerate(args)))
        if returned is None:
            returned = []
        elif not isinstance(returned, (list, tuple)):
            returned = [returned]
        results = [np.asarray(value.to_host() if hasattr(value, "to_host") else value) for value in returned]
    except Exception as error:  # noqa: BLE001 - the runtime's refusal (or its bindings'): the verdict's message
        raise Refused("run", f"{type(error).__name__}: {error}") from None
    return pickle.dumps(results)


def _compile(module_text: str, target: str, flags, timeout: float):
    """``(None, flatbuffer)``, or ``((kind, message), None)``: "crash" when ``iree-compile``
    died of a signal or ran past ``timeout`` seconds, else "compile" and its diagnostics.
    LLVM's crash handler runs without its symbolizer, which can deadlock (seen: a crashed
    iree-compile asleep for half an hour)."""
    from iree.compiler.tools.core import CompilerOptions, TempFileSaver, build_compile_command_line

    with TempFileSaver.implicit() as temporary_files:
        options = CompilerOptions(target_backends=[target], input_type="stablehlo", extra_args=list(flags))
        command = build_compile_command_line("-", temporary_files, options)
        try:
            finished = subprocess.run(command, input=module_text.encode("utf-8"), capture_output=True,
                                      timeout=timeout, env={**os.environ, "LLVM_DISABLE_SYMBOLIZATION": "1"})
        except subprocess.TimeoutExpired:
            return ("crash", f"iree-compile timed out after {timeout:g} s"), None
    said = finished.stderr.decode("utf-8", "replace")
    if finished.returncode < 0:
        lines = [line.strip() for line in said.splitlines()
                 if line.strip() and not re.match(_STACK_TRACE, line)]
        return ("crash", "; ".join([f"iree-compile died of signal {-finished.returncode}"] + lines[:5])[:4000]), None
    if finished.returncode > 0:
        return ("compile", compiler_message(said)), None
    return None, finished.stdout


def compiler_message(text: str) -> str:
    """The diagnostics of a failed compile, from its first ``error:`` on."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if "error:" in line), 0)
    return "\n".join(line for line in lines[first:] if line.strip())[:4000]


# the lines of LLVM's crash report that are its stack trace, not what went wrong
_STACK_TRACE = r"\s*(#\d+ |\d+\s+\S+\s+0x|Please report|Stack dump|\d+\.\s+Program arguments)"
_TENSOR = re.compile(r"%input\d+: tensor<((?:[^<>]|<[^<>]*>)*)>")


def declared_input_types(declaration: str) -> list:
    """The element types of the compiled function's inputs, from its ABI declaration
    (``sync func @main(%input0: tensor<3xf32>) -> ...``): after a demotion flag they
    are not the module's."""
    return [re.sub(r"^(?:(?:\d+|\?)x)*", "", shape) for shape in _TENSOR.findall(declaration)]


def _as_declared(value: np.ndarray, declared: list, index: int) -> np.ndarray:
    """An argument in the width the compiled function takes (f64 as f32 after
    ``--iree-input-demote-f64-to-f32`` ...); any other difference is the runtime's to refuse."""
    if index >= len(declared):
        return value
    try:
        dtype = dtype_of(declared[index])
    except ModuleError:
        return value
    return value.astype(dtype) if value.dtype.kind == dtype.kind and value.dtype != dtype else value


if __name__ == "__main__":
    serve(_answer, reported=(Refused,))
