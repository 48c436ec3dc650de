"""Native code in front of the Python thunks: guards, and fast paths for the hottest calls.

*Guards.* jaxlib calls some PJRT functions from deallocators: a ``jax.Array``
that dies on the value stack while an exception unwinds calls
``PJRT_Buffer_Destroy`` with that exception still *pending* in the thread
state. A ctypes callback cannot return a value in that state: CPython flags "a
result with an exception set", ctypes reports it as unraisable (clearing the
exception) and returns garbage to C, so jaxlib aborts on a bogus
``PJRT_Error*``; and even if the thunk took the exception out and returned
NULL, the unwinding interpreter would find its exception gone and crash.

The fix has to run around the ctypes callback, in native code: a guard that
takes the GIL (jaxlib may have released it around the destruction), takes the
pending exception out, calls the thunk with a clean state, and puts the
exception back once the callback has returned its value::

    PJRT_Error* guard(void* args) {            // CPython 3.12 and later
        PyGILState_STATE state = PyGILState_Ensure();
        PyObject *exception = PyErr_GetRaisedException();
        PJRT_Error* result = thunk(args);
        if (exception) PyErr_SetRaisedException(exception);
        PyGILState_Release(state);
        return result;
    }

CPython 3.11 has no ``PyErr_GetRaisedException``; there the guard takes the
exception out with ``PyErr_Fetch`` (deprecated since 3.12) and puts it back
with ``PyErr_Restore``. :func:`exception_calls` says which pair this Python has,
and each machine has a listing for each (``GUARDS``).

*Fast paths.* A ctypes callback costs about a microsecond, and a jitted call
makes a dozen PJRT calls, most of them getters that copy a value JAX could
have kept (``Executable_NumReplicas`` twice per call, ``Buffer_Device`` of
every output ...). Those get native code of four shapes (:class:`Constants`,
:class:`HeaderWords`, :class:`CompleteEvent`, :class:`WhenNull`) that never
enters Python in the common case; the data they read lives in C (the *header*
of a handle, ``calls.header_handle``). Outputs may be 8, 4 (enums) or 1 (bools)
bytes wide: a narrow one gets the low bytes of its word.
Each fast path has the Python implementation that serves it where there is no
native code and with ``STABLEHLO_INTERP_PJRT_TRACE``.

There is no compiler at install time, so all of it is machine code, for x86-64
(System V: Linux, macOS) and for AArch64 Linux: each guard is a fixed listing
(assembled once with GNU as) with five addresses filled in; the fast paths are
a few instructions encoded below. The code is copied into pages that are
written while read-write and then made read-execute once (on AArch64 Linux the
kernel makes the instruction cache coherent when a page becomes executable).
Every rule the encodings rely on (an offset's range and alignment, a jump's
reach, a listing's placeholders, a slot's size) is checked with an exception,
not an ``assert``, so ``python -O`` keeps the checks.

Elsewhere (macOS on arm64, Windows, other machines), and where the system
refuses executable memory, :func:`entry_points` warns and returns the thunks
unchanged: the calls all go through Python, and the pending-exception hazard
remains (docs/device.md says which platforms and what can happen).
tests/test_device_native.py runs the AArch64 code under qemu where it is
installed, and the x86-64 guards of both CPython APIs on stub functions.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct
import sys
import warnings
from dataclasses import dataclass

# The placeholders of the five addresses in a guard listing: the GIL's two calls
# (ensure, release), the calls that take the pending exception out and put it back
# (take, put_back: exception_calls) and the thunk.
_PLACEHOLDERS = {name: bytes([byte]) * 8 for name, byte in (
    ("ensure", 0x11), ("take", 0x22), ("thunk", 0x33), ("put_back", 0x44), ("release", 0x55))}
_SLOT = 192   # bytes per guard or fast path in the code pages


def _checked(value: int, low: int, high: int, what: str, multiple_of: int = 1) -> int:
    """``value`` if ``low <= value < high`` and a multiple of ``multiple_of``; else a ValueError
    naming ``what`` (an encoding that cannot hold it would write another instruction)."""
    if not (low <= value < high and value % multiple_of == 0):
        raise ValueError(f"{what} {value} does not fit its encoding: it must be in [{low}, {high})"
                         + (f" and a multiple of {multiple_of}" if multiple_of > 1 else ""))
    return value


def _displacement(offset: int) -> bytes:
    """An x86-64 disp32 of a field's offset in a structure (0 to 2**31 - 1)."""
    return struct.pack("<i", _checked(offset, 0, 1 << 31, "field offset"))


