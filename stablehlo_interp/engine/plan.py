"""Load time: turn an MLIR module into plans of plain Python steps.

Each function body (and each region of an op) becomes a :class:`Region`: a list
of :class:`Step` objects over numbered value slots. A step holds the runner
that its op's builder returned, the slots of its operands and results, and the
slots whose last use it is (released after it runs, so memory is bounded by
what is live). Values that a region uses from an enclosing region are
*captures*: the owning op reads them from its own environment and hands them to
the region when it binds it.

Nothing here runs at execution time; engine.py runs the plans.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jaxlib.mlir import ir

from . import registry
from ..ir.decode import decode_location, decode_op_attributes, decode_type
from ..errors import ModuleError, OpError, UnsupportedOpError
from ..ir.locations import SourceLocation
from .quantized import build_quantized, has_quantized_types

TERMINATORS = frozenset({"func.return", "stablehlo.return", "sdy.return", "mhlo.return"})
_REQUIRED = object()
# Ops that call other functions of the module, and the attribute that names them.
_CALLEE_ATTRIBUTE = {
    "func.call": "callee",
    "stablehlo.composite": "decomposition",
    "stablehlo.custom_call": "called_computations",
}


@dataclass
class OpInfo:
    """What an op's builder sees at load time: everything decoded to plain values."""

    name: str
    attributes: dict
    operand_types: tuple
    result_types: tuple
    regions: tuple = ()
    location: SourceLocation = field(default_factory=SourceLocation)
    program: "Program | None" = None

    def attr(self, name: str, default=_REQUIRED):
        """A decoded attribute; a missing required attribute is an OpError."""
        value = self.attributes.get(name, default)
        if value is _REQUIRED:
            raise self.error(f"missing attribute {name!r}")
        return value

    @property
    def result_type(self):
        return self.result_types[0]

    def error(self, reason: str) -> OpError:
        return OpError(self.name, self.location, reason)

    def unsupported(self, reason: str) -> UnsupportedOpError:
        return UnsupportedOpError(self.name, self.location, reason)


class Step:
    """One op in a plan. ``run`` is the runner its builder returned."""

    __slots__ = ("info", "run", "operands", "results", "release", "regions", "captures", "index")

    def __init__(self, info, run, operands, results, release, regions, captures, index):
        self.info: OpInfo = info
        self.run = run
        self.operands: tuple[int, ...] = operands
        self.results: tuple[int, ...] = results
        self.release: tuple[int, ...] = release
        self.regions: tuple[Region, ...] = regions
        self.captures: tuple[tuple[int, ...], ...] = captures  # per region: outer slots
        self.index = index

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def location(self) -> SourceLocation:
        return self.info.location

    def __repr__(self) -> str:
        return f"<Step {self.index}: {self.info.name} at {self.info.location}>"


class Region:
    """A compiled block: captures in slots ``[0, n_captures)``, then arguments, then results."""

    def __init__(self, description: str):
        self.description = description
        self.steps: list[Step] = []
        self.n_captures = 0
        self.n_args = 0
        self.n_slots = 0
        self.arg_types: tuple = ()
        self.outputs: tuple[int, ...] = ()
        self.output_types: tuple = ()
        self.return_location: SourceLocation | None = None
        self.captured_values: list = []  # the outer MLIR values; load time only
        self.program: tuple = ()  # the steps as the run loop reads them (see compile_program)
        self.result_slots: tuple = ()  # one None per slot after the arguments: the env's tail

    def __repr__(self) -> str:
        return f"<Region {self.description}: {len(self.steps)} steps>"


@dataclass
class Function:
    name: str
    visibility: str
    arg_types: tuple
    result_types: tuple
    arg_names: tuple
    result_names: tuple
    region: Region
    location: SourceLocation
    has_body: bool = False


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

    def __init__(self, program: "Program", file_name: str | None):
        self.program = program
        self.file_name = file_name

    def location(self, operation) -> SourceLocation:
        return decode_location(operation.location, self.file_name)

    def compile_function(self, func_op, function: Function) -> None:
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
        _assign_releases(region)
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
                program=self.program,
            )
            operands = tuple(scope.lookup(v) for v in op.operands)
        except OpError:
            raise
        except ModuleError as e:
            raise OpError(name, location, str(e)) from None
        run = build(info)
        results = tuple(scope.define(r) for r in op.results)
        captures += tuple(() for _ in called)
        return Step(info, run, operands, results, (), info.regions, captures, index)

    def _called_functions(self, name: str, attributes: dict) -> tuple:
        """Ops that call functions by symbol get the functions' bodies as extra regions."""
        if name in _CALLEE_ATTRIBUTE:
            symbols = attributes.get(_CALLEE_ATTRIBUTE[name], ())
            symbols = (symbols,) if isinstance(symbols, str) else symbols
            functions = [self.program.function(s.lstrip("@")) for s in symbols]
            for function in functions:
                if not function.has_body:
                    raise ModuleError(f"calls @{function.name}, which is declared without a body")
            return tuple(function.region for function in functions)
        return ()


