"""PJRT calls about the platform: errors, events, the plugin, the client, devices, memories.

A device is its own ``PJRT_DeviceDescription``; the client is its own
``PJRT_TopologyDescription`` (jaxlib does not own that one, so never destroys it).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
from ctypes import addressof, c_int, c_int64

from . import abi
from . import native
from .. import runtime
from .abi import EVENT_ON_READY_CALLBACK, PJRT_NamedValue
from .calls import (FALLBACK_ERROR, SHARED_EVENTS, NO_ATTRIBUTES, NO_OP_DELETER, Calls, Error, ReturnError, handle,
    header_handle, immortal_string, lookup, objects, pointer_array, release)
from ..runtime import PluginError
from ...program.calls import INTERP_PLATFORM

CALLS = Calls()

# ---------------------------------------------------------------- errors


# jaxlib destroys the error of every event it waits for, NULL when the event did not fail.
@CALLS.implements("Error_Destroy", abi.PJRT_Error_Destroy_Args, native.WhenNull("error"))
def error_destroy(args):
    if args.error != id(FALLBACK_ERROR):
        release(args.error)


@CALLS.implements("Error_Message", abi.PJRT_Error_Message_Args)
def error_message(args):
    error = lookup(args.error, "error")
    args.message, args.message_size = addressof(error.message), len(error.message) - 1


@CALLS.implements("Error_GetCode", abi.PJRT_Error_GetCode_Args)
def error_get_code(args):
    args.code = lookup(args.error, "error").code


@CALLS.implements("Error_ForEachPayload", abi.PJRT_Error_ForEachPayload_Args)
def error_for_each_payload(args):
    """Our errors carry no payloads: nothing to visit."""


# ---------------------------------------------------------------- plugin

def named_values(values: dict) -> ctypes.Array:
    """A PJRT_NamedValue array for {name: str | bool | int | tuple of ints}; keeps its data alive."""
    array = (PJRT_NamedValue * len(values))()
    keep = []
    for entry, (name, value) in zip(array, values.items()):
        entry.struct_size = ctypes.sizeof(PJRT_NamedValue)
        entry.name, entry.name_size = immortal_string(name)
        if isinstance(value, str):
            entry.type = abi.NAMED_STRING
            entry.string_value, entry.value_size = immortal_string(value)
        elif isinstance(value, bool):
            entry.type, entry.bool_value, entry.value_size = abi.NAMED_BOOL, value, 1
        elif isinstance(value, int):
            entry.type, entry.int64_value, entry.value_size = abi.NAMED_INT64, value, 1
        else:
            numbers = (c_int64 * len(value))(*value)
            keep.append(numbers)
            entry.type, entry.int64_array_value, entry.value_size = abi.NAMED_INT64_LIST, addressof(numbers), len(value)
    array.keep = keep
    return array


def _version(text: str) -> tuple:
    return tuple(int(part) for part in text.split("."))


_plugin_attributes: list = []


@CALLS.implements("Plugin_Initialize", abi.Args)
def plugin_initialize(args):
    """Nothing to set up: Client_Create builds the client."""


@CALLS.implements("Plugin_Attributes", abi.PJRT_Plugin_Attributes_Args)
def plugin_attributes(args):
    """The StableHLO versions JAX serializes for: jaxlib's own."""
    if not _plugin_attributes:
        from jaxlib.mlir.dialects import stablehlo

        _plugin_attributes.append(named_values({
            "stablehlo_current_version": _version(stablehlo.get_current_version()),
            "stablehlo_minimum_version": _version(stablehlo.get_minimum_version()),
        }))
    attributes = _plugin_attributes[0]
    args.attributes, args.num_attributes = addressof(attributes), len(attributes)


# ---------------------------------------------------------------- events

def _event_error(event) -> int | None:
    """A new PJRT_Error for a failed event (each caller frees its own), or NULL."""
    error = event.error
    return None if error is None else handle(Error(error.code, error.text))


