"""The interpreter's side of host callbacks (jax.debug.print, debug.callback,
pure_callback, io_callback): custom calls that call a Python function.

Two targets, one per way JAX lowers a callback:

* ``stablehlo_interp.host_callback``: the ``interp`` platform's lowering
  (device/host_callbacks.py). Its ``backend_config`` is the key of a
  :class:`HostCallback` in a process-wide table, which lives as long as the
  compiled executable that may call it.
* ``xla_ffi_python_cpu_callback``: the CPU's lowering (JAX's default platform,
  what ``si.run(f, ...)`` and the tools lower for). Its ``index`` attribute
  (``mhlo.backend_config = {index = N}``) points into the list of Python
  callables that JAX keeps beside the module, in the ``jax.stages.Lowered``, and
  would hand to XLA's compiler (jax/_src/callback.py, ``emit_python_callback``).
  A Program loaded from a ``Lowered`` keeps that list (``ModuleInfo.host_callbacks``);
  the module's text alone does not have it, and such a module fails to load
  with an error that says so.

Either way the function gets NumPy arrays, in program order (a callback with a
token is ordered by it, as every op with a side effect is run in program order
here), and what it returns is checked against the op's result types. A
callback that raises stops the run with an error naming the op, where the
callback was made in the user's code and what it raised (the exception is the
error's ``__cause__``).

A *partitioned* callback (``jax.debug.callback(..., partitioned=True)`` and
``jax.debug.print(..., partitioned=True)``; JAX refuses results for it) has a
target of its own, ``xla_ffi_partitioned_python_cpu_callback`` for the CPU and
``stablehlo_interp.partitioned_host_callback`` for ``interp``. XLA's SPMD
partitioner gives that custom call each device's shard of each operand, as the
operand is sharded where it is made (Shardy's propagation decides where the
program leaves it open), and runs it on every device of the program
(xla/python/debug_callback_partitioner.cc): one call per device, replicas
included, each with the device's own shards. In a global program over several
devices the op does the same: :func:`partitioned_operand_tilings` gives the
tiling of each operand (``RunContext.partitioned_callbacks``, which
``Program.execute`` fills), and the op calls the function once per device,
device 0 first, with that device's shards. In a process of a grid (a
``shard_map`` body, whose values are already the device's own) and on one
device, it calls it once, as the plain target does.
"""

from __future__ import annotations

import itertools
import threading
import weakref

import numpy as np

from ..engine.grid import regions_within, steps_within
from ..engine.registry import custom_call
from ..errors import OpExecutionError
from ..ir.types import TOKEN, TokenType
from ..sharding import unreduced
from ..sharding.propagation import value_tilings

TARGET = "stablehlo_interp.host_callback"
PARTITIONED_TARGET = "stablehlo_interp.partitioned_host_callback"
CPU_TARGET = "xla_ffi_python_cpu_callback"
CPU_PARTITIONED_TARGET = "xla_ffi_partitioned_python_cpu_callback"
PARTITIONED_TARGETS = frozenset({PARTITIONED_TARGET, CPU_PARTITIONED_TARGET})

TARGETS = frozenset({TARGET, CPU_TARGET}) | PARTITIONED_TARGETS


def callbacks_with_effects(region) -> list:
    """The host callbacks in ``region`` (and the regions and functions it holds) that have
    a side effect (``io_callback``, ``jax.debug.callback`` and ``print``): what a second run
    of the program would do again. A ``pure_callback`` has none: JAX lets a program call
    it any number of times."""
    return [step for step in steps_within(region)
            if step.info.name == "stablehlo.custom_call" and step.info.attributes.get("call_target_name") in TARGETS
            and (step.info.attributes.get("has_side_effect") or step.info.attributes.get("call_target_name")
                 in PARTITIONED_TARGETS)]


_callbacks: "weakref.WeakValueDictionary[int, HostCallback]" = weakref.WeakValueDictionary()
_keys = itertools.count(1)
_lock = threading.Lock()


class HostCallback:
    """A Python function called from a program, and the table key the program names it by."""

    def __init__(self, function):
        self.function = function
        with _lock:
            self.key = next(_keys)
            _callbacks[self.key] = self


def lookup(key: int) -> HostCallback | None:
    return _callbacks.get(key)


@custom_call(TARGET, variadic=True)
def host_callback(info):
    """Call the registered function with the operands (a leading token passes through)."""
    return callback_runner(info, *registered_callback(info))


@custom_call(PARTITIONED_TARGET, variadic=True, execution=True)
def partitioned_host_callback(info):
    """The registered function, called once per device with its shards (module docstring)."""
    return _per_device(info, *registered_callback(info))


@custom_call(CPU_TARGET, variadic=True)
def cpu_host_callback(info):
    """Call the function JAX lowered for the CPU at ``index``: JAX's wrapper of the
    user's function, which takes and returns the token as well when there is one."""
    return callback_runner(info, *callback_lowered_for_the_cpu(info))


@custom_call(CPU_PARTITIONED_TARGET, variadic=True, execution=True)
def cpu_partitioned_host_callback(info):
    """The function JAX lowered for the CPU, called once per device with its shards."""
    return _per_device(info, *callback_lowered_for_the_cpu(info))


