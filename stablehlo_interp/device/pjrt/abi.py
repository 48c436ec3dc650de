"""The binary layout of the PJRT C API (version 0.102) that the plugin speaks, in ctypes.

Written by hand from ``xla/pjrt/c/pjrt_c_api.h``,
``pjrt_c_api_shardings_extension.h`` and ``pjrt_c_api_layouts_extension.h``;
``tests/test_device_abi.py`` checks every structure below (size and field
offsets) against the layout gcc gives the header on 64-bit Linux.

Every PJRT function has the C signature ``PJRT_Error* F(F_Args* args)``: it
reads its inputs from, and writes its outputs into, an ``*_Args`` structure
that the caller owns. Each such structure starts with ``struct_size`` and
``extension_start`` (the :class:`Args` base class). All pointers are declared
``c_void_p``: the plugin handles addresses as integers.
"""

from __future__ import annotations

import ctypes
from ctypes import c_bool, c_float, c_int, c_int64, c_size_t, c_uint64, c_void_p

API_MAJOR = 0
API_MINOR = 102

# enum PJRT_Error_Code
OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT = 0, 1, 2, 3
NOT_FOUND, FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED, INTERNAL = 5, 9, 11, 12, 13

# enum PJRT_Extension_Type
EXTENSION_LAYOUTS, EXTENSION_SHARDINGS = 4, 19

# enum PJRT_NamedValue_Type
NAMED_STRING, NAMED_INT64, NAMED_INT64_LIST, NAMED_FLOAT, NAMED_BOOL = range(5)

# enum PJRT_Buffer_MemoryLayout_Type
LAYOUT_TILED, LAYOUT_STRIDES = 0, 1

# enum PJRT_Buffer_Type -> NumPy dtype name (ml_dtypes for the narrow floats and ints)
BUFFER_TYPES = {
    1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64",
    6: "uint8", 7: "uint16", 8: "uint32", 9: "uint64",
    10: "float16", 11: "float32", 12: "float64", 13: "bfloat16",
    14: "complex64", 15: "complex128",
    16: "float8_e5m2", 17: "float8_e4m3fn", 18: "float8_e4m3b11fnuz",
    19: "float8_e5m2fnuz", 20: "float8_e4m3fnuz",
    21: "int4", 22: "uint4", 24: "int2", 25: "uint2",
    26: "float8_e4m3", 27: "float8_e3m4", 28: "float8_e8m0fnu", 29: "float4_e2m1fn",
}
BUFFER_TYPE_TOKEN = 23

# Function pointer types.
API_FUNCTION = ctypes.CFUNCTYPE(c_void_p, c_void_p)          # PJRT_Error* F(F_Args*)
VOID_API_FUNCTION = ctypes.CFUNCTYPE(None, c_void_p)          # void F(F_Args*), also deleters
EVENT_ON_READY_CALLBACK = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)   # (PJRT_Error*, user_arg)
ERROR_PAYLOAD_VISITOR = ctypes.CFUNCTYPE(None, c_void_p, c_size_t, c_void_p, c_size_t, c_void_p)


class Args(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p)]


class PJRT_Extension_Base(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("type", c_int), ("next", c_void_p)]


class PJRT_Api_Version(Args):
    _fields_ = [("major_version", c_int), ("minor_version", c_int)]


class _NamedValueUnion(ctypes.Union):
    _fields_ = [("string_value", c_void_p), ("int64_value", c_int64), ("int64_array_value", c_void_p),
                ("float_value", c_float), ("bool_value", c_bool)]


class PJRT_NamedValue(Args):
    _anonymous_ = ("value",)
    _fields_ = [("name", c_void_p), ("name_size", c_size_t), ("type", c_int),
                ("value", _NamedValueUnion), ("value_size", c_size_t)]


# ---------------------------------------------------------------- errors, plugin, events

class PJRT_Error_Destroy_Args(Args):
    _fields_ = [("error", c_void_p)]


class PJRT_Error_Message_Args(Args):
    _fields_ = [("error", c_void_p), ("message", c_void_p), ("message_size", c_size_t)]


class PJRT_Error_GetCode_Args(Args):
    _fields_ = [("error", c_void_p), ("code", c_int)]


class PJRT_Error_ForEachPayload_Args(Args):
    _fields_ = [("error", c_void_p), ("visitor", c_void_p), ("user_arg", c_void_p)]