@CALLS.implements("Event_Destroy", abi.PJRT_Event_Destroy_Args, native.CompleteEvent())
def event_destroy(args):
    if args.event not in SHARED_EVENTS:
        release(args.event)


CALLS.constant_getter("Event_IsReady", abi.PJRT_Event_IsReady_Args, is_ready=1)   # every event is complete


@CALLS.implements("Event_Error", abi.PJRT_Event_Error_Args, native.CompleteEvent())
def event_error(args):
    error = _event_error(lookup(args.event, "event"))
    if error is not None:
        raise ReturnError(error)


@CALLS.implements("Event_Await", abi.PJRT_Event_Error_Args, native.CompleteEvent())
def event_await(args):
    event_error(args)


_on_ready_callbacks: dict[int, object] = {}   # by jaxlib's callback function: a handful in a process


@CALLS.implements("Event_OnReady", abi.PJRT_Event_OnReady_Args, native.CompleteEvent(on_ready=True))
def event_on_ready(args):
    """The event is complete: call back at once (the callback owns the error it gets)."""
    address = args.callback
    callback = _on_ready_callbacks.get(address)
    if callback is None:
        callback = _on_ready_callbacks[address] = EVENT_ON_READY_CALLBACK(address)
    callback(_event_error(lookup(args.event, "event")), args.user_arg)


# ---------------------------------------------------------------- client

class ClientView:
    """The client and the C arrays that describe it (they live as long as the client)."""

    def __init__(self, client: runtime.Client):
        self.client = client
        self.devices = [handle(device) for device in client.devices]
        self.memories = []
        for device in client.devices:
            for memory in device.memories:
                memory.handle = memory_handle(memory)
                memory.c_devices = pointer_array([id(device)])
                self.memories.append(memory.handle)
            device.c_memories = pointer_array([memory.handle for memory in device.memories])
        self.c_devices = pointer_array(self.devices)
        self.c_memories = pointer_array(self.memories)


def _package_version() -> str:
    """The installed distribution's version (pyproject.toml's); a source tree that was
    never installed has none."""
    try:
        return importlib.metadata.version("stablehlo-interp")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# Part of the topology fingerprint, so JAX's compilation cache never serves one version's
# executables to another.
PLATFORM_VERSION = f"stablehlo_interp {_package_version()}"


@CALLS.implements("Client_Create", abi.PJRT_Client_Create_Args)
def client_create(args):
    args.client = handle(ClientView(runtime.Client()))


@CALLS.implements("Client_Destroy", abi.PJRT_Client_Destroy_Args)
def client_destroy(args):
    """Devices and memories stay: buffers and executables may still refer to them."""


@CALLS.implements("Client_PlatformName", abi.PJRT_Client_PlatformName_Args)
def client_platform_name(args):
    args.platform_name, args.platform_name_size = immortal_string(INTERP_PLATFORM)


@CALLS.implements("Client_ProcessIndex", abi.PJRT_Client_ProcessIndex_Args)
def client_process_index(args):
    args.process_index = 0


@CALLS.implements("Client_PlatformVersion", abi.PJRT_Client_PlatformVersion_Args)
def client_platform_version(args):
    args.platform_version, args.platform_version_size = immortal_string(PLATFORM_VERSION)


@CALLS.implements("Client_Devices", abi.PJRT_Client_Devices_Args)
def client_devices(args):
    view = lookup(args.client, "client")
    args.devices, args.num_devices = addressof(view.c_devices), len(view.devices)


@CALLS.implements("Client_AddressableDevices", abi.PJRT_Client_AddressableDevices_Args)
def client_addressable_devices(args):
    view = lookup(args.client, "client")
    args.addressable_devices, args.num_addressable_devices = addressof(view.c_devices), len(view.devices)


@CALLS.implements("Client_LookupDevice", abi.PJRT_Client_LookupDevice_Args)
def client_lookup_device(args):
    args.device = id(lookup(args.client, "client").client.lookup_device(args.id))


