"""Load time: turn an MLIR module into plans of plain Python steps.

Each function body (and each region of an op) becomes a :class:`Region`: its
ops as :class:`Step` objects over numbered value slots. A step holds the runner
that its op's builder returned, the slots of its operands and results, and the
slots whose last use it is (released after it runs, so memory is bounded by
what is live). The compiler leaves them as :class:`StepColumns`, from which the
run loop's program is made, and the Step objects only when something asks.
Values that a region uses from an enclosing region are *captures*: the owning
op reads them from its own environment and hands them to the region when it
binds it.

The compiler (program/compiler.py) builds them, the passes of engine/passes/
(liveness, flattening, folding) make the program the run loop reads; nothing
here runs at execution time, run.py runs the plans.
"""

from __future__ import annotations

import itertools
import operator
import threading
import weakref
from dataclasses import dataclass, field, fields

from ..errors import ModuleError, OpError, UnsupportedOpError
from ..ir.declarations import FunctionSignature
from ..ir.locations import SourceLocation

_REQUIRED = object()
class ModuleInfo:
    """What an op's builder may know of its module beyond the op itself: the process
    grid the module runs as (``mhlo.num_replicas`` x ``mhlo.num_partitions``), its
    meshes (``sdy.mesh``, by name), its functions (for ops that run functions by
    name), a numbering of its ``rng`` ops (ops/random.py) and the Python functions
    its host callbacks lowered for the CPU call, by their ``index`` (JAX keeps them
    beside the module: ops/host_callback.py).

    It holds the functions weakly (their Program holds them): every OpInfo of
    their plans refers to it, and a cycle through it would leave a dropped
    program to the cyclic collector, which visits the whole plan to free it."""

    def __init__(self, num_replicas: int = 1, num_partitions: int = 1, meshes: dict | None = None,
                 functions: dict | None = None, host_callbacks: tuple = (), partition_callback=None):
        self.num_replicas = num_replicas
        self.num_partitions = num_partitions
        self.meshes = meshes or {}
        self.functions: weakref.WeakValueDictionary = weakref.WeakValueDictionary(functions or {})
        self._rng_ops = itertools.count()
        self.host_callbacks = tuple(host_callbacks)
        self.partition_callback = partition_callback

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

    ``regions_called``: a builder whose runner never calls the op's regions (a
    reduce whose body is a plain monoid, run as NumPy's reduction) sets it to False;
    the run loop then binds none of them and passes the runner None for each.
    """

    name: str
    attributes: dict
    operand_types: tuple
    result_types: tuple
    regions: tuple = ()
    location: SourceLocation = field(default_factory=SourceLocation)
    module: "ModuleInfo | None" = None
    watches: list = field(default_factory=list)  # (rule, check): see watch()
    regions_called: bool = True

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
    ``execution`` are its calling convention (engine/registry.py). ``scalar``: the
    runner of the same convention for its 0-d results that the unobserved run loop
    calls instead (BuiltOp.scalar), or None. ``unbound``: for a runner taking the
    Execution that never calls the op's regions (OpInfo.regions_called), the None it
    gets for each, which the run loop passes as they are (engine/passes set it), else None."""

    __slots__ = ("info", "run", "operands", "results", "release", "regions", "captures", "index", "variadic",
                 "execution", "scalar", "unbound")

    def __init__(self, info, run, operands, results, release, regions, captures, index, variadic=False,
                 execution=False, scalar=None):
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
        self.scalar = scalar
        self.unbound: tuple | None = None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def location(self) -> SourceLocation:
        return self.info.location

    def __repr__(self) -> str:
        return f"<Step {self.index}: {self.info.name} at {self.info.location}>"


class BuiltOp:
    """An op's OpInfo and the runner its builder returned (equal element-wise ops
    share one: program/compiler.py). ``scalar``: the runner for its 0-d values that
    the unobserved run loop calls instead (registry.Implementation.scalar), or None;
    listeners see the op run by ``run``, as tools that run a step alone do."""

    __slots__ = ("info", "run", "scalar")

    def __init__(self, info: OpInfo, run, scalar=None):
        self.info = info
        self.run = run
        self.scalar = scalar


_MAKING_STEPS = threading.Lock()

