"""PJRT calls about programs: compile, executables, execute, and the Shardings extension.

A ``PJRT_LoadedExecutable`` is a :class:`runtime.Executable`; each
``PJRT_Executable`` handed out by GetExecutable is an :class:`ExecutableView`
of it, destroyed on its own.
"""

from __future__ import annotations

import ctypes
from ctypes import addressof, c_int, c_int64, c_size_t, c_void_p

from . import abi
from . import interrupts
from .. import placement
from .. import runtime
from .calls import (COMPLETE_EVENT, NO_ATTRIBUTES, NO_OP_DELETER, Calls, c_bytes, handle, header_handle,
    immortal_string, lookup, objects, pointer_array, read_pointers, release, release_header, write_pointers, WORDS)
from .calls_buffers import buffer_handle, note_deletions
from ..runtime import PluginError

CALLS = Calls()


class ExecutableView:
    __slots__ = ("executable",)

    def __init__(self, executable: runtime.Executable):
        self.executable = executable


# An executable view's handle points at its header: the counts JAX asks for at every call.
HEADER_NUM_REPLICAS, HEADER_NUM_PARTITIONS, HEADER_NUM_OUTPUTS = 0, 1, 2


def view_handle(executable: runtime.Executable) -> int:
    return header_handle(ExecutableView(executable),
                         (executable.num_replicas, executable.num_partitions, executable.num_outputs))


def _executable(address) -> runtime.Executable:
    return lookup(address, "executable").executable


@CALLS.implements("Client_Compile", abi.PJRT_Client_Compile_Args)
def client_compile(args):
    """Deserialize the StableHLO portable artifact and build the interpreter's plan, once."""
    view = lookup(args.client, "client")
    program = abi.PJRT_Program.from_address(args.program)
    program_format = ctypes.string_at(program.format, program.format_size).decode()
    if program_format != "mlir":
        raise PluginError(abi.UNIMPLEMENTED,
                          f"the interp device compiles StableHLO ('mlir') programs, not {program_format!r}")
    code = ctypes.string_at(program.code, program.code_size)
    options = ctypes.string_at(args.compile_options, args.compile_options_size)
    args.executable = handle(runtime.Executable(view.client, code, options))


# ---------------------------------------------------------------- PJRT_Executable

@CALLS.implements("Executable_Destroy", abi.PJRT_Executable_Destroy_Args)
def executable_destroy(args):
    release_header(args.executable)


@CALLS.implements("Executable_Name", abi.PJRT_Executable_Name_Args)
def executable_name(args):
    executable = _executable(args.executable)
    args.executable_name, args.executable_name_size = c_bytes(executable, "c_name", executable.name.encode())


CALLS.header_getter("Executable_NumReplicas", abi.PJRT_Executable_NumReplicas_Args, "executable",
                    num_replicas=HEADER_NUM_REPLICAS)
CALLS.header_getter("Executable_NumPartitions", abi.PJRT_Executable_NumPartitions_Args, "executable",
                    num_partitions=HEADER_NUM_PARTITIONS)
CALLS.header_getter("Executable_NumOutputs", abi.PJRT_Executable_NumOutputs_Args, "executable",
                    num_outputs=HEADER_NUM_OUTPUTS)


@CALLS.implements("Executable_SizeOfGeneratedCodeInBytes", abi.PJRT_Executable_SizeOfGeneratedCodeInBytes_Args)
def executable_size_of_generated_code(args):
    args.size_in_bytes = 0


@CALLS.implements("Executable_GetCostAnalysis", abi.PJRT_Executable_GetCostAnalysis_Args)
def executable_get_cost_analysis(args):
    args.num_properties, args.properties = 0, addressof(NO_ATTRIBUTES)


def _buffer_type(output_type) -> int:
    dtype = getattr(output_type, "dtype", None)
    return abi.BUFFER_TYPE_TOKEN if dtype is None else runtime.BUFFER_TYPE_OF[dtype]


@CALLS.implements("Executable_OutputElementTypes", abi.PJRT_Executable_OutputElementTypes_Args)
def executable_output_element_types(args):
    executable = _executable(args.executable)
    if not hasattr(executable, "c_output_types"):
        types = [_buffer_type(t) for t in executable.output_types]
        executable.c_output_types = (c_int * len(types))(*types)
    args.output_types, args.num_output_types = addressof(executable.c_output_types), executable.num_outputs


@CALLS.implements("Executable_OutputDimensions", abi.PJRT_Executable_OutputDimensions_Args)
def executable_output_dimensions(args):
    executable = _executable(args.executable)
    if not hasattr(executable, "c_output_dims"):
        shapes = [getattr(t, "shape", ()) for t in executable.output_types]
        dims = [d for shape in shapes for d in shape]
        executable.c_output_dims = (c_int64 * len(dims))(*dims)
        executable.c_output_dim_sizes = (c_size_t * len(shapes))(*map(len, shapes))
    args.num_outputs = executable.num_outputs
    args.dims, args.dim_sizes = addressof(executable.c_output_dims), addressof(executable.c_output_dim_sizes)