class PJRT_Plugin_Attributes_Args(Args):
    _fields_ = [("attributes", c_void_p), ("num_attributes", c_size_t)]


class PJRT_Event_Destroy_Args(Args):
    _fields_ = [("event", c_void_p)]


class PJRT_Event_IsReady_Args(Args):
    _fields_ = [("event", c_void_p), ("is_ready", c_bool)]


class PJRT_Event_Error_Args(Args):          # also PJRT_Event_Await_Args
    _fields_ = [("event", c_void_p)]


class PJRT_Event_OnReady_Args(Args):
    _fields_ = [("event", c_void_p), ("callback", c_void_p), ("user_arg", c_void_p)]


class PJRT_Event_Create_Args(Args):
    _fields_ = [("event", c_void_p)]


class PJRT_Event_Set_Args(Args):
    _fields_ = [("event", c_void_p), ("error_code", c_int), ("error_message", c_void_p),
                ("error_message_size", c_size_t)]


# ---------------------------------------------------------------- client

class PJRT_Client_Create_Args(Args):
    _fields_ = [("create_options", c_void_p), ("num_options", c_size_t),
                ("kv_get_callback", c_void_p), ("kv_get_user_arg", c_void_p),
                ("kv_put_callback", c_void_p), ("kv_put_user_arg", c_void_p),
                ("client", c_void_p),
                ("kv_try_get_callback", c_void_p), ("kv_try_get_user_arg", c_void_p)]


class PJRT_Client_Destroy_Args(Args):
    _fields_ = [("client", c_void_p)]


class PJRT_Client_PlatformName_Args(Args):
    _fields_ = [("client", c_void_p), ("platform_name", c_void_p), ("platform_name_size", c_size_t)]


class PJRT_Client_ProcessIndex_Args(Args):
    _fields_ = [("client", c_void_p), ("process_index", c_int)]


class PJRT_Client_PlatformVersion_Args(Args):
    _fields_ = [("client", c_void_p), ("platform_version", c_void_p),
                ("platform_version_size", c_size_t)]


class PJRT_Client_TopologyDescription_Args(Args):
    _fields_ = [("client", c_void_p), ("topology", c_void_p)]


class PJRT_Client_Devices_Args(Args):
    _fields_ = [("client", c_void_p), ("devices", c_void_p), ("num_devices", c_size_t)]


class PJRT_Client_AddressableDevices_Args(Args):
    _fields_ = [("client", c_void_p), ("addressable_devices", c_void_p),
                ("num_addressable_devices", c_size_t)]


class PJRT_Client_LookupDevice_Args(Args):
    _fields_ = [("client", c_void_p), ("id", c_int), ("device", c_void_p)]


class PJRT_Client_LookupAddressableDevice_Args(Args):
    _fields_ = [("client", c_void_p), ("local_hardware_id", c_int), ("addressable_device", c_void_p)]


class PJRT_Client_AddressableMemories_Args(Args):
    _fields_ = [("client", c_void_p), ("addressable_memories", c_void_p),
                ("num_addressable_memories", c_size_t)]


class PJRT_Program(Args):
    _fields_ = [("code", c_void_p), ("code_size", c_size_t), ("format", c_void_p),
                ("format_size", c_size_t)]


class PJRT_Client_Compile_Args(Args):
    _fields_ = [("client", c_void_p), ("program", c_void_p), ("compile_options", c_void_p),
                ("compile_options_size", c_size_t), ("executable", c_void_p)]


class PJRT_Client_DefaultDeviceAssignment_Args(Args):
    _fields_ = [("client", c_void_p), ("num_replicas", c_int), ("num_partitions", c_int),
                ("default_assignment_size", c_size_t), ("default_assignment", c_void_p)]


class PJRT_Buffer_MemoryLayout_Tiled(Args):
    _fields_ = [("minor_to_major", c_void_p), ("minor_to_major_size", c_size_t),
                ("tile_dims", c_void_p), ("tile_dim_sizes", c_void_p), ("num_tiles", c_size_t)]


class PJRT_Buffer_MemoryLayout_Strides(Args):
    _fields_ = [("byte_strides", c_void_p), ("num_byte_strides", c_size_t)]


