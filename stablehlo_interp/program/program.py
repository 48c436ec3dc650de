"""The public entry points: ``load`` a module into a Program, ``run`` it."""

from __future__ import annotations

import numpy as np

from ..engine import hostio
from ..engine import grid as process_grid
from ..sharding import tiling as sharding
from ..ir import sources
from ..ir.decode import decode_attribute, decode_location, decode_type
from ..engine.run import UNOBSERVED, Execution, numpy_warnings_off
from ..errors import ArgumentError, ModuleError
from ..engine.plan import Function
from .compiler import Compiler
from ..ir.refinement import refinable, refine, static_types
from ..ir.types import TensorType, TokenType, TupleType


class Program:
    """A loaded module: every function compiled to a plan, ready to run many times.

    ``functions`` maps each function name to its :class:`~stablehlo_interp.engine.plan.Function`
    (signature, argument and result names from JAX's ``jax.result_info``, plan).

    A module whose functions take arguments with dynamic dimensions is
    *shape-polymorphic*: it is compiled per distinct argument shapes, each time
    from a copy refined to those shapes (see :meth:`refined`), so its own
    functions have no plans. (Except a module with ops of unregistered dialects,
    which the refinement passes cannot take: it is compiled as it is, and its
    ops find dynamic sizes at run time or fail to load.)
    """

    _MAX_REFINED = 32  # refined programs kept; the oldest is dropped past that

    def __init__(self, source, *, verify: bool = True):
        parsed = source if isinstance(source, sources.ParsedModule) else sources.parse(source)
        self.module = sharding.annotate_manual_borders(parsed.module, parsed.owned)
        self.file_name = parsed.file_name
        if verify:
            _verify(self.module)
        attributes = self.module.operation.attributes
        self.num_replicas = _int_attribute(attributes, "mhlo.num_replicas", 1)
        self.num_partitions = _int_attribute(attributes, "mhlo.num_partitions", 1)
        self.meshes = sharding.module_meshes(self.module)   # sdy.mesh ops, by name
        self._process_ops: dict = {}
        self.functions: dict[str, Function] = {}
        func_ops = {}
        with self.module.context:
            for operation in self.module.body.operations:
                if operation.operation.name == "func.func":
                    function = _declare_function(operation, self.file_name)
                    self.functions[function.name] = function
                    func_ops[function.name] = operation
            self.shape_polymorphic = any(isinstance(t, TensorType) and not t.is_static
                                         for f in self.functions.values() for t in f.arg_types)
            self.shape_polymorphic = self.shape_polymorphic and refinable(self.module)
            self._refined: dict = {}
            if not self.shape_polymorphic:
                compiler = Compiler(self, self.file_name, func_ops)
                for function in self.functions.values():
                    compiler.compile_function(function)

    def function(self, name: str) -> Function:
        try:
            return self.functions[name]
        except KeyError:
            known = ", ".join(f"@{n}" for n in self.functions) or "none"
            raise ModuleError(f"no function @{name} in the module (functions: {known})") from None

    @property
    def entry_name(self) -> str:
        """``main`` if present, else the only public function."""
        if "main" in self.functions:
            return "main"
        public = [f.name for f in self.functions.values() if f.visibility != "private"]
        if len(public) == 1:
            return public[0]
        raise ModuleError("the module has no @main; name the function to run with function=...")

    def run(self, *args, function: str | None = None, listeners=(),
            io: hostio.HostQueues | None = None) -> list:
        """Run a function on NumPy arguments; returns a list of NumPy arrays.

        ``listeners`` are :class:`~stablehlo_interp.engine.run.Listener` objects that
        observe (and may alter or stop) the run. ``io`` holds the host side of
        infeed, outfeed, send and recv (see :class:`~stablehlo_interp.engine.hostio.HostQueues`).
        """
        target = self.runnable(function)
        values = coerce_arguments(target, args)
        return [_as_result(value, values) for value in self.execute(target, values, listeners, io)]

    def runnable(self, function: str | None = None) -> Function:
        """The function ``run`` would run (``main`` by default); it must have a body."""
        target = self.function(function or self.entry_name)
        if not target.has_body:
            raise ModuleError(f"@{target.name} is declared without a body; there is nothing to run")
        return target

    def execute(self, target: Function, values: list, listeners=(), io=None) -> list:
        """:meth:`run` without its argument checks and result copies, for callers
        whose values already have the function's types and who never write into
        the results (which may be constants or the arguments themselves): the device."""
        if self.shape_polymorphic:
            refined = self.refined(*values, function=target.name)
            return refined.execute(refined.function(target.name), values, listeners, io)
        if self.num_processes > 1 and not process_grid.in_grid() and self._runs_per_process(target):
            return self.run_grid([values] * self.num_processes, function=target.name, listeners=listeners,
                                 io=io)[0]
        execution = Execution(listeners, context=io) if listeners or io is not None else UNOBSERVED
        token = hostio.activate(io)
        try:
            with numpy_warnings_off():
                return execution.run_region(target.region, values)
        finally:
            hostio.deactivate(token)

    @property
    def num_processes(self) -> int:
        return self.num_replicas * self.num_partitions

    def run_grid(self, per_process_args, *, function: str | None = None, listeners=(),
                 io: hostio.HostQueues | None = None) -> list:
        """Run a function once per process of the module's grid, ``num_replicas`` x
        ``num_partitions`` (spec: Parallel execution), with collectives between them.

        ``per_process_args[i]`` are the arguments of the process with flattened id
        ``i = replica_id * num_partitions + partition_id``; returns the list of
        each process's results, in the same order. The processes share ``io``.
        """
        target = self.runnable(function)
        per_process_args = list(per_process_args)
        if len(per_process_args) != self.num_processes:
            raise ArgumentError(f"the module runs as {self.num_processes} process(es) ({self.num_replicas} "
                                f"replica(s) x {self.num_partitions} partition(s)); got arguments for "
                                f"{len(per_process_args)}")
        values = [coerce_arguments(target, args) for args in per_process_args]
        if self.shape_polymorphic:
            return self.refined(*values[0], function=target.name).run_grid(
                values, function=target.name, listeners=listeners, io=io)
        queues = io if io is not None else hostio.HostQueues()
        token = hostio.activate(queues)
        try:
            with numpy_warnings_off():
                outputs = process_grid.Grid(self.num_replicas, self.num_partitions).run(
                    lambda process: Execution(listeners, process.id, queues).run_region(
                        target.region, values[process.id]))
        finally:
            hostio.deactivate(token)
        return [[_as_result(value, args) for value in out] for out, args in zip(outputs, values)]

    def _runs_per_process(self, function: Function) -> bool:
        """Whether the function's own code (outside manual computations) depends on the
        process running it. A global program whose manual code lies between
        SPMDFullToShardShape and SPMDShardToFullShape runs on every process with the
        same arguments; any other such function is a per-process program (run_grid)."""
        if function.name not in self._process_ops:
            self._process_ops[function.name] = process_grid.process_ops(function.region)
        found = self._process_ops[function.name]
        if found and not found & process_grid.MANUAL_BORDERS:
            raise ArgumentError(f"@{function.name} runs as {self.num_processes} processes ({self.num_replicas} "
                                f"replica(s) x {self.num_partitions} partition(s)) and uses "
                                f"{', '.join(sorted(found))}: run it with program.run_grid([arguments of each "
                                "process])")
        return bool(found)

    def refined(self, *args, function: str | None = None) -> "Program":
        """The program specialized to the shapes of ``args``: a shape-polymorphic
        function's copy with static argument types and every type that follows
        from them refined (spec: shape refinement; StableHLO's
        ``stablehlo-refine-shapes`` pass). Built once per distinct shapes."""
        target = self.function(function or self.entry_name)
        if not self.shape_polymorphic:
            return self
        values = coerce_arguments(target, args)
        key = (target.name, static_types(target.arg_types, values))
        program = self._refined.get(key)
        if program is None:
            with self.module.context:
                module = refine(self.module, target.name, key[1])
            program = Program(sources.ParsedModule(module, self.file_name), verify=False)
            if len(self._refined) >= self._MAX_REFINED:
                del self._refined[next(iter(self._refined))]
            self._refined[key] = program
        return program

    def __repr__(self) -> str:
        names = ", ".join(f"@{n}" for n in self.functions)
        return f"<Program functions=[{names}]>"


