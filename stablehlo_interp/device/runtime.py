"""The device side as plain Python objects: client, devices, memories, buffers, executables.

Nothing here knows about ctypes or the PJRT function table (the ``calls_*``
modules adapt these objects to it). A buffer holds a NumPy array; an executable holds the
:class:`~stablehlo_interp.Program` that ``si.load`` built from the portable
artifact JAX compiled, and runs it with ``Program.execute``. Arrays are never
modified in place (by the interpreter's contract), so copies between devices
and donation share them freely.
"""

from __future__ import annotations

import ctypes
import math
import threading
import os

import ml_dtypes
import numpy as np

from ..ir import edit, sources
from ..sharding import partition
from ..sharding import tiling as sharding
from ..program import program as program_module
from ..engine.run import Execution, RunContext
from ..engine.semantics import XLA, semantics_named
from ..errors import ArgumentError, ModuleError, UnsupportedOpError
from ..ir.types import TOKEN, TensorType
from .pjrt import abi
from . import compiler_options, layouts, placement
from .pjrt import protobuf

DEVICE_KIND = "interp"
# A device's memories, as XLA's CPU has them: the default first. A buffer in any of
# them is the same NumPy array; the kind is what JAX sees (``.sharding.memory_kind``).
MEMORY_KINDS = ("device", "pinned_host", "unpinned_host")
DEFAULT_DEVICE_COUNT = 8

# Listeners (stablehlo_interp.Listener) attached to every execution on the device (each
# run takes a snapshot: RunContext's tuple). si.on_device changes the list under the lock,
# so that blocks entered and left on several threads neither lose nor leave a listener.
listeners: list = []
listeners_lock = threading.Lock()

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
    """A memory space of a device, of one of the :data:`MEMORY_KINDS`."""

    def __init__(self, device: "Device", kind: str):
        self.device = device
        self.kind_id = MEMORY_KINDS.index(kind)
        self.id = device.id * len(MEMORY_KINDS) + self.kind_id
        self.kind = kind
        self.debug_string = f"InterpMemory(device={device.id}, kind={kind})"


class Device:
    def __init__(self, client: "Client", device_id: int):
        self.client = client
        self.id = device_id
        self.local_hardware_id = device_id
        self.process_index = 0
        self.kind = DEVICE_KIND
        self.debug_string = f"INTERP_{device_id}"
        self.to_string = f"InterpDevice(id={device_id})"
        self.memories = [Memory(self, kind) for kind in MEMORY_KINDS]
        self.memory = self.memories[0]   # the default
        self.memory_of_kind = {memory.kind: memory for memory in self.memories}


def laid_out(array: np.ndarray, layout: tuple | None) -> np.ndarray:
    """``array`` (the same logical value) with its memory dense in ``layout``'s order
    (a minor_to_major; None: row-major)."""
    if layout is None:
        return np.array(array, order="C")
    order = layouts.major_to_minor(layout)
    return np.ascontiguousarray(np.transpose(array, order)).transpose(np.argsort(order))


def in_memory_order(array: np.ndarray, layout: tuple | None) -> np.ndarray:
    """A view of ``array`` whose C order is ``layout``'s order: its C-order bytes are the
    bytes of a buffer of that layout."""
    return array if layout is None else np.transpose(array, layouts.major_to_minor(layout))


