"""Turn whatever the user hands us into an MLIR module.

Accepted: MLIR text (``str``), a path (``str`` or ``pathlib.Path``) to a text or
bytecode file, ``bytes`` (MLIR bytecode or a StableHLO portable artifact),
a ``jaxlib.mlir.ir.Module``, a ``jax.stages.Lowered`` and a
``jax.export.Exported``.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import threading
from dataclasses import dataclass

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from .check_dialect import to_generic_form
from .declarations import function_operations
from .decode import decode_location, load_quant_dialect
from .first_parse import check_in_child
from ..errors import ModuleError, ParseError

_BYTECODE_MAGIC = b"ML\xefR"

# A string escape of a byte past ASCII (``loc("x\FF")``): it can make a name that is not UTF-8.
_HIGH_BYTE_ESCAPE = re.compile(r"\\[89a-fA-F][0-9a-fA-F]")


@dataclass
class ParsedModule:
    module: ir.Module
    file_name: str | None  # for locations of text parsed from a file
    owned: bool = True     # False: the caller's module, which must not be modified
    # False when the source (text or bytecode, which keeps strings as they are) does
    # not name the custom call that starts manual code: no border to annotate
    # (sharding/manual_borders.py), and no walk over the module to look for one.
    may_have_manual_borders: bool = True
    # The same for the custom call of jax.experimental.custom_partitioning, whose operands
    # and results learn their shardings (sharding/custom_partitioning.py).
    may_have_custom_partitioning: bool = True
    # True when MLIR's parser made the module from text or bytecode: it runs the
    # verifier after parsing (a failure is the parse error), so a second run is waste.
    verified: bool = False
    # Set when the module is text that writes no location and is compiled as parsed: every
    # op's location is its place in the text, which the compiler need not read (TextLocations).
    text_locations: "TextLocations | None" = None
    # The Python functions the module's host callbacks lowered for the CPU call, by their
    # index: JAX keeps them in a Lowered beside the module, never in the module itself.
    host_callbacks: tuple = ()
    # True for a Lowered of this process: its custom partitioning ops name callbacks JAX
    # registered here (their keys are Python object ids, meaningless in another process).
    lowered_here: bool = False


def _of_source(module: ir.Module, file_name: str | None, source: str | bytes) -> ParsedModule:
    marker = MANUAL_BORDER_TARGET if isinstance(source, str) else MANUAL_BORDER_TARGET.encode()
    portable_artifact = isinstance(source, bytes) and _is_portable_artifact(source)
    may_have_manual_borders = marker in source
    custom_partitioning = CUSTOM_PARTITIONING_TARGET if isinstance(source, str) else CUSTOM_PARTITIONING_TARGET.encode()
    # (text with manual borders gets ops inserted before it compiles: sharding/manual_borders.py)
    located_by_text = isinstance(source, str) and "loc(" not in source and not may_have_manual_borders
    return ParsedModule(module, file_name, may_have_manual_borders=may_have_manual_borders,
                        may_have_custom_partitioning=custom_partitioning in source, verified=not portable_artifact,
                        text_locations=TextLocations(source, file_name) if located_by_text else None)


class TextLocations:
    """The locations of the ops of a module parsed from text that writes none
    (no ``loc(...)``): each op's is where it starts in the text (``file:line:col``).

    Reading an op's location through the bindings costs about 0.4 us, a
    twentieth of a load, and only an error or a tool ever needs it: a plan
    keeps this (the text, no MLIR object) and finds the locations again by
    parsing the text again, once, when the first is asked for. A block is
    named by its ``path``: the function's name, then for each op with regions
    on the way down, its index in its block and the region's index.
    """

    def __init__(self, text: str, file_name: str | None):
        self.text = text
        self.file_name = file_name
        self._blocks: dict | None = None   # path -> the locations of the block's ops, in order
        self._parsing = threading.Lock()

    def location(self, path: tuple, index: int):
        """The SourceLocation of op ``index`` of the block at ``path``."""
        if self._blocks is None:
            with self._parsing:
                if self._blocks is None:
                    self._blocks = self._parse_again()
        return self._blocks[path][index]

    def _parse_again(self) -> dict:
        module = _parse_text(self.text, self.file_name, trusted=True)   # (checked by the first parse)
        blocks: dict = {}
        with module.context:
            for name, function in function_operations(module).items():
                if len(function.regions[0].blocks):
                    self._add_block(function.regions[0].blocks[0], (name,), blocks)
        return blocks

    def _add_block(self, block, path: tuple, blocks: dict) -> None:
        locations = blocks[path] = []
        for index, operation in enumerate(block.operations):
            operation = operation.operation
            locations.append(decode_location(operation.location, self.file_name))
            for region_index, region in enumerate(operation.regions):
                if len(region.blocks):
                    self._add_block(region.blocks[0], (*path, (index, region_index)), blocks)


def _is_portable_artifact(data: bytes) -> bool:
    """A StableHLO portable artifact (VHLO bytecode), which is not parsed by ir.Module.parse."""
    return data.startswith(_BYTECODE_MAGIC) and b"StableHLO_v" in data[:64]


MANUAL_BORDER_TARGET = "SPMDFullToShardShape"
CUSTOM_PARTITIONING_TARGET = "CustomSPMDPartitioning"


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


# A context takes a millisecond or more to make (every dialect JAX emits is loaded
# into it), more than parsing and running a small program: loads of text share
# one per thread. What a context uniques (types, attributes, dense constants) lives as
# long as it does, so after parsing this many bytes of source it is replaced by a
# fresh one (the old one goes with the last module parsed in it).
SHARED_CONTEXT_BUDGET = 64 << 20


class _SharedContext(threading.local):
    context: ir.Context | None = None
    parsed: int = 0  # bytes of source parsed in it


_shared = _SharedContext()


def shared_context(size: int) -> ir.Context:
    """The context in which to parse ``size`` bytes of source: this thread's shared
    one, or a fresh one past the budget (SHARED_CONTEXT_BUDGET). A thread Python did not
    start (the interp device's PJRT calls come on XLA's threads) gets a fresh one each
    time: Python clears such a thread's state, its thread-locals with it, when the call
    returns, and a context that dies then (its last module gone) crashed the process in
    its deallocation, after the thread's interpreter state was gone."""
    if isinstance(threading.current_thread(), threading._DummyThread):
        return make_context()
    if _shared.context is None or _shared.parsed + size > SHARED_CONTEXT_BUDGET:
        _shared.context, _shared.parsed = make_context(), 0
    _shared.parsed += size
    return _shared.context


