"""The plugin's native fast paths (device/native.py) against the Python code they stand in for.

Each fast path is called the way jaxlib calls it, through its entry point in
the PJRT_Api table, on an args structure built here; the Python implementation
of the same call must write the same outputs. A second check runs a program
with every call going through Python (tracing calls turns the fast paths off).
"""

from __future__ import annotations

import ast
import ctypes
import os
import re
import shutil
import subprocess
import sys
import textwrap
import types

import ml_dtypes
import numpy as np
import pytest

import jax

from stablehlo_interp.device import plugin, runtime
from stablehlo_interp.device.pjrt import abi, api, calls, calls_platform, native
from stablehlo_interp.device.pjrt.calls_buffers import HEADER_DEVICE, HEADER_MEMORY, buffer_handle

DEV = jax.devices("interp")[3]
TABLE = plugin.table()
native_only = pytest.mark.skipif(not native.guards_supported(), reason="fast paths are x86-64 machine code")


def call_native(name: str, args) -> int | None:
    """Call slot ``name`` of the PJRT_Api table on ``args``; returns the PJRT_Error* (None for NULL)."""
    return abi.API_FUNCTION(TABLE.entry_points[name])(ctypes.addressof(args))


def call_python(name: str, args) -> None:
    function, _ = api.CALLS.implementations[name]
    function(args)


def outputs(args, fields) -> dict:
    return {field: getattr(args, field) for field in fields}


def test_every_fast_path_has_a_python_implementation():
    assert set(api.CALLS.fast_paths) <= set(api.CALLS.implementations)
    assert {"Buffer_Device", "Buffer_Memory", "Executable_NumReplicas", "Executable_NumPartitions",
            "Executable_NumOutputs", "Memory_Kind", "Event_OnReady", "Event_Destroy"} <= set(api.CALLS.fast_paths)


@native_only
def test_fast_paths_are_in_the_table():
    for name in api.CALLS.fast_paths:
        table = TABLE.layouts if name.startswith("Layouts_") else TABLE.api   # the extension's own slots
        assert getattr(table, f"PJRT_{name}") == TABLE.entry_points[name] != \
            ctypes.cast(TABLE.thunks[name], ctypes.c_void_p).value


HEADER = [0x1111_2222_3333_4444, 17, 2**63 + 5, 42, 0x7FFF_FFFF_0000_0009, 1 << 40, 0xFFFF_FFFF_FFFF_FFFE, 3, 99,
          1]


def low_bytes(word: int, field_type) -> int:
    """What a field of ``field_type`` (8, 4 or 1 bytes) holds after the native getter
    stored the word's low bytes, as ctypes reads it."""
    return field_type.from_buffer_copy(word.to_bytes(8, "little")[:ctypes.sizeof(field_type)]).value


@native_only
@pytest.mark.parametrize("name, handle_field", [
    ("Buffer_Device", "buffer"), ("Buffer_Memory", "buffer"), ("Buffer_ElementType", "buffer"),
    ("Buffer_Dimensions", "buffer"), ("Buffer_UnpaddedDimensions", "buffer"),
    ("Buffer_OpaqueDeviceMemoryDataPointer", "buffer"), ("Buffer_OnDeviceSizeInBytes", "buffer"),
    ("Buffer_ReadyEvent", "buffer"), ("Buffer_IsDeleted", "buffer"), ("Layouts_PJRT_Buffer_MemoryLayout", "buffer"),
    ("Layouts_MemoryLayout_Serialize", "layout"), ("Executable_NumReplicas", "executable"),
    ("Executable_NumPartitions", "executable"), ("Executable_NumOutputs", "executable"), ("Memory_Kind", "memory")])
def test_header_getters(name, handle_field):
    """Each native getter copies its header words into the args as the Python code does,
    narrow fields (an element type's 4 bytes) getting the word's low bytes."""
    getter, args_type = api.CALLS.fast_paths[name]
    fields = [field for field, _ in getter.outputs]
    handle = calls.header_handle(object(), HEADER)
    try:
        by_native, by_python = args_type(), args_type()
        for args in (by_native, by_python):
            setattr(args, handle_field, handle)
        assert call_native(name, by_native) is None
        call_python(name, by_python)
        field_types = dict(args_type._fields_)
        assert outputs(by_native, fields) == outputs(by_python, fields) == {
            field: low_bytes(HEADER[index], field_types[field]) for field, index in getter.outputs}
        assert any(field_types[field] is ctypes.c_int for field in fields) == (name == "Buffer_ElementType")
        assert any(field_types[field] is ctypes.c_bool for field in fields) == (name == "Buffer_IsDeleted")
    finally:
        calls.release_header(handle)


