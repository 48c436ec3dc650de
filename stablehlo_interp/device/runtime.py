"""The device side as plain Python objects: client, devices, memories, buffers, executables.

Nothing here knows about ctypes or the PJRT function table (the ``calls_*``
modules adapt these objects to it). A buffer holds a NumPy array; an executable holds the
:class:`~stablehlo_interp.Program` that ``si.load`` built from the portable
artifact JAX compiled, and runs it with ``Program.execute``. Arrays are never
modified in place (by the interpreter's contract), so copies between devices
and donation share them freely.
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np

from ..ir import sources
from ..program import program as program_module
from ..engine.semantics import XLA, semantics_named
from ..errors import ArgumentError, ModuleError, UnsupportedOpError
from ..ir.types import TOKEN
from .pjrt import abi
from . import placement
from .pjrt import protobuf

PLATFORM_NAME = "interp"
DEVICE_KIND = "interp"
MEMORY_KIND = "device"
DEFAULT_DEVICE_COUNT = 8

# Listeners (stablehlo_interp.Listener) attached to every execution on the device.
listeners: list = []

# The semantics of programs the device compiles (docs/semantics.md): "xla", what JAX
# relies on, unless STABLEHLO_INTERP_SEMANTICS says "spec".
SEMANTICS_VARIABLE = "STABLEHLO_INTERP_SEMANTICS"


def device_semantics() -> str:
    return semantics_named(os.environ.get(SEMANTICS_VARIABLE, XLA))


class PluginError(Exception):
    """An error to report to JAX as a PJRT_Error with this code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def error_code(error: BaseException) -> int:
    """The PJRT_Error_Code for an exception raised while serving a call."""
    if isinstance(error, PluginError):
        return error.code
    if isinstance(error, KeyboardInterrupt):
        return abi.CANCELLED
    if isinstance(error, (UnsupportedOpError, NotImplementedError)):
        return abi.UNIMPLEMENTED
    if isinstance(error, (ArgumentError, ModuleError, TypeError, ValueError)):
        return abi.INVALID_ARGUMENT
    return abi.INTERNAL


def _dtype(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name, None) or name)


DTYPES: dict[int, np.dtype] = {code: _dtype(name) for code, name in abi.BUFFER_TYPES.items()}
BUFFER_TYPE_OF: dict[np.dtype, int] = {dtype: code for code, dtype in DTYPES.items()}


def dtype_of_buffer_type(code: int) -> np.dtype:
    try:
        return DTYPES[code]
    except KeyError:
        raise PluginError(abi.INVALID_ARGUMENT, f"unsupported PJRT buffer type {code}") from None


class Memory:
    """The one memory space of a device (kind ``"device"``)."""

    def __init__(self, device: "Device"):
        self.device = device
        self.id = device.id
        self.kind = MEMORY_KIND
        self.debug_string = f"InterpMemory(device={device.id}, kind={MEMORY_KIND})"


class Device:
    def __init__(self, client: "Client", device_id: int):
        self.client = client
        self.id = device_id
        self.local_hardware_id = device_id
        self.process_index = 0
        self.kind = DEVICE_KIND
        self.debug_string = f"INTERP_{device_id}"
        self.to_string = f"InterpDevice(id={device_id})"
        self.memory = Memory(self)


class Buffer:
    """A device array: a NumPy array (or the token) on a device, until deleted."""

    __slots__ = ("device", "value", "dtype", "shape", "c_dims", "exposed")

    def __init__(self, device: Device, value):
        self.device = device
        self.value = value
        if value is TOKEN:
            self.dtype, self.shape = None, ()
        else:
            self.dtype, self.shape = value.dtype, value.shape
        self.c_dims = None   # the int64 array Buffer_Dimensions hands out, made on first use
        self.exposed = False   # its data address was handed out: the array may change under us

    @property
    def buffer_type(self) -> int:
        return abi.BUFFER_TYPE_TOKEN if self.dtype is None else BUFFER_TYPE_OF[self.dtype]

    @property
    def is_deleted(self) -> bool:
        return self.value is None

    def delete(self) -> None:
        self.value = None

    def array(self):
        value = self.value
        if value is None:
            raise _deleted()
        return value

    def shared(self):
        """The array for a program or another buffer to hold: the same one, unless the
        user may write to it (then a copy)."""
        value = self.value
        if value is None:
            raise _deleted()
        return value.copy() if self.exposed else value

    def data_address(self) -> int:
        """The address of the buffer's data, dense and row-major, for the user to read
        or write (``unsafe_buffer_pointer``). Arrays are shared between buffers and with
        programs, so the buffer first takes its own copy, and from then on hands out
        copies (:meth:`shared`): writes reach this buffer alone."""
        if self.dtype is None:
            raise PluginError(abi.INVALID_ARGUMENT, "a token has no data")
        if not self.exposed:
            self.value = np.array(self.array(), order="C")
            self.exposed = True
        return self.value.ctypes.data

    @property
    def nbytes(self) -> int:
        return 0 if self.dtype is None else int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def _deleted() -> PluginError:
    return PluginError(abi.FAILED_PRECONDITION, "the buffer has been deleted or donated to an earlier computation")


