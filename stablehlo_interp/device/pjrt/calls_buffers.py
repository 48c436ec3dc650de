"""PJRT calls about buffers: transfers to and from the host, copies between devices, metadata.

A buffer holds a NumPy array that nothing modifies, so a copy to another
device shares it (and keeps its layout). The array is the logical value; the
buffer's layout (device/layouts.py) orders the bytes that leave it: a copy to
the host without a layout of its own, a raw copy, a read in place
(``runtime.Buffer.hold``).
"""

from __future__ import annotations

import ctypes
from ctypes import addressof, c_int64

import numpy as np

from . import abi
from .. import runtime
from .calls import (COMPLETE_EVENT, INTERRUPTED_EVENT, Calls, array_address, header_handle, lookup, read_pointers,
    release_header, set_header_word)
from .calls_layouts import layout_handle
from .. import layouts
from ..runtime import PluginError

CALLS = Calls()

# A buffer handle points at its header, what the native getters read: the handles of the
# buffer's device and memory, its PJRT_Buffer_Type, its dimensions (an int64 array shared
# by the buffers of that shape) and their count, the handle of its layout, its ready
# event, its size in bytes, the address of the data its external references hold (0
# until the first), and whether it was deleted (Buffer_Delete, donation: note_deletions).
(HEADER_DEVICE, HEADER_MEMORY, HEADER_TYPE, HEADER_DIMS, HEADER_NUM_DIMS, HEADER_LAYOUT, HEADER_READY_EVENT,
 HEADER_SIZE, HEADER_DATA, HEADER_DELETED) = range(10)

# The header of each kind of buffer (class, memory, dtype, shape) seen lately, with the
# dimension array it points to, and the dimension arrays by shape: a lookup is cheaper
# than building them for every buffer. Each memo holds at most MEMO_LIMIT entries (it
# starts again when full); a buffer keeps its own dimension array alive (c_dimensions),
# so dropping a memo's entry frees no array a live buffer's header points to.
MEMO_LIMIT = 4096
_headers: dict[tuple, tuple] = {}
_dimension_arrays: dict[tuple, ctypes.Array] = {}


def _remember(memo: dict, key, value):
    """``memo[key] = value``, emptying ``memo`` first when it holds MEMO_LIMIT entries."""
    if len(memo) >= MEMO_LIMIT:
        memo.clear()
    memo[key] = value
    return value


def buffer_handle(buffer: runtime.Buffer) -> int:
    key = (type(buffer), buffer.memory, buffer.dtype, buffer.shape, buffer.layout)
    header = _headers.get(key)
    if header is None:
        header = _remember(_headers, key, _header(buffer))
    words, buffer.c_dimensions = header
    return header_handle(buffer, words)


def _header(buffer: runtime.Buffer) -> tuple:
    """The header of a buffer of this kind and the dimension array it points to; the
    outputs of an interrupted run are ready with an error (CANCELLED)."""
    shape, memory = buffer.shape, buffer.memory
    dims = _dimension_arrays.get(shape)
    if dims is None:
        dims = _remember(_dimension_arrays, shape, (c_int64 * len(shape))(*shape))
    ready = INTERRUPTED_EVENT if isinstance(buffer, runtime.InterruptedBuffer) else COMPLETE_EVENT
    return (id(memory.device), memory.handle, buffer.buffer_type, addressof(dims), len(shape),
            layout_handle(_minor_to_major(buffer)), ready, buffer.nbytes, 0, 0), dims


def _minor_to_major(buffer: runtime.Buffer) -> tuple:
    return buffer.layout if buffer.layout is not None else layouts.row_major(len(buffer.shape))