@native_only
@pytest.mark.parametrize("name", sorted(name for name, (shape, _) in api.CALLS.fast_paths.items()
                                        if isinstance(shape, native.Constants)))
def test_constant_getters(name):
    """Native constants write what the Python code writes, and nothing else (the bytes
    after a narrow field stay as they were)."""
    getter, args_type = api.CALLS.fast_paths[name]
    by_native, by_python = args_type(), args_type()
    for args in (by_native, by_python):
        ctypes.memset(ctypes.addressof(args), 0xA5, ctypes.sizeof(args_type))
    assert call_native(name, by_native) is None
    call_python(name, by_python)
    assert bytes(by_native) == bytes(by_python)


@native_only
@pytest.mark.parametrize("kind", runtime.MEMORY_KINDS)
def test_buffer_getters_report_the_buffer_s_device_and_memory(kind):
    device = calls_platform.ClientView(runtime.Client()).client.devices[0]
    buffer = runtime.Buffer(device, np.zeros(3, np.float32), device.memory_of_kind[kind])
    handle = buffer_handle(buffer)
    try:
        args = abi.PJRT_Buffer_Memory_Args(buffer=handle)
        assert call_native("Buffer_Memory", args) is None
        assert args.memory == buffer.memory.handle == calls.header_word(handle, HEADER_MEMORY)
        args = abi.PJRT_Buffer_Device_Args(buffer=handle)
        assert call_native("Buffer_Device", args) is None
        assert args.device == id(buffer.device) == calls.header_word(handle, HEADER_DEVICE)
    finally:
        calls.release_header(handle)


@native_only
def test_memory_kind_is_the_memory_s():
    for memory in calls_platform.ClientView(runtime.Client()).client.devices[1].memories:
        by_native, by_python = (abi.PJRT_Memory_Kind_Args(memory=memory.handle) for _ in range(2))
        assert call_native("Memory_Kind", by_native) is None
        call_python("Memory_Kind", by_python)
        assert (by_native.kind, by_native.kind_size) == (by_python.kind, by_python.kind_size)
        assert ctypes.string_at(by_native.kind, by_native.kind_size) == memory.kind.encode()


def on_ready_recorder():
    received = []
    callback = abi.EVENT_ON_READY_CALLBACK(lambda error, user_arg: received.append((error, user_arg)))
    return received, callback


@native_only
def test_on_ready_of_the_complete_event_calls_back_natively():
    received, callback = on_ready_recorder()
    args = abi.PJRT_Event_OnReady_Args(event=calls.COMPLETE_EVENT, user_arg=0xABC0,
                                       callback=ctypes.cast(callback, ctypes.c_void_p).value)
    assert call_native("Event_OnReady", args) is None
    assert received == [(None, 0xABC0)]


@native_only
def test_other_events_fall_back_to_python():
    """A failed event: OnReady hands the callback a new error; Destroy releases the event."""
    failed = calls.handle(calls.Event(calls.Error(abi.INTERNAL, "it failed")))
    received, callback = on_ready_recorder()
    args = abi.PJRT_Event_OnReady_Args(event=failed, user_arg=7, callback=ctypes.cast(callback, ctypes.c_void_p).value)
    assert call_native("Event_OnReady", args) is None
    (error, user_arg), = received
    assert user_arg == 7 and calls.objects.pop(error).text == "it failed"
    assert call_native("Event_Destroy", abi.PJRT_Event_Destroy_Args(event=failed)) is None
    assert failed not in calls.objects
    assert call_native("Event_Destroy", abi.PJRT_Event_Destroy_Args(event=calls.COMPLETE_EVENT)) is None
    assert calls.COMPLETE_EVENT in calls.objects


@native_only
def test_error_destroy_of_null_is_native_and_of_an_error_releases_it():
    assert call_native("Error_Destroy", abi.PJRT_Error_Destroy_Args(error=None)) is None
    error = calls.handle(calls.Error(abi.INTERNAL, "it failed"))
    assert call_native("Error_Destroy", abi.PJRT_Error_Destroy_Args(error=error)) is None
    assert error not in calls.objects


def test_shared_events_are_never_destroyed():
    for event in calls.SHARED_EVENTS:
        call_python("Event_Destroy", abi.PJRT_Event_Destroy_Args(event=event))
        assert event in calls.objects
    assert calls.objects[calls.INTERRUPTED_EVENT].error.code == abi.CANCELLED


