"""The child process of reference.py: evaluates each module it is sent with the C++
StableHLO reference interpreter in jaxlib (``stablehlo.eval_module``), which aborts its
process on what it cannot do (CHLO ops, a failed check): only this process dies.

A request is a pickled ``(module_text, arguments)`` with each argument as
:func:`encode_argument` makes it; the reply is OK with the pickled list of the results'
texts (dense attributes), or ERROR with the interpreter's message.
"""

from __future__ import annotations

import pickle

import numpy as np

from ..ir.child_process import serve


def encode_argument(array: np.ndarray) -> tuple:
    """``(element type, shape, bytes)`` of an argument, its bytes as MLIR stores dense
    elements (one whole byte per sub-byte element, booleans as bytes)."""
    from ..ir.types import bit_width, element_type_of

    array = np.asarray(array)
    width = bit_width(array.dtype)
    if array.dtype == np.bool_:
        raw = np.ascontiguousarray(array, np.uint8).tobytes()
    elif width < 8:
        raw = (np.ascontiguousarray(array).view(np.uint8) & ((1 << width) - 1)).tobytes()
    else:
        raw = np.ascontiguousarray(array).tobytes()
    return element_type_of(array.dtype), array.shape, raw


def evaluate(module_text: str, arguments: list) -> list[str]:
    """``@main`` of the module evaluated by the C++ reference interpreter on the encoded
    ``arguments``: each result as the text of a dense attribute."""
    from jax._src.interpreters import mlir as jax_mlir
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    from ..ir.decode import load_quant_dialect

    context = jax_mlir.make_ir_context()
    load_quant_dialect(context)                       # for !quant.uniform types
    stablehlo.register_interpreter_dialect(context)   # interpreter.run_parallel
    with context, ir.Location.unknown():
        module = ir.Module.parse(module_text)
        attributes = []
        for element, shape, raw in arguments:
            dims = "".join(f"{d}x" for d in shape)
            text = f'dense<"0x{raw.hex().upper()}"> : tensor<{dims}{element}>' if raw else \
                f"dense<> : tensor<{dims}{element}>"
            attributes.append(ir.Attribute.parse(text))
        return [str(result) for result in stablehlo.eval_module(module, attributes)]


def _answer(request: bytes) -> bytes:
    module_text, arguments = pickle.loads(request)
    return pickle.dumps(evaluate(module_text, arguments))


if __name__ == "__main__":
    serve(_answer, reported=(Exception,), describe=lambda error: f"{type(error).__name__}: {error}")
