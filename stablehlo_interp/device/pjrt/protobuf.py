"""The few protocol buffers the plugin reads: compile options and device assignments.

``PJRT_Client_Compile`` receives a serialized ``xla.CompileOptionsProto``.
jaxlib's ``CompileOptions.ParseFromString`` reads it, but the device assignment
it returns exposes only its counts and ``serialize()``; the device ids come
from the serialized ``xla.DeviceAssignmentProto``::

    message DeviceAssignmentProto {
      int32 replica_count = 1;
      int32 computation_count = 2;
      message ComputationDevice { repeated int64 replica_device_ids = 1; }
      repeated ComputationDevice computation_devices = 3;
    }
"""

from __future__ import annotations

from dataclasses import dataclass

_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


@dataclass(frozen=True)
class BuildOptions:
    num_replicas: int
    num_partitions: int
    device_ids: tuple          # device of (replica r, partition p) at r * num_partitions + p; () if portable
    device_assignment: bytes   # the serialized DeviceAssignmentProto, b"" if portable
    spmd: bool = False         # use_spmd_partitioning: the program is global, its partitions are shards
    option_overrides: tuple = ()   # XLA compiler options: ((name, value), ...) (device/compiler_options.py)


def compile_options(serialized: bytes) -> BuildOptions:
    from jaxlib import xla_client

    options = xla_client.CompileOptions.ParseFromString(serialized)
    build = options.executable_build_options
    assignment = build.device_assignment
    spmd = bool(build.use_spmd_partitioning)
    overrides = tuple(sorted(options.env_option_overrides))
    if assignment is None or options.compile_portable_executable:
        return BuildOptions(build.num_replicas, build.num_partitions, (), b"", spmd, overrides)
    data = assignment.serialize()
    return BuildOptions(build.num_replicas, build.num_partitions, device_ids(data), data, spmd, overrides)


def device_ids(device_assignment: bytes) -> tuple:
    """Device ids of a DeviceAssignmentProto, replica-major: ``ids[r * computations + c]``."""
    columns = []   # per computation: its device for each replica
    for number, value in fields(device_assignment):
        if number == 3:
            ids = []
            for inner_number, inner_value in fields(value):
                if inner_number == 1:
                    ids.extend(_packed_varints(inner_value) if isinstance(inner_value, bytes) else [inner_value])
            columns.append(ids)
    return tuple(column[replica] for replica in range(len(columns[0]) if columns else 0) for column in columns)


def fields(data: bytes):
    """Yield ``(field_number, value)``: ints for varints and fixed-width fields, bytes otherwise."""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            value, position = _varint(data, position)
        elif wire_type == _LENGTH_DELIMITED:
            length, position = _varint(data, position)
            value, position = data[position:position + length], position + length
        elif wire_type in (_FIXED64, _FIXED32):
            width = 8 if wire_type == _FIXED64 else 4
            value, position = int.from_bytes(data[position:position + width], "little"), position + width
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
        yield number, value


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def _packed_varints(data: bytes) -> list:
    values, position = [], 0
    while position < len(data):
        value, position = _varint(data, position)
        values.append(value)
    return values
