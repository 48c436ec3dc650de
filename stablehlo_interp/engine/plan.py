"""Load time: turn an MLIR module into plans of plain Python steps.

Each function body (and each region of an op) becomes a :class:`Region`: a list
of :class:`Step` objects over numbered value slots. A step holds the runner
that its op's builder returned, the slots of its operands and results, and the
slots whose last use it is (released after it runs, so memory is bounded by
what is live). Values that a region uses from an enclosing region are
*captures*: the owning op reads them from its own environment and hands them to
the region when it binds it.

The compiler (program/compiler.py) builds them; nothing here runs at execution
time, run.py runs the plans.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields

from ..errors import ModuleError, OpError, UnsupportedOpError
from ..ir.declarations import FunctionSignature
from ..ir.locations import SourceLocation

_REQUIRED = object()
class ModuleInfo:
    """What an op's builder may know of its module beyond the op itself: the process
    grid the module runs as (``mhlo.num_replicas`` x ``mhlo.num_partitions``), its
    meshes (``sdy.mesh``, by name), its functions (for ops that run functions by
    name) and a numbering of its ``rng`` ops (ops/random.py)."""

    def __init__(self, num_replicas: int = 1, num_partitions: int = 1, meshes: dict | None = None,
                 functions: dict | None = None):
        self.num_replicas = num_replicas
        self.num_partitions = num_partitions
        self.meshes = meshes or {}
        self.functions = functions if functions is not None else {}
        self._rng_ops = itertools.count()

    def function(self, name: str) -> "Function":
        try:
            return self.functions[name]
        except KeyError:
            known = ", ".join(f"@{n}" for n in self.functions) or "none"
            raise ModuleError(f"no function @{name} in the module (functions: {known})") from None

    def next_rng_op(self) -> int:
        """The number of the next rng op built for this module: 0, 1, 2 ..."""
        return next(self._rng_ops)


@dataclass(slots=True)
class OpInfo:
    """What an op's builder sees at load time: everything decoded to plain values.

    ``regions`` are the op's compiled regions, then the bodies of the functions
    it calls (func.call, composite, custom_call's called_computations). A call
    to a function whose body is still being compiled, a recursive call, has None
    there until that body is built; the compiler fills it in before anything runs.
    """

    name: str
    attributes: dict
    operand_types: tuple
    result_types: tuple
    regions: tuple = ()
    location: SourceLocation = field(default_factory=SourceLocation)
    module: "ModuleInfo | None" = None
    watches: list = field(default_factory=list)  # (rule, check): see watch()

    def attr(self, name: str, default=_REQUIRED):
        """A decoded attribute; a missing required attribute is an OpError."""
        value = self.attributes.get(name, default)
        if value is _REQUIRED:
            raise self.error(f"missing attribute {name!r}")
        return value

    @property
    def result_type(self):
        return self.result_types[0]

    @property
    def has_quantized_types(self) -> bool:
        """Whether an operand or result is a quantized tensor (engine/quantized.py)."""
        return any(getattr(t, "is_quantized", False) for t in (*self.operand_types, *self.result_types))

    def derived(self, name: str, attributes: dict, operand_types: tuple, result_types: tuple) -> "OpInfo":
        """The info of another op that implements this one (same location and module,
        no regions): for builders that build a runner from another op's builder."""
        return OpInfo(name, attributes, operand_types, result_types, (), self.location, self.module)

    def watch(self, rule: str, check) -> None:
        """When a listener watches the run, call ``check(*operands, *results)`` after
        the op ran; a message it returns is reported as ``rule`` (a name in
        engine/semantics.py's RULES) through ``Execution.report``. For ops whose
        runners do not get the Execution (a runner that does reports itself)."""
        self.watches.append((rule, check))

    def error(self, reason: str) -> OpError:
        return OpError(self.name, self.location, reason)

    def unsupported(self, reason: str) -> UnsupportedOpError:
        return UnsupportedOpError(self.name, self.location, reason)


class Step:
    """One op in a plan. ``run`` is the runner its builder returned; ``variadic`` and
    ``execution`` are its calling convention (engine/registry.py)."""

    __slots__ = ("info", "run", "operands", "results", "release", "regions", "captures", "index", "variadic",
                 "execution")

    def __init__(self, info, run, operands, results, release, regions, captures, index, variadic=False,
                 execution=False):
        self.info: OpInfo = info
        self.run = run
        self.operands: tuple[int, ...] = operands
        self.results: tuple[int, ...] = results
        self.release: tuple[int, ...] = release
        self.regions: tuple[Region, ...] = regions
        self.captures: tuple[tuple[int, ...], ...] = captures  # per region: outer slots
        self.index = index
        self.variadic: bool = variadic
        self.execution: bool = execution

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def location(self) -> SourceLocation:
        return self.info.location

    def __repr__(self) -> str:
        return f"<Step {self.index}: {self.info.name} at {self.info.location}>"


class Region:
    """A compiled block: captures in slots ``[0, n_captures)``, then arguments, then results.

    Built whole, from what the block is: its steps (their slots already in that
    layout), how many values it captures, its argument types, the slots and
    types of what it returns, where it returns, and how many slots it uses. The
    rest follows here: each step's releases, the program the run loop reads
    and the result slots of a fresh environment.
    """

    __slots__ = ("description", "steps", "n_captures", "arg_types", "n_args", "outputs", "output_types",
                 "return_location", "n_slots", "flat_steps", "result_slots")

    def __init__(self, description: str, steps, n_captures: int, arg_types, outputs, output_types,
                 return_location: SourceLocation | None, n_slots: int):
        self.description = description
        self.steps: tuple[Step, ...] = tuple(steps)
        self.n_captures = n_captures
        self.arg_types: tuple = tuple(arg_types)
        self.n_args = len(self.arg_types)
        self.outputs: tuple[int, ...] = tuple(outputs)
        self.output_types: tuple = tuple(output_types)
        self.return_location = return_location
        self.n_slots = n_slots
        assign_releases(self.steps, self.outputs)
        self.flat_steps = flatten_steps(self.steps)  # the steps as the run loop reads them
        self.result_slots = (None,) * (n_slots - n_captures - self.n_args)  # the env's tail: one per result

    def __repr__(self) -> str:
        return f"<Region {self.description}: {len(self.steps)} steps>"


@dataclass
class Function(FunctionSignature):
    """A function of a program: its signature (decoded once, by ir/declarations.py)
    and, once compiled, its plan ``region``.

    ``region`` is None for a declaration without a body, for the functions of a
    shape-polymorphic program, which runs refined copies (Program.refined), and
    for a function the compiler has not reached yet while it compiles the module."""

    region: Region | None = None

    @classmethod
    def declared(cls, signature: FunctionSignature) -> "Function":
        """The function of ``signature``, not compiled yet."""
        return cls(**{f.name: getattr(signature, f.name) for f in fields(signature)})


def assign_releases(steps, outputs) -> None:
    """Give each step the slots whose last use it is (and its results nobody uses).

    One pass from the last step back: a slot not seen yet (nor returned) is one
    that no later step uses."""
    live = set(outputs)
    see = live.add
    for step in reversed(steps):
        release = [slot for slot in step.results if slot not in live]
        for slot in step.operands:
            if slot not in live:
                see(slot)
                release.append(slot)
        for slots in step.captures:
            for slot in slots:
                if slot not in live:
                    see(slot)
                    release.append(slot)
        step.release = tuple(sorted(release)) if len(release) > 1 else tuple(release)


# Step kinds of the run loop (run.py): how to fetch operands and store results. UNARY,
# BINARY and SINGLE: plain runners of one result; GENERAL: the step's convention decides.
UNARY, BINARY, SINGLE, GENERAL = range(4)


# Ops whose result depends on nothing but their operands, cheap to keep: with
# constant operands (a literal broadcast to a shape, ...) the run loop gets their
# result computed once, at load. The observed loop still runs every op.
FOLDABLE = frozenset({"stablehlo.constant", "stablehlo.broadcast_in_dim", "stablehlo.broadcast", "stablehlo.reshape",
                      "stablehlo.transpose", "stablehlo.convert"})


def _folded(step, constants: dict):
    """The value of a foldable step (FOLDABLE) whose operands are all constants, or None."""
    if step.info.has_quantized_types or step.variadic or step.execution \
            or not all(slot in constants for slot in step.operands):
        return None
    try:
        value = step.run(*[constants[slot] for slot in step.operands])
    except Exception:   # noqa: BLE001 - it fails again at run time, where the error belongs
        return None
    if hasattr(value, "flags"):
        value.flags.writeable = False   # every run returns this array: read-only, as constants are
    return value


def flatten_steps(steps) -> tuple:
    """Flatten steps to ``(runner, operands, results, release, kind, step)`` tuples.

    Plain single-result ops (most of a program) get their result slot as a plain
    int, and unary ones their operand slot too, so the loop skips building
    argument lists; foldable ops of constants (FOLDABLE) get a runner that returns
    the value computed now.
    """
    program = []
    constants: dict[int, object] = {}
    for step in steps:
        value = _folded(step, constants) if step.info.name in FOLDABLE else None
        if value is not None:
            constants[step.results[0]] = value
            entry = ((lambda value=value: value), (), step.results[0], step.release, SINGLE, step)
        elif step.regions or step.variadic or step.execution:
            entry = (step.run, step.operands, step.results, step.release, GENERAL, step)
        elif len(step.operands) == 1:
            entry = (step.run, step.operands[0], step.results[0], step.release, UNARY, step)
        elif len(step.operands) == 2:
            entry = (step.run, step.operands, step.results[0], step.release, BINARY, step)
        else:
            entry = (step.run, step.operands, step.results[0], step.release, SINGLE, step)
        program.append(entry)
    return tuple(program)