class _MemoryLayoutUnion(ctypes.Union):
    _fields_ = [("tiled", PJRT_Buffer_MemoryLayout_Tiled), ("strides", PJRT_Buffer_MemoryLayout_Strides)]


class PJRT_Buffer_MemoryLayout(Args):
    _anonymous_ = ("layout",)
    _fields_ = [("layout", _MemoryLayoutUnion), ("type", c_int)]


class PJRT_Client_BufferFromHostBuffer_Args(Args):
    _fields_ = [("client", c_void_p), ("data", c_void_p), ("type", c_int),
                ("dims", c_void_p), ("num_dims", c_size_t),
                ("byte_strides", c_void_p), ("num_byte_strides", c_size_t),
                ("host_buffer_semantics", c_int), ("device", c_void_p), ("memory", c_void_p),
                ("device_layout", c_void_p), ("done_with_host_buffer", c_void_p), ("buffer", c_void_p)]


# ---------------------------------------------------------------- devices and memories

class PJRT_DeviceDescription_Id_Args(Args):
    _fields_ = [("device_description", c_void_p), ("id", c_int)]


class PJRT_DeviceDescription_ProcessIndex_Args(Args):
    _fields_ = [("device_description", c_void_p), ("process_index", c_int)]


class PJRT_DeviceDescription_Attributes_Args(Args):
    _fields_ = [("device_description", c_void_p), ("num_attributes", c_size_t), ("attributes", c_void_p)]


class PJRT_DeviceDescription_Kind_Args(Args):
    _fields_ = [("device_description", c_void_p), ("device_kind", c_void_p), ("device_kind_size", c_size_t)]


class PJRT_DeviceDescription_DebugString_Args(Args):
    _fields_ = [("device_description", c_void_p), ("debug_string", c_void_p),
                ("debug_string_size", c_size_t)]


class PJRT_DeviceDescription_ToString_Args(Args):
    _fields_ = [("device_description", c_void_p), ("to_string", c_void_p), ("to_string_size", c_size_t)]


class PJRT_Device_GetDescription_Args(Args):
    _fields_ = [("device", c_void_p), ("device_description", c_void_p)]


class PJRT_Device_IsAddressable_Args(Args):
    _fields_ = [("device", c_void_p), ("is_addressable", c_bool)]


class PJRT_Device_LocalHardwareId_Args(Args):
    _fields_ = [("device", c_void_p), ("local_hardware_id", c_int)]


class PJRT_Device_AddressableMemories_Args(Args):
    _fields_ = [("device", c_void_p), ("memories", c_void_p), ("num_memories", c_size_t)]


class PJRT_Device_DefaultMemory_Args(Args):
    _fields_ = [("device", c_void_p), ("memory", c_void_p)]


class PJRT_Device_MemoryStats_Args(Args):
    _fields_ = [("device", c_void_p), ("bytes_in_use", c_int64)] + [
        field for name in ("peak_bytes_in_use", "num_allocs", "largest_alloc_size", "bytes_limit",
                           "bytes_reserved", "peak_bytes_reserved", "bytes_reservable_limit",
                           "largest_free_block_bytes", "pool_bytes", "peak_pool_bytes")
        for field in ((name, c_int64), (f"{name}_is_set", c_bool))]


class PJRT_Device_GetAttributes_Args(Args):
    _fields_ = [("device", c_void_p), ("attributes", c_void_p), ("num_attributes", c_size_t),
                ("device_attributes", c_void_p), ("attributes_deleter", c_void_p)]


class PJRT_Memory_Id_Args(Args):
    _fields_ = [("memory", c_void_p), ("id", c_int)]


class PJRT_Memory_Kind_Args(Args):
    _fields_ = [("memory", c_void_p), ("kind", c_void_p), ("kind_size", c_size_t)]


class PJRT_Memory_Kind_Id_Args(Args):
    _fields_ = [("memory", c_void_p), ("kind_id", c_int)]


class PJRT_Memory_DebugString_Args(Args):
    _fields_ = [("memory", c_void_p), ("debug_string", c_void_p), ("debug_string_size", c_size_t)]


class PJRT_Memory_ToString_Args(Args):
    _fields_ = [("memory", c_void_p), ("to_string", c_void_p), ("to_string_size", c_size_t)]


class PJRT_Memory_AddressableByDevices_Args(Args):
    _fields_ = [("memory", c_void_p), ("devices", c_void_p), ("num_devices", c_size_t)]


