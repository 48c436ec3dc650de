"""JAX's platforms as backends: a module compiled by a PJRT client (XLA's CPU,
a GPU, a plugin's platform such as ``interp``)."""

from __future__ import annotations

import functools
import os
import pickle

import numpy as np

from ..ir.child_process import ERROR, ChildDied, ChildProcess
from ..ir.decode import load_quant_dialect
from ..ir.sources import host_callbacks_of
from ..ir.types import Token
from ..judge.precision import declared_precision
from ..program.calls import lower_for, missing_platform, platform_devices
from .errors import BackendCompileError, BackendCrash, BackendError


class JaxBackend:
    """Compile and run modules with one of JAX's backends (XLA's PJRT clients).

    A module that calls host callbacks is run with the Python functions they call
    (``host_callbacks``, in the order of their ``index``): what :meth:`lower` returns
    with the module. A token argument is passed as JAX passes one (an empty array)."""

    def __init__(self, platform: str = "cpu"):
        self.platform = platform
        self.name = platform

    @property
    def precision(self):
        """What the platform declares of its arithmetic beyond the spec's rounding
        (judge/precision.py; None for XLA's CPU, which keeps the spec's)."""
        return declared_precision(self.platform)

    @property
    def settings(self) -> tuple:
        """XLA's flags that the environment sets (``XLA_FLAGS``), but the number of
        host devices: the others can change numerics (``--xla_cpu_enable_fast_math``)."""
        flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split()
                 if flag.partition("=")[0] not in DEVICE_COUNT_FLAGS]
        return tuple(f"XLA flag {flag}" for flag in flags)

    def __call__(self, module_text: str, args, host_callbacks: tuple = ()) -> list:
        import jax

        self._check_platform()
        try:
            executable = _compile(self.platform, module_text, tuple(host_callbacks))
        except Exception as error:  # XLA's compiler rejected the program: its message
            raise BackendCompileError(self.name, str(error)) from error
        try:
            return execute(executable, jax.devices(self.platform)[0], args)
        except Exception as error:  # e.g. a runtime check of XLA's
            raise BackendError(self.name, str(error)) from error

    def run_per_device(self, module_text: str, per_device_args: list, host_callbacks: tuple = ()) -> list | None:
        """Each device's results (``[d][i]``) of a module over ``len(per_device_args)``
        partitions, as XLA runs it: partitioned by XLA for that many of this platform's
        devices (partition ``d`` on the ``d``-th) and run on each device's own arguments
        (``per_device_args[d]``, its shards). None where the platform has fewer devices."""
        import jax

        self._check_platform()
        count = len(per_device_args)
        devices = jax.devices(self.platform)[:count]
        if len(devices) < count:
            return None
        try:
            executable = _compile(self.platform, module_text, tuple(host_callbacks), count)
        except Exception as error:  # XLA's compiler rejected the program: its message
            raise BackendCompileError(self.name, str(error)) from error
        try:
            return execute_per_device(executable, devices, per_device_args)
        except Exception as error:
            raise BackendError(self.name, str(error)) from error

    def _check_platform(self) -> None:
        if not platform_devices(self.platform):
            raise BackendCompileError(self.name, f"{missing_platform(self.platform)}; or run it with "
                                      f"JaxChildBackend({self.platform!r}), XLA in a child process of its own, "
                                      "where a program without host callbacks runs")

    def lower(self, traced) -> tuple[str, tuple]:
        """A ``jax.stages.Traced`` lowered for this platform: the module's text (with
        locations) and the host callbacks it calls (program/calls.py's ``lower_for``)."""
        from jax._src import xla_bridge

        lowered = lower_for(traced, xla_bridge.canonicalize_platform(self.platform))
        return lowered.as_text(debug_info=True), host_callbacks_of(lowered)


class JaxChildBackend:
    """A JAX platform in a child process of its own whose XLA reads ``xla_flags`` (the
    whole of its ``XLA_FLAGS``; XLA reads them once per process, when JAX initializes:
    backends/jax_child.py). A flag XLA does not know aborts the child: a
    :class:`BackendCrash` whose message gives XLA's last words ("Unknown flag in
    XLA_FLAGS: ..."); so does any other abort of XLA's, and a program that has not run
    within ``timeout`` seconds (its child killed). The child lives until :meth:`close`
    (or the end of this process). It cannot call host callbacks. ``name``: how reports
    name it (by default the platform and its flags)."""

    def __init__(self, platform: str = "cpu", xla_flags: str = "", timeout: float = 600.0, name: str | None = None):
        self.platform_name, self.xla_flags, self.timeout = platform, " ".join(xla_flags.split()), timeout
        self.name = name or (f"{platform} (XLA_FLAGS={self.xla_flags})" if self.xla_flags else platform)
        # JAX_PLATFORMS: the child starts the platform it runs, whatever order its parent's lists
        self._child = ChildProcess(f"{__package__}.jax_child", {"XLA_FLAGS": self.xla_flags, "JAX_PLATFORMS": platform})

    @property
    def settings(self) -> tuple:
        return tuple(f"XLA flag {flag}" for flag in self.xla_flags.split()
                     if flag.partition("=")[0] not in DEVICE_COUNT_FLAGS)

    def __call__(self, module_text: str, args) -> list:
        return self._ask(module_text, [_buffer(value) for value in args], per_device=False)

    def run_per_device(self, module_text: str, per_device_args: list, host_callbacks: tuple = ()) -> list | None:
        """:meth:`JaxBackend.run_per_device` in the child (whose XLA_FLAGS give it its
        devices: ``--xla_force_host_platform_device_count`` for the CPU's)."""
        if host_callbacks:
            raise BackendCompileError(self.name, "a child process of its own cannot call this process's host callbacks")
        return self._ask(module_text, [[_buffer(value) for value in device] for device in per_device_args],
                         per_device=True)

    def _ask(self, module_text: str, arguments: list, per_device: bool):
        request = pickle.dumps((self.platform_name, module_text, arguments, per_device))
        try:
            status, payload = self._child.ask(request, self.timeout)
        except ChildDied as died:
            raise BackendCrash(self.name, str(died)) from None
        if status == ERROR:
            kind, message = payload.decode("utf-8").split(":", 1)   # jax_child.Refused
            raise (BackendCompileError if kind == "compile" else BackendError)(self.name, message)
        return pickle.loads(payload)

    def close(self) -> None:
        """End the child (a later call starts another)."""
        self._child.close()