class X86_64:
    """x86-64, System V calling convention: the args pointer arrives in rdi."""

    GUARDS = {
        # CPython 3.11 (PyErr_Fetch, PyErr_Restore):
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
        "fetch": bytes.fromhex(
            "53415441554883ec204889fb48b81111111111111111ffd04189c5488d3c24488d742408488d"
            "54241048b82222222222222222ffd04889df48b83333333333333333ffd04989c4488b3c2448"
            "85ff7416488b742408488b54241048b84444444444444444ffd04489ef48b855555555555555"
            "55ffd04c89e04883c420415d415c5bc3"),
        # CPython 3.12 and later (PyErr_GetRaisedException, PyErr_SetRaisedException):
        #   push rbx; push r12; push r13                (rsp 16-byte aligned for the calls)
        #   mov rbx, rdi                                (the args pointer)
        #   movabs rax, PyGILState_Ensure; call rax; mov r13d, eax
        #   movabs rax, PyErr_GetRaisedException; call rax; mov r12, rax
        #   mov rdi, rbx; movabs rax, thunk; call rax; mov rbx, rax
        #   test r12, r12; je 1f
        #   mov rdi, r12; movabs rax, PyErr_SetRaisedException; call rax
        # 1: mov edi, r13d; movabs rax, PyGILState_Release; call rax
        #   mov rax, rbx; pop r13; pop r12; pop rbx; ret
        "raised": bytes.fromhex(
            "53415441554889fb48b81111111111111111ffd04189c548b82222222222222222ffd04989c4"
            "4889df48b83333333333333333ffd04889c34d85e4740f4c89e748b84444444444444444ffd0"
            "4489ef48b85555555555555555ffd04889d8415d415c5bc3"),
    }
    _RETURN_NULL = b"\x31\xc0\xc3"                                    # xor eax, eax; ret

    @staticmethod
    def _load_rax(offset: int) -> bytes:                              # mov rax, [rdi + offset]
        return b"\x48\x8b\x87" + _displacement(offset)

    @staticmethod
    def _store_rcx(offset: int, width: int = 8) -> bytes:   # mov [rdi + offset], rcx / ecx / cl
        opcodes = {8: b"\x48\x89\x8f", 4: b"\x89\x8f", 1: b"\x88\x8f"}
        if width not in opcodes:
            raise ValueError(f"an output {width} bytes wide: the native code stores 8, 4 or 1")
        return opcodes[width] + _displacement(offset)

    @staticmethod
    def _move_rcx(value: int) -> bytes:                               # movabs rcx, value
        return b"\x48\xb9" + struct.pack("<Q", _checked(value, 0, 1 << 64, "64-bit value"))

    def constants(self, outputs) -> bytes:
        """``[(offset, width, value)]``: store each value (its low ``width`` bytes) at
        args + offset; return NULL."""
        return b"".join(self._move_rcx(value) + self._store_rcx(offset, width) for offset, width, value in outputs) \
            + self._RETURN_NULL

    def header_words(self, handle_offset: int, copies) -> bytes:
        """``[(word offset, output offset, width)]``: copy words of the header the handle at
        args + handle_offset points to into the args (their low ``width`` bytes); return NULL."""
        code = self._load_rax(handle_offset)
        for word_offset, output_offset, width in copies:              # mov rcx, [rax + word_offset]
            code += b"\x48\x8b\x88" + _displacement(word_offset) + self._store_rcx(output_offset, width)
        return code + self._RETURN_NULL

    def complete_event(self, event_offset: int, complete: int, fallback: int, call_back) -> bytes:
        """If the event (or other pointer) at args + event_offset is ``complete``: call
        ``callback(NULL, user_arg)`` if ``call_back`` gives their offsets, return NULL;
        otherwise jump to ``fallback`` with the same args."""
        handled = b""
        if call_back is not None:
            callback_offset, user_arg_offset = call_back
            handled = (b"\x48\x83\xec\x08"                                         # sub rsp, 8
                       + b"\x48\x8b\xb7" + _displacement(user_arg_offset)         # mov rsi, [rdi + ..]
                       + self._load_rax(callback_offset)
                       + b"\x31\xff\xff\xd0"                                        # xor edi, edi; call rax
                       + b"\x48\x83\xc4\x08")                                       # add rsp, 8
        handled += self._RETURN_NULL
        skip = _checked(len(handled), 0, 128, "jump over the handled case (rel8, bytes)")
        return (self._load_rax(event_offset) + self._move_rcx(complete)
                + b"\x48\x39\xc8\x75" + bytes([skip]) + handled                    # cmp rax, rcx; jne
                + b"\x48\xb8" + struct.pack("<Q", _checked(fallback, 1, 1 << 64, "fallback address"))
                + b"\xff\xe0")                                                     # movabs rax, ..; jmp rax


