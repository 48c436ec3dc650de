"""Turn whatever the user hands us into an MLIR module.

Accepted: MLIR text (``str``), a path (``str`` or ``pathlib.Path``) to a text or
bytecode file, ``bytes`` (MLIR bytecode or a StableHLO portable artifact),
a ``jaxlib.mlir.ir.Module``, a ``jax.stages.Lowered`` and a
``jax.export.Exported``.
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .check_dialect import to_generic_form
from .decode import load_quant_dialect
from ..errors import ModuleError

_BYTECODE_MAGIC = b"ML\xefR"


@dataclass
class ParsedModule:
    module: ir.Module
    file_name: str | None  # for locations of text parsed from a file
    owned: bool = True     # False: the caller's module, which must not be modified


def copy_module(module: ir.Module) -> ir.Module:
    """A deep copy of a module (attributes, and every op of its body)."""
    with module.context, ir.Location.unknown():
        copy = ir.Module.create()
        for name in module.operation.attributes:
            copy.operation.attributes[name] = module.operation.attributes[name]
        with ir.InsertionPoint(copy.body):
            for operation in module.body.operations:
                operation.operation.clone()
    return copy


def make_context() -> ir.Context:
    """A context with every dialect JAX emits (func, stablehlo, chlo, sdy, mhlo ...)."""
    from jax._src.interpreters import mlir as jax_mlir

    context = jax_mlir.make_ir_context()
    # The check dialect of StableHLO's interpreter tests is not in jaxlib: its ops
    # are parsed in generic form (see check_dialect.py) as unregistered ops.
    context.allow_unregistered_dialects = True
    stablehlo.register_interpreter_dialect(context)
    load_quant_dialect(context)  # for !quant.uniform types
    return context


def parse(source) -> ParsedModule:
    if isinstance(source, ir.Module):
        return ParsedModule(source, None, owned=False)
    if isinstance(source, pathlib.Path):
        return _parse_file(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return ParsedModule(_parse_bytes(bytes(source)), None)
    if isinstance(source, str):
        if _looks_like_path(source):
            return _parse_file(pathlib.Path(source))
        return ParsedModule(_parse_text(source), None)
    compiler_ir = getattr(source, "compiler_ir", None)
    if callable(compiler_ir):  # jax.stages.Lowered
        return ParsedModule(compiler_ir("stablehlo"), None, owned=False)
    serialized = getattr(source, "mlir_module_serialized", None)
    if serialized is not None:  # jax.export.Exported
        return ParsedModule(_parse_bytes(bytes(serialized)), None)
    raise ModuleError(
        f"cannot load a module from {type(source).__name__}: expected MLIR text, a path, bytes, "
        "an ir.Module, a jax.stages.Lowered or a jax.export.Exported")


def _looks_like_path(text: str) -> bool:
    if "\n" in text or "{" in text or len(text) > 4096:
        return False
    if os.path.exists(text):
        return True
    if text.endswith((".mlir", ".mlirbc", ".bc", ".stablehlo")):
        raise ModuleError(f"no such file: {text}")
    return False


def _parse_file(path: pathlib.Path) -> ParsedModule:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ModuleError(f"cannot read {path}: {e}") from e
    if data.startswith(_BYTECODE_MAGIC):
        return ParsedModule(_parse_bytes(data), str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModuleError(f"{path} is neither MLIR text (UTF-8) nor MLIR bytecode") from e
    return ParsedModule(_parse_text(text, str(path)), str(path))


def _parse_text(text: str, file_name: str | None = None) -> ir.Module:
    context = make_context()
    with context:
        try:
            return ir.Module.parse(to_generic_form(text))
        except ir.MLIRError as e:
            where = f" in {file_name}" if file_name else ""
            raise ModuleError(f"cannot parse MLIR text{where}:\n{_diagnostics(e)}") from None


def _parse_bytes(data: bytes) -> ir.Module:
    context = make_context()
    if not data.startswith(_BYTECODE_MAGIC):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ModuleError("bytes are neither MLIR bytecode nor MLIR text") from None
        return _parse_text(text)
    with context:
        if b"StableHLO_v" in data[:64]:
            try:
                return stablehlo.deserialize_portable_artifact(context, data)
            except Exception as e:  # noqa: BLE001 - the bindings raise several types
                raise ModuleError(f"cannot deserialize StableHLO portable artifact: {e}") from None
        try:
            return ir.Module.parse(data)
        except ir.MLIRError as e:
            raise ModuleError(f"cannot parse MLIR bytecode:\n{_diagnostics(e)}") from None


def verify(module: ir.Module) -> None:
    """Run MLIR's verifier on the module; a failure is a ModuleError carrying its diagnostics."""
    try:
        module.operation.verify()
    except ir.MLIRError as e:
        raise ModuleError(f"the module does not verify:\n{_diagnostics(e)}") from None


def _diagnostics(error: ir.MLIRError) -> str:
    diagnostics = getattr(error, "error_diagnostics", None)
    if not diagnostics:
        return str(error)
    lines = []
    for d in diagnostics:
        lines.append(f"  {d.location}: {d.message}")
        for note in d.notes:
            lines.append(f"    note: {note.location}: {note.message}")
    return "\n".join(lines)