# An op's location as StepColumns.locations keeps it: one encoding, made by
# encode_location and read back by StepColumns.location.
#   None            the op's OpInfo holds its location (the OpInfo is its own);
#   IN_TEXT         where the op starts in the module's text, which writes no location:
#                   found there when asked (StepColumns.locate: ir/sources.py,
#                   TextLocations), so the load never reads it;
#   an int >= 0     line << 32 | column of a line of the module's own text (MLIR's file
#                   ``-``): no object that the collector visits;
#   a SourceLocation  any other location.
IN_TEXT = -1


def encode_location(location):
    """The code of an op's ``location`` in StepColumns.locations: ``location`` is
    None (the op's OpInfo holds it), IN_TEXT, a SourceLocation, or a line of MLIR
    text as ``(file, line, column)``."""
    if type(location) is tuple:
        file, line, column = location
        return line << 32 | column if file == "-" else SourceLocation.at_line(file, line, column)
    if location is None or location is IN_TEXT or type(location) is SourceLocation:
        return location
    raise TypeError(f"not an op's location: {location!r}")


class StepColumns:
    """A region's steps as the compiler leaves them, one list per field, one entry per op.

    The run loop needs of each op only its runner, operand and result slots and
    releases; a :class:`Step` is made when a tool, an observed run or an error
    asks for it (:meth:`steps`), so that loading a long program makes next to no
    Python object per op. ``ops[i]`` is either

    * the op's :class:`Step`, made at load: an op with regions, a variadic or
      execution runner (the run loop's GENERAL kind), or a step given whole
      (:meth:`of_steps`); ``operands[i]`` and ``results[i]`` are its slots; or
    * a :class:`BuiltOp`, for an op of one result (``results[i]`` is its slot).
      ``locations[i]`` is None when its OpInfo is the op's own; otherwise the op
      shares the OpInfo and runner of an equal element-wise op, and
      ``locations[i]`` codes the op's own location (:func:`encode_location`).

    ``releases[i]`` are the slots whose last use op ``i`` is (set by engine/passes).
    """

    __slots__ = ("file_name", "locate", "ops", "operands", "results", "locations", "releases", "_steps")

    def __init__(self, file_name: str = "-", locate=None):
        self.file_name = file_name   # the module's file, for locations of its text
        self.locate = locate         # op index -> its SourceLocation, for IN_TEXT
        self.ops: list = []
        self.operands: list[tuple[int, ...]] = []
        self.results: list = []
        self.locations: list = []
        self.releases: list[tuple[int, ...]] = []
        self._steps: tuple | None = None

    @classmethod
    def of_steps(cls, steps) -> "StepColumns":
        """The columns of steps made whole."""
        columns = cls()
        for step in steps:
            columns.append_step(step)
        return columns

    def __len__(self) -> int:
        return len(self.ops)

    def append_step(self, step: Step) -> None:
        self.ops.append(step)
        self.operands.append(step.operands)
        self.results.append(step.results)
        self.locations.append(None)

    def append(self, op: BuiltOp, operands: tuple, result: int, location=None) -> None:
        """An op of one result whose Step is made on demand; ``location``: its code
        (:func:`encode_location`)."""
        self.ops.append(op)
        self.operands.append(operands)
        self.results.append(result)
        self.locations.append(location)

    def location(self, index: int) -> SourceLocation | None:
        """The location of op ``index`` that its code in ``locations`` says (None: its
        OpInfo's)."""
        code = self.locations[index]
        if code is None or type(code) is SourceLocation:
            return code
        if code == IN_TEXT:
            return self.locate(index)
        return SourceLocation.at_line(self.file_name, code >> 32, code & 0xFFFFFFFF)

    def renumber(self, mapping: dict) -> None:
        """Give every slot ``s`` the number ``mapping[s]`` (the steps made whole too)."""
        def remap(slots):
            return tuple(mapping[s] for s in slots)

        for index, op in enumerate(self.ops):
            if type(op) is Step:
                op.operands, op.results = remap(op.operands), remap(op.results)
                op.captures = tuple(remap(c) for c in op.captures)
                self.operands[index], self.results[index] = op.operands, op.results
            else:
                self.operands[index] = remap(self.operands[index])
                self.results[index] = mapping[self.results[index]]

    def steps(self) -> tuple:
        """Every op's Step (made on first use, then kept: tools may change them, and
        listeners may know a step by identity, so the processes of a grid, each a
        thread, must get the same ones)."""
        if self._steps is None:
            with _MAKING_STEPS:
                if self._steps is None:
                    self._steps = tuple(map(self._step, range(len(self.ops))))
        return self._steps

    def step(self, index: int) -> Step:
        """The Step of op ``index`` (of :meth:`steps` once they are made)."""
        return self._step(index) if self._steps is None else self._steps[index]

    def _step(self, index: int) -> Step:
        op = self.ops[index]
        if type(op) is Step:
            return op
        info, location = op.info, self.location(index)
        if location is not None:   # the OpInfo of an equal op: this op's own, at its location
            info = OpInfo(info.name, info.attributes, info.operand_types, info.result_types, (), location,
                          info.module, info.watches)
        return Step(info, op.run, self.operands[index], (self.results[index],), self.releases[index], (), (), index)