def test_headers_are_reused_after_release():
    first = calls.header_handle("a", [1, 2])
    calls.release_header(first)
    calls.release_header(first)   # a second release must not free the header twice
    second, third = calls.header_handle("b", [3]), calls.header_handle("c", [4])
    assert first == second != third
    assert (calls.header_word(second, 0), calls.header_word(third, 0)) == (3, 4)
    calls.release_header(second)
    calls.release_header(third)
    with pytest.raises(runtime.PluginError, match="destroyed handle"):
        calls.header_word(third, 0)


@pytest.mark.parametrize("array", [np.arange(5), np.zeros((0, 3)), np.asarray(np.float32(2)),
                                   np.frombuffer(b"abcdefgh", np.uint8), np.arange(6.0).reshape(2, 3)[1:, ::2],
                                   np.zeros(3, ml_dtypes.bfloat16)])
def test_array_address_is_numpy_s(array):
    """calls.array_address reads the data address from the array object, as
    array.ctypes.data gives it (views, read-only and empty arrays too)."""
    assert calls.array_address(array) == array.ctypes.data


def test_pointer_arrays():
    memory = (ctypes.c_uint64 * 8)()
    address = ctypes.addressof(memory)
    calls.write_pointers(address, [5, 2**64 - 1, 1 << 40])
    assert calls.read_pointers(address, 3) == [5, 2**64 - 1, 1 << 40]
    assert calls.read_pointers(address, 0) == []


@pytest.mark.parametrize("minor_to_major, expected", [((1, 0), lambda a: a), ((0, 1), lambda a: a.T)])
def test_to_host_buffer_writes_the_host_layout_asked_for(minor_to_major, expected):
    """Buffer_ToHostBuffer copies into the caller's memory in its layout: row-major, or
    column-major (minor_to_major (0, 1)), which is the transpose's row-major bytes."""
    device = calls_platform.ClientView(runtime.Client()).client.devices[0]
    array = np.arange(6, dtype=np.int16).reshape(2, 3)
    handle = buffer_handle(runtime.Buffer(device, array))
    order = (ctypes.c_int64 * 2)(*minor_to_major)
    layout = abi.PJRT_Buffer_MemoryLayout(type=abi.LAYOUT_TILED)
    layout.tiled.minor_to_major, layout.tiled.minor_to_major_size = ctypes.addressof(order), 2
    host = np.full(8, -1, np.int16)   # two more elements than the buffer: they stay untouched
    args = abi.PJRT_Buffer_ToHostBuffer_Args(src=handle, dst=host.ctypes.data, dst_size=host.nbytes,
                                             host_layout=ctypes.addressof(layout))
    try:
        call_python("Buffer_ToHostBuffer", args)
        np.testing.assert_array_equal(host, np.concatenate([expected(array).reshape(-1), [-1, -1]]))
        assert args.event == calls.COMPLETE_EVENT
        args.dst_size = 10
        with pytest.raises(runtime.PluginError, match="host buffer of 10 bytes is too small for 12 bytes"):
            call_python("Buffer_ToHostBuffer", args)
    finally:
        calls.release_header(handle)


def test_execute_on_one_device_runs_and_reports_bad_arguments():
    """The single-device path of Execute: the output buffer holds the result; a deleted
    argument and a handle that was destroyed are INVALID_ARGUMENT / FAILED_PRECONDITION
    errors naming what is wrong."""
    scalar = jax.device_put(np.float32(2.0), jax.devices("interp")[0])
    compiled = jax.jit(lambda v: v * 3).lower(scalar).compile()   # alive while its executable is used
    executable = [handle for handle, obj in calls.objects.items() if isinstance(obj, runtime.Executable)][-1]
    argument = runtime.Buffer(calls.objects[executable].devices[0], np.asarray(np.float32(2.0)))
    arguments = (ctypes.c_void_p * 1)(buffer_handle(argument))
    argument_lists = (ctypes.c_void_p * 1)(ctypes.addressof(arguments))
    outputs, events = (ctypes.c_void_p * 1)(), (ctypes.c_void_p * 1)()
    output_lists = (ctypes.c_void_p * 1)(ctypes.addressof(outputs))
    args = abi.PJRT_LoadedExecutable_Execute_Args(executable=executable, num_devices=1, num_args=1,
                                                  argument_lists=ctypes.addressof(argument_lists),
                                                  output_lists=ctypes.addressof(output_lists),
                                                  device_complete_events=ctypes.addressof(events))
    call_python("LoadedExecutable_Execute", args)
    assert calls.objects[outputs[0]].array() == np.float32(6.0) and events[0] == calls.COMPLETE_EVENT
    calls.release_header(outputs[0])
    argument.delete()
    with pytest.raises(runtime.PluginError, match="the buffer has been deleted or donated"):
        call_python("LoadedExecutable_Execute", args)
    calls.release_header(arguments[0])
    with pytest.raises(runtime.PluginError, match=f"unknown or destroyed buffer handle {arguments[0]}"):
        call_python("LoadedExecutable_Execute", args)
    del compiled


