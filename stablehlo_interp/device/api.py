"""The PJRT_Api function table, implemented in Python with ctypes.

Each PJRT function ``PJRT_Error* PJRT_X(PJRT_X_Args* args)`` is a Python
function registered with ``@implements("X", PJRT_X_Args)``: it reads its inputs
from the ``args`` structure, writes its outputs into it, and raises to report
an error. :func:`build_table` wraps every function in a *thunk* (a ctypes
callback) that never lets an exception escape into C: an exception becomes a
``PJRT_Error`` carrying a code and the message (for interpreter failures, the
failing op and its source location), which JAX raises as ``JaxRuntimeError``.
Slots without an implementation return ``UNIMPLEMENTED``.

Opaque PJRT pointers (``PJRT_Client*``, ``PJRT_Buffer*`` ...) are the ``id()``
of the Python object, kept alive in ``_objects`` until the matching
``*_Destroy``. Outputs that the header says live as long as their object
(dimensions, strings, device lists) are ctypes arrays stored on that object.

Events: every computation finishes before its call returns, so events are
created complete (the header allows it); ``_COMPLETE`` is one shared event
whose ``Destroy`` does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys
from ctypes import addressof, c_int, c_int64, c_size_t, c_void_p

import numpy as np

from ..errors import InterpreterError
from . import abi, native, runtime
from .abi import API_FUNCTION, EVENT_ON_READY_CALLBACK, VOID_API_FUNCTION, PJRT_NamedValue
from .runtime import PluginError

# ---------------------------------------------------------------- handles

_objects: dict[int, object] = {}


def _handle(obj) -> int:
    """The opaque pointer handed to JAX for ``obj`` (kept alive until its Destroy)."""
    key = id(obj)
    _objects[key] = obj
    return key


def _lookup(address, kind: str):
    try:
        return _objects[address]
    except KeyError:
        raise PluginError(abi.INVALID_ARGUMENT, f"unknown or destroyed {kind} handle {address!r}") from None


def _release(address) -> None:
    _objects.pop(address, None)


class _Immortal:
    """Keeps ctypes data alive for the process (strings and arrays the header says live forever)."""

    strings: dict[str, ctypes.Array] = {}

    @classmethod
    def string(cls, text: str) -> tuple[int, int]:
        buffer = cls.strings.get(text)
        if buffer is None:
            buffer = cls.strings[text] = ctypes.create_string_buffer(text.encode())
        return addressof(buffer), len(buffer) - 1


def _c_string(owner, attribute: str, text: str) -> tuple[int, int]:
    """A C string stored on ``owner`` (lives as long as it); returns (address, size)."""
    buffer = getattr(owner, attribute, None)
    if buffer is None:
        buffer = ctypes.create_string_buffer(text.encode())
        setattr(owner, attribute, buffer)
    return addressof(buffer), len(buffer) - 1


def _pointer_array(handles) -> ctypes.Array:
    return (c_void_p * len(handles))(*handles)


# ---------------------------------------------------------------- errors

class Error:
    """A PJRT_Error: a code and a message that lives until PJRT_Error_Destroy."""

    __slots__ = ("code", "message")

    def __init__(self, code: int, text: str):
        self.code = code
        self.message = ctypes.create_string_buffer(text.encode("utf-8", "replace"))


def error_message(error: BaseException) -> str:
    if isinstance(error, (InterpreterError, PluginError)):
        return str(error)
    return f"{type(error).__name__}: {error}"


# Returned when even building an Error fails (e.g. MemoryError); never destroyed.
_FALLBACK_ERROR = Error(abi.INTERNAL, "internal error in the interp PJRT plugin")


def _error_handle(error: BaseException) -> int:
    try:
        return _handle(Error(runtime.error_code(error), error_message(error)))
    except BaseException:  # noqa: BLE001 - nothing may escape into C
        return id(_FALLBACK_ERROR)


_objects[id(_FALLBACK_ERROR)] = _FALLBACK_ERROR

# ---------------------------------------------------------------- registration of implementations

_IMPLEMENTATIONS: dict[str, tuple] = {}


def implements(name: str, args_type):
    """Register the implementation of ``PJRT_<name>``, taking a ``args_type`` structure."""

    def decorate(function):
        _IMPLEMENTATIONS[name] = (function, args_type)
        return function

    return decorate


@implements("Error_Destroy", abi.PJRT_Error_Destroy_Args)
def error_destroy(args):
    if args.error != id(_FALLBACK_ERROR):
        _release(args.error)


@implements("Error_Message", abi.PJRT_Error_Message_Args)
def error_message_of(args):
    error = _lookup(args.error, "error")
    args.message = addressof(error.message)
    args.message_size = len(error.message) - 1


@implements("Error_GetCode", abi.PJRT_Error_GetCode_Args)
def error_get_code(args):
    args.code = _lookup(args.error, "error").code


@implements("Error_ForEachPayload", abi.PJRT_Error_ForEachPayload_Args)
def error_for_each_payload(args):
    """Our errors carry no payloads: nothing to visit."""


# ---------------------------------------------------------------- plugin

def _named_values(values: dict) -> ctypes.Array:
    """A PJRT_NamedValue array for {name: str | int | bool | tuple of ints}; keeps its data alive."""
    array = (PJRT_NamedValue * len(values))()
    keep = []
    for entry, (name, value) in zip(array, values.items()):
        entry.struct_size = ctypes.sizeof(PJRT_NamedValue)
        entry.name, entry.name_size = _Immortal.string(name)
        if isinstance(value, str):
            entry.type = abi.NAMED_STRING
            entry.string_value, entry.value_size = _Immortal.string(value)
        elif isinstance(value, bool):
            entry.type, entry.bool_value, entry.value_size = abi.NAMED_BOOL, value, 1
        elif isinstance(value, int):
            entry.type, entry.int64_value, entry.value_size = abi.NAMED_INT64, value, 1
        else:
            numbers = (c_int64 * len(value))(*value)
            keep.append(numbers)
            entry.type, entry.int64_array_value, entry.value_size = abi.NAMED_INT64_LIST, addressof(numbers), len(value)
    array._keep = keep
    return array


def _version(text: str) -> tuple:
    return tuple(int(part) for part in text.split("."))


def _plugin_attributes() -> ctypes.Array:
    from jaxlib.mlir.dialects import stablehlo

    return _named_values({
        "stablehlo_current_version": _version(stablehlo.get_current_version()),
        "stablehlo_minimum_version": _version(stablehlo.get_minimum_version()),
    })


_PLUGIN_ATTRIBUTES: list = []


@implements("Plugin_Initialize", abi.Args)
def plugin_initialize(args):
    """Nothing to set up: the client is created by Client_Create."""


@implements("Plugin_Attributes", abi.PJRT_Plugin_Attributes_Args)
def plugin_attributes(args):
    if not _PLUGIN_ATTRIBUTES:
        _PLUGIN_ATTRIBUTES.append(_plugin_attributes())
    attributes = _PLUGIN_ATTRIBUTES[0]
    args.attributes, args.num_attributes = addressof(attributes), len(attributes)


# ---------------------------------------------------------------- events

class Event:
    """A completed event, successful (``error`` None) or failed."""

    __slots__ = ("error",)

    def __init__(self, error: Error | None = None):
        self.error = error


_COMPLETE = Event()
_objects[id(_COMPLETE)] = _COMPLETE
COMPLETE_EVENT = id(_COMPLETE)


def _event_error(event: Event) -> int | None:
    """A new PJRT_Error for a failed event (each caller frees its own), or NULL."""
    error = event.error
    return None if error is None else _handle(Error(error.code, error.message.value.decode("utf-8", "replace")))


@implements("Event_Destroy", abi.PJRT_Event_Destroy_Args)
def event_destroy(args):
    if args.event != COMPLETE_EVENT:
        _release(args.event)


@implements("Event_IsReady", abi.PJRT_Event_IsReady_Args)
def event_is_ready(args):
    args.is_ready = True


class _ReturnError(Exception):
    """Return this PJRT_Error from the current call (Event_Error and Event_Await report one)."""

    def __init__(self, error_handle: int):
        super().__init__()
        self.error_handle = error_handle


@implements("Event_Error", abi.PJRT_Event_Error_Args)
def event_error(args):
    error = _event_error(_lookup(args.event, "event"))
    if error is not None:
        raise _ReturnError(error)


@implements("Event_Await", abi.PJRT_Event_Error_Args)
def event_await(args):
    event_error(args)


_on_ready_callbacks: dict[int, object] = {}


@implements("Event_OnReady", abi.PJRT_Event_OnReady_Args)
def event_on_ready(args):
    """The event is complete: call back at once (the callback owns the error it gets)."""
    address = args.callback
    callback = _on_ready_callbacks.get(address)
    if callback is None:
        callback = _on_ready_callbacks[address] = EVENT_ON_READY_CALLBACK(address)
    callback(_event_error(_lookup(args.event, "event")), args.user_arg)


# ---------------------------------------------------------------- client

class ClientView:
    """The client and the C arrays that describe it."""

    def __init__(self, client: runtime.Client):
        self.client = client
        self.devices = [_handle(device) for device in client.devices]
        self.memories = [_handle(device.memory) for device in client.devices]
        self.c_devices = _pointer_array(self.devices)
        self.c_memories = _pointer_array(self.memories)
        for device, memory in zip(client.devices, self.memories):
            device.c_memories = _pointer_array([memory])
            device.memory.c_devices = _pointer_array([id(device)])


@implements("Client_Create", abi.PJRT_Client_Create_Args)
def client_create(args):
    args.client = _handle(ClientView(runtime.Client()))


@implements("Client_Destroy", abi.PJRT_Client_Destroy_Args)
def client_destroy(args):
    """Devices and memories stay: buffers and executables may still refer to them."""


@implements("Client_PlatformName", abi.PJRT_Client_PlatformName_Args)
def client_platform_name(args):
    args.platform_name, args.platform_name_size = _Immortal.string(runtime.PLATFORM_NAME)


@implements("Client_ProcessIndex", abi.PJRT_Client_ProcessIndex_Args)
def client_process_index(args):
    args.process_index = 0


def _platform_version() -> str:
    from .. import __version__

    return f"stablehlo_interp {__version__}"


@implements("Client_PlatformVersion", abi.PJRT_Client_PlatformVersion_Args)
def client_platform_version(args):
    args.platform_version, args.platform_version_size = _Immortal.string(_platform_version())


@implements("Client_Devices", abi.PJRT_Client_Devices_Args)
def client_devices(args):
    view = _lookup(args.client, "client")
    args.devices, args.num_devices = addressof(view.c_devices), len(view.devices)


@implements("Client_AddressableDevices", abi.PJRT_Client_AddressableDevices_Args)
def client_addressable_devices(args):
    view = _lookup(args.client, "client")
    args.addressable_devices, args.num_addressable_devices = addressof(view.c_devices), len(view.devices)


@implements("Client_LookupDevice", abi.PJRT_Client_LookupDevice_Args)
def client_lookup_device(args):
    args.device = id(_lookup(args.client, "client").client.lookup_device(args.id))


@implements("Client_LookupAddressableDevice", abi.PJRT_Client_LookupAddressableDevice_Args)
def client_lookup_addressable_device(args):
    args.addressable_device = id(_lookup(args.client, "client").client.lookup_device(args.local_hardware_id))


@implements("Client_AddressableMemories", abi.PJRT_Client_AddressableMemories_Args)
def client_addressable_memories(args):
    view = _lookup(args.client, "client")
    args.addressable_memories, args.num_addressable_memories = addressof(view.c_memories), len(view.memories)


@implements("Client_TopologyDescription", abi.PJRT_Client_TopologyDescription_Args)
def client_topology_description(args):
    """The topology is the client itself (jaxlib does not own, so never destroys, it)."""
    args.topology = args.client


@implements("Client_DefaultDeviceAssignment", abi.PJRT_Client_DefaultDeviceAssignment_Args)
def client_default_device_assignment(args):
    devices = _lookup(args.client, "client").client.devices
    count = args.num_replicas * args.num_partitions
    if count > len(devices) or args.default_assignment_size < count:
        raise PluginError(abi.INVALID_ARGUMENT, f"cannot assign {count} devices: there are {len(devices)}")
    assignment = (c_int * count).from_address(args.default_assignment)
    for index in range(count):
        assignment[index] = devices[index].id


@implements("Client_Compile", abi.PJRT_Client_Compile_Args)
def client_compile(args):
    view = _lookup(args.client, "client")
    program = abi.PJRT_Program.from_address(args.program)
    program_format = ctypes.string_at(program.format, program.format_size).decode()
    if program_format != "mlir":
        raise PluginError(abi.UNIMPLEMENTED, f"the interp device compiles StableHLO ('mlir') programs, "
                                             f"not {program_format!r}")
    code = ctypes.string_at(program.code, program.code_size)
    options = ctypes.string_at(args.compile_options, args.compile_options_size)
    args.executable = _handle(runtime.Executable(view.client, code, options))


@implements("Client_BufferFromHostBuffer", abi.PJRT_Client_BufferFromHostBuffer_Args)
def client_buffer_from_host_buffer(args):
    """Always copies, so the host buffer is released at once (``done_with_host_buffer`` is complete)."""
    if args.memory:
        device = _lookup(args.memory, "memory").device
    else:
        device = _lookup(args.device, "device")
    dtype = runtime.dtype_of_buffer_type(args.type)
    shape = tuple((c_int64 * args.num_dims).from_address(args.dims)) if args.num_dims else ()
    strides = tuple((c_int64 * args.num_byte_strides).from_address(args.byte_strides)) \
        if args.byte_strides and args.num_byte_strides else None
    array = runtime.array_from_host(args.data, dtype, shape, strides)
    args.buffer = _handle(runtime.Buffer(device, array))
    args.done_with_host_buffer = COMPLETE_EVENT


# ---------------------------------------------------------------- devices and descriptions
# A device is its own PJRT_DeviceDescription.

@implements("DeviceDescription_Id", abi.PJRT_DeviceDescription_Id_Args)
def device_description_id(args):
    args.id = _lookup(args.device_description, "device").id


@implements("DeviceDescription_ProcessIndex", abi.PJRT_DeviceDescription_ProcessIndex_Args)
def device_description_process_index(args):
    args.process_index = _lookup(args.device_description, "device").process_index


_NO_ATTRIBUTES = (PJRT_NamedValue * 0)()


@implements("DeviceDescription_Attributes", abi.PJRT_DeviceDescription_Attributes_Args)
def device_description_attributes(args):
    args.attributes, args.num_attributes = addressof(_NO_ATTRIBUTES), 0


@implements("DeviceDescription_Kind", abi.PJRT_DeviceDescription_Kind_Args)
def device_description_kind(args):
    args.device_kind, args.device_kind_size = _Immortal.string(_lookup(args.device_description, "device").kind)


@implements("DeviceDescription_DebugString", abi.PJRT_DeviceDescription_DebugString_Args)
def device_description_debug_string(args):
    device = _lookup(args.device_description, "device")
    args.debug_string, args.debug_string_size = _Immortal.string(device.debug_string)


@implements("DeviceDescription_ToString", abi.PJRT_DeviceDescription_ToString_Args)
def device_description_to_string(args):
    device = _lookup(args.device_description, "device")
    args.to_string, args.to_string_size = _Immortal.string(device.to_string)


@implements("Device_GetDescription", abi.PJRT_Device_GetDescription_Args)
def device_get_description(args):
    args.device_description = args.device


@implements("Device_IsAddressable", abi.PJRT_Device_IsAddressable_Args)
def device_is_addressable(args):
    args.is_addressable = True


@implements("Device_LocalHardwareId", abi.PJRT_Device_LocalHardwareId_Args)
def device_local_hardware_id(args):
    args.local_hardware_id = _lookup(args.device, "device").local_hardware_id


@implements("Device_AddressableMemories", abi.PJRT_Device_AddressableMemories_Args)
def device_addressable_memories(args):
    device = _lookup(args.device, "device")
    args.memories, args.num_memories = addressof(device.c_memories), 1


@implements("Device_DefaultMemory", abi.PJRT_Device_DefaultMemory_Args)
def device_default_memory(args):
    args.memory = id(_lookup(args.device, "device").memory)


@implements("Device_GetAttributes", abi.PJRT_Device_GetAttributes_Args)
def device_get_attributes(args):
    """No attributes; jaxlib requires a non-NULL deleter all the same."""
    args.attributes, args.num_attributes = addressof(_NO_ATTRIBUTES), 0
    args.device_attributes = None
    args.attributes_deleter = _NO_OP_DELETER_ADDRESS


@implements("Memory_Id", abi.PJRT_Memory_Id_Args)
def memory_id(args):
    args.id = _lookup(args.memory, "memory").id


@implements("Memory_Kind", abi.PJRT_Memory_Kind_Args)
def memory_kind(args):
    args.kind, args.kind_size = _Immortal.string(_lookup(args.memory, "memory").kind)


@implements("Memory_Kind_Id", abi.PJRT_Memory_Kind_Id_Args)
def memory_kind_id(args):
    args.kind_id = 0


@implements("Memory_DebugString", abi.PJRT_Memory_DebugString_Args)
def memory_debug_string(args):
    args.debug_string, args.debug_string_size = _Immortal.string(_lookup(args.memory, "memory").debug_string)


@implements("Memory_ToString", abi.PJRT_Memory_ToString_Args)
def memory_to_string(args):
    args.to_string, args.to_string_size = _Immortal.string(_lookup(args.memory, "memory").debug_string)


@implements("Memory_AddressableByDevices", abi.PJRT_Memory_AddressableByDevices_Args)
def memory_addressable_by_devices(args):
    memory = _lookup(args.memory, "memory")
    args.devices, args.num_devices = addressof(memory.c_devices), 1


# ---------------------------------------------------------------- topology (the client)

@implements("TopologyDescription_Destroy", abi.PJRT_TopologyDescription_Destroy_Args)
def topology_destroy(args):
    """The topology is the client: nothing to free."""


@implements("TopologyDescription_PlatformName", abi.PJRT_TopologyDescription_PlatformName_Args)
def topology_platform_name(args):
    args.platform_name, args.platform_name_size = _Immortal.string(runtime.PLATFORM_NAME)


@implements("TopologyDescription_PlatformVersion", abi.PJRT_TopologyDescription_PlatformVersion_Args)
def topology_platform_version(args):
    args.platform_version, args.platform_version_size = _Immortal.string(_platform_version())


@implements("TopologyDescription_GetDeviceDescriptions", abi.PJRT_TopologyDescription_GetDeviceDescriptions_Args)
def topology_get_device_descriptions(args):
    view = _lookup(args.topology, "topology")
    args.descriptions, args.num_descriptions = addressof(view.c_devices), len(view.devices)


@implements("TopologyDescription_Attributes", abi.PJRT_TopologyDescription_Attributes_Args)
def topology_attributes(args):
    args.attributes, args.num_attributes = addressof(_NO_ATTRIBUTES), 0


# ---------------------------------------------------------------- executables
# A PJRT_LoadedExecutable is a runtime.Executable; each PJRT_Executable handed out
# by GetExecutable is an ExecutableView of it, destroyed on its own.

class ExecutableView:
    __slots__ = ("executable",)

    def __init__(self, executable: runtime.Executable):
        self.executable = executable


def _executable(address) -> runtime.Executable:
    return _lookup(address, "executable").executable


@implements("Executable_Destroy", abi.PJRT_Executable_Destroy_Args)
def executable_destroy(args):
    _release(args.executable)


@implements("Executable_Name", abi.PJRT_Executable_Name_Args)
def executable_name(args):
    executable = _executable(args.executable)
    args.executable_name, args.executable_name_size = _c_string(executable, "c_name", executable.name)


@implements("Executable_NumReplicas", abi.PJRT_Executable_NumReplicas_Args)
def executable_num_replicas(args):
    args.num_replicas = _executable(args.executable).num_replicas


@implements("Executable_NumPartitions", abi.PJRT_Executable_NumPartitions_Args)
def executable_num_partitions(args):
    args.num_partitions = _executable(args.executable).num_partitions


@implements("Executable_NumOutputs", abi.PJRT_Executable_NumOutputs_Args)
def executable_num_outputs(args):
    args.num_outputs = _executable(args.executable).num_outputs


@implements("Executable_SizeOfGeneratedCodeInBytes", abi.PJRT_Executable_SizeOfGeneratedCodeInBytes_Args)
def executable_size_of_generated_code(args):
    args.size_in_bytes = 0


@implements("Executable_GetCostAnalysis", abi.PJRT_Executable_GetCostAnalysis_Args)
def executable_get_cost_analysis(args):
    args.num_properties, args.properties = 0, addressof(_NO_ATTRIBUTES)


def _output_buffer_type(output_type) -> int:
    dtype = getattr(output_type, "dtype", None)
    return abi.BUFFER_TYPE_TOKEN if dtype is None else runtime.BUFFER_TYPE_OF[dtype]


@implements("Executable_OutputElementTypes", abi.PJRT_Executable_OutputElementTypes_Args)
def executable_output_element_types(args):
    executable = _executable(args.executable)
    if not hasattr(executable, "c_output_types"):
        executable.c_output_types = (c_int * executable.num_outputs)(
            *[_output_buffer_type(t) for t in executable.output_types])
    args.output_types, args.num_output_types = addressof(executable.c_output_types), executable.num_outputs


@implements("Executable_OutputDimensions", abi.PJRT_Executable_OutputDimensions_Args)
def executable_output_dimensions(args):
    executable = _executable(args.executable)
    if not hasattr(executable, "c_output_dims"):
        shapes = [getattr(t, "shape", ()) for t in executable.output_types]
        dims = [d for shape in shapes for d in shape]
        executable.c_output_dims = (c_int64 * len(dims))(*dims)
        executable.c_output_dim_sizes = (c_size_t * len(shapes))(*map(len, shapes))
    args.num_outputs = executable.num_outputs
    args.dims, args.dim_sizes = addressof(executable.c_output_dims), addressof(executable.c_output_dim_sizes)


def _memory_kinds(executable: runtime.Executable, count: int, attribute: str):
    if not hasattr(executable, attribute):
        kind, size = _Immortal.string(runtime.MEMORY_KIND)
        setattr(executable, attribute, ((c_void_p * count)(*[kind] * count), (c_size_t * count)(*[size] * count)))
    kinds, sizes = getattr(executable, attribute)
    return addressof(kinds), addressof(sizes)


@implements("Executable_OutputMemoryKinds", abi.PJRT_Executable_OutputMemoryKinds_Args)
def executable_output_memory_kinds(args):
    executable = _executable(args.executable)
    args.num_outputs = executable.num_outputs
    args.memory_kinds, args.memory_kind_sizes = _memory_kinds(executable, executable.num_outputs,
                                                              "c_output_memory_kinds")


@implements("LoadedExecutable_Destroy", abi.PJRT_LoadedExecutable_Destroy_Args)
def loaded_executable_destroy(args):
    _release(args.executable)


@implements("LoadedExecutable_GetExecutable", abi.PJRT_LoadedExecutable_GetExecutable_Args)
def loaded_executable_get_executable(args):
    args.executable = _handle(ExecutableView(_lookup(args.loaded_executable, "executable")))


@implements("LoadedExecutable_AddressableDevices", abi.PJRT_LoadedExecutable_AddressableDevices_Args)
def loaded_executable_addressable_devices(args):
    executable = _lookup(args.executable, "executable")
    if not hasattr(executable, "c_devices"):
        executable.c_devices = _pointer_array([id(device) for device in executable.devices])
    args.addressable_devices = addressof(executable.c_devices)
    args.num_addressable_devices = len(executable.devices)


@implements("LoadedExecutable_AddressableDeviceLogicalIds",
            abi.PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args)
def loaded_executable_logical_ids(args):
    executable = _lookup(args.executable, "executable")
    if not hasattr(executable, "c_logical_ids"):
        executable.c_logical_ids = (abi.PJRT_LogicalDeviceIds * 1)(abi.PJRT_LogicalDeviceIds(0, 0))
    args.addressable_device_logical_ids = addressof(executable.c_logical_ids)
    args.num_addressable_device_logical_ids = 1


@implements("LoadedExecutable_GetDeviceAssignment", abi.PJRT_LoadedExecutable_GetDeviceAssignment_Args)
def loaded_executable_get_device_assignment(args):
    """The serialized DeviceAssignmentProto, empty for a portable executable."""
    executable = _lookup(args.executable, "executable")
    args.serialized_bytes, args.serialized_bytes_size = _c_bytes(executable, "c_device_assignment",
                                                                 executable.device_assignment)
    args.serialized_device_assignment = None
    args.serialized_device_assignment_deleter = _NO_OP_DELETER_ADDRESS


def _c_bytes(owner, attribute: str, data: bytes) -> tuple[int, int]:
    buffer = getattr(owner, attribute, None)
    if buffer is None:
        buffer = ctypes.create_string_buffer(data, len(data) + 1)
        setattr(owner, attribute, buffer)
    return addressof(buffer), len(data)


@implements("LoadedExecutable_Delete", abi.PJRT_LoadedExecutable_Destroy_Args)
def loaded_executable_delete(args):
    _lookup(args.executable, "executable").deleted = True


@implements("LoadedExecutable_IsDeleted", abi.PJRT_LoadedExecutable_IsDeleted_Args)
def loaded_executable_is_deleted(args):
    args.is_deleted = _lookup(args.executable, "executable").deleted


@implements("LoadedExecutable_Execute", abi.PJRT_LoadedExecutable_Execute_Args)
def loaded_executable_execute(args):
    executable = _lookup(args.executable, "executable")
    num_devices, num_args = args.num_devices, args.num_args
    if num_devices != 1:
        raise PluginError(abi.UNIMPLEMENTED, f"the interp device runs single-device programs only for now "
                                             f"(asked to run on {num_devices} devices)")
    argument_list = (c_void_p * num_devices).from_address(args.argument_lists)[0]
    arguments = [_lookup(address, "buffer") for address in (c_void_p * num_args).from_address(argument_list)] \
        if num_args else []
    device = _lookup(args.execute_device, "device") if args.execute_device else None
    outputs = executable.execute(arguments, device, _non_donatable(args.options))
    output_list = (c_void_p * num_devices).from_address(args.output_lists)[0]
    slots = (c_void_p * len(outputs)).from_address(output_list)
    for index, buffer in enumerate(outputs):
        slots[index] = _handle(buffer)
    if args.device_complete_events:
        (c_void_p * num_devices).from_address(args.device_complete_events)[0] = COMPLETE_EVENT


def _non_donatable(options_address) -> frozenset:
    if not options_address:
        return frozenset()
    options = abi.PJRT_ExecuteOptions.from_address(options_address)
    count = options.num_non_donatable_input_indices
    if not count:
        return frozenset()
    return frozenset((c_int64 * count).from_address(options.non_donatable_input_indices))


# ---------------------------------------------------------------- the Shardings extension

# A serialized xla.OpSharding {type: REPLICATED}: every output of a single-device program.
_REPLICATED = b"\x08\x00"


def _replicated_shardings(executable: runtime.Executable, count: int, attribute: str):
    if not hasattr(executable, attribute):
        sharding, size = _c_bytes(executable, "c_replicated", _REPLICATED)
        setattr(executable, attribute, ((c_void_p * count)(*[sharding] * count), (c_size_t * count)(*[size] * count)))
    shardings, sizes = getattr(executable, attribute)
    return addressof(shardings), addressof(sizes)


@implements("Shardings_OutputShardings", abi.PJRT_Shardings_PJRT_Executable_OutputShardings_Args)
def shardings_output_shardings(args):
    executable = _executable(args.executable)
    args.num_outputs = executable.num_outputs
    args.shardings, args.sharding_sizes = _replicated_shardings(executable, executable.num_outputs,
                                                                "c_output_shardings")


@implements("Shardings_ParameterShardings", abi.PJRT_Shardings_PJRT_Executable_ParameterShardings_Args)
def shardings_parameter_shardings(args):
    executable = _executable(args.executable)
    count = len(executable.function.arg_types)
    args.num_parameters = count
    args.shardings, args.sharding_sizes = _replicated_shardings(executable, count, "c_parameter_shardings")


# ---------------------------------------------------------------- buffers

@implements("Buffer_Destroy", abi.PJRT_Buffer_Destroy_Args)
def buffer_destroy(args):
    _release(args.buffer)


@implements("Buffer_ElementType", abi.PJRT_Buffer_ElementType_Args)
def buffer_element_type(args):
    args.type = _lookup(args.buffer, "buffer").buffer_type


def _dimensions(buffer: runtime.Buffer) -> int:
    dims = buffer.c_dims
    if dims is None:
        dims = buffer.c_dims = (c_int64 * len(buffer.shape))(*buffer.shape)
    return addressof(dims)


@implements("Buffer_Dimensions", abi.PJRT_Buffer_Dimensions_Args)
def buffer_dimensions(args):
    buffer = _lookup(args.buffer, "buffer")
    args.dims, args.num_dims = _dimensions(buffer), len(buffer.shape)


@implements("Buffer_UnpaddedDimensions", abi.PJRT_Buffer_Dimensions_Args)
def buffer_unpadded_dimensions(args):
    buffer_dimensions(args)


@implements("Buffer_DynamicDimensionIndices", abi.PJRT_Buffer_DynamicDimensionIndices_Args)
def buffer_dynamic_dimension_indices(args):
    args.dynamic_dim_indices, args.num_dynamic_dims = None, 0


_MINOR_TO_MAJOR: dict[int, ctypes.Array] = {}


@implements("Buffer_GetMemoryLayout", abi.PJRT_Buffer_GetMemoryLayout_Args)
def buffer_get_memory_layout(args):
    """Dense row-major: minor_to_major = (rank-1, ..., 0), no tiles."""
    rank = len(_lookup(args.buffer, "buffer").shape)
    order = _MINOR_TO_MAJOR.get(rank)
    if order is None:
        order = _MINOR_TO_MAJOR[rank] = (c_int64 * rank)(*range(rank - 1, -1, -1))
    layout = args.layout
    layout.struct_size = ctypes.sizeof(abi.PJRT_Buffer_MemoryLayout)
    layout.type = abi.LAYOUT_TILED
    tiled = layout.tiled
    tiled.struct_size = ctypes.sizeof(abi.PJRT_Buffer_MemoryLayout_Tiled)
    tiled.minor_to_major, tiled.minor_to_major_size = addressof(order), rank
    tiled.tile_dims, tiled.tile_dim_sizes, tiled.num_tiles = None, None, 0


@implements("Buffer_OnDeviceSizeInBytes", abi.PJRT_Buffer_OnDeviceSizeInBytes_Args)
def buffer_on_device_size(args):
    args.on_device_size_in_bytes = _lookup(args.buffer, "buffer").nbytes


@implements("Buffer_Device", abi.PJRT_Buffer_Device_Args)
def buffer_device(args):
    args.device = id(_lookup(args.buffer, "buffer").device)


@implements("Buffer_Memory", abi.PJRT_Buffer_Memory_Args)
def buffer_memory(args):
    args.memory = id(_lookup(args.buffer, "buffer").device.memory)


@implements("Buffer_Delete", abi.PJRT_Buffer_Destroy_Args)
def buffer_delete(args):
    _lookup(args.buffer, "buffer").delete()


@implements("Buffer_IsDeleted", abi.PJRT_Buffer_IsDeleted_Args)
def buffer_is_deleted(args):
    args.is_deleted = _lookup(args.buffer, "buffer").is_deleted


@implements("Buffer_IsOnCpu", abi.PJRT_Buffer_IsOnCpu_Args)
def buffer_is_on_cpu(args):
    args.is_on_cpu = False


@implements("Buffer_ReadyEvent", abi.PJRT_Buffer_ReadyEvent_Args)
def buffer_ready_event(args):
    args.event = COMPLETE_EVENT


def _copy_to(buffer_address, device: runtime.Device) -> int:
    """A copy on another device shares the (immutable) array."""
    buffer = _lookup(buffer_address, "buffer")
    return _handle(runtime.Buffer(device, buffer.array()))


@implements("Buffer_CopyToDevice", abi.PJRT_Buffer_CopyToDevice_Args)
def buffer_copy_to_device(args):
    args.dst_buffer = _copy_to(args.buffer, _lookup(args.dst_device, "device"))


@implements("Buffer_CopyToMemory", abi.PJRT_Buffer_CopyToMemory_Args)
def buffer_copy_to_memory(args):
    args.dst_buffer = _copy_to(args.buffer, _lookup(args.dst_memory, "memory").device)


def _host_bytes(buffer: runtime.Buffer, host_layout_address) -> np.ndarray:
    """The buffer as a C-contiguous array in the host layout asked for (row-major if none)."""
    array = buffer.array()
    if buffer.dtype is None:
        raise PluginError(abi.INVALID_ARGUMENT, "a token has no host representation")
    if host_layout_address:
        layout = abi.PJRT_Buffer_MemoryLayout.from_address(host_layout_address)
        rank = len(buffer.shape)
        if layout.type != abi.LAYOUT_TILED or layout.tiled.num_tiles:
            raise PluginError(abi.UNIMPLEMENTED, "only untiled host layouts are supported")
        minor_to_major = tuple((c_int64 * layout.tiled.minor_to_major_size).from_address(
            layout.tiled.minor_to_major)) if rank else ()
        major_to_minor = minor_to_major[::-1]
        if major_to_minor != tuple(range(rank)):
            array = np.transpose(array, major_to_minor)
    return np.ascontiguousarray(array)


@implements("Buffer_ToHostBuffer", abi.PJRT_Buffer_ToHostBuffer_Args)
def buffer_to_host_buffer(args):
    """With ``dst`` NULL, reports the size needed; otherwise copies and completes at once."""
    buffer = _lookup(args.src, "buffer")
    if not args.dst:
        args.dst_size = buffer.nbytes
        return
    array = _host_bytes(buffer, args.host_layout)
    if args.dst_size < array.nbytes:
        raise PluginError(abi.INVALID_ARGUMENT, f"host buffer of {args.dst_size} bytes is too small for "
                                                f"{array.nbytes} bytes")
    if array.nbytes:
        ctypes.memmove(args.dst, array.ctypes.data, array.nbytes)
    args.event = COMPLETE_EVENT


@implements("Buffer_CopyRawToHost", abi.PJRT_Buffer_CopyRawToHost_Args)
def buffer_copy_raw_to_host(args):
    buffer = _lookup(args.buffer, "buffer")
    data = _host_bytes(buffer, None).view(np.uint8).reshape(-1)
    end = args.offset + args.transfer_size
    if args.offset < 0 or end > data.size:
        raise PluginError(abi.OUT_OF_RANGE, f"bytes [{args.offset}, {end}) are outside the buffer's {data.size}")
    if args.transfer_size:
        ctypes.memmove(args.dst, data[args.offset:].ctypes.data, args.transfer_size)
    args.event = COMPLETE_EVENT


# ---------------------------------------------------------------- the table

def native_no_op() -> int:
    """A native function that ignores its argument and returns 0 (NULL): libc's ``sched_yield``.

    Used as the deleter of outputs that live as long as their object, and (see
    plugin.py) for Destroy calls that arrive while the interpreter shuts down.
    """
    return ctypes.cast(ctypes.CDLL(None).sched_yield, c_void_p).value


_NO_OP_DELETER_ADDRESS = native_no_op()
_TRACE = bool(os.environ.get("STABLEHLO_INTERP_PJRT_TRACE"))


def _thunk(name: str, function, args_type):
    """The C-callable wrapper of one implementation: returns NULL or a PJRT_Error*."""
    from_address = args_type.from_address

    def thunk(address):
        try:
            if _TRACE:
                print(f"[interp pjrt] PJRT_{name}", file=sys.stderr)
            function(from_address(address))
            return None
        except _ReturnError as returned:
            return returned.error_handle
        except BaseException as error:  # noqa: BLE001 - nothing may escape into C
            return _error_handle(error)

    return thunk


def _unimplemented(name: str):
    def thunk(address):
        if _TRACE:
            print(f"[interp pjrt] PJRT_{name} (unimplemented)", file=sys.stderr)
        return _error_handle(PluginError(abi.UNIMPLEMENTED, f"PJRT_{name} is not implemented by the interp plugin"))

    return thunk


class Table:
    """The PJRT_Api structure, its Shardings extension and every thunk they point to.

    Each slot points at the native guard of its thunk (``native.py``). The
    thunks are never freed (see ``plugin.py``): jaxlib may call them until the
    process ends.
    """

    _EXTENSION_SLOTS = ("Shardings_ParameterShardings", "Shardings_OutputShardings")

    def __init__(self):
        self.thunks = {name: self._thunk(name) for name in abi.API_SLOTS + self._EXTENSION_SLOTS}
        self.entry_points = native.guarded({name: ctypes.cast(thunk, c_void_p).value
                                            for name, thunk in self.thunks.items()})
        self.api = abi.PJRT_Api()
        self.api.struct_size = ctypes.sizeof(abi.PJRT_Api)
        self.api.pjrt_api_version.struct_size = ctypes.sizeof(abi.PJRT_Api_Version)
        self.api.pjrt_api_version.major_version = abi.API_MAJOR
        self.api.pjrt_api_version.minor_version = abi.API_MINOR
        for name in abi.API_SLOTS:
            setattr(self.api, f"PJRT_{name}", self.entry_points[name])
        self.shardings = abi.PJRT_Shardings_Extension()
        self.shardings.base.struct_size = ctypes.sizeof(abi.PJRT_Shardings_Extension)
        self.shardings.base.type = abi.EXTENSION_SHARDINGS
        for name in self._EXTENSION_SLOTS:
            setattr(self.shardings, f"PJRT_Shardings_PJRT_Executable_{name.split('_', 1)[1]}",
                    self.entry_points[name])
        self.api.extension_start = addressof(self.shardings)

    @staticmethod
    def _thunk(name: str):
        if name in _IMPLEMENTATIONS:
            function, args_type = _IMPLEMENTATIONS[name]
            python = _thunk(name, function, args_type)
        else:
            python = _unimplemented(name)
        return (VOID_API_FUNCTION if name in abi.VOID_SLOTS else API_FUNCTION)(python)

    @property
    def address(self) -> int:
        return addressof(self.api)