@dataclass(frozen=True, slots=True)
class RegionKind:
    """What a region is: the body of ``function`` (a function's plan, or the body an
    op calls: func.call, composite, custom_call's called computations), or region
    ``index`` of an op named ``op``. A function's body keeps the names of its
    arguments and results where the module gives them (``FunctionSignature.arg_names``,
    ``result_names``: a JAX program's pytree paths), for reports that name them."""

    function: str | None = None
    op: str | None = None
    index: int = 0
    arg_names: tuple = ()
    result_names: tuple = ()

    @classmethod
    def body_of(cls, function: str, arg_names: tuple = (), result_names: tuple = ()) -> "RegionKind":
        return cls(function=function, arg_names=tuple(arg_names), result_names=tuple(result_names))

    def argument_name(self, index: int) -> str:
        """Argument ``index`` by its name (``x['w']``), else by number (``argument #0``)."""
        return _named("argument", self.arg_names, index)

    def result_name(self, index: int) -> str:
        """Result ``index`` by its name (``result[1]['Dense_0']['kernel']``), else ``result #1``."""
        return _named("result", self.result_names, index)

    @classmethod
    def of_op(cls, op: str, index: int) -> "RegionKind":
        return cls(op=op, index=index)

    @property
    def is_function_body(self) -> bool:
        return self.function is not None

    @property
    def name(self) -> str:
        """``@f`` for a function's body, ``region 1`` for an op's region."""
        return f"@{self.function}" if self.function is not None else f"region {self.index}"

    def __str__(self) -> str:
        return self.name if self.function is not None else f"{self.name} of {self.op}"


def _named(what: str, names: tuple, index: int) -> str:
    """``result['a']`` (a name that says what it is), ``argument x``, or ``result #0``
    (no name, or JAX's bare ``result`` of a function with one)."""
    name = names[index] if index < len(names) else None
    if not name or name == what:
        return f"{what} #{index}"
    return name if name.startswith((f"{what}[", f"{what}.")) else f"{what} {name}"


class Region:
    """A compiled block: captures in slots ``[0, n_captures)``, then arguments, then results.

    Built whole, from what the block is: its kind, its steps (:class:`StepColumns`,
    their slots already in that layout), how many values it captures, its argument
    types, the slots and types of what it returns, where it returns, how many slots
    it uses, and the program the run loop reads (a :class:`RunProgram`, made by
    engine/passes, which set the steps' releases). The result slots of a fresh
    environment follow here.
    """

    __slots__ = ("kind", "columns", "n_captures", "arg_types", "n_args", "outputs", "output_types",
                 "return_location", "n_slots", "flat_steps", "result_slots", "output_values")

    def __init__(self, kind: RegionKind, columns: StepColumns, n_captures: int, arg_types, outputs, output_types,
                 return_location: SourceLocation | None, n_slots: int, program: RunProgram):
        self.kind = kind
        self.columns = columns
        self.n_captures = n_captures
        self.arg_types: tuple = tuple(arg_types)
        self.n_args = len(self.arg_types)
        self.outputs: tuple[int, ...] = tuple(outputs)
        self.output_types: tuple = tuple(output_types)
        self.return_location = return_location
        self.n_slots = n_slots
        self.set_program(program)
        self.output_values = _values_in(self.outputs)   # env -> the region's outputs, a sequence

    def set_program(self, program: RunProgram) -> None:
        """Run ``program`` from now on (engine/passes), and fill the tail of a fresh
        environment: a slot per result, the values folded at load filled in."""
        self.flat_steps = program
        first = self.n_captures + self.n_args
        tail = [None] * (self.n_slots - first)
        for slot, value in program.folded:
            tail[slot - first] = value
        self.result_slots = tuple(tail)

    @property
    def description(self) -> str:
        """``@f``, ``region 0 of stablehlo.while`` ... (for messages)."""
        return str(self.kind)

    @property
    def steps(self) -> tuple[Step, ...]:
        """Each op's :class:`Step`, made on first use (StepColumns)."""
        return self.columns.steps()

    def __repr__(self) -> str:
        return f"<Region {self.description}: {len(self.columns)} steps>"