@pytest.mark.parametrize("num_devices, num_args, message", [
    (1, 2, "the program takes 1 argument.s. per device, got 2"),
    (1, 1 << 60, f"the program takes 1 argument.s. per device, got {1 << 60}"),
    (3, 1, "the program runs on 1 device.s., got arguments for 3"),
    (1 << 60, 1, f"the program runs on 1 device.s., got arguments for {1 << 60}"),
])
def test_execute_checks_its_counts_before_reading_its_lists(num_devices, num_args, message):
    """Execute reads ``num_devices`` lists of ``num_args`` handles: wrong counts are an
    INVALID_ARGUMENT error before any of that memory is read (a count far past the
    caller's arrays would read unmapped memory)."""
    scalar = jax.device_put(np.float32(2.0), jax.devices("interp")[0])
    compiled = jax.jit(lambda v: v * 5).lower(scalar).compile()
    executable = [handle for handle, obj in calls.objects.items() if isinstance(obj, runtime.Executable)][-1]
    assert calls.objects[executable].plain_region is not None   # the common path decides first
    arguments = (ctypes.c_void_p * 1)(buffer_handle(runtime.Buffer(calls.objects[executable].devices[0],
                                                                   np.asarray(np.float32(2.0)))))
    argument_lists = (ctypes.c_void_p * 1)(ctypes.addressof(arguments))
    outputs = (ctypes.c_void_p * 1)()
    output_lists = (ctypes.c_void_p * 1)(ctypes.addressof(outputs))
    args = abi.PJRT_LoadedExecutable_Execute_Args(executable=executable, num_devices=num_devices, num_args=num_args,
                                                  argument_lists=ctypes.addressof(argument_lists),
                                                  output_lists=ctypes.addressof(output_lists))
    try:
        with pytest.raises(runtime.PluginError, match=message) as raised:
            call_python("LoadedExecutable_Execute", args)
        assert raised.value.code == abi.INVALID_ARGUMENT and not outputs[0]
        args.num_devices, args.num_args = 1, 1
        call_python("LoadedExecutable_Execute", args)
        assert calls.objects[outputs[0]].array() == np.float32(10.0)
        calls.release_header(outputs[0])
    finally:
        calls.release_header(arguments[0])
    del compiled


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


# ---------------------------------------------------------------- the AArch64 code, under qemu

QEMU, CROSS_GCC = shutil.which("qemu-aarch64"), shutil.which("aarch64-linux-gnu-gcc")

# check_call(fn, arg): fn(arg) with markers in the callee-saved registers x19-x28;
# returns fn's result, or 0xDEAD if a marker or sp changed.
CHECK_CALL = """
    .text
    .globl check_call
check_call:
    stp x29, x30, [sp, #-96]!
    stp x19, x20, [sp, #16]
    stp x21, x22, [sp, #32]
    stp x23, x24, [sp, #48]
    stp x25, x26, [sp, #64]
    stp x27, x28, [sp, #80]
    mov x29, sp
    mov x9, x0
    mov x0, x1
""" + "".join(f"    mov x{r}, #{r}\n" for r in range(19, 29)) + """
    blr x9
    mov x9, sp
    cmp x9, x29
    b.ne 1f
""" + "".join(f"    cmp x{r}, #{r}\n    b.ne 1f\n" for r in range(19, 29)) + """
    b 2f
1:  mov x0, #0xDEAD
2:  ldp x19, x20, [sp, #16]
    ldp x21, x22, [sp, #32]
    ldp x23, x24, [sp, #48]
    ldp x25, x26, [sp, #64]
    ldp x27, x28, [sp, #80]
    ldp x29, x30, [sp], #96
    ret
"""