def load(source, *, verify: bool = True) -> Program:
    """Parse and compile a module (text, path, bytes, ir.Module, Lowered, Exported)."""
    return Program(source, verify=verify)


def run(source, *args, function: str | None = None, listeners=(),
        io: hostio.HostQueues | None = None) -> list:
    """Load ``source`` and run one function on ``args``; returns a list of NumPy arrays."""
    program = source if isinstance(source, Program) else load(source)
    return program.run(*args, function=function, listeners=listeners, io=io)


def _verify(module) -> None:
    from jaxlib.mlir import ir

    try:
        module.operation.verify()
    except ir.MLIRError as e:
        raise ModuleError(f"the module does not verify:\n{sources._diagnostics(e)}") from None


def _int_attribute(attributes, name: str, default: int) -> int:
    try:
        return int(decode_attribute(attributes[name]))
    except (KeyError, IndexError, ValueError, TypeError):
        return default


def _declare_function(operation, file_name) -> Function:
    attributes = operation.operation.attributes
    name = decode_attribute(attributes["sym_name"])
    visibility = decode_attribute(attributes["sym_visibility"]) if "sym_visibility" in attributes else "public"
    function_type = operation.type
    arg_types = tuple(decode_type(t) for t in function_type.inputs)
    result_types = tuple(decode_type(t) for t in function_type.results)
    arg_names = _value_names(attributes, "arg_attrs", len(arg_types), operation)
    result_names = _value_names(attributes, "res_attrs", len(result_types), None)
    return Function(name, visibility, arg_types, result_types, arg_names, result_names,
                    decode_location(operation.location, file_name),
                    has_body=len(operation.regions[0].blocks) > 0)


