"""Load time: compile a module's functions into plans (engine/plan.py).

The compiler walks each function body and each region of its ops once, maps
MLIR values to numbered slots, decodes every op (attributes, types, location)
into an :class:`~stablehlo_interp.engine.plan.OpInfo` and calls the op's
builder from the registry, which returns the runner. It is the one place
besides ir/ that reads MLIR operations; the plans it produces hold none.
"""

from __future__ import annotations

from .. import ops
from ..engine import registry
from ..engine.plan import ModuleInfo, OpInfo, Region, Step, assign_releases, compile_program
from ..engine.quantized import build_quantized
from ..errors import ModuleError, OpError, UnsupportedOpError
from ..ir.declarations import function_operations
from ..ir.decode import decode_location, decode_op_attributes, decode_type
from ..ir.locations import SourceLocation

TERMINATORS = frozenset({"func.return", "stablehlo.return", "sdy.return", "mhlo.return"})

# Ops that call other functions of the module, and the attribute that names them.
_CALLEE_ATTRIBUTE = {
    "func.call": "callee",
    "stablehlo.composite": "decomposition",
    "stablehlo.custom_call": "called_computations",
}



class _Scope:
    """Maps MLIR values to slots while one region is compiled."""

    def __init__(self, region: Region, parent: "_Scope | None"):
        self.region = region
        self.parent = parent
        self.slots: dict = {}

    def define(self, value) -> int:
        slot = self.region.n_slots
        self.region.n_slots += 1
        self.slots[value] = slot
        return slot

    def lookup(self, value) -> int:
        slot = self.slots.get(value)
        if slot is not None:
            return slot
        if self.parent is None:
            raise ModuleError(f"value {value.get_name()} is used but not defined in scope")
        self.parent.lookup(value)  # must exist in an enclosing region
        self.region.captured_values.append(value)
        return self.define(value)


class Compiler:
    """Compiles the functions of one module into a Program's plans."""

    def __init__(self, module: ModuleInfo, file_name: str | None):
        ops.load_all()
        self.module = module
        self.file_name = file_name

    def location(self, operation) -> SourceLocation:
        return decode_location(operation.location, self.file_name)

    def compile_functions(self, module) -> None:
        """Fill the plan of each of the module's functions (the program's ``functions``)."""
        with module.context:
            for name, func_op in function_operations(module).items():
                function = self.module.functions[name]
                if function.has_body:  # an external declaration has none: calling it is an error
                    self._compile_block(func_op.regions[0].blocks[0], function.region, parent=None)

    def compile_region(self, mlir_region, description: str, parent: _Scope) -> Region:
        blocks = list(mlir_region.blocks)
        if len(blocks) != 1:
            raise ModuleError(f"{description}: regions must have exactly one block, found {len(blocks)}")
        region = Region(description)
        self._compile_block(blocks[0], region, parent)
        return region

    def _compile_block(self, block, region: Region, parent: _Scope | None) -> None:
        scope = _Scope(region, parent)
        # Captures are discovered while compiling; they are renumbered to the front below.
        arguments = list(block.arguments)
        region.arg_types = tuple(decode_type(a.type) for a in arguments)
        region.n_args = len(arguments)
        arg_slots = [scope.define(a) for a in arguments]
        steps: list[Step] = []
        for operation in block.operations:
            name = operation.operation.name
            if name in TERMINATORS:
                region.outputs = tuple(scope.lookup(v) for v in operation.operands)
                region.output_types = tuple(decode_type(v.type) for v in operation.operands)
                region.return_location = self.location(operation)
                break
            steps.append(self._compile_op(operation, scope, len(steps)))
        else:
            raise ModuleError(f"{region.description}: block has no terminator")
        self._renumber_captures(region, scope, arg_slots, steps)
        region.steps = steps
        assign_releases(region)
        region.program = compile_program(steps)
        region.result_slots = (None,) * (region.n_slots - region.n_captures - region.n_args)

    def _renumber_captures(self, region: Region, scope: _Scope, arg_slots, steps) -> None:
        """Move capture slots to the front: [captures][args][results]."""
        n_captures = len(region.captured_values)
        region.n_captures = n_captures
        if not n_captures:
            return
        old_capture_slots = [scope.slots[v] for v in region.captured_values]
        mapping = {}
        for new, old in enumerate(old_capture_slots):
            mapping[old] = new
        next_slot = n_captures
        for old in range(region.n_slots):
            if old not in mapping:
                mapping[old] = next_slot
                next_slot += 1
        remap = lambda slots: tuple(mapping[s] for s in slots)  # noqa: E731
        for step in steps:
            step.operands = remap(step.operands)
            step.results = remap(step.results)
            step.captures = tuple(remap(c) for c in step.captures)
        region.outputs = remap(region.outputs)
        assert remap(arg_slots) == tuple(range(n_captures, n_captures + len(arg_slots)))

    def _compile_op(self, operation, scope: _Scope, index: int) -> Step:
        op = operation.operation
        name = op.name
        location = self.location(op)
        try:
            nested = tuple(self.compile_region(r, f"region {i} of {name}", scope)
                           for i, r in enumerate(op.regions))
            captures = tuple(tuple(scope.lookup(v) for v in r.captured_values) for r in nested)
            for r in nested:
                r.captured_values = []
            attributes = decode_op_attributes(op)
            called = self._called_functions(name, attributes)
            info = OpInfo(
                name=name,
                attributes=attributes,
                operand_types=tuple(decode_type(v.type) for v in op.operands),
                result_types=tuple(decode_type(r.type) for r in op.results),
                regions=nested + called,
                location=location,
                module=self.module,
            )
            operands = tuple(scope.lookup(v) for v in op.operands)
        except OpError:
            raise
        except ModuleError as e:
            raise OpError(name, location, str(e)) from None
        implementation = _implementation(info)
        run = build(info, implementation)
        results = tuple(scope.define(r) for r in op.results)
        captures += tuple(() for _ in called)
        return Step(info, run, operands, results, (), info.regions, captures, index, implementation.variadic,
                    implementation.execution)

    def _called_functions(self, name: str, attributes: dict) -> tuple:
        """Ops that call functions by symbol get the functions' bodies as extra regions."""
        if name in _CALLEE_ATTRIBUTE:
            symbols = attributes.get(_CALLEE_ATTRIBUTE[name], ())
            symbols = (symbols,) if isinstance(symbols, str) else symbols
            functions = [self.module.function(s.lstrip("@")) for s in symbols]
            for function in functions:
                if not function.has_body:
                    raise ModuleError(f"calls @{function.name}, which is declared without a body")
            return tuple(function.region for function in functions)
        return ()


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


def build(info: OpInfo, implementation: registry.Implementation):
    """Run the op's builder (through quantized.py when the op has quantized operands or
    results); returns the runner."""
    try:
        if info.has_quantized_types:
            return build_quantized(info, implementation)
        return implementation.builder(info)
    except OpError:
        raise
    except (NotImplementedError, ModuleError) as e:
        raise UnsupportedOpError(info.name, info.location, str(e)) from e
    except Exception as e:
        raise OpError(info.name, info.location, f"cannot load op: {type(e).__name__}: {e}") from e