DEVICE_COUNT_FLAGS = {"--xla_force_host_platform_device_count"}


def with_host_devices(xla_flags: str, count: int) -> str:
    """``xla_flags`` with XLA's CPU made of ``count`` host devices (any count it gave replaced)."""
    kept = [flag for flag in xla_flags.split() if flag.partition("=")[0] not in DEVICE_COUNT_FLAGS]
    return " ".join([*kept, f"--xla_force_host_platform_device_count={count}"])


def execute(executable, device, args) -> list:
    """A compiled program's results on ``args`` on ``device``."""
    import jax

    # the module's types as written: without x64, JAX would hand an f64 or i64 argument over as 32 bits
    with jax.enable_x64(True):
        return [_value(out) for out in executable.execute([jax.device_put(_buffer(a), device) for a in args])]


def execute_per_device(executable, devices: list, per_device_args: list) -> list:
    """A program compiled for ``len(devices)`` partitions run on each device's own
    arguments (``per_device_args[d]``); each device's results (``[d][i]``)."""
    import jax

    everywhere = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(devices), ("devices",)),
                                            jax.sharding.PartitionSpec())
    with jax.enable_x64(True):   # the module's types as written (see execute)
        arrays = [jax.make_array_from_single_device_arrays(
            np.shape(_buffer(per_device_args[0][index])), everywhere,
            [jax.device_put(_buffer(arguments[index]), device) for arguments, device in zip(per_device_args, devices)])
            for index in range(len(per_device_args[0]))]
        returned = executable.execute_sharded(arrays).disassemble_into_single_device_arrays()
    return [[_value(output[device]) for output in returned] for device in range(len(devices))]
_TOKEN_BUFFER = np.zeros(0, np.bool_)   # what JAX passes for a token (jax/_src/dispatch.py)


def _buffer(argument):
    return _TOKEN_BUFFER if isinstance(argument, Token) else np.asarray(argument)


def _value(out):
    # a token comes back as an empty bool array that cannot be read: any empty bool array is this one
    return _TOKEN_BUFFER if out.shape == (0,) and out.dtype == np.bool_ else np.asarray(out)


def _default_layouts(module) -> None:
    """Ask for ``@main``'s arguments and results in the default (row-major) layout where the
    module leaves them open (``mhlo.layout_mode``): a compiler free to choose gave a TPU's
    transpose a column-major result, which the executable's raw ``execute`` handed back
    in that order, read as row-major (a prefix's every transposed value, permuted)."""
    from jaxlib.mlir import ir

    for operation in module.body.operations:
        if operation.operation.name != "func.func" or ir.StringAttr(operation.attributes["sym_name"]).value != "main":
            continue
        function_type = ir.FunctionType(ir.TypeAttr(operation.attributes["function_type"]).value)
        for key, count in (("arg_attrs", len(function_type.inputs)), ("res_attrs", len(function_type.results))):
            existing = list(ir.ArrayAttr(operation.attributes[key])) if key in operation.attributes else \
                [ir.DictAttr.get({})] * count
            updated = []
            for attributes in existing:
                entries = {named.name: named.attr for named in ir.DictAttr(attributes)}  # type: ignore[attr-defined]
                entries.setdefault("mhlo.layout_mode", ir.StringAttr.get("default"))
                updated.append(ir.DictAttr.get(entries))
            operation.attributes[key] = ir.ArrayAttr.get(updated)


@functools.lru_cache(maxsize=32)
def _compile(platform: str, module_text: str, host_callbacks: tuple = (), partitions: int = 1, overrides: tuple = ()):
    """The module compiled for ``partitions`` devices of the platform; ``overrides``: XLA
    options ``(name, value)`` for this compile (``env_option_overrides``, e.g. its dump options)."""
    from jax._src import compiler, xla_bridge
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client
    from jaxlib.mlir import ir

    backend = xla_bridge.get_backend(platform)
    with mlir.make_ir_context() as context:
        load_quant_dialect(context)   # for modules with !quant.uniform types
        module = ir.Module.parse(module_text)
        _default_layouts(module)
        chosen = backend.local_devices()[:partitions]
        options = compiler.get_compile_options(num_replicas=1, num_partitions=partitions,
                                               device_assignment=np.array([[d.id for d in chosen]]))
        options.env_option_overrides = list(overrides)
        devices = xla_client.DeviceList(tuple(chosen))
        if host_callbacks:
            return backend.compile_and_load(module, devices, options, host_callbacks=list(host_callbacks))
        return backend.compile_and_load(module, devices, options)