@CALLS.implements("Client_LookupAddressableDevice", abi.PJRT_Client_LookupAddressableDevice_Args)
def client_lookup_addressable_device(args):
    args.addressable_device = id(lookup(args.client, "client").client.lookup_device(args.local_hardware_id))


@CALLS.implements("Client_AddressableMemories", abi.PJRT_Client_AddressableMemories_Args)
def client_addressable_memories(args):
    view = lookup(args.client, "client")
    args.addressable_memories, args.num_addressable_memories = addressof(view.c_memories), len(view.memories)


@CALLS.implements("Client_TopologyDescription", abi.PJRT_Client_TopologyDescription_Args)
def client_topology_description(args):
    args.topology = args.client


@CALLS.implements("Client_DefaultDeviceAssignment", abi.PJRT_Client_DefaultDeviceAssignment_Args)
def client_default_device_assignment(args):
    devices = lookup(args.client, "client").client.devices
    count = args.num_replicas * args.num_partitions
    if count > len(devices) or args.default_assignment_size < count:
        raise PluginError(abi.INVALID_ARGUMENT, f"cannot assign {count} devices: there are {len(devices)}")
    assignment = (c_int * count).from_address(args.default_assignment)
    for index in range(count):
        assignment[index] = devices[index].id


# ---------------------------------------------------------------- devices

@CALLS.implements("DeviceDescription_Id", abi.PJRT_DeviceDescription_Id_Args)
def device_description_id(args):
    args.id = lookup(args.device_description, "device").id


@CALLS.implements("DeviceDescription_ProcessIndex", abi.PJRT_DeviceDescription_ProcessIndex_Args)
def device_description_process_index(args):
    args.process_index = lookup(args.device_description, "device").process_index


@CALLS.implements("DeviceDescription_Attributes", abi.PJRT_DeviceDescription_Attributes_Args)
def device_description_attributes(args):
    args.attributes, args.num_attributes = addressof(NO_ATTRIBUTES), 0


@CALLS.implements("DeviceDescription_Kind", abi.PJRT_DeviceDescription_Kind_Args)
def device_description_kind(args):
    args.device_kind, args.device_kind_size = immortal_string(lookup(args.device_description, "device").kind)


@CALLS.implements("DeviceDescription_DebugString", abi.PJRT_DeviceDescription_DebugString_Args)
def device_description_debug_string(args):
    device = lookup(args.device_description, "device")
    args.debug_string, args.debug_string_size = immortal_string(device.debug_string)


@CALLS.implements("DeviceDescription_ToString", abi.PJRT_DeviceDescription_ToString_Args)
def device_description_to_string(args):
    device = lookup(args.device_description, "device")
    args.to_string, args.to_string_size = immortal_string(device.to_string)


@CALLS.implements("Device_GetDescription", abi.PJRT_Device_GetDescription_Args)
def device_get_description(args):
    args.device_description = args.device


@CALLS.implements("Device_IsAddressable", abi.PJRT_Device_IsAddressable_Args)
def device_is_addressable(args):
    args.is_addressable = True


@CALLS.implements("Device_LocalHardwareId", abi.PJRT_Device_LocalHardwareId_Args)
def device_local_hardware_id(args):
    args.local_hardware_id = lookup(args.device, "device").local_hardware_id


@CALLS.implements("Device_AddressableMemories", abi.PJRT_Device_AddressableMemories_Args)
def device_addressable_memories(args):
    device = lookup(args.device, "device")
    args.memories, args.num_memories = addressof(device.c_memories), len(device.memories)


@CALLS.implements("Device_DefaultMemory", abi.PJRT_Device_DefaultMemory_Args)
def device_default_memory(args):
    args.memory = lookup(args.device, "device").memory.handle


@CALLS.implements("Device_MemoryStats", abi.PJRT_Device_MemoryStats_Args)
def device_memory_stats(args):
    """Bytes held by the device's live buffers (counted on request: nothing is tracked per call).

    jaxlib does not clear the structure, so every optional statistic is marked unset.
    """
    device = lookup(args.device, "device")
    buffers = [obj for obj in list(objects.values())
               if isinstance(obj, runtime.Buffer) and obj.device is device and not obj.is_deleted]
    for name, _ in abi.PJRT_Device_MemoryStats_Args._fields_[1:]:
        setattr(args, name, 0)
    args.bytes_in_use = sum(buffer.nbytes for buffer in buffers)
    args.num_allocs, args.num_allocs_is_set = len(buffers), True


