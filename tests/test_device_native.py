"""The plugin's native fast paths (device/native.py) against the Python code they stand in for.

Each fast path is called the way jaxlib calls it, through its entry point in
the PJRT_Api table, on an args structure built here; the Python implementation
of the same call must write the same outputs. A second check runs a program
with every call going through Python (tracing calls turns the fast paths off).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jax

from stablehlo_interp.device import abi, api, native, plugin, runtime
from stablehlo_interp.device.calls_buffers import HEADER_DEVICE, HEADER_MEMORY, buffer_handle

DEV = jax.devices("interp")[3]
TABLE = plugin.table()
native_only = pytest.mark.skipif(not native.guards_supported(), reason="fast paths are x86-64 machine code")


def call_native(name: str, args) -> int | None:
    """Call slot ``name`` of the PJRT_Api table on ``args``; returns the PJRT_Error* (None for NULL)."""
    return abi.API_FUNCTION(TABLE.entry_points[name])(ctypes.addressof(args))


def call_python(name: str, args) -> None:
    function, _ = api._IMPLEMENTATIONS[name]
    function(args)


def outputs(args, fields) -> dict:
    return {field: getattr(args, field) for field in fields}


def test_every_fast_path_has_a_python_implementation():
    assert set(api._FAST_PATHS) <= set(api._IMPLEMENTATIONS)
    assert {"Buffer_Device", "Buffer_Memory", "Executable_NumReplicas", "Executable_NumPartitions",
            "Executable_NumOutputs", "Memory_Kind", "Event_OnReady", "Event_Destroy"} <= set(api._FAST_PATHS)


@native_only
def test_fast_paths_are_in_the_table():
    for name in api._FAST_PATHS:
        assert getattr(TABLE.api, f"PJRT_{name}") == TABLE.entry_points[name] != \
            ctypes.cast(TABLE.thunks[name], ctypes.c_void_p).value


@native_only
@pytest.mark.parametrize("name, handle_field", [
    ("Buffer_Device", "buffer"), ("Buffer_Memory", "buffer"), ("Executable_NumReplicas", "executable"),
    ("Executable_NumPartitions", "executable"), ("Executable_NumOutputs", "executable")])
def test_header_getters(name, handle_field):
    getter, args_type = api._FAST_PATHS[name]
    fields = [field for field, _ in getter.outputs]
    handle = api.header_handle(object(), [0x1111_2222_3333_4444, 17, 2**63 + 5, 42])
    try:
        by_native, by_python = args_type(), args_type()
        for args in (by_native, by_python):
            setattr(args, handle_field, handle)
        assert call_native(name, by_native) is None
        call_python(name, by_python)
        assert outputs(by_native, fields) == outputs(by_python, fields) == {
            field: [0x1111_2222_3333_4444, 17, 2**63 + 5, 42][index] for field, index in getter.outputs}
    finally:
        api.release_header(handle)


@native_only
def test_buffer_getters_report_the_buffer_s_device_and_memory():
    buffer = runtime.Buffer(runtime.Client().devices[0], np.zeros(3, np.float32))
    handle = buffer_handle(buffer)
    try:
        args = abi.PJRT_Buffer_Memory_Args(buffer=handle)
        assert call_native("Buffer_Memory", args) is None
        assert args.memory == id(buffer.device.memory) == api.header_word(handle, HEADER_MEMORY)
        args = abi.PJRT_Buffer_Device_Args(buffer=handle)
        assert call_native("Buffer_Device", args) is None
        assert args.device == id(buffer.device) == api.header_word(handle, HEADER_DEVICE)
    finally:
        api.release_header(handle)


@native_only
def test_memory_kind_is_a_constant():
    by_native, by_python = abi.PJRT_Memory_Kind_Args(), abi.PJRT_Memory_Kind_Args()
    assert call_native("Memory_Kind", by_native) is None
    call_python("Memory_Kind", by_python)
    assert (by_native.kind, by_native.kind_size) == (by_python.kind, by_python.kind_size)
    assert ctypes.string_at(by_native.kind, by_native.kind_size) == b"device"


def on_ready_recorder():
    calls = []
    callback = abi.EVENT_ON_READY_CALLBACK(lambda error, user_arg: calls.append((error, user_arg)))
    return calls, callback


@native_only
def test_on_ready_of_the_complete_event_calls_back_natively():
    calls, callback = on_ready_recorder()
    args = abi.PJRT_Event_OnReady_Args(event=api.COMPLETE_EVENT, user_arg=0xABC0,
                                       callback=ctypes.cast(callback, ctypes.c_void_p).value)
    assert call_native("Event_OnReady", args) is None
    assert calls == [(None, 0xABC0)]


@native_only
def test_other_events_fall_back_to_python():
    """A failed event: OnReady hands the callback a new error; Destroy releases the event."""
    failed = api.handle(api.Event(api.Error(abi.INTERNAL, "it failed")))
    calls, callback = on_ready_recorder()
    args = abi.PJRT_Event_OnReady_Args(event=failed, user_arg=7, callback=ctypes.cast(callback, ctypes.c_void_p).value)
    assert call_native("Event_OnReady", args) is None
    (error, user_arg), = calls
    assert user_arg == 7 and api.objects.pop(error).text == "it failed"
    assert call_native("Event_Destroy", abi.PJRT_Event_Destroy_Args(event=failed)) is None
    assert failed not in api.objects
    assert call_native("Event_Destroy", abi.PJRT_Event_Destroy_Args(event=api.COMPLETE_EVENT)) is None
    assert api.COMPLETE_EVENT in api.objects


def test_headers_are_reused_after_release():
    first = api.header_handle("a", [1, 2])
    api.release_header(first)
    api.release_header(first)   # a second release must not free the header twice
    second, third = api.header_handle("b", [3]), api.header_handle("c", [4])
    assert first == second != third
    assert (api.header_word(second, 0), api.header_word(third, 0)) == (3, 4)
    api.release_header(second)
    api.release_header(third)
    with pytest.raises(runtime.PluginError, match="destroyed handle"):
        api.header_word(third, 0)


@pytest.mark.parametrize("offset", [0, 4])
def test_pointer_arrays_aligned_or_not(offset):
    memory = (ctypes.c_char * 64)()
    address = ctypes.addressof(memory) + offset
    api.write_pointers(address, [5, 2**64 - 1, 1 << 40])
    assert api.read_pointers(address, 3) == [5, 2**64 - 1, 1 << 40]
    assert api.read_pointers(address, 0) == []


def test_every_call_through_python():
    """With calls traced, the fast paths are off: the Python implementations serve jit,
    eager ops, transfers and events."""
    script = textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np
        dev = jax.devices("interp")[0]
        x = jax.device_put(np.arange(4, dtype=np.float32), dev)
        y = jax.jit(lambda v: (v * 2, v.sum()))(x)
        z = x + 1
        print(np.asarray(y[0]).tolist(), float(y[1]), np.asarray(z).tolist(), y[0].devices() == {dev})
    """)
    environment = dict(os.environ, STABLEHLO_INTERP_PJRT_TRACE="1", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[0] == "[0.0, 2.0, 4.0, 6.0] 6.0 [1.0, 2.0, 3.0, 4.0] True"
    for name in ("Executable_NumOutputs", "Buffer_Device", "Buffer_Memory", "Memory_Kind", "Event_OnReady",
                 "Event_Destroy"):
        assert f"[interp pjrt] PJRT_{name}\n" in result.stderr