# ---------------------------------------------------------------- topology

class PJRT_TopologyDescription_Destroy_Args(Args):
    _fields_ = [("topology", c_void_p)]


class PJRT_TopologyDescription_PlatformName_Args(Args):
    _fields_ = [("topology", c_void_p), ("platform_name", c_void_p), ("platform_name_size", c_size_t)]


class PJRT_TopologyDescription_PlatformVersion_Args(Args):
    _fields_ = [("topology", c_void_p), ("platform_version", c_void_p),
                ("platform_version_size", c_size_t)]


class PJRT_TopologyDescription_GetDeviceDescriptions_Args(Args):
    _fields_ = [("topology", c_void_p), ("descriptions", c_void_p), ("num_descriptions", c_size_t)]


class PJRT_TopologyDescription_Attributes_Args(Args):
    _fields_ = [("topology", c_void_p), ("attributes", c_void_p), ("num_attributes", c_size_t)]


class PJRT_TopologyDescription_Fingerprint_Args(Args):
    _fields_ = [("topology", c_void_p), ("fingerprint", c_uint64)]


# ---------------------------------------------------------------- executables

class PJRT_Executable_Destroy_Args(Args):
    _fields_ = [("executable", c_void_p)]


class PJRT_Executable_Name_Args(Args):
    _fields_ = [("executable", c_void_p), ("executable_name", c_void_p), ("executable_name_size", c_size_t)]


class PJRT_Executable_NumReplicas_Args(Args):
    _fields_ = [("executable", c_void_p), ("num_replicas", c_size_t)]


class PJRT_Executable_NumPartitions_Args(Args):
    _fields_ = [("executable", c_void_p), ("num_partitions", c_size_t)]


class PJRT_Executable_NumOutputs_Args(Args):
    _fields_ = [("executable", c_void_p), ("num_outputs", c_size_t)]


class PJRT_Executable_SizeOfGeneratedCodeInBytes_Args(Args):
    _fields_ = [("executable", c_void_p), ("size_in_bytes", c_int64)]


class PJRT_Executable_GetCostAnalysis_Args(Args):
    _fields_ = [("executable", c_void_p), ("num_properties", c_size_t), ("properties", c_void_p)]


class PJRT_Executable_OutputElementTypes_Args(Args):
    _fields_ = [("executable", c_void_p), ("output_types", c_void_p), ("num_output_types", c_size_t)]


class PJRT_Executable_OutputDimensions_Args(Args):
    _fields_ = [("executable", c_void_p), ("num_outputs", c_size_t), ("dims", c_void_p),
                ("dim_sizes", c_void_p)]


class PJRT_Executable_OutputMemoryKinds_Args(Args):   # also ..._ParameterMemoryKinds_Args
    _fields_ = [("executable", c_void_p), ("num_outputs", c_size_t), ("memory_kinds", c_void_p),
                ("memory_kind_sizes", c_void_p)]


class PJRT_Executable_OptimizedProgram_Args(Args):
    _fields_ = [("executable", c_void_p), ("program", c_void_p)]


class PJRT_LoadedExecutable_Destroy_Args(Args):
    _fields_ = [("executable", c_void_p)]


class PJRT_LoadedExecutable_GetExecutable_Args(Args):
    _fields_ = [("loaded_executable", c_void_p), ("executable", c_void_p)]


class PJRT_LoadedExecutable_AddressableDevices_Args(Args):
    _fields_ = [("executable", c_void_p), ("addressable_devices", c_void_p),
                ("num_addressable_devices", c_size_t)]


class PJRT_LoadedExecutable_IsDeleted_Args(Args):
    _fields_ = [("executable", c_void_p), ("is_deleted", c_bool)]


class PJRT_LoadedExecutable_GetDeviceAssignment_Args(Args):
    _fields_ = [("executable", c_void_p), ("serialized_bytes", c_void_p),
                ("serialized_bytes_size", c_size_t), ("serialized_device_assignment", c_void_p),
                ("serialized_device_assignment_deleter", c_void_p)]


class PJRT_LogicalDeviceIds(ctypes.Structure):
    _fields_ = [("replica", c_int), ("partition", c_int)]


class PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args(Args):
    _fields_ = [("executable", c_void_p), ("addressable_device_logical_ids", c_void_p),
                ("num_addressable_device_logical_ids", c_size_t)]