class _A64Code:
    """AArch64 instructions, with 64-bit literals in a pool after the code."""

    NOP = 0xD503201F

    def __init__(self):
        self.words: list[int] = []
        self.literals: list[tuple[int, int, int]] = []   # (instruction index, register, value)

    def emit(self, *words: int) -> "_A64Code":
        self.words.extend(words)
        return self

    @staticmethod
    def scaled(offset: int, width: int) -> int:
        """The imm12 of an ``ldr``/``str`` of ``width`` bytes at ``offset``: the offset in
        units of ``width`` (unsigned, 12 bits)."""
        return _checked(offset, 0, 4096 * width, f"offset of a {width}-byte access", width) // width

    def load(self, register: int, base: int, offset: int) -> "_A64Code":       # ldr xR, [xB, #offset]
        return self.emit(0xF9400000 | self.scaled(offset, 8) << 10 | base << 5 | register)

    def store(self, register: int, base: int, offset: int, width: int = 8) -> "_A64Code":
        """str xR / str wR / strb wR, [xB, #offset]: the register's low ``width`` bytes."""
        opcodes = {8: 0xF9000000, 4: 0xB9000000, 1: 0x39000000}
        if width not in opcodes:
            raise ValueError(f"an output {width} bytes wide: the native code stores 8, 4 or 1")
        return self.emit(opcodes[width] | self.scaled(offset, width) << 10 | base << 5 | register)

    def load_literal(self, register: int, value: int) -> "_A64Code":          # ldr xR, =value
        self.literals.append((len(self.words), register, _checked(value, 0, 1 << 64, "64-bit value")))
        return self.emit(self.NOP)

    def code(self) -> bytes:
        words = list(self.words) + [self.NOP] * (len(self.words) % 2)        # the pool is 8-byte aligned
        for slot, (at, register, _) in enumerate(self.literals):
            distance = len(words) + 2 * slot - at                                # in instructions
            _checked(distance, 0, 1 << 18, "literal's distance (imm19, instructions)")
            words[at] = 0x58000000 | distance << 5 | register
        return struct.pack(f"<{len(words)}I", *words) + b"".join(
            struct.pack("<Q", value) for _, _, value in self.literals)