def build(info: OpInfo):
    """Look the op up in the registry and run its builder (through quantized.py
    when the op has quantized operands or results)."""
    builder = registry.op_builder(info.name)
    if builder is None:
        raise UnsupportedOpError(info.name, info.location, "op is not supported by stablehlo_interp")
    try:
        if has_quantized_types(info):
            return build_quantized(info, builder)
        return builder(info)
    except OpError:
        raise
    except (NotImplementedError, ModuleError) as e:
        raise UnsupportedOpError(info.name, info.location, str(e)) from e
    except Exception as e:
        raise OpError(info.name, info.location, f"cannot load op: {type(e).__name__}: {e}") from e


def _assign_releases(region: Region) -> None:
    """Give each step the slots whose last use it is (and results nobody uses)."""
    last_use: dict[int, int] = {}
    for step in region.steps:
        for slot in step.operands:
            last_use[slot] = step.index
        for slots in step.captures:
            for slot in slots:
                last_use[slot] = step.index
    kept = set(region.outputs)
    releases: list[list[int]] = [[] for _ in region.steps]
    for slot, index in last_use.items():
        if slot not in kept:
            releases[index].append(slot)
    for step in region.steps:
        for slot in step.results:
            if slot not in last_use and slot not in kept:
                releases[step.index].append(slot)
    for step, release in zip(region.steps, releases):
        step.release = tuple(sorted(set(release)))


# Step kinds of the run loop (engine._run_steps): how to fetch operands and store results.
UNARY, BINARY, SINGLE, MULTIPLE, WITH_REGIONS = range(5)


# Ops whose result depends on nothing but their operands, cheap to keep: with
# constant operands (a literal broadcast to a shape, ...) the run loop gets their
# result computed once, at load. The observed loop still runs every op.
FOLDABLE = frozenset({"stablehlo.constant", "stablehlo.broadcast_in_dim", "stablehlo.broadcast", "stablehlo.reshape",
                      "stablehlo.transpose", "stablehlo.convert"})


def _folded(step, constants: dict):
    """The value of a foldable step whose operands are all constants, or None."""
    if step.info.name not in FOLDABLE or has_quantized_types(step.info) \
            or not all(slot in constants for slot in step.operands):
        return None
    try:
        value = step.run(*[constants[slot] for slot in step.operands])
    except Exception:   # noqa: BLE001 - it fails again at run time, where the error belongs
        return None
    if hasattr(value, "flags"):
        value.flags.writeable = False   # every run returns this array: read-only, as constants are
    return value


def compile_program(steps) -> tuple:
    """Flatten steps to ``(runner, operands, results, release, kind, step)`` tuples.

    Unary and binary single-result ops (most of a program) get their operand and
    result slots as plain ints so the loop skips building argument lists; foldable
    ops of constants (FOLDABLE) get a runner that returns the value computed now.
    """
    program = []
    constants: dict[int, object] = {}
    for step in steps:
        value = _folded(step, constants)
        if value is not None:
            constants[step.results[0]] = value
            entry = ((lambda value=value: value), (), step.results[0], step.release, SINGLE, step)
        elif step.regions:
            entry = (step.run, step.operands, step.results, step.release, WITH_REGIONS, step)
        elif len(step.results) == 1 and len(step.operands) == 1:
            entry = (step.run, step.operands[0], step.results[0], step.release, UNARY, step)
        elif len(step.results) == 1 and len(step.operands) == 2:
            entry = (step.run, step.operands, step.results[0], step.release, BINARY, step)
        elif len(step.results) == 1:
            entry = (step.run, step.operands, step.results[0], step.release, SINGLE, step)
        else:
            entry = (step.run, step.operands, step.results, step.release, MULTIPLE, step)
        program.append(entry)
    return tuple(program)