class PJRT_ExecuteOptions(Args):
    _fields_ = [("send_callbacks", c_void_p), ("recv_callbacks", c_void_p),
                ("num_send_ops", c_size_t), ("num_recv_ops", c_size_t), ("launch_id", c_int),
                ("non_donatable_input_indices", c_void_p),
                ("num_non_donatable_input_indices", c_size_t), ("context", c_void_p),
                ("call_location", c_void_p), ("num_tasks", c_size_t), ("task_ids", c_void_p),
                ("incarnation_ids", c_void_p), ("multi_slice_config", c_void_p)]


class PJRT_LoadedExecutable_Execute_Args(Args):
    _fields_ = [("executable", c_void_p), ("options", c_void_p), ("argument_lists", c_void_p),
                ("num_devices", c_size_t), ("num_args", c_size_t), ("output_lists", c_void_p),
                ("device_complete_events", c_void_p), ("execute_device", c_void_p)]


# ---------------------------------------------------------------- buffers

class PJRT_Buffer_Destroy_Args(Args):          # also _Delete_Args
    _fields_ = [("buffer", c_void_p)]


class PJRT_Buffer_ElementType_Args(Args):
    _fields_ = [("buffer", c_void_p), ("type", c_int)]


class PJRT_Buffer_Dimensions_Args(Args):       # also _UnpaddedDimensions_Args
    _fields_ = [("buffer", c_void_p), ("dims", c_void_p), ("num_dims", c_size_t)]


class PJRT_Buffer_DynamicDimensionIndices_Args(Args):
    _fields_ = [("buffer", c_void_p), ("dynamic_dim_indices", c_void_p), ("num_dynamic_dims", c_size_t)]


class PJRT_Buffer_GetMemoryLayout_Args(Args):
    _fields_ = [("buffer", c_void_p), ("layout", PJRT_Buffer_MemoryLayout)]


class PJRT_Buffer_ToHostBuffer_Args(Args):
    _fields_ = [("src", c_void_p), ("host_layout", c_void_p), ("dst", c_void_p), ("dst_size", c_size_t),
                ("event", c_void_p)]


class PJRT_Buffer_OnDeviceSizeInBytes_Args(Args):
    _fields_ = [("buffer", c_void_p), ("on_device_size_in_bytes", c_size_t)]


class PJRT_Buffer_IsDeleted_Args(Args):
    _fields_ = [("buffer", c_void_p), ("is_deleted", c_bool)]


class PJRT_Buffer_IsOnCpu_Args(Args):
    _fields_ = [("buffer", c_void_p), ("is_on_cpu", c_bool)]


class PJRT_Buffer_CopyRawToHost_Args(Args):
    _fields_ = [("buffer", c_void_p), ("dst", c_void_p), ("offset", c_int64), ("transfer_size", c_int64),
                ("event", c_void_p)]


class PJRT_Buffer_CopyToDevice_Args(Args):
    _fields_ = [("buffer", c_void_p), ("dst_device", c_void_p), ("dst_buffer", c_void_p)]


class PJRT_Buffer_CopyToMemory_Args(Args):
    _fields_ = [("buffer", c_void_p), ("dst_memory", c_void_p), ("dst_buffer", c_void_p)]


class PJRT_Buffer_UnsafePointer_Args(Args):
    _fields_ = [("buffer", c_void_p), ("buffer_pointer", c_size_t)]


class PJRT_Buffer_IncreaseExternalReferenceCount_Args(Args):
    _fields_ = [("buffer", c_void_p)]


class PJRT_Buffer_DecreaseExternalReferenceCount_Args(Args):
    _fields_ = [("buffer", c_void_p)]


class PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args(Args):
    _fields_ = [("buffer", c_void_p), ("device_memory_ptr", c_void_p)]


class PJRT_Buffer_Device_Args(Args):
    _fields_ = [("buffer", c_void_p), ("device", c_void_p)]


class PJRT_Buffer_Memory_Args(Args):
    _fields_ = [("buffer", c_void_p), ("memory", c_void_p)]


class PJRT_Buffer_ReadyEvent_Args(Args):
    _fields_ = [("buffer", c_void_p), ("event", c_void_p)]


# ---------------------------------------------------------------- the Shardings extension

