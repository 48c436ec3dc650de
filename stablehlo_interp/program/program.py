"""A module loaded into a Program: ``program.run`` takes ``@main``'s own arguments;
``program.call`` takes those of the JAX function it was lowered from."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..engine.grid import MANUAL_BORDERS, Grid, process_ops
from ..engine.hostio import HostQueues
from ..sharding import tiling as sharding
from ..ir import sources
from ..ir.declarations import decode_module
from ..sharding.custom_partitioning import annotate_custom_partitioning
from ..sharding.manual_borders import annotate_manual_borders
from ..engine.run import Execution, Listener, RunContext, numpy_warnings_off
from ..engine.semantics import SPEC, semantics_named
from ..errors import ArgumentError, ModuleError, counted
from ..engine.plan import Function, ModuleInfo, Region
from .compiler import Compiler
from ..sharding import custom_partitioning
from ..ir.refinement import refinable, refine, static_types
from ..ir.types import TensorType, TokenType, TupleType
from ..ops.sharding_calls import Partitioned
from ..ops.host_callback import partitioned_operand_tilings
from ..sharding.propagation import Propagation
from .signature import JaxSignature, is_jax_function


class Program:
    """A loaded module: every function compiled to a plan, ready to run many times.

    ``functions`` maps each function name to its :class:`~stablehlo_interp.engine.plan.Function`
    (signature, argument and result names and attributes, plan); ``name`` is the
    module's name (None without one), ``meshes`` its Shardy meshes by name.

    A module whose functions take arguments with dynamic dimensions is
    *shape-polymorphic*: it is compiled per distinct argument shapes, each time
    from a copy refined to those shapes (see :meth:`refined`), so its own
    functions have no plans. (Except a module with ops of unregistered dialects,
    which the refinement passes cannot take: it is compiled as it is, and its
    ops find dynamic sizes at run time or fail to load.)

    ``signature`` is the calling convention of the JAX function a ``Lowered`` or
    an ``Exported`` came from (None for a module in any other form): :meth:`call`
    takes that function's arguments; :meth:`run` always takes the module's.

    ``semantics`` is what its runs follow unless a run says otherwise: ``"spec"``
    (the default) or ``"xla"`` (docs/semantics.md, engine/semantics.py).

    ``host_callbacks`` are the Python functions the module's host callbacks lowered
    for the CPU call (``xla_ffi_python_cpu_callback``), by their index: a ``Lowered``
    carries them; for the text of its module, pass them (ops/host_callback.py).

    ``propagation`` gives the shardings Shardy's propagation finds for the values the
    module leaves open (sharding/propagation.py), run at the first question only.

    ``partition_callback`` answers the module's custom partitioning ops
    (``jax.experimental.custom_partitioning``) with their per-device programs
    (ops/sharding_calls.py): JAX's own for a ``Lowered`` (:func:`jax_partition_callback`),
    which the ``interp`` device hands too; none otherwise.
    """

    _MAX_REFINED = 32  # refined programs kept; the oldest is dropped past that

    def __init__(self, source: Any, *, verify: bool = True, semantics: str = SPEC,
                 host_callbacks: Sequence[Callable] | None = None,
                 partition_callback: Callable | None = None) -> None:
        if is_jax_function(source):
            raise ModuleError("a function becomes a module for its arguments: si.run(f, *args), or "
                              "si.load(jax.jit(f).lower(*args))")
        self.signature = JaxSignature.of(source)
        self.semantics = semantics_named(semantics)
        parsed = source if isinstance(source, sources.ParsedModule) else sources.parse(source)
        self.module = annotate_manual_borders(parsed.module, parsed.owned) if parsed.may_have_manual_borders \
            else parsed.module
        if parsed.may_have_custom_partitioning:
            self.module = annotate_custom_partitioning(self.module, parsed.owned or self.module is not parsed.module)
        if partition_callback is None and parsed.lowered_here:
            partition_callback = jax_partition_callback   # JAX registered its callbacks in this process
        self.partition_callback = partition_callback
        self.file_name = parsed.file_name
        self.host_callbacks = parsed.host_callbacks if host_callbacks is None else tuple(host_callbacks)
        if verify and not (parsed.verified and not parsed.may_have_manual_borders):
            sources.verify(self.module)
        declared = decode_module(self.module, self.file_name)
        self.name = declared.name
        self.num_replicas = declared.num_replicas
        self.num_partitions = declared.num_partitions
        self.meshes = {name: sharding.parse_mesh(text, self.num_partitions) for name, text in declared.meshes.items()}
        self._process_ops: dict = {}
        self._partitioned_callbacks: dict = {}   # function name -> partitioned_operand_tilings
        self._runnable: dict = {}  # function name (None: the entry) -> its Function
        self.functions: dict[str, Function] = {f.name: Function.declared(f) for f in declared.functions}
        self.propagation = Propagation(self.meshes, self.module, self.functions)
        self.shape_polymorphic = any(isinstance(t, TensorType) and not t.is_static
                                     for f in self.functions.values() for t in f.arg_types)
        self.shape_polymorphic = self.shape_polymorphic and refinable(self.module)
        self._refined: dict = {}
        self.module_info = ModuleInfo(self.num_replicas, self.num_partitions, self.meshes, self.functions,
                                      self.host_callbacks, partition_callback)
        self._in_grid = self.num_processes > 1
        if not self.shape_polymorphic:
            Compiler(self.module_info, self.file_name, parsed.text_locations).compile_functions(self.module)

    def function(self, name: str) -> Function:
        return self.module_info.function(name)

    @property
    def entry_name(self) -> str:
        """``main`` if present, else the only public function."""
        if "main" in self.functions:
            return "main"
        public = [f.name for f in self.functions.values() if f.visibility != "private"]
        if len(public) == 1:
            return public[0]
        raise ModuleError("the module has no @main; name the function to run with function=...")

    def run(self, *args: Any, function: str | None = None, listeners: Iterable[Listener] = (), io: HostQueues | None = None,
            semantics: str | None = None, loops: list | None = None) -> list:
        """Run a function on NumPy arguments; returns a list of NumPy arrays.

        ``listeners`` are :class:`~stablehlo_interp.engine.run.Listener` objects that
        observe (and may alter or stop) the run. ``io`` holds the host side of
        infeed, outfeed, send and recv (see :class:`~stablehlo_interp.engine.hostio.HostQueues`).
        ``semantics`` is ``"spec"`` or ``"xla"`` (the program's by default). ``loops``:
        a list where the run keeps the ``while`` loops it is in, with their iterations,
        for a progress line (RunContext; tools/progress.py).
        """
        target = self._runnable.get(function) or self.runnable(function)
        values = coerce_arguments(target, args)
        context = RunContext(listeners, io, semantics=semantics or self.semantics, loops=loops)
        return _as_results(self.execute(target, values, context), values)

    def call(self, *args: Any, listeners: Iterable[Listener] = (), io: HostQueues | None = None,
             semantics: str | None = None, **kwargs: Any) -> Any:
        """Call the program as the JAX function it was lowered from: the same positional
        and keyword arguments, pytrees and static arguments (see :meth:`bind`); returns
        the function's output pytree of NumPy arrays, as ``jax.jit(f)(*args, **kwargs)``
        would. ``listeners``, ``io`` and ``semantics`` are :meth:`run`'s."""
        main = self.runnable()
        outputs = self.run(*self.bind(args, kwargs), listeners=listeners, io=io, semantics=semantics)
        return self.signature.results(main, outputs)

    def bind(self, args: tuple, kwargs: dict, static_argnums: int | Sequence[int] | None = None) -> list:
        """``@main``'s checked arguments for a call of the function this program was
        lowered from. A ``Lowered`` or ``Exported`` is specialized to the static
        arguments it was lowered with and does not keep them: they may stand in the
        call, but they are not compared with the lowered ones (``static_argnums``
        says where they are, when known; see :class:`~.signature.JaxSignature`)."""
        if self.signature is None:
            raise ArgumentError("this module was not lowered from a JAX function: run it with @main's "
                                "arguments, program.run(*args)")
        main = self.runnable()
        values = self.signature.arguments(main, args, kwargs, static_argnums)
        try:
            return coerce_arguments(main, values)
        except ArgumentError as error:
            raise self.signature.mismatch(args, kwargs, str(error)) from None

    def runnable(self, function: str | None = None) -> Function:
        """The function ``run`` would run (``main`` by default); it must have a body."""
        target = self.function(function or self.entry_name)
        if not target.has_body:
            raise ModuleError(f"@{target.name} is declared without a body; there is nothing to run")
        self._runnable[function] = target
        return target

    def execute(self, target: Function, values: list, context: RunContext | None = None) -> list | tuple:
        """:meth:`run` without its argument checks and result copies, for callers
        whose values already have the function's types and who never write into
        the results (which may be constants or the arguments themselves): the device.
        The results come as a sequence (Execution.run_entry).
        ``context`` holds the run's listeners, host queues and semantics (a new one,
        with the program's semantics, by default)."""
        context = context if context is not None else RunContext(semantics=self.semantics)
        if self.shape_polymorphic:
            refined = self.refined(*values, function=target.name)
            return refined.execute(refined.function(target.name), values, context)
        if self._in_grid:
            if self._runs_per_process(target):
                return self._run_grid(target, [values] * self.num_processes, context)[0]
            if context.partitioned_callbacks is None:
                context.partitioned_callbacks = self.partitioned_callbacks(target)
        return Execution(context).run_entry(target.region, values)

    def partitioned_callbacks(self, target: Function) -> dict:
        """How each partitioned host callback of the global function ``target`` finds its
        operands sharded over the module's partitions, for the call it makes on each
        device (ops/host_callback.py, ``partitioned_operand_tilings``); found once."""
        if target.name not in self._partitioned_callbacks:
            self._partitioned_callbacks[target.name] = partitioned_operand_tilings(self.propagation, target,
                                                                                  self.num_partitions)
        return self._partitioned_callbacks[target.name]

    def plain_region(self, target: Function) -> Region | None:
        """The region :meth:`execute` runs as it is for ``target``, as
        ``Execution(context).run_entry(region, values)``: None when a run first refines
        the program (shape polymorphism) or the module has a grid of processes. A
        caller that runs one function many times (the device) decides this once."""
        if self.shape_polymorphic or self._in_grid:
            return None
        return target.region

    @property
    def num_processes(self) -> int:
        return self.num_replicas * self.num_partitions

    def run_grid(self, per_process_args: Sequence[Sequence[Any]], *, function: str | None = None,
                 listeners: Iterable[Listener] = (),
                 io: HostQueues | None = None, semantics: str | None = None) -> list:
        """Run a function once per process of the module's grid, ``num_replicas`` x
        ``num_partitions`` (spec: Parallel execution), with collectives between them.

        ``per_process_args[i]`` are the arguments of the process with flattened id
        ``i = replica_id * num_partitions + partition_id``; returns the list of
        each process's results, in the same order. The processes share ``io``.
        ``semantics`` is :meth:`run`'s.
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
                values, function=target.name, listeners=listeners, io=io, semantics=semantics or self.semantics)
        outputs = self._run_grid(target, values, RunContext(listeners, io, semantics=semantics or self.semantics))
        return [_as_results(out, args) for out, args in zip(outputs, values)]

    def _run_grid(self, target: Function, per_process_values: list, context: RunContext) -> list:
        """Each process's results of ``target`` (arguments already checked), in one run."""
        with numpy_warnings_off():
            return Grid(self.num_replicas, self.num_partitions).run(
                lambda process: Execution(context, process).run_entry(target.region, per_process_values[process.id]))

    def _runs_per_process(self, function: Function) -> bool:
        """Whether the function's own code (outside manual computations) depends on the
        process running it. A global program whose manual code lies between
        SPMDFullToShardShape and SPMDShardToFullShape runs on every process with the
        same arguments; any other such function is a per-process program (run_grid)."""
        if function.name not in self._process_ops:
            self._process_ops[function.name] = process_ops(function.region)
        found = self._process_ops[function.name]
        if found and not found & MANUAL_BORDERS:
            raise ArgumentError(f"@{function.name} runs as {self.num_processes} processes ({self.num_replicas} "
                                f"replica(s) x {self.num_partitions} partition(s)) and uses "
                                f"{', '.join(sorted(found))}: run it with program.run_grid([arguments of each "
                                "process])")
        return bool(found)

    def refined(self, *args: Any, function: str | None = None) -> "Program":
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
            program = Program(sources.ParsedModule(module, self.file_name), verify=False,
                              host_callbacks=self.host_callbacks, partition_callback=self.partition_callback)
            if len(self._refined) >= self._MAX_REFINED:
                del self._refined[next(iter(self._refined))]
            self._refined[key] = program
        return program

    def sibling(self, source: Any) -> "Program":
        """Another module loaded as this one was: with its semantics, host callbacks and
        partition callback (the per-device program Shardy's partitioner makes of it,
        sharding/per_device.py)."""
        return Program(source, semantics=self.semantics, host_callbacks=self.host_callbacks,
                       partition_callback=self.partition_callback)

    def __repr__(self) -> str:
        names = ", ".join(f"@{n}" for n in self.functions)
        return f"<Program functions=[{names}]>"


def load(source: Any, *, verify: bool = True, semantics: str = SPEC,
         host_callbacks: Sequence[Callable] | None = None, partition_callback: Callable | None = None) -> Program:
    """Parse and compile a module (text, path, bytes, ir.Module, Lowered, Exported);
    its runs follow ``semantics`` (``"spec"`` or ``"xla"``) unless a run says otherwise.
    ``host_callbacks``: the Python functions of the module's CPU host callbacks, for a
    module whose source does not carry them; ``partition_callback``: the answer of its
    custom partitioning ops (see :class:`Program`)."""
    return Program(source, verify=verify, semantics=semantics, host_callbacks=host_callbacks,
                   partition_callback=partition_callback)


def jax_partition_callback(*question) -> Partitioned | None:
    """JAX's answer to a custom partitioning op of a program of this process
    (sharding/custom_partitioning.py: ``question`` is what ``ask_jax`` takes), its
    per-device program loaded; None where JAX registered no such op."""
    answer = custom_partitioning.ask_jax(*question)
    if answer is None:
        return None
    code, operand_tilings, result_tilings = answer
    program = load(sources.parse(code, trusted=True), partition_callback=jax_partition_callback)
    return Partitioned(program.runnable(), program, operand_tilings, result_tilings)


def coerce_arguments(function: Function, args) -> list:
    """Check arguments against the signature; convert Python scalars and JAX arrays.
    An array of the argument's dtype and static shape is taken as it is (the common
    case, checked first with the least work: it is part of every run's fixed cost)."""
    types = function.arg_types
    if len(args) != len(types):
        expected = ", ".join(map(str, types))
        raise ArgumentError(f"@{function.name} takes {counted(len(types), 'argument')} ({expected}), got {len(args)}")
    values = list(args)
    for index, expected in enumerate(types):
        value = values[index]
        if type(value) is not np.ndarray or value.dtype != expected.dtype or value.shape != expected.shape \
                or type(expected) is not TensorType:
            values[index] = _coerce(value, expected, index, function)
    return values


def _coerce(value, expected, index: int, function: Function):
    """The argument ``value`` as a value of type ``expected``, or an ArgumentError."""
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
        raise ArgumentError(f"{where}: expected {expected}, got an array of shape {array.shape}")
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


def _as_results(values, arguments) -> list:
    """The results of a run as the caller gets them: each a fresh, writable ndarray.
    Constants are read-only and results may be views of the arguments (``return
    %arg0``, a slice), which the caller must not alias: those are copied."""
    results = list(values)
    for index, value in enumerate(results):
        if type(value) is np.ndarray and value.base is None and value.flags.writeable:
            for argument in arguments:  # owns its data: fresh unless it is an argument
                if value is argument:
                    results[index] = value.copy()
        else:
            results[index] = _as_result(value, arguments)
    return results


def _as_result(value, arguments):
    """:func:`_as_results` of one value that is not a writable array owning its data."""
    if isinstance(value, tuple):
        return tuple(_as_results(value, arguments))
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, np.ndarray) and (not value.flags.writeable or any(
            isinstance(a, np.ndarray) and np.may_share_memory(value, a) for a in arguments)):
        return value.copy()
    return value