class Buffer:
    """A device array: a NumPy array (or the token) in a memory of a device (its
    default one unless given), until deleted. ``layout`` is where its elements are
    in memory (a minor_to_major, device/layouts.py; None: dense row-major): the
    array is the logical value whatever the layout, and the layout decides the
    order of its bytes wherever they leave the buffer (:meth:`hold`,
    :meth:`data_address`, pjrt/calls_buffers.py's copies to the host)."""

    # c_dimensions: the C array of its shape that its PJRT header points to (pjrt/calls_buffers.py)
    __slots__ = ("device", "memory", "value", "dtype", "shape", "layout", "exposed", "external_references", "held",
                 "c_dimensions")
    c_dimensions: ctypes.Array

    def __init__(self, device: Device, value, memory: Memory | None = None, layout: tuple | None = None):
        self.device = device
        self.memory = memory or device.memory
        self.layout = layout
        self.value = value
        if value is TOKEN:
            self.dtype, self.shape = None, ()
        else:
            self.dtype, self.shape = value.dtype, value.shape
        self.exposed = False   # its data address was handed out: the array may change under us
        self.external_references = 0
        self.held = None   # the arrays external references hold (see hold), made on first use

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

    def hold(self) -> np.ndarray:
        """The array, dense in the buffer's layout, held for an external reference: JAX
        reads a buffer in place (``np.asarray`` of an array on the device is a read-only
        view of this memory, as on XLA's CPU, which reads it in the buffer's layout).
        The array stays alive until :meth:`release_hold`, even if the buffer is deleted
        or donated meanwhile."""
        array = self.array()
        if self.dtype is None:
            raise PluginError(abi.INVALID_ARGUMENT, "a token has no data")
        if type(array) is not np.ndarray or not in_memory_order(array, self.layout).flags.c_contiguous:   # (not a subclass)
            array = self.value = laid_out(array, self.layout)   # the same value, dense
        self.external_references += 1
        if self.held is None:
            self.held = []
        if not self.held or self.held[-1] is not array:
            self.held.append(array)
        return array

    def release_hold(self) -> None:
        """End an external reference (:meth:`hold`). A release does not say which reference
        ends, so the arrays are kept until the last one does."""
        if not self.external_references:
            raise PluginError(abi.FAILED_PRECONDITION, "the buffer has no external reference to release")
        self.external_references -= 1
        if not self.external_references:
            self.held = None

    def data_address(self) -> int:
        """The address of the buffer's data, dense in its layout, for the user to read
        or write (``unsafe_buffer_pointer``). Arrays are shared between buffers and with
        programs, so the buffer first takes its own copy, and from then on hands out
        copies (:meth:`shared`): writes reach this buffer alone."""
        if self.dtype is None:
            raise PluginError(abi.INVALID_ARGUMENT, "a token has no data")
        if not self.exposed:
            self.value = laid_out(self.array(), self.layout)
            self.exposed = True
        return self.value.ctypes.data

    @property
    def nbytes(self) -> int:
        return 0 if self.dtype is None else math.prod(self.shape) * self.dtype.itemsize


class InterruptedBuffer(Buffer):
    """An output of a run that a KeyboardInterrupt stopped: it has the output's type but no
    value, and every use of it fails with CANCELLED (see :class:`Interrupted`)."""

    __slots__ = ()

    def __init__(self, device: Device, value_type, memory: Memory):
        super().__init__(device, np.empty((0,), value_type.dtype) if isinstance(value_type, TensorType) else TOKEN,
                         memory)
        if self.dtype is not None:
            self.shape = value_type.shape

    def array(self):
        raise interrupted_error()

    shared = array

    def data_address(self) -> int:
        raise interrupted_error()

    @property
    def nbytes(self) -> int:
        return 0


def interrupted_error() -> PluginError:
    return PluginError(abi.CANCELLED, "KeyboardInterrupt: the computation of this array was interrupted")


class Interrupted(Exception):
    """A KeyboardInterrupt stopped a run. ``outputs`` are its outputs, one list per
    device, as :class:`InterruptedBuffer`: JAX gets them instead of an error, and the
    KeyboardInterrupt itself is raised again once control is back in Python
    (``calls.interrupt_after_return``), so the user sees ``KeyboardInterrupt`` as on
    the CPU, not a ``JaxRuntimeError``."""

    def __init__(self, outputs: list):
        super().__init__("KeyboardInterrupt")
        self.outputs = outputs


def _executable_deleted() -> PluginError:
    return PluginError(abi.FAILED_PRECONDITION, "the executable has been deleted")


def _deleted() -> PluginError:
    return PluginError(abi.FAILED_PRECONDITION, "the buffer has been deleted or donated to an earlier computation")