class Executable:
    """A compiled program: the interpreter's plan plus what JAX asks about it."""

    def __init__(self, client: "Client", code: bytes, options: bytes):
        self.client = client
        build = protobuf.compile_options(options)
        self.num_replicas = build.num_replicas
        self.num_partitions = build.num_partitions
        if build.device_ids:
            self.devices = [client.lookup_device(device_id) for device_id in build.device_ids]
            self.device_assignment = build.device_assignment
        elif self.num_replicas * self.num_partitions == 1:   # a portable executable: Execute names the device
            self.devices = [client.devices[0]]
            self.device_assignment = b""
        else:
            raise PluginError(abi.INVALID_ARGUMENT, "a multi-device program needs a device assignment")
        self.program = program_module.load(sources.parse(code, trusted=True),  # JAX's own bytecode
                                           semantics=device_semantics())
        self.name = self.program.name or "main"
        self.function = self.program.function(self.program.entry_name)
        self.output_types = self.function.result_types
        self.donated_parameters = _donated_parameters(self.function)
        self.placement = placement.placement(self.program, self.function, self.num_replicas, self.num_partitions,
                                             build.spmd)
        self.deleted = False

    @property
    def num_outputs(self) -> int:
        return len(self.output_types)

    @property
    def num_parameters(self) -> int:
        return len(self.function.arg_types)

    def execute(self, argument_lists: list, device: Device | None, non_donatable: frozenset) -> list:
        """Run the program on one list of argument buffers per device (in the order of
        ``devices``); returns one list of output buffers per device."""
        if self.deleted:
            raise PluginError(abi.FAILED_PRECONDITION, "the executable has been deleted")
        if len(argument_lists) != len(self.devices):
            raise PluginError(abi.INVALID_ARGUMENT, f"the program runs on {len(self.devices)} device(s), "
                                                    f"got arguments for {len(argument_lists)}")
        values = []
        for arguments in argument_lists:
            values.append([buffer.shared() for buffer in arguments])
        results = self.placement.run(values, listeners)
        if self.donated_parameters:
            for arguments in argument_lists:
                for index in self.donated_parameters:
                    if index not in non_donatable:
                        arguments[index].delete()
        per_device = []
        for target, outputs in zip([device] if device is not None else self.devices, results):
            per_device.append([Buffer(target, value) for value in outputs])
        return per_device


def _donated_parameters(function) -> tuple:
    """Parameters JAX donated: ``tf.aliasing_output`` or ``jax.buffer_donor`` on the argument."""
    return tuple(index for index, attributes in enumerate(function.arg_attributes)
                 if "tf.aliasing_output" in attributes or attributes.get("jax.buffer_donor"))


class Client:
    """The simulated platform: ``STABLEHLO_INTERP_DEVICES`` devices, all in this process."""

    def __init__(self):
        count = device_count()
        self.devices = [Device(self, i) for i in range(count)]

    def lookup_device(self, device_id: int) -> Device:
        if 0 <= device_id < len(self.devices):
            return self.devices[device_id]
        raise PluginError(abi.INVALID_ARGUMENT,
                          f"no interp device with id {device_id} (there are {len(self.devices)})")


def device_count() -> int:
    text = os.environ.get("STABLEHLO_INTERP_DEVICES", "")
    try:
        count = int(text) if text.strip() else DEFAULT_DEVICE_COUNT
    except ValueError:
        count = DEFAULT_DEVICE_COUNT
    return max(1, count)