@CALLS.implements("Client_BufferFromHostBuffer", abi.PJRT_Client_BufferFromHostBuffer_Args)
def client_buffer_from_host_buffer(args):
    """Always copies, so the host buffer is released at once (``done_with_host_buffer`` is complete).
    The byte strides say where the host's elements are; ``device_layout``, the
    buffer's layout (row-major if NULL)."""
    if args.memory:
        memory = lookup(args.memory, "memory")
        device = memory.device
    else:
        device = lookup(args.device, "device")
        memory = device.memory
    dtype = runtime.dtype_of_buffer_type(args.type)
    num_dims = args.num_dims
    shape = tuple(read_pointers(args.dims, num_dims)) if num_dims else ()   # sizes: never negative
    array = array_from_host(args.data, dtype, shape, args.byte_strides if args.num_byte_strides else None)
    layout = _read_layout(args.device_layout, len(shape), "device_layout") if args.device_layout else None
    args.buffer = buffer_handle(runtime.Buffer(device, array, memory, layout))
    args.done_with_host_buffer = COMPLETE_EVENT


def array_from_host(address: int, dtype: np.dtype, shape: tuple, byte_strides_address) -> np.ndarray:
    """Copy a host array (its byte strides, one per dimension, at ``byte_strides_address``:
    any, possibly negative or transposed; dense row-major if None) into a new array."""
    if 0 in shape:
        return np.zeros(shape, dtype)
    dense = _row_major_strides.get((shape, dtype.itemsize))
    if dense is None:
        dense = _remember(_row_major_strides, (shape, dtype.itemsize), row_major_strides(shape, dtype.itemsize))
    if byte_strides_address is None or (not shape or tuple(read_pointers(byte_strides_address, len(shape))) == dense):
        # the common case: one copy of the bytes
        return np.ndarray(shape, dtype, ctypes.string_at(address, dense[0] * shape[0] if shape else dtype.itemsize))
    byte_strides = tuple((c_int64 * len(shape)).from_address(byte_strides_address))
    low = sum(stride * (size - 1) for stride, size in zip(byte_strides, shape) if stride < 0)
    high = sum(stride * (size - 1) for stride, size in zip(byte_strides, shape) if stride > 0) + dtype.itemsize
    raw = ctypes.string_at(address + low, high - low)
    view = np.ndarray(shape, dtype, buffer=raw, offset=-low, strides=byte_strides)
    return np.ascontiguousarray(view) if not view.flags.c_contiguous else view


_row_major_strides: dict[tuple, tuple] = {}   # (shape, itemsize) -> row_major_strides(shape, itemsize), a memo


def row_major_strides(shape: tuple, itemsize: int) -> tuple:
    """The byte strides of a dense row-major array."""
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


@CALLS.implements("Buffer_Destroy", abi.PJRT_Buffer_Destroy_Args)
def buffer_destroy(args):
    release_header(args.buffer)


CALLS.header_getter("Buffer_ElementType", abi.PJRT_Buffer_ElementType_Args, "buffer", type=HEADER_TYPE)
CALLS.header_getter("Buffer_Dimensions", abi.PJRT_Buffer_Dimensions_Args, "buffer", dims=HEADER_DIMS,
                    num_dims=HEADER_NUM_DIMS)
CALLS.header_getter("Buffer_UnpaddedDimensions", abi.PJRT_Buffer_Dimensions_Args, "buffer", dims=HEADER_DIMS,
                    num_dims=HEADER_NUM_DIMS)
# The Layouts extension's layout of a buffer (calls_layouts.py).
CALLS.header_getter("Layouts_PJRT_Buffer_MemoryLayout", abi.PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args, "buffer",
                    layout=HEADER_LAYOUT)
CALLS.constant_getter("Buffer_DynamicDimensionIndices", abi.PJRT_Buffer_DynamicDimensionIndices_Args,
                      dynamic_dim_indices=0, num_dynamic_dims=0)   # every dimension is static


# by minor_to_major: as many as the layouts there are, a few per rank (handed out: kept)
_MINOR_TO_MAJOR: dict[tuple, ctypes.Array] = {}


