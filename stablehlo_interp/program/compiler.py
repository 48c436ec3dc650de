"""Load time: compile a module's functions into plans (engine/plan.py).

The compiler walks each function body and each region of its ops once, maps
MLIR values to numbered slots, decodes every op (attributes, types, location)
into an :class:`~stablehlo_interp.engine.plan.OpInfo` and calls the op's
builder from the registry, which returns the runner. Equal element-wise ops
share the first one's (``_built``); of those, only the location is read, and
not even that in text that writes none (ir/sources.py, TextLocations). It is the one place
besides ir/ that reads MLIR operations; the plans it produces hold none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc

from jaxlib.mlir.ir import FileLineColLoc

from .. import ops
from ..engine import registry
from ..engine.passes import run_program
from ..engine.plan import (IN_TEXT, BuiltOp, Function, ModuleInfo, OpInfo, Region, RegionKind, Step, StepColumns,
    encode_location)
from ..engine.quantized import build_quantized
from ..errors import ModuleError, OpError, UnsupportedOpError
from ..ir.declarations import function_operations
from ..ir.decode import decode_location, decode_op_attributes, decode_type
from ..ir.locations import SourceLocation
from ..ir.types import TensorType, TupleType
from ..ir.sources import TextLocations

TERMINATORS = frozenset({"func.return", "stablehlo.return", "sdy.return", "mhlo.return"})

# Ops that call other functions of the module, and the attribute that names them.
_CALLEE_ATTRIBUTE = {
    "func.call": "callee",
    "stablehlo.composite": "decomposition",
    "stablehlo.custom_call": "called_computations",
}



@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector paused while a module compiles.

    A compile creates several objects per op and frees few, so the collector
    would run its full passes over everything alive again and again: a load
    would cost more per op the longer the module. The plans hold no cycles that
    need collecting while they are built.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _Scope:
    """What the compiler keeps while it compiles one block: the slot of each MLIR
    value, its decoded type and that type's id (the shared runners' keys), the
    values the block captures from enclosing ones, and the block's ``path``
    (TextLocations)."""

    def __init__(self, parent: "_Scope | None", path: tuple):
        self.parent = parent
        self.path = path
        # hash(value) -> its slot. jaxlib's bindings hash a Value as its MLIR pointer: the
        # distinct values of a module, all alive while it compiles, hash apart (checked:
        # check_keys_apart). Keyed by the Values, each look-up of an operand (a new Value
        # object) would compare it with the key too, and the dict would keep every Value
        # object alive while the block compiles (up to 0.5 us per op: docs/engine.md).
        self.slots: dict = {}
        self.types: list = []  # the decoded type of each slot
        self.type_ids: list[int] = []  # id() of each slot's decoded type
        self.captured_values: list = []  # the outer MLIR values, in the order of their slots

    @property
    def n_slots(self) -> int:
        return len(self.types)

    def define(self, value, value_type) -> int:
        slot = len(self.types)
        self.types.append(value_type)
        self.type_ids.append(id(value_type))
        self.slots[hash(value)] = slot
        return slot

    def lookup(self, value) -> int:
        slot = self.slots.get(hash(value))
        if slot is not None:
            return slot
        if self.parent is None:
            raise ModuleError(f"value {value.get_name()} is used but not defined in scope")
        outer = self.parent.lookup(value)  # must exist in an enclosing region
        self.captured_values.append(value)
        return self.define(value, self.parent.types[outer])

    def captures_first(self, n_args: int, columns: StepColumns, outputs) -> tuple:
        """Renumber the slots to a Region's layout, [captures][args][results] (captures
        are found while compiling, after the arguments took the first slots): the
        steps' slots change in place; returns ``outputs`` renumbered."""
        if not self.captured_values:
            return outputs
        mapping = {self.slots[hash(v)]: new for new, v in enumerate(self.captured_values)}
        for old in range(self.n_slots):
            if old not in mapping:
                mapping[old] = len(mapping)
        columns.renumber(mapping)
        n_captures = len(self.captured_values)
        assert [mapping[s] for s in range(n_args)] == list(range(n_captures, n_captures + n_args))
        return tuple(mapping[s] for s in outputs)

    def check_keys_apart(self) -> None:
        """Fail, rather than mix two values up, should the bindings hash two values
        of the module alike: each slot has its own key, and no value of this block
        has the key of a value of an enclosing one (except those it captures)."""
        clash = len(self.slots) != self.n_slots
        if not clash and self.parent is not None:
            captured = set(map(hash, self.captured_values))
            enclosing = []
            scope = self.parent
            while scope is not None:
                enclosing.append(scope.slots)
                scope = scope.parent
            clash = any(key not in captured and any(key in slots for slots in enclosing) for key in self.slots)
        if clash:
            raise ModuleError("two MLIR values of the module hash alike: the compiler keys values by their hashes, "
                              "which jaxlib's bindings make their pointers (program/compiler.py, _Scope)")


