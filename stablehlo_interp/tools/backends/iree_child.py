"""The child process of iree.py: compiles each module it is sent with IREE's
compiler and runs its ``@main`` with IREE's runtime (either may abort: only this
process dies).

A request is a pickled ``(module_text, target, driver, flags, args)``; the reply is
OK with the pickled list of results, or ERROR with a pickled ``(kind, message)``,
``kind`` "compile", "crash" (the compiler died of a signal) or "run".
"""

from __future__ import annotations

import pickle
import re

import numpy as np

from ...errors import ModuleError
from ...ir.child_process import ERROR, OK, serve
from ...ir.types import dtype_of

_CONFIGS = {}   # driver -> iree.runtime.Config: one device per driver for the child's life


def _answer(request: bytes) -> tuple[bytes, bytes]:
    import iree.compiler
    import iree.runtime

    module_text, target, driver, flags, args = pickle.loads(request)
    try:
        flatbuffer = iree.compiler.compile_str(module_text, target_backends=[target], input_type="stablehlo",
                                               extra_args=list(flags))
    except iree.compiler.CompilerToolError as error:
        return ERROR, pickle.dumps(compiler_failure(str(error)))
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
        return ERROR, pickle.dumps(("run", f"{type(error).__name__}: {error}"))
    return OK, pickle.dumps(results)


def compiler_failure(text: str) -> tuple[str, str]:
    """``(kind, message)`` of a failed compile: "crash" when ``iree-compile`` died of a
    signal (its error code is minus the signal's number; the message is what it said
    before its stack trace), else "compile" and its diagnostics."""
    code = re.search(r"^Error code: (-?\d+)$", text, re.MULTILINE)
    if code is None or int(code.group(1)) >= 0:
        return "compile", compiler_message(text)
    diagnostics = text.partition("Diagnostics:")[2].partition("Invoked with:")[0]
    said = [line.strip() for line in diagnostics.splitlines()
            if line.strip() and not re.match(r"\s*(#\d+ |Please report|Stack dump:|\d+\.\s+Program arguments)", line)]
    return "crash", "; ".join([f"iree-compile died of signal {-int(code.group(1))}"] + said[:5])[:4000]


def compiler_message(text: str) -> str:
    """The diagnostics of a failed compile, from its first ``error:`` on (IREE's
    message starts with the compiler's name and ends with the command line it ran)."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if "error:" in line), 0)
    last = next((i for i, line in enumerate(lines) if line.startswith("Invoked with:") and i > first), len(lines))
    return "\n".join(line for line in lines[first:last] if line.strip())[:4000]


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
    serve(_answer)
