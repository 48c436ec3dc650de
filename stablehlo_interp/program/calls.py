"""The front door of ``si.run`` and of every tool: a target and its arguments become a
program, the arguments of the function it runs, and a way back to the caller's results.

Two forms (docs/programs.md):

* **the function's form**, for a Python function, a jitted function, a
  ``jax.stages.Lowered`` or a ``jax.export.Exported``: the same positional and
  keyword arguments, pytrees and static arguments as the function, and its
  output pytree back, as ``jax.jit(f)(*args, **kwargs)`` returns it;
* **the module's form**, for MLIR text, a path, bytes, an ``ir.Module`` and a
  loaded :class:`~stablehlo_interp.Program` (``si.load(lowered)`` asks for it):
  ``@main``'s (or ``function=``'s) flat arguments, a list of results back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engine.run import Listener

import functools
import os
import pathlib
import warnings
from dataclasses import dataclass

from ..engine.hostio import HostQueues
from ..errors import ArgumentError
from ..sharding.partition import PartitionError
from ..sharding.per_device import PerDeviceProgram, PerDeviceWarning
from .program import Program, coerce_arguments, load
from .signature import JaxSignature, is_jax_function

# The JAX platform name of the interpreter's device (device/): what a function is lowered
# for to run its host callbacks through the interpreter.
INTERP_PLATFORM = "interp"


@dataclass
class Call:
    """A program ready to run one call: ``program.run(*arguments, function=function)``.

    ``signature`` is set for a call in the function's form (results go back as its
    output pytree). ``traced`` is JAX's ``jax.stages.Traced`` when the target was a
    Python function (its ``.jaxpr`` is what ``si.explain`` prints), else None.
    ``partitioned`` is set for a per-device run (sharding/per_device.py): each device
    runs its own program on its shards of the arguments; ``check(call, results, io,
    semantics)``, when set, judges each per-device run's results (``[d][i]``) after it
    (sharding/check.py judges them against the global run).
    """

    program: Program
    arguments: list           # the function's arguments, checked against its types
    function: str
    signature: JaxSignature | None = None
    traced: object = None
    partitioned: PerDeviceProgram | None = None
    check: Callable[[Call, list, HostQueues | None, str | None], None] | None = None

    def run(self, listeners=(), io: HostQueues | None = None, semantics: str | None = None) -> list:
        """The function's results as a flat list (the module's results); in a per-device
        run, put together from the devices' shards."""
        if self.partitioned is not None:
            return self.partitioned.assemble(self.run_devices(listeners, io, semantics))
        return self.program.run(*self.arguments, function=self.function, listeners=listeners, io=io,
                                semantics=semantics)

    def run_devices(self, listeners=(), io: HostQueues | None = None, semantics: str | None = None) -> list:
        """A per-device run's results of each device (``[d][i]``: device d's result i)."""
        partitioned = self.per_device_program()
        results = partitioned.run_devices(partitioned.shards(self.arguments), listeners, io, semantics)
        if self.check is not None:
            self.check(self, results, io, semantics)
        return results

    def per_device_program(self) -> PerDeviceProgram:
        """The per-device program of a call prepared with ``per_device=True``."""
        if self.partitioned is None:
            raise ArgumentError("this call runs the global program: prepare it with per_device=True")
        return self.partitioned

    def results(self, outputs: list):
        """``outputs`` of :meth:`run` as the caller expects them: the function's output
        pytree in the function's form, the list itself in the module's form."""
        if self.signature is None:
            return outputs
        return self.signature.results(self.program.function(self.function), outputs)


def prepare(target, args=(), kwargs=None, function: str | None = None, platform: str | None = None,
            per_device: bool = False) -> Call:
    """Load ``target`` for the call with ``args`` and ``kwargs`` (see the module's docstring).
    ``platform``: the JAX platform a Python or jitted function is lowered for (default:
    JAX's default backend's). ``per_device``: each device runs its partitioned program
    (sharding/per_device.py; a ``PartitionError`` where Shardy cannot partition it)."""
    call = _prepare(target, args, kwargs or {}, function, platform)
    if per_device:
        call.partitioned = PerDeviceProgram(call.program, call.function)
    return call