class AArch64:
    """AArch64 (AAPCS64): the args pointer arrives in x0."""

    GUARDS = {
        # CPython 3.11 (PyErr_Fetch, PyErr_Restore):
        # stp x29, x30, [sp, #-64]!; mov x29, sp; stp x19, x20, [sp, #16]; str x21, [sp, #32]
        # mov x19, x0; ldr x16, =PyGILState_Ensure; blr x16; mov w20, w0
        # add x0, sp, #40; add x1, sp, #48; add x2, sp, #56; ldr x16, =PyErr_Fetch; blr x16
        # mov x0, x19; ldr x16, =thunk; blr x16; mov x21, x0
        # ldr x0, [sp, #40]; cbz x0, 1f; ldr x1, [sp, #48]; ldr x2, [sp, #56]
        # ldr x16, =PyErr_Restore; blr x16
        # 1: mov w0, w20; ldr x16, =PyGILState_Release; blr x16
        # mov x0, x21; ldr x21, [sp, #32]; ldp x19, x20, [sp, #16]; ldp x29, x30, [sp], #64; ret
        "fetch": bytes.fromhex(
            "fd7bbca9fd030091f35301a9f51300f9f30300aa7003005800023fd6f403002ae0a30091e1c30091"
            "e2e30091f002005800023fd6e00313aad002005800023fd6f50300aae01740f9a00000b4e11b40f9"
            "e21f40f93002005800023fd6e003142a1002005800023fd6e00315aaf51340f9f35341a9fd7bc4a8"
            "c0035fd61f2003d51111111111111111222222222222222233333333333333334444444444444444"
            "5555555555555555"),
        # CPython 3.12 and later (PyErr_GetRaisedException, PyErr_SetRaisedException):
        # stp x29, x30, [sp, #-48]!; mov x29, sp; stp x19, x20, [sp, #16]; str x21, [sp, #32]
        # mov x19, x0; ldr x16, =PyGILState_Ensure; blr x16; mov w20, w0
        # ldr x16, =PyErr_GetRaisedException; blr x16; mov x21, x0
        # mov x0, x19; ldr x16, =thunk; blr x16; mov x19, x0
        # cbz x21, 1f; mov x0, x21; ldr x16, =PyErr_SetRaisedException; blr x16
        # 1: mov w0, w20; ldr x16, =PyGILState_Release; blr x16
        # mov x0, x19; ldr x21, [sp, #32]; ldp x19, x20, [sp, #16]; ldp x29, x30, [sp], #48; ret
        "raised": bytes.fromhex(
            "fd7bbda9fd030091f35301a9f51300f9f30300aaf002005800023fd6f403002ad002005800023fd6"
            "f50300aae00313aa9002005800023fd6f30300aa950000b4e00315aa3002005800023fd6e003142a"
            "1002005800023fd6e00313aaf51340f9f35341a9fd7bc3a8c0035fd61f2003d51111111111111111"
            "2222222222222222333333333333333344444444444444445555555555555555"),
    }
    _RETURN_NULL = (0xD2800000, 0xD65F03C0)                            # mov x0, #0; ret

    def constants(self, outputs) -> bytes:
        code = _A64Code()
        for offset, width, value in outputs:
            code.load_literal(10, value).store(10, 0, offset, width)
        return code.emit(*self._RETURN_NULL).code()

    def header_words(self, handle_offset: int, copies) -> bytes:
        code = _A64Code().load(9, 0, handle_offset)
        for word_offset, output_offset, width in copies:
            code.load(10, 9, word_offset).store(10, 0, output_offset, width)
        return code.emit(*self._RETURN_NULL).code()

    def complete_event(self, event_offset: int, complete: int, fallback: int, call_back) -> bytes:
        handled = []
        if call_back is not None:
            callback_offset, user_arg_offset = call_back
            handled = [0xA9BF7BFD,                                             # stp x29, x30, [sp, #-16]!
                       0xF9400001 | _A64Code.scaled(user_arg_offset, 8) << 10,  # ldr x1, [x0, #user_arg]
                       0xF9400009 | _A64Code.scaled(callback_offset, 8) << 10,  # ldr x9, [x0, #callback]
                       0xD2800000, 0xD63F0120,                         # mov x0, #0; blr x9
                       0xA8C17BFD]                                     # ldp x29, x30, [sp], #16
        handled += self._RETURN_NULL
        code = _A64Code().load(9, 0, event_offset).load_literal(10, complete)
        skip = _checked(len(handled) + 1, 1, 1 << 18, "branch over the handled case (imm19, instructions)")
        code.emit(0xEB0A013F, 0x54000001 | skip << 5)                  # cmp x9, x10; b.ne fallback
        fallback = _checked(fallback, 1, 1 << 64, "fallback address")
        return code.emit(*handled).load_literal(16, fallback).emit(0xD61F0200).code()   # br x16


