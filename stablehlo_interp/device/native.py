"""Native guards around the Python thunks: keep a pending Python exception out of them.

jaxlib calls some PJRT functions from deallocators: a ``jax.Array`` that dies
on the value stack while an exception unwinds calls ``PJRT_Buffer_Destroy``
with that exception still *pending* in the thread state. A ctypes callback
cannot return a value in that state: CPython flags "a result with an exception
set", ctypes reports it as unraisable (clearing the exception) and returns
garbage to C, so jaxlib aborts on a bogus ``PJRT_Error*``; and even if the
thunk took the exception out and returned NULL, the unwinding interpreter would
find its exception gone and crash.

The fix has to run around the ctypes callback, in native code: a guard that
takes the GIL (jaxlib may have released it around the destruction), takes the
pending exception out (``PyErr_Fetch``), calls the thunk with a clean state,
and puts the exception back (``PyErr_Restore``) once the callback has returned
its value::

    PJRT_Error* guard(void* args) {
        PyGILState_STATE state = PyGILState_Ensure();
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PJRT_Error* result = thunk(args);
        if (type) PyErr_Restore(type, value, traceback);
        PyGILState_Release(state);
        return result;
    }

There is no compiler at install time, so the guard is this x86-64 machine
code (assembled once with GNU as; listing below), copied into an executable
page once per thunk with the five addresses filled in. On other machines
:func:`entry_points` returns the thunks unchanged (the hazard remains there).

*Fast paths.* A ctypes callback costs about a microsecond, and a jitted call
makes a dozen PJRT calls, most of them getters that copy a value JAX could
have kept (``Executable_NumReplicas`` twice per call, ``Buffer_Device`` of
every output ...). Those get native code of three shapes (:class:`Constants`,
:class:`HeaderWords`, :class:`CompleteEvent`) that never enters Python; the
data they read lives in C (the *header* of a handle, ``api.header_handle``).
Each fast path has the Python implementation that serves it on other
machines and with ``STABLEHLO_INTERP_PJRT_TRACE``.
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import struct
from dataclasses import dataclass

# x86-64 System V; "movabs rax, imm64" placeholders 0x11.. to 0x55..
#   push rbx; push r12; push r13; sub rsp, 32   (rsp 16-byte aligned for the calls)
#   mov rbx, rdi                                (the args pointer)
#   movabs rax, PyGILState_Ensure; call rax; mov r13d, eax
#   lea rdi, [rsp]; lea rsi, [rsp+8]; lea rdx, [rsp+16]
#   movabs rax, PyErr_Fetch; call rax
#   mov rdi, rbx; movabs rax, thunk; call rax; mov r12, rax
#   mov rdi, [rsp]; test rdi, rdi; je 1f
#   mov rsi, [rsp+8]; mov rdx, [rsp+16]; movabs rax, PyErr_Restore; call rax
# 1: mov edi, r13d; movabs rax, PyGILState_Release; call rax
#   mov rax, r12; add rsp, 32; pop r13; pop r12; pop rbx; ret
_X86_64_GUARD = bytes.fromhex(
    "53415441554883ec204889fb48b81111111111111111ffd04189c5488d3c24488d742408488d"
    "54241048b82222222222222222ffd04889df48b83333333333333333ffd04989c4488b3c2448"
    "85ff7416488b742408488b54241048b84444444444444444ffd04489ef48b855555555555555"
    "55ffd04c89e04883c420415d415c5bc3")
_PLACEHOLDERS = {name: bytes([byte]) * 8 for name, byte in (
    ("ensure", 0x11), ("fetch", 0x22), ("thunk", 0x33), ("restore", 0x44), ("release", 0x55))}
_SLOT = 144   # bytes per guard in the code pages


class _CodePages:
    """Executable memory for guards: written while read-write, then made read-execute.

    Mapped with libc's ``mmap`` and never unmapped: jaxlib may call a guard
    until the process ends.
    """

    def __init__(self, count: int):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self._mprotect = libc.mprotect
        self.size = -(-count * _SLOT // mmap.PAGESIZE) * mmap.PAGESIZE
        address = libc.mmap(None, self.size, mmap.PROT_READ | mmap.PROT_WRITE,
                            mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap failed")
        self.address = address
        self.used = 0

    def add(self, code: bytes) -> int:
        assert len(code) <= _SLOT, len(code)
        address = self.address + self.used
        ctypes.memmove(address, code, len(code))
        self.used += _SLOT
        return address

    def seal(self) -> None:
        if self._mprotect(self.address, self.size, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed")


def _address(function) -> int:
    return ctypes.cast(function, ctypes.c_void_p).value


def guards_supported() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def _offset(args_type, field: str, size: int = 8) -> int:
    """Offset of ``field`` in ``args_type``, which must be a ``size``-byte field."""
    descriptor = getattr(args_type, field)
    if descriptor.size != size:
        raise TypeError(f"{args_type.__name__}.{field} is {descriptor.size} bytes, not {size}")
    return descriptor.offset


# x86-64 instructions the fast paths are made of (rdi: the args pointer).
def _load_rax_from_args(offset: int) -> bytes:        # mov rax, [rdi + offset]
    return b"\x48\x8b\x87" + struct.pack("<i", offset)


def _load_rcx_from_rax(offset: int) -> bytes:         # mov rcx, [rax + offset]
    return b"\x48\x8b\x88" + struct.pack("<i", offset)


def _store_rcx_to_args(offset: int) -> bytes:         # mov [rdi + offset], rcx
    return b"\x48\x89\x8f" + struct.pack("<i", offset)


def _move_rcx(value: int) -> bytes:                   # movabs rcx, value
    return b"\x48\xb9" + struct.pack("<Q", value)


_RETURN_NULL = b"\x31\xc0\xc3"                        # xor eax, eax; ret


def _unless_rax_is_rcx_jump_to(fallback: int, code: bytes) -> bytes:
    """cmp rax, rcx; jne L; <code>; L: movabs rax, fallback; jmp rax (a tail call: same args)."""
    return b"\x48\x39\xc8\x75" + bytes([len(code)]) + code + b"\x48\xb8" + struct.pack("<Q", fallback) + b"\xff\xe0"


@dataclass(frozen=True)
class Constants:
    """Writes the same values into ``args`` at every call: ``{field: value}``."""

    outputs: tuple

    def python(self, args) -> None:
        for field, value in self.outputs:
            setattr(args, field, value)

    def x86_64(self, args_type, fallback: int, complete_event: int) -> bytes:
        code = b"".join(_move_rcx(value) + _store_rcx_to_args(_offset(args_type, field))
                        for field, value in self.outputs)
        return code + _RETURN_NULL


@dataclass(frozen=True)
class HeaderWords:
    """Copies words of a handle's header into ``args``: ``args.field = header[index]``.

    The handle in ``args.<handle>`` is the address of its header
    (``api.header_handle``), an array of 64-bit words.
    """

    handle: str
    outputs: tuple   # (field, index) pairs

    def python(self, args, header_word) -> None:
        handle = getattr(args, self.handle)
        for field, index in self.outputs:
            setattr(args, field, header_word(handle, index))

    def x86_64(self, args_type, fallback: int, complete_event: int) -> bytes:
        code = _load_rax_from_args(_offset(args_type, self.handle))
        for field, index in self.outputs:
            code += _load_rcx_from_rax(8 * index) + _store_rcx_to_args(_offset(args_type, field))
        return code + _RETURN_NULL


@dataclass(frozen=True)
class CompleteEvent:
    """For the shared complete event, what the call does with it natively; any other
    event goes on to the Python implementation.

    With ``on_ready``, calls ``args.callback(NULL, args.user_arg)``
    (PJRT_Event_OnReady); without, does nothing (PJRT_Event_Destroy).
    """

    on_ready: bool = False

    def x86_64(self, args_type, fallback: int, complete_event: int) -> bytes:
        code = b""
        if self.on_ready:
            code = (b"\x48\x83\xec\x08"                                                  # sub rsp, 8
                    + b"\x48\x8b\xb7" + struct.pack("<i", _offset(args_type, "user_arg"))   # mov rsi, [rdi+..]
                    + _load_rax_from_args(_offset(args_type, "callback"))
                    + b"\x31\xff\xff\xd0"                                                 # xor edi, edi; call rax
                    + b"\x48\x83\xc4\x08")                                                # add rsp, 8
        return (_load_rax_from_args(_offset(args_type, "event")) + _move_rcx(complete_event)
                + _unless_rax_is_rcx_jump_to(fallback, code + _RETURN_NULL))


def entry_points(thunks: dict[str, int], fast_paths: dict[str, tuple], complete_event: int) -> dict[str, int]:
    """The native entry point of each slot: for thunks ``{name: address}``, their
    guards; for ``fast_paths`` ``{name: (shape, args_type)}``, the fast path, which
    falls back to the guard. Without native code, the thunks themselves."""
    if not guards_supported() or not thunks:
        return dict(thunks)
    python = ctypes.pythonapi
    fixed = {"ensure": _address(python.PyGILState_Ensure), "fetch": _address(python.PyErr_Fetch),
             "restore": _address(python.PyErr_Restore), "release": _address(python.PyGILState_Release)}
    try:
        pages = _CodePages(len(thunks) + len(fast_paths))
        result = {}
        for name, thunk in thunks.items():
            code = _X86_64_GUARD
            for key, address in {**fixed, "thunk": thunk}.items():
                code = code.replace(_PLACEHOLDERS[key], address.to_bytes(8, "little"))
            result[name] = pages.add(code)
        for name, (shape, args_type) in fast_paths.items():
            result[name] = pages.add(shape.x86_64(args_type, result[name], complete_event))
        pages.seal()
    except OSError:   # no executable memory (a W^X policy): fall back to the bare thunks
        return dict(thunks)
    return result