@CALLS.implements("Buffer_GetMemoryLayout", abi.PJRT_Buffer_GetMemoryLayout_Args)
def buffer_get_memory_layout(args):
    """The buffer's layout: its minor_to_major, no tiles."""
    minor_to_major = _minor_to_major(lookup(args.buffer, "buffer"))
    rank = len(minor_to_major)
    order = _MINOR_TO_MAJOR.get(minor_to_major)
    if order is None:
        order = _MINOR_TO_MAJOR[minor_to_major] = (c_int64 * rank)(*minor_to_major)
    layout = args.layout
    layout.struct_size = ctypes.sizeof(abi.PJRT_Buffer_MemoryLayout)
    layout.type = abi.LAYOUT_TILED
    tiled = layout.tiled
    tiled.struct_size = ctypes.sizeof(abi.PJRT_Buffer_MemoryLayout_Tiled)
    tiled.minor_to_major, tiled.minor_to_major_size = addressof(order), rank
    tiled.tile_dims, tiled.tile_dim_sizes, tiled.num_tiles = None, None, 0


CALLS.header_getter("Buffer_OnDeviceSizeInBytes", abi.PJRT_Buffer_OnDeviceSizeInBytes_Args, "buffer",
                    on_device_size_in_bytes=HEADER_SIZE)


CALLS.header_getter("Buffer_Device", abi.PJRT_Buffer_Device_Args, "buffer", device=HEADER_DEVICE)
CALLS.header_getter("Buffer_Memory", abi.PJRT_Buffer_Memory_Args, "buffer", memory=HEADER_MEMORY)


@CALLS.implements("Buffer_Delete", abi.PJRT_Buffer_Destroy_Args)
def buffer_delete(args):
    lookup(args.buffer, "buffer").delete()
    note_deletions([args.buffer])


def note_deletions(handles) -> None:
    """Mark in their headers the buffers among ``handles`` that were deleted, for Buffer_IsDeleted."""
    for address in handles:
        if lookup(address, "buffer").is_deleted:
            set_header_word(address, HEADER_DELETED, 1)


CALLS.header_getter("Buffer_IsDeleted", abi.PJRT_Buffer_IsDeleted_Args, "buffer", is_deleted=HEADER_DELETED)


# A buffer is a NumPy array in host memory: jaxlib reads it in place (np.asarray of an
# array on the device), through an external reference, as it reads XLA CPU's buffers.
CALLS.constant_getter("Buffer_IsOnCpu", abi.PJRT_Buffer_IsOnCpu_Args, is_on_cpu=1)


@CALLS.implements("Buffer_IncreaseExternalReferenceCount", abi.PJRT_Buffer_IncreaseExternalReferenceCount_Args)
def buffer_increase_external_reference_count(args):
    """Hold the buffer's array (``Buffer.hold``) and put its address where
    Buffer_OpaqueDeviceMemoryDataPointer reads it."""
    set_header_word(args.buffer, HEADER_DATA, array_address(lookup(args.buffer, "buffer").hold()))


@CALLS.implements("Buffer_DecreaseExternalReferenceCount", abi.PJRT_Buffer_DecreaseExternalReferenceCount_Args)
def buffer_decrease_external_reference_count(args):
    lookup(args.buffer, "buffer").release_hold()


# The address of the data the buffer's external references hold: valid while one is held
# (pjrt_c_api.h asks the caller to hold one), 0 before the first.
CALLS.header_getter("Buffer_OpaqueDeviceMemoryDataPointer", abi.PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args,
                    "buffer", device_memory_ptr=HEADER_DATA)


@CALLS.implements("Buffer_UnsafePointer", abi.PJRT_Buffer_UnsafePointer_Args)
def buffer_unsafe_pointer(args):
    args.buffer_pointer = lookup(args.buffer, "buffer").data_address()


CALLS.header_getter("Buffer_ReadyEvent", abi.PJRT_Buffer_ReadyEvent_Args, "buffer", event=HEADER_READY_EVENT)