class Compiler:
    """Compiles the functions of one module into a Program's plans.

    A function is compiled before the first op that calls it (a func.call,
    composite or custom_call gets the called function's Region as a region), so
    it may be declared anywhere in the module. A call to a function whose body is
    being compiled (recursion) gets that function's Region once it is built.

    With ``text_locations`` (a module of text that writes no location), the
    ops that share a runner read no location: their plans find it in the text
    when asked (StepColumns.locate).
    """

    # Whether _compile_block takes the hot path for equal element-wise ops; the general
    # one (_compile_op) builds the same plan (tests/test_load.py compiles both ways).
    shortcuts = True

    def __init__(self, module: ModuleInfo, file_name: str | None, text_locations: TextLocations | None = None):
        ops.load_all()
        self.module = module
        self.file_name = file_name
        self.text_locations = text_locations
        self._func_ops: dict = {}   # function name -> its func.func operation
        self._compiling: set[str] = set()
        self._recursive_calls: dict[str, list] = {}  # function name -> [(call step, region index)]
        self._types: dict = {}      # MLIR type -> decoded type (MLIR uniques types: one decoding each)
        self._locations: dict = {}  # MLIR location attribute -> decoded location (decode_location)
        # (name, MLIR result type, operand type ids, attributes) of a shareable op -> its
        # _SharedRunner; the type ids are those of self._types' values, which live as long as
        # this compiler
        self._shared_runners: dict = {}

    def location(self, operation) -> SourceLocation:
        return decode_location(operation.location, self.file_name, self._locations)

    def type_of(self, mlir_type):
        decoded = self._types.get(mlir_type)
        if decoded is None:
            decoded = self._types[mlir_type] = decode_type(mlir_type)
        return decoded

    def compile_functions(self, mlir_module) -> None:
        """Compile each of the module's functions into its ``region`` (ModuleInfo.functions)."""
        with mlir_module.context, _collector_paused():
            self._func_ops = function_operations(mlir_module)
            for function in self.module.functions.values():
                self.compile_function(function)

    def compile_function(self, function: Function) -> None:
        """Compile ``function``'s body into ``function.region`` (once; an external
        declaration has no body: calling it is an error)."""
        if function.region is not None or not function.has_body or function.name in self._compiling:
            return
        self._compiling.add(function.name)
        block = self._func_ops[function.name].regions[0].blocks[0]
        function.region, _ = self._compile_block(block, RegionKind.body_of(function.name, function.arg_names, function.result_names), None, (function.name,))
        self._compiling.remove(function.name)
        for step, index in self._recursive_calls.pop(function.name, ()):
            regions = list(step.regions)
            regions[index] = function.region
            step.regions = step.info.regions = tuple(regions)

    def compile_region(self, mlir_region, kind: RegionKind, parent: _Scope, path: tuple) -> tuple:
        """An op's region (its block at ``path``): ``(Region, the outer values it captures)``."""
        blocks = list(mlir_region.blocks)
        if len(blocks) != 1:
            raise ModuleError(f"{kind}: regions must have exactly one block, found {len(blocks)}")
        return self._compile_block(blocks[0], kind, parent, path)

    def _compile_block(self, block, kind: RegionKind, parent: _Scope | None, path: tuple) -> tuple:
        scope = _Scope(parent, path)
        arguments = list(block.arguments)
        for argument in arguments:
            scope.define(argument, self.type_of(argument.type))
        arg_types = tuple(scope.types)
        text_locations = self.text_locations
        columns = StepColumns(self.file_name or "-",
                              None if text_locations is None else functools.partial(text_locations.location, path))
        # The loop below is the load's hot path (docs/engine.md, "What a load costs"): an
        # element-wise op without attributes equal to one compiled before (the same name
        # and types: _built) costs only the binding calls that read it and a few list
        # appends (_Scope.define and StepColumns.append inlined: 0.1 to 0.3 us per op less,
        # same-run A/B); any other op goes through _compile_op, which builds the same plan
        # (tests/test_load.py compiles a corpus both ways: Compiler.shortcuts).
        elementwise = registry.ELEMENTWISE_OPS if self.shortcuts else ()
        shared_runners, slots, types, type_ids = self._shared_runners, scope.slots, scope.types, scope.type_ids
        slot_of, encode, file_line_col = slots.get, encode_location, FileLineColLoc
        append_op, append_operands, append_result, append_location = (   # (StepColumns.append, inlined)
            columns.ops.append, columns.operands.append, columns.results.append, columns.locations.append)
        for operation in block.operations:
            operation = operation.operation
            name = operation.name
            if name in elementwise and not len(operation.attributes):
                result = operation.result   # (an element-wise op has one result, no regions)
                operands = tuple(map(slot_of, map(hash, operation.operands)))
                if None in operands:   # (a value of an enclosing block)
                    shared = None
                elif len(operands) == 2:   # (unpacking a map costs more than the binding calls around it)
                    shared = shared_runners.get((name, result.type, type_ids[operands[0]], type_ids[operands[1]]))
                elif len(operands) == 1:
                    shared = shared_runners.get((name, result.type, type_ids[operands[0]]))
                else:
                    shared = shared_runners.get((name, result.type, *map(type_ids.__getitem__, operands)))
                if shared is not None:
                    if text_locations is not None:
                        location = IN_TEXT   # (its own code: encode_location)
                    elif type(location := operation.location) is file_line_col:
                        location = encode((location.filename, location.start_line, location.start_col))
                    else:
                        location = encode(self.location(operation))
                    slots[hash(result)] = slot = len(types)   # (scope.define, inlined)
                    types.append(shared.result_type)
                    type_ids.append(shared.result_type_id)
                    append_op(shared)
                    append_operands(operands)
                    append_result(slot)
                    append_location(location)
                    continue
            if name in TERMINATORS:
                outputs = tuple(scope.lookup(v) for v in operation.operands)
                output_types = tuple(scope.types[slot] for slot in outputs)
                return_location = self.location(operation)
                break
            self._compile_op(operation, name, scope, columns)
        else:
            raise ModuleError(f"{kind}: block has no terminator")
        scope.check_keys_apart()
        outputs = scope.captures_first(len(arguments), columns, outputs)
        region = Region(kind, columns, len(scope.captured_values), arg_types, outputs, output_types,
                        return_location, scope.n_slots, run_program(columns, outputs))
        return region, scope.captured_values

    def _compile_op(self, op, name: str, scope: _Scope, columns: StepColumns) -> None:
        location = self.location(op)
        nested = captures = callees = called = ()
        try:
            if len(op.regions):
                path = scope.path
                index = len(columns)
                compiled = [self.compile_region(r, RegionKind.of_op(name, i), scope, (*path, (index, i)))
                            for i, r in enumerate(op.regions)]
                nested = tuple(region for region, _ in compiled)
                captures = tuple(tuple(scope.lookup(v) for v in captured) for _, captured in compiled)
            attributes = decode_op_attributes(op) if len(op.attributes) else {}
            if name in _CALLEE_ATTRIBUTE:
                callees = self._callees(name, attributes)
            # (map over bound C methods: no Python frame per value, as a comprehension has)
            operands = tuple(map(scope.slots.get, map(hash, op.operands)))
            if None in operands:   # a value of an enclosing block: captured
                operands = tuple(map(scope.lookup, op.operands))
            mlir_result_types = tuple(op.results.types)
            result_types = tuple(map(self.type_of, mlir_result_types))
        except OpError:
            raise
        except ModuleError as e:
            raise OpError(name, location, str(e)) from None
        if callees:
            for function in callees:
                self.compile_function(function)
            called = tuple(function.region for function in callees)   # None: a recursive call
            captures += tuple(() for _ in called)
        regions = nested + called
        shared_key = None
        if not regions and name in registry.ELEMENTWISE_OPS:
            # (the key of _compile_block's look-up, and the attributes)
            shared_key = (name, *mlir_result_types, *map(scope.type_ids.__getitem__, operands), *attributes.items())
        built, implementation = self._built(name, attributes, operands, scope, result_types, regions, location,
                                            shared_key)
        info = built.info
        results = tuple(map(scope.define, op.results, info.result_types))
        if regions or implementation.variadic or implementation.execution:
            step = Step(info, built.run, operands, results, (), regions, captures, len(columns),
                        implementation.variadic, implementation.execution, built.scalar)
            columns.append_step(step)
            for offset, (function, region) in enumerate(zip(callees, called)):
                if region is None:
                    self._recursive_calls.setdefault(function.name, []).append((step, len(nested) + offset))
        else:   # (an equal element-wise op compiled before has another location)
            columns.append(built, operands, results[0], None if info.location is location else encode_location(location))

    def _built(self, name: str, attributes: dict, operands: tuple, scope: _Scope, result_types: tuple,
               regions: tuple, location: SourceLocation, shared_key: tuple | None) -> tuple:
        """The op's ``(BuiltOp, implementation)``. Element-wise ops with equal names,
        attributes and types (``shared_key``) share one, if their implementation is
        shareable (engine/registry.py): the first one's OpInfo (its decoded
        attributes, types and watches) and runner; each keeps its own location
        (StepColumns)."""
        if shared_key is not None:
            try:
                shared = self._shared_runners.get(shared_key)
            except TypeError:   # an attribute that is not hashable (an array): the op builds its own
                shared_key = shared = None
            if shared is not None:
                return shared, shared.implementation
        operand_types = tuple(map(scope.types.__getitem__, operands))
        info = OpInfo(name, attributes, operand_types, result_types, regions, location, self.module)
        implementation = _implementation(info)
        run = build(info, implementation)
        scalar = _scalar_runner(info, implementation)
        if shared_key is not None and implementation.shareable and not info.has_quantized_types:
            shared = self._shared_runners[shared_key] = _SharedRunner(info, run, implementation, scalar)
            return shared, implementation
        return BuiltOp(info, run, scalar), implementation

    def _callees(self, name: str, attributes: dict) -> tuple:
        """The functions an op calls by symbol (their bodies become its last regions)."""
        if name not in _CALLEE_ATTRIBUTE:
            return ()
        symbols = attributes.get(_CALLEE_ATTRIBUTE[name], ())
        symbols = (symbols,) if isinstance(symbols, str) else symbols
        functions = tuple(self.module.function(s.lstrip("@")) for s in symbols)
        for function in functions:
            if not function.has_body:
                raise ModuleError(f"calls @{function.name}, which is declared without a body")
        return functions