def prepare_per_device(target, args=(), kwargs=None, function: str | None = None,
                       platform: str | None = None) -> Call:
    """:func:`prepare` with ``per_device=True`` for the tools: where Shardy cannot
    partition the program, a :class:`PerDeviceWarning` says why and the call runs the
    global program (``call.partitioned`` is None), as the device's per-device modes do."""
    call = _prepare(target, args, kwargs or {}, function, platform)
    try:
        call.partitioned = PerDeviceProgram(call.program, call.function)
    except PartitionError as why:
        warnings.warn(f"the per-device run falls back to the global program of {call.program.name or 'a module'}: "
                      f"{why}", PerDeviceWarning, stacklevel=3)
    return call


def _prepare(target, args, kwargs: dict, function: str | None, platform: str | None) -> Call:
    if is_jax_function(target):
        _no_function_name(target, function)
        traced, static_argnums = _trace(target, args, kwargs)
        program = load(lower_for(traced, platform))
        return Call(program, program.bind(args, kwargs, static_argnums), "main", program.signature, traced)
    program = target if isinstance(target, Program) else load(target)
    if program.signature is not None and program is not target:
        _no_function_name(target, function)
        return Call(program, program.bind(args, kwargs), "main", program.signature)
    if kwargs:
        raise ArgumentError(f"keyword arguments ({', '.join(kwargs)}) need a JAX function, a Lowered or an Exported: "
                            "a module takes its function's arguments in order")
    runnable = program.runnable(function)
    return Call(program, coerce_arguments(runnable, args), runnable.name)


def run(target: Any, *args: Any, function: str | None = None, listeners: Iterable[Listener] = (),
        io: HostQueues | None = None, semantics: str | None = None, **kwargs: Any) -> Any:
    """Run ``target`` on its arguments.

    A Python function, a jitted function, a ``Lowered`` or an ``Exported`` is called
    as the function: ``si.run(f, *args, **kwargs)`` returns what ``jax.jit(f)(*args,
    **kwargs)`` returns, with NumPy arrays. MLIR text, a path, bytes, an ``ir.Module``
    or a loaded ``Program`` runs ``@main`` (or ``function``) on its flat arguments
    and returns the list of its results. ``listeners`` observe the run (see
    :class:`~stablehlo_interp.Listener`); ``io`` holds its host queues; ``semantics``
    is ``"spec"`` (the default for a module or function loaded here; a Program's own
    otherwise) or ``"xla"`` (docs/semantics.md).
    """
    call = prepare(target, args, kwargs, function)
    return call.results(call.run(listeners, io, semantics))


@dataclass
class DeviceRun:
    """What a per-device run gives: ``outputs``, the global results put together from the
    devices' shards (as ``si.run`` returns them), and ``per_device[d]``, device ``d``'s
    own list of results; ``program`` is the :class:`PerDeviceProgram` that ran."""

    outputs: object
    per_device: list
    program: PerDeviceProgram


def lower_for(traced: Any, platform: str | None) -> Any:
    """``traced`` (a ``jax.stages.Traced``) lowered for ``platform`` (None: JAX's default
    device's), as JAX lowers a call on that platform's first device.

    JAX lowers a call for the platform of its devices: the arguments' where they are
    committed to some, else the default device's. ``lowering_platforms`` changes the
    platform of the module's ops, not that device, and JAX's lowering of a host callback
    for the CPU (``emit_python_callback``) asks the module's backend for that platform's
    client and refuses any other ("the platform for the specified backend interp is
    different from the lowering platform cpu", with ``JAX_PLATFORMS=interp,cpu``). So
    the default device is the platform's own for the lowering, where JAX has one, and
    an argument committed to one device of another platform is lowered as uncommitted
    (the module is the same; only the device JAX lowers on changes).

    Where JAX still lowers on another platform's devices (arguments sharded over several
    of them, shardings that name them) or has no device of the platform
    (``JAX_PLATFORMS`` leaves it out), a host callback cannot be lowered: an
    :class:`ArgumentError` says why and what to do."""
    import contextlib

    import jax

    if platform is None:
        return traced.lower()
    devices = platform_devices(platform)
    if devices:
        traced = _released_from_other_platforms(traced, platform)
    with jax.default_device(devices[0]) if devices else contextlib.nullcontext():
        try:
            return traced.lower(lowering_platforms=(platform,))
        except ValueError as error:
            if _CALLBACK_BACKEND_REFUSED not in str(error):
                raise
            why = (f"the call's devices are another platform's (arguments sharded over several of its devices, "
                   f"or shardings that name them): put the arguments on {platform} devices (jax.device_put)"
                   if devices else missing_platform(platform))
            raise ArgumentError(f"JAX cannot lower this function for {platform}: {error}. JAX lowers a host "
                                f"callback for a platform on one of its devices, and {why}") from error