def architecture():
    """The machine code for this machine, or None where the plugin has none."""
    machine = platform.machine().lower()
    if os.name == "posix" and machine in ("x86_64", "amd64"):
        return X86_64()
    if sys.platform.startswith("linux") and machine in ("aarch64", "arm64"):
        return AArch64()
    return None


def guards_supported() -> bool:
    return architecture() is not None


def _offset(args_type, field: str) -> int:
    """Offset of ``field`` in ``args_type``, which must be an 8-byte field."""
    offset, width = _offset_and_width(args_type, field)
    if width != 8:
        raise TypeError(f"{args_type.__name__}.{field} is {width} bytes, not 8")
    return offset


def _offset_and_width(args_type, field: str) -> tuple[int, int]:
    """Offset and size of an output ``field`` of ``args_type``: 8 bytes (pointers, sizes),
    4 (enums such as a buffer's element type) or 1 (bools)."""
    descriptor = getattr(args_type, field)
    if descriptor.size not in (1, 4, 8):
        raise TypeError(f"{args_type.__name__}.{field} is {descriptor.size} bytes, not 1, 4 or 8")
    return descriptor.offset, descriptor.size


@dataclass(frozen=True)
class Constants:
    """Writes the same values into ``args`` at every call: ``{field: value}``."""

    outputs: tuple

    def python(self, args) -> None:
        for field, value in self.outputs:
            setattr(args, field, value)

    def native(self, machine, args_type, fallback: int, complete_event: int) -> bytes:
        return machine.constants([(*_offset_and_width(args_type, field), value) for field, value in self.outputs])


@dataclass(frozen=True)
class HeaderWords:
    """Copies words of a handle's header into ``args``: ``args.field = header[index]``.

    The handle in ``args.<handle>`` is the address of its header
    (``calls.header_handle``), an array of 64-bit words.
    """

    handle: str
    outputs: tuple   # (field, index) pairs

    def python(self, args, header_word) -> None:
        handle = getattr(args, self.handle)
        for field, index in self.outputs:
            setattr(args, field, header_word(handle, index))

    def native(self, machine, args_type, fallback: int, complete_event: int) -> bytes:
        return machine.header_words(_offset(args_type, self.handle),
                                    [(8 * index, *_offset_and_width(args_type, field)) for field, index in self.outputs])


@dataclass(frozen=True)
class CompleteEvent:
    """For the shared complete event, what the call does with it natively; any other
    event goes on to the Python implementation.

    With ``on_ready``, calls ``args.callback(NULL, args.user_arg)``
    (PJRT_Event_OnReady); without, does nothing and returns NULL (PJRT_Event_Destroy;
    PJRT_Event_Error and PJRT_Event_Await: the event did not fail).
    """

    on_ready: bool = False

    def native(self, machine, args_type, fallback: int, complete_event: int) -> bytes:
        call_back = (_offset(args_type, "callback"), _offset(args_type, "user_arg")) if self.on_ready else None
        return machine.complete_event(_offset(args_type, "event"), complete_event, fallback, call_back)


@dataclass(frozen=True)
class WhenNull:
    """Returns NULL natively when ``args.<field>`` is NULL (nothing to do); otherwise goes
    on to the Python implementation."""

    field: str

    def native(self, machine, args_type, fallback: int, complete_event: int) -> bytes:
        return machine.complete_event(_offset(args_type, self.field), 0, fallback, None)