def _copy_to(buffer_address, memory: runtime.Memory) -> int:
    """A copy to another memory or device shares the array (nothing modifies it; see
    Buffer.shared) and keeps the layout."""
    buffer = lookup(buffer_address, "buffer")
    return buffer_handle(runtime.Buffer(memory.device, buffer.shared(), memory, buffer.layout))


@CALLS.implements("Buffer_CopyToDevice", abi.PJRT_Buffer_CopyToDevice_Args)
def buffer_copy_to_device(args):
    args.dst_buffer = _copy_to(args.buffer, lookup(args.dst_device, "device").memory)


@CALLS.implements("Buffer_CopyToMemory", abi.PJRT_Buffer_CopyToMemory_Args)
def buffer_copy_to_memory(args):
    args.dst_buffer = _copy_to(args.buffer, lookup(args.dst_memory, "memory"))


def _read_layout(address: int, rank: int, what: str) -> tuple | None:
    """The minor_to_major of the PJRT_Buffer_MemoryLayout at ``address`` (None if row-major)."""
    layout = abi.PJRT_Buffer_MemoryLayout.from_address(address)
    if layout.type != abi.LAYOUT_TILED or layout.tiled.num_tiles:
        raise PluginError(abi.UNIMPLEMENTED, f"{what}: only untiled layouts are supported")
    minor_to_major = tuple((c_int64 * layout.tiled.minor_to_major_size).from_address(
        layout.tiled.minor_to_major)) if layout.tiled.minor_to_major_size else ()
    try:
        layouts.check(minor_to_major, rank, what)
    except ValueError as problem:
        raise PluginError(abi.INVALID_ARGUMENT, str(problem)) from None
    return None if minor_to_major == layouts.row_major(rank) else minor_to_major


def _host_view(buffer: runtime.Buffer, host_layout_address) -> np.ndarray:
    """The buffer's array laid out as the host layout asks (the buffer's own if none,
    as XLA copies it): a view whose C-order copy is the bytes the host wants."""
    array = buffer.array()
    if buffer.dtype is None:
        raise PluginError(abi.INVALID_ARGUMENT, "a token has no host representation")
    layout = _read_layout(host_layout_address, len(buffer.shape), "host_layout") if host_layout_address \
        else buffer.layout
    return runtime.in_memory_order(array, layout)


@CALLS.implements("Buffer_ToHostBuffer", abi.PJRT_Buffer_ToHostBuffer_Args)
def buffer_to_host_buffer(args):
    """With ``dst`` NULL, reports the size needed; otherwise copies and completes at once."""
    buffer = lookup(args.src, "buffer")
    if not args.dst:
        args.dst_size = buffer.nbytes
        return
    array = _host_view(buffer, args.host_layout)
    if args.dst_size < array.nbytes:
        raise PluginError(abi.INVALID_ARGUMENT, f"host buffer of {args.dst_size} bytes is too small for "
                                                f"{array.nbytes} bytes")
    if array.nbytes:   # copied straight into the host's memory, in C order
        np.copyto(np.ndarray(array.shape, array.dtype, (ctypes.c_char * array.nbytes).from_address(args.dst)),
                  array)
    args.event = COMPLETE_EVENT


@CALLS.implements("Buffer_CopyRawToHost", abi.PJRT_Buffer_CopyRawToHost_Args)
def buffer_copy_raw_to_host(args):
    buffer = lookup(args.buffer, "buffer")
    data = np.ascontiguousarray(_host_view(buffer, None)).view(np.uint8).reshape(-1)
    end = args.offset + args.transfer_size
    if args.offset < 0 or end > data.size:
        raise PluginError(abi.OUT_OF_RANGE, f"bytes [{args.offset}, {end}) are outside the buffer's {data.size}")
    if args.transfer_size:
        ctypes.memmove(args.dst, data[args.offset:].ctypes.data, args.transfer_size)
    args.event = COMPLETE_EVENT