def _value_names(attributes, key: str, count: int, operation) -> tuple:
    """Names JAX gives arguments (their ``loc("x")``) and results (``jax.result_info``)."""
    names = [None] * count
    if key in attributes:
        for i, entry in enumerate(decode_attribute(attributes[key])):
            if isinstance(entry, dict) and isinstance(entry.get("jax.result_info"), str):
                names[i] = entry["jax.result_info"]
    if operation is not None and len(operation.regions[0].blocks):
        for i, arg in enumerate(operation.regions[0].blocks[0].arguments):
            location = decode_location(arg.location)
            if location.name and not location.frames:
                names[i] = location.name
    return tuple(names)


def coerce_arguments(function: Function, args) -> list:
    """Check arguments against the signature; convert Python scalars and JAX arrays."""
    if len(args) != len(function.arg_types):
        expected = ", ".join(map(str, function.arg_types))
        raise ArgumentError(f"@{function.name} takes {len(function.arg_types)} arguments ({expected}), "
                            f"got {len(args)}")
    return [value if type(value) is np.ndarray and type(t) is TensorType and value.dtype == t.dtype
            and value.shape == t.shape else _coerce(value, t, i, function)
            for i, (value, t) in enumerate(zip(args, function.arg_types))]


def _coerce(value, expected, index: int, function: Function):
    label = function.arg_names[index] or f"#{index}"
    where = f"argument {label} of @{function.name}"
    if isinstance(expected, TokenType):
        from ..ir.types import TOKEN

        return TOKEN
    if isinstance(expected, TupleType):
        if not isinstance(value, (tuple, list)) or len(value) != len(expected.elements):
            raise ArgumentError(f"{where}: expected a tuple of {len(expected.elements)} values")
        return tuple(_coerce(v, t, index, function) for v, t in zip(value, expected.elements))
    assert isinstance(expected, TensorType)
    if isinstance(value, (bool, int, float, complex)):
        array = _convert_scalar(value, expected, where)
    else:
        array = np.asarray(value)
        if array.dtype != expected.dtype:
            raise ArgumentError(f"{where}: expected {expected} ({expected.dtype}), "
                                f"got an array of dtype {array.dtype}")
    if not expected.matches(array):
        got = "x".join(map(str, array.shape)) or "scalar"
        raise ArgumentError(f"{where}: expected {expected}, got shape {got}")
    return array


def _convert_scalar(value, expected: TensorType, where: str) -> np.ndarray:
    """A Python scalar as a 0-d array of the expected type, if it fits exactly (ints)
    or is representable by rounding (floats)."""
    kinds = {"bool": (bool,), "signed": (bool, int), "unsigned": (bool, int), "quantized": (bool, int),
             "float": (bool, int, float), "complex": (bool, int, float, complex)}
    if not isinstance(value, kinds[expected.kind]):
        raise ArgumentError(f"{where}: {value!r} does not fit {expected}")
    if expected.kind in ("signed", "unsigned", "quantized"):  # quantized: the stored integer
        import ml_dtypes

        limits = ml_dtypes.iinfo(expected.dtype)
        if not limits.min <= value <= limits.max:
            raise ArgumentError(f"{where}: {value!r} does not fit {expected}")
    return np.asarray(value).astype(expected.dtype)


def _as_result(value, arguments):
    """A fresh, writable ndarray: constants are read-only and results may be views
    of the arguments (``return %arg0``, a slice), which the caller must not alias."""
    if isinstance(value, tuple):
        return tuple(_as_result(v, arguments) for v in value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, np.ndarray):
        if value.base is None and value.flags.writeable and not any(value is a for a in arguments):
            return value  # owns its data and is no argument: a fresh array
        if not value.flags.writeable or any(
                isinstance(a, np.ndarray) and np.may_share_memory(value, a) for a in arguments):
            return value.copy()
    return value