def registered_callback(info, kind: str = "host callback") -> tuple:
    """``(name, call)`` of the interp platform's callback: its function from the table."""
    key = int(info.attr("backend_config"))
    entry = lookup(key)
    if entry is None:
        raise info.unsupported(f"{kind} #{key} no longer exists: the jitted function that "
                               "registered it is gone")
    function = entry.function
    return f"{kind} #{key}", lambda token, operands: function(*operands)


def callback_lowered_for_the_cpu(info, kind: str = "host callback") -> tuple:
    """``(name, call)`` of a callback JAX lowered for the CPU: the function at ``index``
    of the list the Lowered keeps."""
    config = info.attr("mhlo.backend_config", None)
    index = config.get("index") if isinstance(config, dict) else None
    if index is None:
        raise info.error(f"a {kind} needs its index: mhlo.backend_config = {{index = N : ui64}}")
    known = info.module.host_callbacks if info.module is not None else ()
    if not 0 <= index < len(known):
        target = info.attr("call_target_name")
        raise info.unsupported(
            f"{kind} #{index} of a module JAX lowered for the CPU: its Python function is known only to "
            "the jax.stages.Lowered the module came from, not to the module's text. Run the function, the jitted "
            "function or the Lowered itself (si.run(lowered, *args)), or register an implementation with "
            f"si.register_custom_call({target!r}, ...)")
    function = known[index]

    def call(token, operands):
        if token is None:
            return function(*operands)
        return function(token, *operands)[1:]

    return f"{kind} #{index}", call


def _per_device(info, name: str, call):
    """The runner of a partitioned callback: once per device with the device's shards
    where the run says how the operands are sharded (``RunContext.partitioned_callbacks``,
    a global program over several devices), else once with the operands it gets."""
    if len(info.result_types) > int(_takes_token(info)):
        raise info.unsupported("a partitioned host callback returns no values (each device calls it with its "
                               "own shards; JAX refuses results for it)")
    key = id(info)
    once = callback_runner(info, name, call)
    on_device: dict = {}   # device -> the runner whose errors name it

    def run(execution, *operands):
        placed = execution.context.partitioned_callbacks
        found = None if placed is None or execution.in_grid else placed.get(key)
        if found is None:
            return once(*operands)
        num_devices, tilings = found
        for device in range(num_devices):
            if device not in on_device:
                on_device[device] = callback_runner(info, f"{name} on device {device}", call)
            results = on_device[device](*[unreduced.shard_of(value, tiling, device) if tiling is not None else value
                                          for value, tiling in zip(operands, tilings)])
        return results

    return run


def partitioned_operand_tilings(propagation, function, num_devices: int) -> dict:
    """The tiling of each operand of each partitioned callback that ``function`` runs as
    global code (not in a manual computation, whose body each device runs on its own
    values), by ``id`` of the op's OpInfo: ``(num_devices, [tiling or None])``. A tiling
    is the operand's sharding where it is made, as XLA's partitioner finds it: its
    annotation, else what Shardy's propagation gives it (``propagation``, asked only
    when there is such a callback). Empty on one device."""
    if num_devices < 2:
        return {}
    global_code = regions_within(function.region, enter=lambda step: step.info.name != "sdy.manual_computation")
    found = [(region, step) for region in global_code for step in region.steps
             if step.info.name == "stablehlo.custom_call"
             and step.info.attributes.get("call_target_name") in PARTITIONED_TARGETS]
    if not found:
        return {}
    operands = [((id(region), slot), value_type) for region, step in found
                for slot, value_type in zip(step.operands, step.info.operand_types)]
    _, _, tilings = value_tilings(propagation, function, num_devices, operands)
    placed, start = {}, 0
    for _, step in found:
        count = len(step.operands)
        placed[id(step.info)] = (num_devices, tilings[start:start + count])
        start += count
    return placed


def callback_runner(info, name: str, call):
    """The runner of a host callback op: ``call(token or None, operands)`` returns the
    callback's values (without a token); the op's leading token, if any, passes through."""
    takes_token = _takes_token(info)
    outputs = info.result_types[1:] if takes_token else info.result_types

    def run(*operands):
        token, operands = (operands[0], operands[1:]) if takes_token else (None, operands)
        try:
            values = call(token, operands)
        except Exception as error:
            raise OpExecutionError(info.name, info.location,
                                   f"the {name} raised {type(error).__name__}: {error}") from error
        results = _checked(values, outputs)
        return (TOKEN, *results) if takes_token else results

    return run


def _takes_token(info) -> bool:
    return bool(info.operand_types) and isinstance(info.operand_types[0], TokenType)


def _checked(values, types) -> list:
    values = list(values or ())
    if len(values) != len(types):
        raise RuntimeError(f"the host callback returned {len(values)} values, expected {len(types)}")
    results = []
    for index, (value, expected) in enumerate(zip(values, types)):
        array = np.asarray(value)
        if array.shape != tuple(expected.shape) or array.dtype != expected.dtype:
            raise RuntimeError(f"the host callback returned {array.dtype}{list(array.shape)} for result "
                               f"#{index}, expected {expected.dtype}{list(expected.shape)}")
        results.append(array)
    return results