# How JAX's emit_python_callback refuses a module whose backend is another platform's.
_CALLBACK_BACKEND_REFUSED = "is different from the lowering platform"


def _released_from_other_platforms(traced: Any, platform: str) -> Any:
    """``traced`` with its arguments committed to a single device of another platform
    taken as uncommitted, so that they leave the lowering to the default device. (JAX's
    ``Traced`` keeps each argument's sharding and commitment in ``_meta_tys_flat``; an
    argument sharded over several devices keeps them.)"""
    from jax._src import stages

    def elsewhere(meta) -> bool:
        devices: tuple = tuple(getattr(meta.sharding, "_device_assignment", ())) if meta.committed else ()
        return len(devices) == 1 and devices[0].platform != platform

    metas = list(traced._meta_tys_flat)
    if not any(elsewhere(meta) for meta in metas):
        return traced
    released = [meta.replace(committed=False) if elsewhere(meta) else meta for meta in metas]
    return stages.Traced(released, traced._params, traced._in_tree, traced.out_tree, traced._consts)


def platform_devices(platform: str) -> list:
    """JAX's devices of ``platform`` in this process ([] where ``JAX_PLATFORMS`` leaves it out)."""
    import jax

    try:
        return jax.devices(platform)
    except RuntimeError:   # "Unknown backend ..."
        return []


def missing_platform(platform: str) -> str:
    """Why JAX has no device of ``platform`` here, and the way to one."""
    listed = os.environ.get("JAX_PLATFORMS")
    why = (f"JAX_PLATFORMS={listed} leaves {platform} out: list it too" if listed else
           f"JAX has no {platform} device in this process")
    return f'{why} (docs/device.md, "Platform orders")'


def _no_function_name(target, function: str | None) -> None:
    if function is not None:
        raise ArgumentError(f"function={function!r} names a function of a module, and a "
                            f"{type(target).__name__} is called as its JAX function; to run @{function}, "
                            "load its module: si.load(lowered).run(*arguments, function=...)")


def _trace(function, args, kwargs):
    """``jax.jit``'s trace of ``function`` for the call, and the positions of its static
    arguments (a jitted function's own; a plain function has none).

    A plain function is traced with ``keep_unused=True``, so that the module shows
    every argument; a jitted function keeps its own options.
    """
    import jax

    _hide_our_frames()
    if hasattr(function, "trace"):
        jit_info = getattr(function, "_jit_info", None)
        return function.trace(*args, **kwargs), getattr(jit_info, "static_argnums", None)
    return jax.jit(function, keep_unused=True).trace(*args, **kwargs), ()


@functools.cache
def _hide_our_frames() -> None:
    """Keep this package's frames out of the source locations JAX records, so an
    op's location is the user's line (as for JAX's own frames). The battery's
    programs are user code: their frames stay."""
    from jax._src import source_info_util

    package = pathlib.Path(__file__).resolve().parent.parent
    for path in sorted(package.rglob("*.py")):
        if path.name != "battery.py" and str(path) not in source_info_util._exclude_paths:
            source_info_util.register_exclusion(str(path))


def interpreter_platform() -> str | None:
    """``"interp"`` when JAX can lower for the interp platform in this process (its
    lowering rules are registered, which importing this package does, whatever
    ``JAX_INTERP_PLATFORMS`` says), else None. A function lowered for it calls its host
    callbacks through the interpreter (device/host_callbacks.py)."""
    import collections

    import jax
    from jax._src.interpreters import mlir

    jax.devices()   # initializes the plugins JAX_INTERP_PLATFORMS allows
    return INTERP_PLATFORM if isinstance(mlir._platform_specific_lowerings.get(INTERP_PLATFORM), collections.ChainMap) else None