class _SharedRunner(BuiltOp):
    """What equal element-wise ops share: the first one's OpInfo (its decoded
    attributes, types and watches: OpInfo.watch, a check the builder asked for
    holds for every equal op) and runner; its implementation and result type."""

    __slots__ = ("implementation", "result_type", "result_type_id")

    def __init__(self, info: OpInfo, run, implementation: registry.Implementation, scalar=None):
        super().__init__(info, run, scalar)
        self.implementation = implementation
        self.result_type = info.result_types[0]
        self.result_type_id = id(self.result_type)


def _scalar_runner(info: OpInfo, implementation: registry.Implementation):
    """The op's runner on 0-d values (registry.Implementation.scalar), or None: for an op
    whose results are 0-d tensors (an element-wise op's operands are 0-d too), of plain
    (not quantized) types; of the op's calling convention (a reduce's: Step.scalar)."""
    if implementation.scalar is None:
        return None
    if info.has_quantized_types or not all(type(t) is TensorType and t.shape == () for t in info.result_types):
        return None
    return implementation.scalar(info)


def _implementation(info: OpInfo) -> registry.Implementation:
    """The registered implementation of the op (of its target, for a custom call)."""
    if info.name == registry.CUSTOM_CALL:
        target = info.attr("call_target_name")
        implementation = registry.custom_call_implementation(target)
        if implementation is None:
            raise info.unsupported(f"custom call target {target!r} is not implemented "
                                   "(register one with stablehlo_interp.register_custom_call)")
    else:
        implementation = registry.op_implementation(info.name)
        if implementation is None:
            raise info.unsupported("op is not supported by stablehlo_interp")
    if not implementation.variadic and len(info.result_types) != 1:
        raise info.error(f"the op has {len(info.result_types)} results, but its implementation returns one "
                         "(register a builder whose runner returns them all with variadic=True)")
    return implementation


