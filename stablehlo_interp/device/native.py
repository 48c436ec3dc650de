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
:func:`guarded` returns the thunk unchanged (the hazard remains there).
"""

from __future__ import annotations

import ctypes
import mmap
import platform

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


def guarded(thunks: dict[str, int]) -> dict[str, int]:
    """Native guards for thunks ``{name: address}``; the thunks themselves where unsupported."""
    if not guards_supported() or not thunks:
        return dict(thunks)
    python = ctypes.pythonapi
    fixed = {"ensure": _address(python.PyGILState_Ensure), "fetch": _address(python.PyErr_Fetch),
             "restore": _address(python.PyErr_Restore), "release": _address(python.PyGILState_Release)}
    try:
        pages = _CodePages(len(thunks))
        result = {}
        for name, thunk in thunks.items():
            code = _X86_64_GUARD
            for key, address in {**fixed, "thunk": thunk}.items():
                code = code.replace(_PLACEHOLDERS[key], address.to_bytes(8, "little"))
            result[name] = pages.add(code)
        pages.seal()
    except OSError:   # no executable memory (a W^X policy): fall back to the bare thunks
        return dict(thunks)
    return result