@CALLS.implements("Executable_OutputMemoryKinds", abi.PJRT_Executable_OutputMemoryKinds_Args)
def executable_output_memory_kinds(args):
    executable = _executable(args.executable)
    args.num_outputs = executable.num_outputs
    args.memory_kinds, args.memory_kind_sizes = _string_array(
        executable, "c_output_memory_kinds", [kind.encode() for kind in executable.output_memory_kinds])


@CALLS.implements("Executable_OptimizedProgram", abi.PJRT_Executable_OptimizedProgram_Args)
def executable_optimized_program(args):
    """The program as StableHLO text (format "mlir"): the per-device program
    (``Executable.optimized_program``), for ``compiled.as_text()`` and its kin.

    Called twice: with ``code`` NULL to learn the size, then with a buffer that large.
    """
    text = _executable(args.executable).optimized_program()
    program = abi.PJRT_Program.from_address(args.program)
    program.format, program.format_size = immortal_string("mlir")
    if program.code:
        if program.code_size < len(text):
            raise PluginError(abi.INVALID_ARGUMENT, f"program buffer of {program.code_size} bytes is too small "
                                                    f"for {len(text)} bytes")
        ctypes.memmove(program.code, text, len(text))
    program.code_size = len(text)


# ---------------------------------------------------------------- the Shardings extension

@CALLS.implements("Shardings_OutputShardings", abi.PJRT_Shardings_PJRT_Executable_OutputShardings_Args)
def shardings_output_shardings(args):
    """Serialized ``xla.OpSharding`` of each output (device/placement.py). A program
    without outputs returns an empty tuple, which has a sharding of its own: jaxlib
    expects exactly that one."""
    executable = _executable(args.executable)
    shardings = executable.placement.output_shardings or [placement.REPLICATED]
    args.num_outputs = len(shardings)
    args.shardings, args.sharding_sizes = _string_array(executable, "c_output_shardings", shardings)


@CALLS.implements("Shardings_ParameterShardings", abi.PJRT_Shardings_PJRT_Executable_ParameterShardings_Args)
def shardings_parameter_shardings(args):
    executable = _executable(args.executable)
    args.num_parameters = executable.num_parameters
    args.shardings, args.sharding_sizes = _string_array(executable, "c_parameter_shardings",
                                                        executable.placement.parameter_shardings)


def _string_array(executable, attribute: str, values: list) -> tuple[int, int]:
    """Arrays of pointers to ``values`` (bytes) and of their sizes, stored on the executable."""
    if not hasattr(executable, attribute):
        strings = [ctypes.create_string_buffer(value, len(value)) for value in values]
        pointers = (c_void_p * len(values))(*[addressof(s) for s in strings])
        sizes = (c_size_t * len(values))(*map(len, values))
        setattr(executable, attribute, (strings, pointers, sizes))
    _, pointers, sizes = getattr(executable, attribute)
    return addressof(pointers), addressof(sizes)


# ---------------------------------------------------------------- PJRT_LoadedExecutable

@CALLS.implements("LoadedExecutable_Destroy", abi.PJRT_LoadedExecutable_Destroy_Args)
def loaded_executable_destroy(args):
    release(args.executable)


@CALLS.implements("LoadedExecutable_GetExecutable", abi.PJRT_LoadedExecutable_GetExecutable_Args)
def loaded_executable_get_executable(args):
    args.executable = view_handle(lookup(args.loaded_executable, "executable"))


@CALLS.implements("LoadedExecutable_AddressableDevices", abi.PJRT_LoadedExecutable_AddressableDevices_Args)
def loaded_executable_addressable_devices(args):
    executable = lookup(args.executable, "executable")
    if not hasattr(executable, "c_devices"):
        executable.c_devices = pointer_array([id(device) for device in executable.devices])
    args.addressable_devices, args.num_addressable_devices = addressof(executable.c_devices), len(executable.devices)


@CALLS.implements("LoadedExecutable_AddressableDeviceLogicalIds",
                  abi.PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args)