def _returns_one_tuple(info: OpInfo, implementation: registry.Implementation) -> bool:
    """A custom call whose one result is a tuple, as HLO's custom calls return several
    results (the translation of an XLA module, tools/passes.py): its target's builder,
    written for the results one by one, sees the tuple's elements."""
    return (info.name == registry.CUSTOM_CALL and implementation.variadic and len(info.result_types) == 1
            and isinstance(info.result_types[0], TupleType))


def _tupled(run):
    """A runner whose results come back as the one tuple the op returns."""
    def tupled(*arguments):
        return (tuple(run(*arguments)),)

    return tupled


def build(info: OpInfo, implementation: registry.Implementation):
    """Run the op's builder (through quantized.py when the op has quantized operands or
    results); returns the runner."""
    try:
        if info.has_quantized_types:
            return build_quantized(info, implementation)
        if _returns_one_tuple(info, implementation):
            return _tupled(implementation.builder(dataclasses.replace(info, result_types=info.result_types[0].elements)))
        return implementation.builder(info)
    except OpError:
        raise
    except (NotImplementedError, ModuleError) as e:
        raise UnsupportedOpError(info.name, info.location, str(e)) from e
    except Exception as e:
        raise OpError(info.name, info.location, f"cannot load op: {type(e).__name__}: {e}") from e