HARNESS = r"""
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
extern uint64_t check_call(void *fn, void *arg);
static char trail[256];
static int pending;
#define NOTE(...) sprintf(trail + strlen(trail), __VA_ARGS__)
static int ensure(void) { NOTE("E "); return 7; }
static void fetch(void **t, void **v, void **tb) { NOTE("F "); *t = pending ? (void *)0x10 : 0; *v = (void *)0x20; *tb = (void *)0x30; }
static void *thunk(void *args) { NOTE("T%lx ", (long)args); return (void *)0x1234; }
static void restore(void *t, void *v, void *tb) { NOTE("R%lx,%lx,%lx ", (long)t, (long)v, (long)tb); }
static void release(int state) { NOTE("L%d ", state); }
static void *take(void) { NOTE("G "); return pending ? (void *)0x10 : 0; }
static void put_back(void *exception) { NOTE("S%lx ", (long)exception); }
static void *fallback(uint64_t *args) { NOTE("fallback(%lx) ", (long)args[2]); return (void *)0x4321; }
static void callback(void *error, void *user_arg) { NOTE("callback(%lx,%lx) ", (long)error, (long)user_arg); }
static void *install(const unsigned char *code, size_t size) {
  unsigned char *page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  memcpy(page, code, size);
  uint64_t marks[9][2] = {{MARK_ENSURE, (uint64_t)ensure}, {MARK_FETCH, (uint64_t)fetch}, {MARK_THUNK, (uint64_t)thunk},
                          {MARK_RESTORE, (uint64_t)restore}, {MARK_RELEASE, (uint64_t)release},
                          {MARK_FALLBACK, (uint64_t)fallback}, {MARK_TAKE, (uint64_t)take},
                          {MARK_PUT_BACK, (uint64_t)put_back}, {0, 0}};
  for (size_t i = 0; i + 8 <= size; i += 4)
    for (int m = 0; marks[m][0]; m++)
      if (!memcmp(page + i, &marks[m][0], 8)) memcpy(page + i, &marks[m][1], 8);
  mprotect(page, 4096, PROT_READ | PROT_EXEC);
  __builtin___clear_cache((char *)page, (char *)page + size);
  return page;
}
static void report(const char *name, uint64_t result, uint64_t *args, int n) {
  printf("%s: %s-> %lx", name, trail, (long)result);
  for (int i = 0; i < n; i++) printf(" %lx", (long)args[i]);
  printf("\n");
  trail[0] = 0;
}
int main(void) {
  uint64_t header[16], args[16], result;
  for (int i = 0; i < 16; i++) header[i] = 0x100 * (i + 1) + 1;  /* low byte 1: a true bool */
CASES
  return 0;
}
"""