def parse(source, *, trusted: bool = False) -> ParsedModule:
    """``source`` as a module. Bytecode is parsed first in a child process (see
    first_parse.py) unless ``trusted``: bytes JAX made in this process."""
    if isinstance(source, ir.Module):
        return ParsedModule(source, None, owned=False)
    if isinstance(source, pathlib.Path):
        return _parse_file(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        return _of_source(parse_bytes(data) if trusted else _parse_untrusted_bytes(data), None, data)
    if isinstance(source, str):
        if _looks_like_path(source):
            return _parse_file(pathlib.Path(source))
        return _of_source(_parse_text(source), None, source)
    compiler_ir = getattr(source, "compiler_ir", None)
    if callable(compiler_ir):  # jax.stages.Lowered
        return ParsedModule(compiler_ir("stablehlo"), None, owned=False, host_callbacks=host_callbacks_of(source),
                            lowered_here=True)
    serialized = getattr(source, "mlir_module_serialized", None)
    if serialized is not None:  # jax.export.Exported
        data = bytes(serialized)
        return _of_source(_parse_untrusted_bytes(data), None, data)
    raise ModuleError(
        f"cannot load a module from {type(source).__name__}: expected MLIR text, a path, bytes, "
        "an ir.Module, a jax.stages.Lowered or a jax.export.Exported")


def host_callbacks_of(lowered) -> tuple:
    """The Python functions a ``Lowered``'s host callbacks call, in the order of their
    index (jax/_src/callback.py: ``emit_python_callback``); jax 0.10 keeps them only in
    the lowering's compile arguments, which JAX hands to XLA's compiler."""
    compile_args = getattr(getattr(lowered, "_lowering", None), "compile_args", None) or {}
    return tuple(compile_args.get("host_callbacks", ()))


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
        return _of_source(_parse_untrusted_bytes(data), str(path), data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModuleError(f"{path} is neither MLIR text (UTF-8) nor MLIR bytecode") from e
    return _of_source(_parse_text(text, str(path)), str(path), text)


def _parse_text(text: str, file_name: str | None = None, *, trusted: bool = False,
                context: ir.Context | None = None) -> ir.Module:
    where = f" in {file_name}" if file_name else ""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:  # lone surrogates, which the parser's binding cannot take
        raise ModuleError(f"cannot parse MLIR text{where}: it is not valid Unicode ({error})") from None
    if not trusted and _HIGH_BYTE_ESCAPE.search(text):
        check_in_child(text.encode())   # reading a name that is not UTF-8 would abort this process
    context = context or shared_context(len(text))
    with context, captured_diagnostics(context, file_name) as diagnostics:
        try:
            return ir.Module.parse(to_generic_form(text))
        except ir.MLIRError:
            raise ParseError(f"cannot parse MLIR text{where}:\n{diagnostics.text()}") from None


def _parse_untrusted_bytes(data: bytes) -> ir.Module:
    if not data.startswith(_BYTECODE_MAGIC):
        return _parse_text(_text_of(data))
    return parse_bytes(check_in_child(data))   # the child's own rewrite: see check_in_child


def _text_of(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ModuleError("bytes are neither MLIR bytecode nor MLIR text") from None


def parse_bytes(data: bytes, context: ir.Context | None = None) -> ir.Module:
    """MLIR bytecode, a portable artifact or UTF-8 text, parsed in this process with
    no first parse in a child: for JAX's own bytecode, and for that child. Each in
    a ``context`` of its own (a fresh one by default): the device's compiles crash
    the process in a shared one (tests/test_device.py, missing custom call target)."""
    context = context or make_context()
    if not data.startswith(_BYTECODE_MAGIC):
        return _parse_text(_text_of(data), trusted=True, context=context)
    with context, captured_diagnostics(context) as diagnostics:
        if _is_portable_artifact(data):
            try:
                return stablehlo.deserialize_portable_artifact(context, data)
            except Exception:  # noqa: BLE001 - the bindings raise several types; the diagnostics tell why
                raise ModuleError(f"cannot deserialize StableHLO portable artifact:\n{diagnostics.text()}") from None
        try:
            module = ir.Module.parse(data)
        except ir.MLIRError:
            raise ModuleError(f"cannot parse MLIR bytecode:\n{diagnostics.text()}") from None
        if any(op.operation.name.startswith("vhlo.") for op in module.body.operations):
            # a portable artifact whose producer is not "StableHLO_v..." (JAX's of early 2023
            # say "MLIRxxx-trunk"): its VHLO ops parse as they are, and mean StableHLO's
            return stablehlo.deserialize_portable_artifact(context, data)
        return module


def verify(module: ir.Module) -> None:
    """Run MLIR's verifier on the module; a failure is a ModuleError carrying its diagnostics."""
    with captured_diagnostics(module.context) as diagnostics:
        try:
            module.operation.verify()
        except ir.MLIRError:
            raise ModuleError(f"the module does not verify:\n{diagnostics.text()}") from None


class _Diagnostics:
    """The diagnostics MLIR emitted during one parse or verification, as lines of text:
    ``FILE:LINE:COL: message`` where the text came from ``file_name`` (MLIR's parser
    calls text it is handed ``-``: ``loc("-":7:8)``)."""

    def __init__(self, file_name: str | None = None):
        self.lines: list[str] = []
        self.file_name = file_name

    def handle(self, diagnostic) -> bool:
        self.lines.append(f"  {self._describe(diagnostic)}")
        self.lines.extend(f"    note: {self._describe(note)}" for note in diagnostic.notes)
        return True

    def text(self) -> str:
        return "\n".join(self.lines) or "  (no diagnostic)"

    def _describe(self, diagnostic) -> str:
        try:
            return f"{self._where(diagnostic.location)}: {diagnostic.message}"
        except RuntimeError:  # nanobind's "conversion error": the text quotes damaged bytes
            return "(a diagnostic whose text is not valid UTF-8)"

    def _where(self, location: ir.Location) -> str:
        if self.file_name and type(location) is ir.FileLineColLoc and location.filename == "-":
            return f"{self.file_name}:{location.start_line}:{location.start_col}"
        return str(location)


@contextlib.contextmanager
def captured_diagnostics(context: ir.Context, file_name: str | None = None):
    """Catch the context's diagnostics with a handler of ours, not in jaxlib's ``MLIRError``.

    jaxlib gathers a failed parse's diagnostics and converts them to Python strings
    when it raises ``MLIRError``; a diagnostic that is not valid UTF-8 (a note quoting
    bytes of damaged bytecode) makes that conversion throw inside nanobind's exception
    translation, which aborts the process. A handler gets each diagnostic as an object
    whose text, read in Python, raises an ordinary ``RuntimeError`` instead.
    """
    diagnostics = _Diagnostics(file_name)
    context.emit_error_diagnostics = True  # errors go to the handlers, not into MLIRError
    handler = context.attach_diagnostic_handler(diagnostics.handle)
    try:
        yield diagnostics
    finally:
        handler.detach()
        context.emit_error_diagnostics = False