class PJRT_Shardings_PJRT_Executable_OutputShardings_Args(Args):
    _fields_ = [("executable", c_void_p), ("num_outputs", c_size_t), ("shardings", c_void_p),
                ("sharding_sizes", c_void_p)]


class PJRT_Shardings_PJRT_Executable_ParameterShardings_Args(Args):
    _fields_ = [("executable", c_void_p), ("num_parameters", c_size_t), ("shardings", c_void_p),
                ("sharding_sizes", c_void_p)]


class PJRT_Shardings_Extension(ctypes.Structure):
    _fields_ = [("base", PJRT_Extension_Base),
                ("PJRT_Shardings_PJRT_Executable_ParameterShardings", c_void_p),
                ("PJRT_Shardings_PJRT_Executable_OutputShardings", c_void_p)]


# ---------------------------------------------------------------- the Layouts extension
# (PJRT_Layouts_MemoryLayout and PJRT_Layouts_SerializedLayout are opaque handles.)

class PJRT_Layouts_MemoryLayout_Destroy_Args(Args):
    _fields_ = [("layout", c_void_p)]


class PJRT_Layouts_MemoryLayout_Serialize_Args(Args):
    _fields_ = [("layout", c_void_p), ("serialized_bytes", c_void_p), ("serialized_bytes_size", c_size_t),
                ("serialized_layout", c_void_p), ("serialized_layout_deleter", c_void_p)]


class PJRT_Layouts_PJRT_Client_GetDefaultLayout_Args(Args):
    _fields_ = [("client", c_void_p), ("type", c_int), ("dims", c_void_p), ("num_dims", c_size_t),
                ("layout", c_void_p)]


class PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args(Args):
    _fields_ = [("buffer", c_void_p), ("layout", c_void_p)]


class PJRT_Layouts_PJRT_Topology_GetDefaultLayout_Args(Args):
    _fields_ = [("topology_description", c_void_p), ("type", c_int), ("dims", c_void_p), ("num_dims", c_size_t),
                ("layout", c_void_p)]


class PJRT_Layouts_PJRT_Executable_GetOutputLayouts_Args(Args):
    _fields_ = [("executable", c_void_p), ("num_outputs", c_size_t), ("layouts", c_void_p)]


class PJRT_Layouts_PJRT_Executable_GetParameterLayouts_Args(Args):
    _fields_ = [("executable", c_void_p), ("num_parameters", c_size_t), ("layouts", c_void_p)]


# The slots of PJRT_Layouts_Extension in order, without their "PJRT_Layouts_" prefix.
LAYOUTS_SLOTS = ("MemoryLayout_Destroy", "MemoryLayout_Serialize", "PJRT_Client_GetDefaultLayout",
                 "PJRT_Buffer_MemoryLayout", "PJRT_Topology_GetDefaultLayout", "PJRT_Executable_GetOutputLayouts",
                 "PJRT_Executable_GetParameterLayouts")


class PJRT_Layouts_Extension(ctypes.Structure):
    _fields_ = [("base", PJRT_Extension_Base)] + [(f"PJRT_Layouts_{name}", c_void_p) for name in LAYOUTS_SLOTS]


# ---------------------------------------------------------------- the function table