class _CodePages:
    """Executable memory: written while read-write, then made read-execute.

    Mapped with libc's ``mmap`` and never unmapped: jaxlib may call this code
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
        if len(code) > _SLOT:
            raise ValueError(f"native code of {len(code)} bytes does not fit its slot of {_SLOT}")
        if self.used + _SLOT > self.size:
            raise ValueError(f"no slot left in the code pages ({self.size} bytes)")
        address = self.address + self.used
        ctypes.memmove(address, code, len(code))
        self.used += _SLOT
        return address

    def seal(self) -> None:
        if self._mprotect(self.address, self.size, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed")


def _address(function) -> int:
    return ctypes.cast(function, ctypes.c_void_p).value


def no_op() -> int:
    """A native function that ignores its argument and returns 0 (NULL): libc's ``sched_yield``.

    The deleter of outputs that live as long as their object (``calls.NO_OP_DELETER``), and
    (see plugin.py) the Destroy calls that arrive while the interpreter shuts down.
    """
    return _address(ctypes.CDLL(None).sched_yield)


def exception_calls(python=None) -> tuple[str, dict[str, int]]:
    """How a guard takes the pending exception out and puts it back, in this CPython:
    ``("raised", ...)`` with ``PyErr_GetRaisedException`` and ``PyErr_SetRaisedException``
    (3.12 and later), else ``("fetch", ...)`` with ``PyErr_Fetch`` and ``PyErr_Restore``
    (3.11; deprecated since 3.12); the dictionary gives the addresses of ``take`` and
    ``put_back``, and of the GIL's ``ensure`` and ``release``."""
    python = python or ctypes.pythonapi
    gil = {"ensure": _address(python.PyGILState_Ensure), "release": _address(python.PyGILState_Release)}
    if hasattr(python, "PyErr_GetRaisedException"):
        return "raised", {**gil, "take": _address(python.PyErr_GetRaisedException),
                          "put_back": _address(python.PyErr_SetRaisedException)}
    return "fetch", {**gil, "take": _address(python.PyErr_Fetch), "put_back": _address(python.PyErr_Restore)}


def guard_code(listing: bytes, addresses: dict[str, int]) -> bytes:
    """A guard: ``listing`` (a machine's ``GUARDS[kind]``) with the five ``addresses``
    (``ensure``, ``take``, ``thunk``, ``put_back``, ``release``) filled in."""
    if set(addresses) != set(_PLACEHOLDERS):
        raise ValueError(f"a guard takes the addresses of {sorted(_PLACEHOLDERS)}, got {sorted(addresses)}")
    code = listing
    for key, address in addresses.items():
        if listing.count(_PLACEHOLDERS[key]) != 1:
            raise ValueError(f"the guard listing holds the placeholder of {key!r} "
                             f"{listing.count(_PLACEHOLDERS[key])} times, not once")
        code = code.replace(_PLACEHOLDERS[key], _checked(address, 1, 1 << 64, f"address of {key}").to_bytes(8, "little"))
    return code


_HAZARD = ("every PJRT call enters Python through its ctypes callback directly, so a call made while a Python "
           "exception is pending (a jax.Array destroyed while an exception unwinds) can abort the process or "
           "lose the exception (docs/device.md, 'Three crash hazards')")


def entry_points(thunks: dict[str, int], fast_paths: dict[str, tuple], complete_event: int) -> dict[str, int]:
    """The native entry point of each slot: for thunks ``{name: address}``, their
    guards; for ``fast_paths`` ``{name: (shape, args_type)}``, the fast path, which
    falls back to the guard. Without native code (another machine, or no executable
    memory), the thunks themselves, with a RuntimeWarning saying what remains unguarded."""
    if not thunks:
        return {}
    machine = architecture()
    if machine is None:
        return _unguarded(thunks, f"has no native guard for {sys.platform} on {platform.machine()}")
    missing = set(fast_paths) - set(thunks)
    if missing:
        raise ValueError(f"fast paths without a thunk to fall back to: {sorted(missing)}")
    kind, python_api = exception_calls()
    listing = machine.GUARDS[kind]
    try:
        pages = _CodePages(len(thunks) + len(fast_paths))
    except OSError as error:   # no memory to map
        return _unguarded(thunks, f"cannot install its native guards ({error})")
    result = {name: pages.add(guard_code(listing, {**python_api, "thunk": thunk})) for name, thunk in thunks.items()}
    for name, (shape, args_type) in fast_paths.items():
        result[name] = pages.add(shape.native(machine, args_type, result[name], complete_event))
    try:
        pages.seal()
    except OSError as error:   # the pages may not become executable (a W^X policy)
        return _unguarded(thunks, f"cannot install its native guards ({error})")
    return result


def _unguarded(thunks: dict[str, int], why: str) -> dict[str, int]:
    """The bare thunks, with a warning that the device ``why`` and what that leaves."""
    warnings.warn(f"the interp device {why}: {_HAZARD}; the native fast paths are off too", RuntimeWarning,
                  stacklevel=3)
    return dict(thunks)