@CALLS.implements("Device_GetAttributes", abi.PJRT_Device_GetAttributes_Args)
def device_get_attributes(args):
    """No attributes; jaxlib requires a non-NULL deleter all the same."""
    args.attributes, args.num_attributes = addressof(NO_ATTRIBUTES), 0
    args.device_attributes = None
    args.attributes_deleter = NO_OP_DELETER


# ---------------------------------------------------------------- memories

@CALLS.implements("Memory_Id", abi.PJRT_Memory_Id_Args)
def memory_id(args):
    args.id = lookup(args.memory, "memory").id


# A memory handle points at its header: its kind, as a C string and its size.
HEADER_KIND, HEADER_KIND_SIZE = 0, 1


def memory_handle(memory: runtime.Memory) -> int:
    return header_handle(memory, immortal_string(memory.kind))


CALLS.header_getter("Memory_Kind", abi.PJRT_Memory_Kind_Args, "memory", kind=HEADER_KIND, kind_size=HEADER_KIND_SIZE)


@CALLS.implements("Memory_Kind_Id", abi.PJRT_Memory_Kind_Id_Args)
def memory_kind_id(args):
    args.kind_id = lookup(args.memory, "memory").kind_id


@CALLS.implements("Memory_DebugString", abi.PJRT_Memory_DebugString_Args)
def memory_debug_string(args):
    args.debug_string, args.debug_string_size = immortal_string(lookup(args.memory, "memory").debug_string)


@CALLS.implements("Memory_ToString", abi.PJRT_Memory_ToString_Args)
def memory_to_string(args):
    args.to_string, args.to_string_size = immortal_string(lookup(args.memory, "memory").debug_string)


@CALLS.implements("Memory_AddressableByDevices", abi.PJRT_Memory_AddressableByDevices_Args)
def memory_addressable_by_devices(args):
    args.devices, args.num_devices = addressof(lookup(args.memory, "memory").c_devices), 1


# ---------------------------------------------------------------- topology (the client)

@CALLS.implements("TopologyDescription_Destroy", abi.PJRT_TopologyDescription_Destroy_Args)
def topology_destroy(args):
    """The topology is the client: nothing to free."""


@CALLS.implements("TopologyDescription_PlatformName", abi.PJRT_TopologyDescription_PlatformName_Args)
def topology_platform_name(args):
    args.platform_name, args.platform_name_size = immortal_string(INTERP_PLATFORM)


@CALLS.implements("TopologyDescription_PlatformVersion", abi.PJRT_TopologyDescription_PlatformVersion_Args)
def topology_platform_version(args):
    args.platform_version, args.platform_version_size = immortal_string(PLATFORM_VERSION)


@CALLS.implements("TopologyDescription_GetDeviceDescriptions", abi.PJRT_TopologyDescription_GetDeviceDescriptions_Args)
def topology_get_device_descriptions(args):
    view = lookup(args.topology, "topology")
    args.descriptions, args.num_descriptions = addressof(view.c_devices), len(view.devices)


@CALLS.implements("TopologyDescription_Attributes", abi.PJRT_TopologyDescription_Attributes_Args)
def topology_attributes(args):
    args.attributes, args.num_attributes = addressof(NO_ATTRIBUTES), 0


@CALLS.implements("TopologyDescription_Fingerprint", abi.PJRT_TopologyDescription_Fingerprint_Args)
def topology_fingerprint(args):
    """Identifies the platform and its device count (part of JAX's compilation cache key)."""
    view = lookup(args.topology, "topology")
    text = f"{INTERP_PLATFORM}/{PLATFORM_VERSION}/{len(view.devices)}".encode()
    args.fingerprint = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")