class Executable:
    """A compiled program: the interpreter's plan plus what JAX asks about it."""

    def __init__(self, client: "Client", code: bytes, options: bytes):
        self.client = client
        build = protobuf.compile_options(options)
        ours = dict(build.option_overrides).get(placement.SPMD_OPTION)
        unacceptable = compiler_options.problem(tuple((name, value) for name, value in build.option_overrides
                                                      if name != placement.SPMD_OPTION))
        if unacceptable:
            raise PluginError(abi.INVALID_ARGUMENT, unacceptable)
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
                                           semantics=device_semantics(),
                                           partition_callback=program_module.jax_partition_callback)
        self.name = self.program.name or "main"
        self.function = self.program.function(self.program.entry_name)
        self.output_types = self.function.result_types
        self.output_memory_kinds = tuple(_memory_kind(attributes) for attributes in self.function.result_attributes)
        # The layouts of parameters and outputs (minor_to_major), as the program asks
        # (mhlo.layout_mode), for JAX; each output buffer's (None: row-major). Outputs
        # are plain when they are all in the default memory and row-major.
        self.parameter_layouts, self.output_layouts = layouts.assign(self.function)
        self.output_buffer_layouts = tuple(None if layout == layouts.row_major(len(layout)) else layout
                                           for layout in self.output_layouts)
        self.outputs_plain = set(self.output_memory_kinds) <= {MEMORY_KINDS[0]} and \
            not any(self.output_buffer_layouts)
        self.num_parameters = len(self.function.arg_types)
        self.placement = placement.placement(self.program, self.function, self.num_replicas, self.num_partitions,
                                             build.spmd, placement.spmd_mode(ours))
        self.donated_parameters = _donated_parameters(self.function, self.placement)
        # The common call, decided here once: a program on one device that donates nothing
        # and runs its entry region as it is (Program.plain_region) is run by run_plain,
        # around the placement layer; None sends every call through execute.
        self.plain_region = self.program.plain_region(self.function) \
            if len(self.devices) == 1 and not self.donated_parameters else None
        self.deleted = False
        self._program_text: bytes | None = None   # see optimized_program

    @property
    def num_outputs(self) -> int:
        return len(self.output_types)

    def optimized_program(self) -> bytes:
        """The program text XLA's ``PJRT_Executable_OptimizedProgram`` hands over: the
        per-device program (:meth:`per_device_program_text`). Only ``compiled.as_text()``
        and its kin ask for it: jaxlib learns layouts through the Layouts extension
        (pjrt/calls_layouts.py), so compiling never makes it."""
        if self._program_text is None:
            self._program_text = self.per_device_program_text().encode()
        return self._program_text

    def per_device_program_text(self) -> str:
        """The program each device runs, as XLA shows it: for a program on several devices
        with Shardy meshes, the one Shardy's partitioner makes (sharding/partition/); when it
        cannot, the global program with a note saying why (the module's frontend attribute
        ``interp.per_device_program``)."""
        if len(self.devices) > 1 and self.program.meshes:
            try:
                return partition.per_device_program(self.program.module)
            except partition.PartitionError as why:
                return self.global_program_text({"interp.per_device_program": f"not made ({why}); this is the "
                                                                               "global program, which the "
                                                                               "interpreter runs"})
        return self.global_program_text()

    def global_program_text(self, notes: dict[str, str] | None = None) -> str:
        """The program the interpreter runs, with Shardy's sharding constraints and reshards
        as HLO's ``Sharding`` custom calls: XLA's StableHLO-to-HLO converter refuses ``sdy``
        ops. ``notes`` become frontend attributes of the module."""
        meshes, count = self.program.meshes, len(self.devices)

        def hlo_sharding(text: str) -> str:
            return sharding.parse_sharding(text, meshes).tiling().hlo_text(count)

        return edit.as_hlo_convertible(str(self.program.module), hlo_sharding, notes)

    def check_call(self, num_devices: int, num_args: int) -> None:
        """An Execute call's counts, checked before anything reads its lists: the program's
        devices, and its parameters per device."""
        if num_devices != len(self.devices):
            raise PluginError(abi.INVALID_ARGUMENT, f"the program runs on {len(self.devices)} device(s), "
                                                    f"got arguments for {num_devices}")
        if num_args != self.num_parameters:
            raise PluginError(abi.INVALID_ARGUMENT, f"the program takes {self.num_parameters} argument(s) per "
                                                    f"device, got {num_args}")

    def execute(self, argument_lists: list, device: Device | None, non_donatable: frozenset) -> list:
        """Run the program on one list of argument buffers per device (in the order of
        ``devices``; :meth:`check_call` first); returns one list of output buffers per device."""
        if self.deleted:
            raise _executable_deleted()
        donated = self.donated_parameters - non_donatable
        if donated:
            for index, arguments in enumerate(argument_lists):
                self._check_donations(arguments, donated, index)
        targets = [device] if device is not None else self.devices
        values = [[buffer.shared() for buffer in arguments] for arguments in argument_lists]
        try:
            results = self.placement.run(values, listeners)
        except KeyboardInterrupt:
            raise self._interrupted(targets) from None
        if donated:   # as on XLA's CPU, a buffer read in place (held) is not given up
            for arguments in argument_lists:
                for index in donated:
                    if not arguments[index].external_references:
                        arguments[index].delete()
        return [self._output_buffers(target, outputs) for target, outputs in zip(targets, results)]

    def run_plain(self, values: list, device: Device | None) -> list:
        """:meth:`execute` of a program with a ``plain_region`` (most calls) on the arrays of
        its arguments (``Buffer.shared``), without per-device lists and around the
        placement layer (each frame saved is a tenth of a microsecond of a call that
        costs a few; docs/device.md, "What a call costs"); returns the output buffers."""
        if self.deleted:
            raise _executable_deleted()
        target = device or self.devices[0]
        try:   # (positional: keywords cost a tenth of a microsecond here)
            results = Execution(RunContext(listeners, None, None, self.program.semantics)).run_entry(
                self.plain_region, values)
        except KeyboardInterrupt:
            raise self._interrupted([target]) from None
        return self._output_buffers(target, results)

    def _interrupted(self, targets: list) -> Interrupted:
        return Interrupted([[InterruptedBuffer(target, value_type, target.memory_of_kind[kind])
                             for value_type, kind in zip(types, self.output_memory_kinds)]
                            for target, types in zip(targets, self.placement.result_types())])

    def _output_buffers(self, target: Device, outputs: list) -> list:
        if self.outputs_plain:
            return [Buffer(target, outputs[0])] if len(outputs) == 1 else [Buffer(target, value) for value in outputs]
        return [Buffer(target, value, target.memory_of_kind[kind], layout)
                for value, kind, layout in zip(outputs, self.output_memory_kinds, self.output_buffer_layouts)]

    def _check_donations(self, arguments: list, donated: frozenset, device_index: int) -> None:
        """A buffer donated to a call cannot also be another of its arguments (XLA's rule
        and message, so that the error is the CPU's)."""
        first_use: dict[int, int] = {}
        for index, buffer in enumerate(arguments):
            first = first_use.setdefault(id(buffer), index)
            if first == index:
                continue
            if first in donated:
                problem, example = "use a buffer that was previously donated in", "f(donate(a), a)"
            elif index in donated:
                problem, example = "donate a buffer which is also used by", "f(a, donate(a))"
            else:
                continue
            replica, partition = divmod(device_index, self.num_partitions)
            raise PluginError(abi.INVALID_ARGUMENT,
                              f"Attempt to {problem} the same call to Execute() (flattened argument {index}, "
                              f"replica {replica}, partition {partition}, first use: {first}). Toy example for "
                              f"this bug: `{example}`.")