def _values_in(slots: tuple):
    """A function of an environment returning the values in ``slots`` as a sequence,
    without a Python frame per call: a tuple for several slots, a list for one or none
    (``itemgetter`` of a slice)."""
    if len(slots) > 1:
        return operator.itemgetter(*slots)
    return operator.itemgetter(slice(slots[0], slots[0] + 1) if slots else slice(0, 0))


@dataclass
class Function(FunctionSignature):
    """A function of a program: its signature (decoded once, by ir/declarations.py)
    and, once compiled, its plan ``region``.

    ``region`` is None for a declaration without a body, for the functions of a
    shape-polymorphic program, which runs refined copies (Program.refined), and
    for a function the compiler has not reached yet while it compiles the module."""

    region: Region | None = None

    def argument_name(self, index: int) -> str:
        """Argument ``index`` by its name (``argument x['w']``), else by number (``argument #0``)."""
        return _named("argument", self.arg_names, index)

    def result_name(self, index: int) -> str:
        """Result ``index`` by its name (``result[1]['Dense_0']['kernel']``), else ``result #1``."""
        return _named("result", self.result_names, index)

    @classmethod
    def declared(cls, signature: FunctionSignature) -> "Function":
        """The function of ``signature``, not compiled yet."""
        return cls(**{f.name: getattr(signature, f.name) for f in fields(signature)})


# Step kinds of the run loop (run.py): how to fetch operands and store results. UNARY,
# BINARY, TERNARY (three operands: select, clamp) and SINGLE (any other count): plain
# runners of one result; GENERAL: the step's convention decides; CALL and BRANCH: a
# RegionCallRunner's op, whose region the loop runs itself (the last two: the loop
# tests ``kind >= CALL``).
UNARY, BINARY, TERNARY, SINGLE, GENERAL, CALL, BRANCH = range(7)


class RegionCallRunner:
    """The runner of an op whose work is a call of one of its regions, its results the
    region's outputs: ``runner(regions, *operands)`` as any runner of an op with regions.

    * a call (``index``: which region; ``func.call``, ``composite``): the region runs on
      the op's operands;
    * a branch (``choose``: ``if``, ``case``): the op's one operand picks the region,
      ``choose(operand)`` its index; the region takes no arguments.

    Recognized by engine/passes, which give it the run loop's kind CALL or BRANCH:
    unobserved, the loop runs the region itself, with no region bound, no runner called
    and no argument check (the verified types hold them), so the op costs little more
    than the ops it runs. The region is read at each call (a function's body that the
    compiler fills in later, for a recursive call)."""

    __slots__ = ("index", "choose")

    def __init__(self, index: int | None = None, choose=None):
        self.index = index
        self.choose = choose

    def __call__(self, regions, *operands):
        if self.choose is None:
            return regions[self.index](*operands)
        return regions[self.choose(*operands)]()


class RunProgram(tuple):
    """A region's program as the run loop reads it (made by engine/passes): a tuple of
    ``(runner, operands, results, release, kind, step)`` entries, where ``step``
    is the op's Step or, for an op whose Step is made on demand, its index:
    :meth:`step` gives the Step either way (for an error). ``folded``: the
    ``(slot, value)`` pairs of the ops it leaves out, computed at load."""

    def __new__(cls, entries, columns: StepColumns, folded: tuple = ()):
        program = super().__new__(cls, entries)
        program.columns = columns
        program.folded = folded
        return program

    def step(self, step) -> Step:
        return step if type(step) is Step else self.columns.step(step)