def loaded_executable_logical_ids(args):
    executable = lookup(args.executable, "executable")
    count = len(executable.devices)
    if not hasattr(executable, "c_logical_ids"):
        partitions = executable.num_partitions
        executable.c_logical_ids = (abi.PJRT_LogicalDeviceIds * count)(
            *[abi.PJRT_LogicalDeviceIds(i // partitions, i % partitions) for i in range(count)])
    args.addressable_device_logical_ids, args.num_addressable_device_logical_ids = \
        addressof(executable.c_logical_ids), count


@CALLS.implements("LoadedExecutable_GetDeviceAssignment", abi.PJRT_LoadedExecutable_GetDeviceAssignment_Args)
def loaded_executable_get_device_assignment(args):
    """The serialized DeviceAssignmentProto; empty for a portable executable."""
    executable = lookup(args.executable, "executable")
    args.serialized_bytes, args.serialized_bytes_size = c_bytes(executable, "c_device_assignment",
                                                                executable.device_assignment)
    args.serialized_device_assignment = None
    args.serialized_device_assignment_deleter = NO_OP_DELETER


@CALLS.implements("LoadedExecutable_Delete", abi.PJRT_LoadedExecutable_Destroy_Args)
def loaded_executable_delete(args):
    lookup(args.executable, "executable").deleted = True


@CALLS.implements("LoadedExecutable_IsDeleted", abi.PJRT_LoadedExecutable_IsDeleted_Args)
def loaded_executable_is_deleted(args):
    args.is_deleted = lookup(args.executable, "executable").deleted


@CALLS.implements("LoadedExecutable_Execute", abi.PJRT_LoadedExecutable_Execute_Args)
def loaded_executable_execute(args):
    """Run on ``num_devices`` devices, one argument list each (device/placement.py); outputs
    go into the caller's ``output_lists``, one list per device, and every event is complete.

    A run that a KeyboardInterrupt stops hands out outputs that fail with CANCELLED, and
    the KeyboardInterrupt is raised again in the caller (``interrupts.py``).

    Most calls run a program with a ``plain_region`` (one device, nothing donated; decided
    when it was compiled, runtime.Executable): they take :func:`_execute_plain`. The counts
    are checked before any list is read."""
    executable = lookup(args.executable, "executable")
    num_devices, num_args = args.num_devices, args.num_args
    if executable.plain_region is not None and num_devices == 1 and num_args == executable.num_parameters:
        _execute_plain(executable, args, num_args)
        return
    executable.check_call(num_devices, num_args)
    device = lookup(args.execute_device, "device") if args.execute_device else None
    handle_lists = [read_pointers(address, num_args) for address in read_pointers(args.argument_lists, num_devices)]
    non_donatable = _non_donatable(args.options) if executable.donated_parameters else frozenset()
    try:
        per_device = executable.execute([_buffers(handles) for handles in handle_lists], device, non_donatable)
    except runtime.Interrupted as interrupted:
        per_device = _interrupted_outputs(interrupted)
    if executable.donated_parameters:
        for handles in handle_lists:
            note_deletions(handles)
    if executable.output_types:
        for outputs, output_list in zip(per_device, read_pointers(args.output_lists, num_devices)):
            write_pointers(output_list, [buffer_handle(buffer) for buffer in outputs])
    if args.device_complete_events:
        write_pointers(args.device_complete_events, [COMPLETE_EVENT] * num_devices)


def _execute_plain(executable: runtime.Executable, args, num_args: int) -> None:
    """Execute of a program with a ``plain_region`` (``Executable.run_plain``): the path
    above without per-device lists, and with the fewest Python frames and objects (each
    costs a tenth of a microsecond of a call that costs a few; docs/device.md, "What a
    call costs"): one argument or output, the most common count, is read or written
    directly."""
    device = lookup(args.execute_device, "device") if args.execute_device else None
    first = WORDS[args.argument_lists >> 3] >> 3   # the word of the first argument's handle
    try:
        values = [objects[WORDS[first]].shared()] if num_args == 1 else \
            [objects[WORDS[word]].shared() for word in range(first, first + num_args)]
    except KeyError as unknown:
        raise _unknown_buffer(unknown.args[0]) from None
    try:
        outputs = executable.run_plain(values, device)
    except runtime.Interrupted as interrupted:
        outputs = _interrupted_outputs(interrupted)[0]
    if outputs:
        first = WORDS[args.output_lists >> 3] >> 3
        if len(outputs) == 1:
            WORDS[first] = buffer_handle(outputs[0])
        else:
            WORDS[first:first + len(outputs)] = [buffer_handle(buffer) for buffer in outputs]
    if args.device_complete_events:
        WORDS[args.device_complete_events >> 3] = COMPLETE_EVENT


def _interrupted_outputs(interrupted: runtime.Interrupted) -> list:
    """The outputs of a run a KeyboardInterrupt stopped, to hand out in place of its
    results; the KeyboardInterrupt is raised again in the caller (or, where it cannot
    be, reported as the call's error)."""
    if not interrupts.raise_in_caller():
        raise runtime.interrupted_error() from None
    return interrupted.outputs


def _buffers(handles: list) -> list:
    """The buffers of an argument list."""
    try:
        return [objects[handle] for handle in handles]
    except KeyError as unknown:
        raise _unknown_buffer(unknown.args[0]) from None


def _unknown_buffer(address: int) -> PluginError:
    return PluginError(abi.INVALID_ARGUMENT, f"unknown or destroyed buffer handle {address!r}")


def _non_donatable(options_address) -> frozenset:
    if not options_address:
        return frozenset()
    options = abi.PJRT_ExecuteOptions.from_address(options_address)
    count = options.num_non_donatable_input_indices
    if not count:
        return frozenset()
    return frozenset((c_int64 * count).from_address(options.non_donatable_input_indices))