def _memory_kind(result_attributes: dict) -> str:
    """The memory an output goes to: ``mhlo.memory_kind`` (JAX's ``out_shardings``,
    ``compute_on``), by default the device's."""
    kind = result_attributes.get("mhlo.memory_kind", MEMORY_KINDS[0])
    if kind not in MEMORY_KINDS:
        raise PluginError(abi.INVALID_ARGUMENT, f"the program puts a result in memory kind {kind!r}; the interp "
                                                f"device has {', '.join(MEMORY_KINDS)}")
    return kind


def _byte_size(value_type) -> int | None:
    """A value's size in bytes (None for a token, which no buffer holds)."""
    if not isinstance(value_type, TensorType):
        return None
    return math.prod(value_type.shape) * value_type.dtype.itemsize


def _donated_parameters(function, where: placement.Placement) -> frozenset:
    """Parameters a call gives up: those JAX aliased with a result (``tf.aliasing_output``),
    and each ``jax.buffer_donor`` that a result can take over. JAX marks donors so when the
    compiler is to decide (a program over several devices); XLA then pairs each result with
    the first unpaired donor of its per-device size in bytes and memory kind (a shard of
    (8, 1) takes over one of (8,); ``OptimizeInputOutputBufferAlias``), and a donor left
    unpaired is not donated: it stays alive after the call (JAX warns that it was not
    usable)."""
    attributes = function.arg_attributes
    aliased = {index for index, these in enumerate(attributes) if "tf.aliasing_output" in these}
    taken = {int(attributes[index]["tf.aliasing_output"]) for index in aliased}
    donors = [index for index, these in enumerate(attributes) if these.get("jax.buffer_donor") and index not in aliased]
    if not donors:
        return frozenset(aliased)
    parameters = [(_byte_size(t), _memory_kind(a)) for t, a in zip(where.parameter_types()[0], attributes)]
    results = [(_byte_size(t), _memory_kind(a)) for t, a in zip(where.result_types()[0], function.result_attributes)]
    for result, wanted in enumerate(results):
        match = next((d for d in donors if parameters[d] == wanted), None) if result not in taken else None
        if match is not None:
            donors.remove(match)
            aliased.add(match)
    return frozenset(aliased)


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