# The PJRT_Api slots in order, without their "PJRT_" prefix.
API_SLOTS = (
    "Error_Destroy", "Error_Message", "Error_GetCode",
    "Plugin_Initialize", "Plugin_Attributes",
    "Event_Destroy", "Event_IsReady", "Event_Error", "Event_Await", "Event_OnReady",
    "Client_Create", "Client_Destroy", "Client_PlatformName", "Client_ProcessIndex",
    "Client_PlatformVersion", "Client_Devices", "Client_AddressableDevices", "Client_LookupDevice",
    "Client_LookupAddressableDevice", "Client_AddressableMemories", "Client_Compile",
    "Client_DefaultDeviceAssignment", "Client_BufferFromHostBuffer",
    "DeviceDescription_Id", "DeviceDescription_ProcessIndex", "DeviceDescription_Attributes",
    "DeviceDescription_Kind", "DeviceDescription_DebugString", "DeviceDescription_ToString",
    "Device_GetDescription", "Device_IsAddressable", "Device_LocalHardwareId",
    "Device_AddressableMemories", "Device_DefaultMemory", "Device_MemoryStats",
    "Memory_Id", "Memory_Kind", "Memory_DebugString", "Memory_ToString", "Memory_AddressableByDevices",
    "Executable_Destroy", "Executable_Name", "Executable_NumReplicas", "Executable_NumPartitions",
    "Executable_NumOutputs", "Executable_SizeOfGeneratedCodeInBytes", "Executable_GetCostAnalysis",
    "Executable_OutputMemoryKinds", "Executable_OptimizedProgram", "Executable_Serialize",
    "LoadedExecutable_Destroy", "LoadedExecutable_GetExecutable", "LoadedExecutable_AddressableDevices",
    "LoadedExecutable_Delete", "LoadedExecutable_IsDeleted", "LoadedExecutable_Execute",
    "Executable_DeserializeAndLoad", "LoadedExecutable_Fingerprint",
    "Buffer_Destroy", "Buffer_ElementType", "Buffer_Dimensions", "Buffer_UnpaddedDimensions",
    "Buffer_DynamicDimensionIndices", "Buffer_GetMemoryLayout", "Buffer_OnDeviceSizeInBytes",
    "Buffer_Device", "Buffer_Memory", "Buffer_Delete", "Buffer_IsDeleted", "Buffer_CopyToDevice",
    "Buffer_ToHostBuffer", "Buffer_IsOnCpu", "Buffer_ReadyEvent", "Buffer_UnsafePointer",
    "Buffer_IncreaseExternalReferenceCount", "Buffer_DecreaseExternalReferenceCount",
    "Buffer_OpaqueDeviceMemoryDataPointer",
    "CopyToDeviceStream_Destroy", "CopyToDeviceStream_AddChunk", "CopyToDeviceStream_TotalBytes",
    "CopyToDeviceStream_GranuleSize", "CopyToDeviceStream_CurrentBytes",
    "TopologyDescription_Create", "TopologyDescription_Destroy", "TopologyDescription_PlatformName",
    "TopologyDescription_PlatformVersion", "TopologyDescription_GetDeviceDescriptions",
    "TopologyDescription_Serialize", "TopologyDescription_Attributes",
    "Compile", "Executable_OutputElementTypes", "Executable_OutputDimensions", "Buffer_CopyToMemory",
    "Client_CreateViewOfDeviceBuffer", "Executable_Fingerprint", "Client_TopologyDescription",
    "Executable_GetCompiledMemoryStats", "Memory_Kind_Id", "ExecuteContext_Create",
    "ExecuteContext_Destroy", "Buffer_CopyRawToHost",
    "AsyncHostToDeviceTransferManager_Destroy", "AsyncHostToDeviceTransferManager_TransferData",
    "Client_CreateBuffersForAsyncHostToDevice", "AsyncHostToDeviceTransferManager_RetrieveBuffer",
    "AsyncHostToDeviceTransferManager_Device", "AsyncHostToDeviceTransferManager_BufferCount",
    "AsyncHostToDeviceTransferManager_BufferSize", "AsyncHostToDeviceTransferManager_SetBufferError",
    "AsyncHostToDeviceTransferManager_AddMetadata", "Client_DmaMap", "Client_DmaUnmap",
    "Client_CreateUninitializedBuffer", "Client_UpdateGlobalProcessInfo",
    "TopologyDescription_Deserialize", "Client_CreateAliasBuffer", "Client_FulfillAliasBuffer",
    "LoadedExecutable_GetDeviceAssignment", "Client_CreateErrorBuffer",
    "AsyncHostToDeviceTransferManager_TransferLiteral", "Buffer_CopyRawToHostFuture",
    "Device_PoisonExecution", "Device_CreateAsyncTrackingEvent", "AsyncTrackingEvent_Destroy",
    "Executable_GetCompileOptions", "Buffer_DonateWithControlDependency", "Event_Create", "Event_Set",
    "Device_GetAttributes", "Client_Load", "LoadedExecutable_AddressableDeviceLogicalIds",
    "Buffer_Bitcast", "Error_ForEachPayload", "TopologyDescription_Fingerprint",
    "Executable_ParameterMemoryKinds",
)

# Slots whose function returns void rather than PJRT_Error*.
VOID_SLOTS = frozenset({"Error_Destroy", "Error_Message"})


class PJRT_Api(Args):
    _fields_ = [("pjrt_api_version", PJRT_Api_Version)] + [(f"PJRT_{name}", c_void_p) for name in API_SLOTS]