@pytest.mark.skipif(not (QEMU and CROSS_GCC), reason="needs qemu-aarch64 and aarch64-linux-gnu-gcc")
def test_aarch64_code_under_qemu(tmp_path):
    """The AArch64 guards (of CPython 3.11's PyErr_Fetch and of 3.12's
    PyErr_GetRaisedException) and fast paths, run by an AArch64 program under qemu
    with stub functions in place of CPython's and jaxlib's: calls, arguments,
    results, outputs, and the registers the calling convention says they keep."""
    machine = native.AArch64()
    marks = {name: 0x0101010101010101 * byte for name, byte in (
        ("ENSURE", 0xA1), ("FETCH", 0xA2), ("THUNK", 0xA3), ("RESTORE", 0xA4), ("RELEASE", 0xA5), ("FALLBACK", 0xA6),
        ("TAKE", 0xA7), ("PUT_BACK", 0xA8))}
    complete = 0xC0FFEE
    gil = {"ensure": marks["ENSURE"], "release": marks["RELEASE"], "thunk": marks["THUNK"]}
    guards = {
        "fetch": (native.guard_code(machine.GUARDS["fetch"], {**gil, "take": marks["FETCH"],
                                                              "put_back": marks["RESTORE"]}), "F ", "R10,20,30 "),
        "raised": (native.guard_code(machine.GUARDS["raised"], {**gil, "take": marks["TAKE"],
                                                                "put_back": marks["PUT_BACK"]}), "G ", "S10 ")}
    cases, expected = [], []

    def case(name, code, fill, shown, outcome):
        hex_bytes = ",".join(str(b) for b in code)
        cases.append(f"  {{ static const unsigned char code[] = {{{hex_bytes}}}; memset(args, 0, sizeof args); {fill}\n"
                     f"    result = check_call(install(code, sizeof code), args); report(\"{name}\", result, args, {shown}); }}")
        expected.append(f"{name}: {outcome}")

    for kind, (guard, taken, put_back) in guards.items():
        for is_pending in (0, 1):
            restored = put_back if is_pending else ""
            case(f"guard-{kind}{is_pending}", guard, f"pending = {is_pending};", 0,
                 f"E {taken}T{{args}} {restored}L7 -> 1234")
    for name, (shape, args_type) in sorted(api.CALLS.fast_paths.items()):
        words = ctypes.sizeof(args_type) // 8
        if isinstance(shape, native.CompleteEvent):
            for event in (complete, 0xBAD):
                fill = (f"args[{args_type.event.offset // 8}] = {event:#x};" +
                        (f" args[{args_type.callback.offset // 8}] = (uint64_t)callback;"
                         f" args[{args_type.user_arg.offset // 8}] = 0x77;" if shape.on_ready else ""))
                code = shape.native(machine, args_type, marks["FALLBACK"], complete)
                if event == complete:
                    outcome = ("callback(0,77) " if shape.on_ready else "") + "-> 0"
                else:
                    outcome = f"fallback({event:x}) -> 4321"
                case(f"{name}/{event:x}", code, fill, 0, outcome)
            continue
        if isinstance(shape, native.WhenNull):
            offset = getattr(args_type, shape.field).offset // 8
            code = shape.native(machine, args_type, marks["FALLBACK"], complete)
            case(f"{name}/null", code, "", 0, "-> 0")
            case(f"{name}/set", code, f"args[{offset}] = 0xE1;", 0, "fallback(e1) -> 4321")
            continue
        code = shape.native(machine, args_type, marks["FALLBACK"], complete)
        by_python = args_type()
        if isinstance(shape, native.HeaderWords):
            fill = f"args[{getattr(args_type, shape.handle).offset // 8}] = (uint64_t)header;"
            setattr(by_python, shape.handle, 0x5150)
            shape.python(by_python, lambda handle, index: 0x100 * (index + 1) + 1)
            setattr(by_python, shape.handle, 0)   # the harness's header address is not known here
        else:
            fill = ""
            shape.python(by_python)
        words_by_python = list((ctypes.c_uint64 * words).from_buffer(by_python))
        shown = " ".join("{header}" if isinstance(shape, native.HeaderWords) and
                         i == getattr(args_type, shape.handle).offset // 8 else f"{w:x}"
                         for i, w in enumerate(words_by_python))
        case(name, code, fill, words, f"-> 0 {shown}")

    (tmp_path / "check_call.s").write_text(CHECK_CALL)
    source = HARNESS.replace("CASES", "\n".join(cases))
    for name, value in marks.items():
        source = source.replace(f"MARK_{name}", f"{value:#x}ULL")
    (tmp_path / "harness.c").write_text(source)
    subprocess.run([CROSS_GCC, "-O1", "-static", "-o", str(tmp_path / "harness"), str(tmp_path / "harness.c"),
                    str(tmp_path / "check_call.s")], check=True, capture_output=True, timeout=300)
    run = subprocess.run([QEMU, str(tmp_path / "harness")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == len(expected)
    for line, want in zip(lines, expected):
        if "{args}" in want or "{header}" in want:
            # addresses of the harness's own arrays: any value, as long as the rest matches
            pattern = re.escape(want).replace(re.escape("{args}"), "[0-9a-f]+").replace(re.escape("{header}"),
                                                                                          "[0-9a-f]+")
            assert re.fullmatch(pattern, line), (line, want)
        else:
            assert line == want


def test_at_exit_releasing_calls_no_longer_enter_python():
    """Hazard 3 of plugin.py, in a child process: after the atexit handler, every slot
    that only releases (Buffer_Destroy, Buffer_Delete, the end of an external
    reference that np.asarray of a device array holds ...) is the native no-op, and
    the others are as they were; the process then ends cleanly, arrays still alive."""
    script = textwrap.dedent("""
        import ctypes, jax, numpy as np
        from stablehlo_interp.device import plugin
        from stablehlo_interp.device.pjrt import native
        x = jax.device_put(np.arange(4, dtype=np.float32), jax.devices("interp")[0])
        y = jax.jit(lambda v: v * 2)(x)
        view = np.asarray(y)          # read in place: an external reference to y's buffer
        api = plugin.table().api
        slot = lambda name: ctypes.cast(getattr(api, "PJRT_" + name), ctypes.c_void_p).value
        before = {name: slot(name) for name in ("Buffer_ToHostBuffer", "LoadedExecutable_Execute")}
        plugin._silence_releasing_calls()
        no_op = native.no_op()
        print(sorted(name for name in plugin.RELEASING_SLOTS if slot(name) == no_op))
        print(all(slot(name) == address != no_op for name, address in before.items()), view.tolist())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    silenced, others = done.stdout.strip().splitlines()
    assert ast.literal_eval(silenced) == sorted(plugin.RELEASING_SLOTS)
    assert {"Buffer_Destroy", "Buffer_Delete", "Buffer_DecreaseExternalReferenceCount", "Client_Destroy",
            "LoadedExecutable_Delete", "Event_Destroy", "Error_Destroy"} <= set(plugin.RELEASING_SLOTS)
    assert others == "True [0.0, 2.0, 4.0, 6.0]"


# ---------------------------------------------------------------- the x86-64 guards, on stub functions

x86_64_only = pytest.mark.skipif(not isinstance(native.architecture(), native.X86_64),
                                 reason="x86-64 machine code, run on this machine")


@x86_64_only
@pytest.mark.parametrize("pending", [False, True])
@pytest.mark.parametrize("kind", ["fetch", "raised"])
def test_x86_64_guards_call_in_order(kind, pending):
    """Each x86-64 guard (CPython 3.11's PyErr_Fetch/PyErr_Restore, 3.12's
    PyErr_GetRaisedException/PyErr_SetRaisedException), called as jaxlib calls a slot,
    with ctypes stubs in place of CPython's calls: the GIL taken, the pending
    exception taken out, the thunk called on the args, the exception put back only if
    there was one, the GIL's state released, the thunk's result returned."""
    trail = []
    void_p = ctypes.c_void_p
    stubs = {
        "ensure": ctypes.CFUNCTYPE(ctypes.c_int)(lambda: trail.append("E") or 7),
        "thunk": ctypes.CFUNCTYPE(void_p, void_p)(lambda args: trail.append(f"T{args or 0:x}") or 0x1234),
        "release": ctypes.CFUNCTYPE(None, ctypes.c_int)(lambda state: trail.append(f"L{state}")),
    }
    if kind == "fetch":
        def fetch(kind_out, value_out, traceback_out):
            trail.append("F")
            kind_out[0], value_out[0], traceback_out[0] = (0x10 if pending else None), 0x20, 0x30

        pointer = ctypes.POINTER(void_p)
        stubs["take"] = ctypes.CFUNCTYPE(None, pointer, pointer, pointer)(fetch)
        stubs["put_back"] = ctypes.CFUNCTYPE(None, void_p, void_p, void_p)(
            lambda *exception: trail.append("R" + ",".join(f"{part or 0:x}" for part in exception)))
        put_back = "R10,20,30"
    else:
        stubs["take"] = ctypes.CFUNCTYPE(void_p)(lambda: trail.append("G") or (0x10 if pending else None))
        stubs["put_back"] = ctypes.CFUNCTYPE(None, void_p)(lambda exception: trail.append(f"S{exception or 0:x}"))
        put_back = "S10"
    pages = native._CodePages(1)
    guard = pages.add(native.guard_code(native.X86_64.GUARDS[kind],
                                        {name: ctypes.cast(stub, void_p).value for name, stub in stubs.items()}))
    pages.seal()
    assert abi.API_FUNCTION(guard)(0xABC0) == 0x1234
    assert trail == ["E", "F" if kind == "fetch" else "G", "Tabc0", *([put_back] if pending else []), "L7"]


def test_the_guard_takes_the_exception_with_this_python_s_calls():
    """3.12 and later: PyErr_GetRaisedException (PyErr_Fetch is deprecated there); 3.11:
    PyErr_Fetch. A Python that has the new calls gets them."""
    kind, addresses = native.exception_calls()
    assert kind == ("raised" if sys.version_info >= (3, 12) else "fetch")
    python = ctypes.pythonapi
    new = types.SimpleNamespace(PyGILState_Ensure=python.PyGILState_Ensure, PyGILState_Release=python.PyGILState_Release,
                                PyErr_GetRaisedException=python.Py_IncRef, PyErr_SetRaisedException=python.Py_DecRef)
    kind, addresses = native.exception_calls(new)
    assert kind == "raised"
    assert (addresses["take"], addresses["put_back"]) == (ctypes.cast(python.Py_IncRef, ctypes.c_void_p).value,
                                                          ctypes.cast(python.Py_DecRef, ctypes.c_void_p).value)


# ---------------------------------------------------------------- each invariant of the encodings is an exception

@pytest.mark.parametrize("machine", [native.X86_64(), native.AArch64()], ids=["x86-64", "aarch64"])
@pytest.mark.parametrize("encode, message", [
    (lambda m: m.header_words(-8, [(0, 0, 8)]), "field offset -8|offset of a 8-byte access -8"),
    (lambda m: m.header_words(0, [(0, 2**31, 8)]), "2147483648"),
    (lambda m: m.header_words(0, [(0, 8, 2)]), "2 bytes wide"),
    (lambda m: m.constants([(0, 8, 2**64)]), "64-bit value"),
    (lambda m: m.constants([(0, 8, -1)]), "64-bit value"),
    (lambda m: m.complete_event(0, 1, 0, None), "fallback address 0"),
])
def test_an_encoding_that_cannot_hold_its_value_raises(machine, encode, message):
    with pytest.raises(ValueError, match=message):
        encode(machine)


@pytest.mark.parametrize("encode, message", [
    (lambda m: m.header_words(12, [(0, 0, 8)]), "a multiple of 8"),            # ldr's offset is scaled
    (lambda m: m.header_words(0, [(0, 6, 4)]), "a multiple of 4"),
    (lambda m: m.header_words(32768, [(0, 0, 8)]), "32768"),
    (lambda m: m.complete_event(0, 1, 64, (12, 16)), "a multiple of 8"),
])
def test_an_aarch64_offset_its_instruction_cannot_scale_raises(encode, message):
    with pytest.raises(ValueError, match=message):
        encode(native.AArch64())


def test_a_guard_listing_and_its_addresses_are_checked():
    listing = native.X86_64.GUARDS["raised"]
    addresses = dict(ensure=1, take=2, thunk=3, put_back=4, release=5)
    code = native.guard_code(listing, addresses)
    assert len(code) == len(listing) and all(address.to_bytes(8, "little") in code for address in range(1, 6))
    with pytest.raises(ValueError, match="takes the addresses of"):
        native.guard_code(listing, {**addresses, "fetch": 6})
    with pytest.raises(ValueError, match="placeholder of 'thunk' 0 times"):
        native.guard_code(listing.replace(b"\x33" * 8, b"\x00" * 8), addresses)
    with pytest.raises(ValueError, match="placeholder of 'take' 2 times"):
        native.guard_code(listing + b"\x22" * 8, addresses)
    with pytest.raises(ValueError, match="address of release 0"):
        native.guard_code(listing, {**addresses, "release": 0})


def test_code_pages_refuse_code_larger_than_a_slot_and_slots_past_their_pages():
    pages = native._CodePages(1)
    with pytest.raises(ValueError, match="193 bytes does not fit its slot of 192"):
        pages.add(b"\xc3" * 193)
    for _ in range(pages.size // native._SLOT):
        pages.add(b"\xc3")
    with pytest.raises(ValueError, match="no slot left"):
        pages.add(b"\xc3")


def test_the_checks_hold_under_python_dash_o():
    """``python -O`` drops asserts: the encodings' checks are exceptions, so they stay."""
    script = ("from stablehlo_interp.device.pjrt import native\n"
              "try:\n    native.AArch64().header_words(12, [])\nexcept ValueError as error:\n    print(error)\n")
    done = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "offset of a 8-byte access 12 does not fit its encoding" in done.stdout


def test_without_a_guard_the_device_warns_what_remains(monkeypatch):
    """No machine code for this platform (macOS on arm64, Windows ...) or no executable
    memory: the thunks are the entry points, and a RuntimeWarning says the
    pending-exception hazard remains, instead of falling back in silence."""
    thunks = {"Buffer_Destroy": 0x1000, "Error_Destroy": 0x2000}
    with monkeypatch.context() as patch:
        patch.setattr(native, "architecture", lambda: None)
        with pytest.warns(RuntimeWarning, match="has no native guard for .*exception is pending"):
            assert native.entry_points(thunks, {}, 0) == thunks

    def refused(self):
        raise OSError(13, "mprotect failed")

    if native.architecture() is not None:
        monkeypatch.setattr(native._CodePages, "seal", refused)
        with pytest.warns(RuntimeWarning, match=r"cannot install its native guards \(\[Errno 13\] mprotect failed\)"):
            assert native.entry_points(thunks, {}, 0) == thunks
