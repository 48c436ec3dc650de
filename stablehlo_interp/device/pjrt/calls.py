"""What every PJRT call is built from: handles, C data, errors and events, and the
:class:`Calls` a ``calls_*`` module registers its implementations in.

Each PJRT function ``PJRT_Error* PJRT_X(PJRT_X_Args* args)`` is a Python
function registered with ``@CALLS.implements("X", PJRT_X_Args)``: it reads its
inputs from the ``args`` structure, writes its outputs into it, and raises to
report an error (``api.py`` turns the exception into a ``PJRT_Error``).

Opaque PJRT pointers (``PJRT_Client*``, ``PJRT_Device*`` ...) are the ``id()``
of a Python object, kept alive in ``objects`` until the matching
``*_Destroy``. Buffers, executables, memories and layouts are pointed to by a
*header* instead: a small array of 64-bit words (a buffer's device, memory,
type, dimensions, layout, ready event ...; an executable's counts) that the
native fast paths read without entering Python
(``native.py``, :meth:`Calls.header_getter`). Outputs that ``pjrt_c_api.h`` says
live as long as their object (dimensions, strings, device lists) are ctypes
arrays stored on that object.

Events: every computation finishes before its call returns, so all events are
created complete (``pjrt_c_api.h`` allows it); ``COMPLETE_EVENT`` is one shared
event whose ``Destroy`` does nothing, and so is ``INTERRUPTED_EVENT``, the ready
event of every output of an interrupted run.
"""

from __future__ import annotations

import ctypes
from ctypes import addressof, c_uint64, c_void_p

import numpy as np

from ...errors import InterpreterError
from . import abi
from . import native
from .. import runtime
from ..runtime import PluginError

# ---------------------------------------------------------------- handles

objects: dict[int, object] = {}


def handle(obj) -> int:
    """The opaque pointer handed to JAX for ``obj`` (kept alive until its Destroy)."""
    key = id(obj)
    objects[key] = obj
    return key


def lookup(address, kind: str):
    try:
        return objects[address]
    except KeyError:
        raise PluginError(abi.INVALID_ARGUMENT, f"unknown or destroyed {kind} handle {address!r}") from None


def release(address) -> None:
    objects.pop(address, None)


# ---------------------------------------------------------------- C memory

# The address space as an array of 64-bit words: reading or writing one word of C
# memory costs an index instead of a new ctypes object. The C ABI aligns what is read
# this way to 8 bytes (jaxlib's argument and output lists are arrays of pointers;
# dimensions and strides arrays of int64; headers are ours), so the word at
# ``address`` is ``WORDS[address >> 3]``.
WORDS = (c_uint64 * (1 << 45)).from_address(0)



def _array_data_offset(probe: np.ndarray) -> int:
    """Where a NumPy array object keeps the address of its data (``PyArrayObject.data``,
    the field after the object header): found on a probe array, by its address."""
    for offset in range(8, 64, 8):
        if WORDS[(id(probe) + offset) >> 3] == probe.ctypes.data:
            return offset
    raise ImportError("cannot find the data pointer of a NumPy array object")


_ARRAY_DATA_OFFSET = _array_data_offset(np.arange(3))


def array_address(array: np.ndarray) -> int:
    """The address of a NumPy array's data, read from the array object (what
    ``array.ctypes.data`` gives, without the ctypes object it builds each time: a few
    microseconds inside a call from jaxlib)."""
    return WORDS[(id(array) + _ARRAY_DATA_OFFSET) >> 3]


HEADER_WORDS = 16
_HEADERS_PER_CHUNK = 1024
_header_chunks: list[ctypes.Array] = []   # never freed: a header may be reused, not unmapped
_free_headers: list[int] = []


def header_handle(obj, words) -> int:
    """The opaque pointer for ``obj``: the address of a header holding ``words``
    (at most HEADER_WORDS 64-bit words), which native fast paths read; live until
    :func:`release_header`."""
    if not _free_headers:
        chunk = (c_uint64 * (HEADER_WORDS * _HEADERS_PER_CHUNK))()
        _header_chunks.append(chunk)
        _free_headers.extend(range(addressof(chunk) + 8 * HEADER_WORDS * (_HEADERS_PER_CHUNK - 1),
                                   addressof(chunk) - 1, -8 * HEADER_WORDS))
    address = _free_headers.pop()
    index = address >> 3
    WORDS[index:index + len(words)] = words
    objects[address] = obj
    return address


def set_header_word(address: int, index: int, word: int) -> None:
    """Change word ``index`` of the header of a live handle."""
    WORDS[(address >> 3) + index] = word


def header_word(address: int, index: int) -> int:
    """Word ``index`` of the header of a live handle."""
    if address not in objects:
        raise PluginError(abi.INVALID_ARGUMENT, f"unknown or destroyed handle {address!r}")
    return WORDS[(address >> 3) + index]


def release_header(address) -> None:
    if objects.pop(address, None) is not None:
        _free_headers.append(address)


def read_pointers(address: int, count: int) -> list:
    """The ``count`` pointers (unsigned 64-bit words) of the C array at ``address``."""
    first = address >> 3
    return WORDS[first:first + count]


def write_pointers(address: int, values) -> None:
    """Store pointers (ints) into the C array at ``address``."""
    first = address >> 3
    WORDS[first:first + len(values)] = values


# ---------------------------------------------------------------- C data handed out

_immortal_strings: dict[str, ctypes.Array] = {}   # the plugin's and its devices' names: a fixed set


def immortal_string(text: str) -> tuple[int, int]:
    """(address, size) of a C string that lives for the process (names, kinds, versions)."""
    buffer = _immortal_strings.get(text)
    if buffer is None:
        buffer = _immortal_strings[text] = ctypes.create_string_buffer(text.encode())
    return addressof(buffer), len(buffer) - 1


def c_bytes(owner, attribute: str, data: bytes) -> tuple[int, int]:
    """(address, size) of a copy of ``data`` stored on ``owner`` (lives as long as it)."""
    buffer = getattr(owner, attribute, None)
    if buffer is None:
        buffer = ctypes.create_string_buffer(data, len(data) + 1)
        setattr(owner, attribute, buffer)
    return addressof(buffer), len(buffer) - 1


def pointer_array(addresses) -> ctypes.Array:
    return (c_void_p * len(addresses))(*addresses)


NO_ATTRIBUTES = (abi.PJRT_NamedValue * 0)()

# The deleter of outputs that live as long as their object.
NO_OP_DELETER = native.no_op()

# ---------------------------------------------------------------- errors and events


class Error:
    """A PJRT_Error: a code and a message that lives until PJRT_Error_Destroy."""

    __slots__ = ("code", "message")

    def __init__(self, code: int, text: str):
        self.code = code
        self.message = ctypes.create_string_buffer(text.encode("utf-8", "replace"))

    @property
    def text(self) -> str:
        return self.message.value.decode("utf-8", "replace")


def error_message(error: BaseException) -> str:
    if isinstance(error, (InterpreterError, PluginError)):
        return str(error)
    return f"{type(error).__name__}: {error}"


# Returned when even building an Error fails (e.g. MemoryError); never destroyed.
FALLBACK_ERROR = Error(abi.INTERNAL, "internal error in the interp PJRT plugin")
objects[id(FALLBACK_ERROR)] = FALLBACK_ERROR


def error_handle(error: BaseException) -> int:
    try:
        return handle(Error(runtime.error_code(error), error_message(error)))
    except BaseException:  # noqa: BLE001 - nothing may escape into C
        return id(FALLBACK_ERROR)


class ReturnError(Exception):
    """Raised by an implementation to return this PJRT_Error (Event_Error reports one)."""

    def __init__(self, error_handle: int):
        super().__init__()
        self.error_handle = error_handle


class Event:
    """A completed event, successful (``error`` None) or failed."""

    __slots__ = ("error",)

    def __init__(self, error: Error | None = None):
        self.error = error


_COMPLETE = Event()
COMPLETE_EVENT = handle(_COMPLETE)
_interrupted = runtime.interrupted_error()
INTERRUPTED_EVENT = handle(Event(Error(_interrupted.code, str(_interrupted))))
SHARED_EVENTS = frozenset((COMPLETE_EVENT, INTERRUPTED_EVENT))   # never destroyed


# ---------------------------------------------------------------- registration


class Calls:
    """PJRT functions and their implementations: ``implementations`` {name: (function,
    args_type)}, and ``fast_paths`` {name: (native shape, args_type)} for those that have
    native code (``native.py``) in front of the Python function."""

    def __init__(self):
        self.implementations: dict[str, tuple] = {}
        self.fast_paths: dict[str, tuple] = {}

    def implements(self, name: str, args_type, fast_path=None):
        """Register the implementation of ``PJRT_<name>``, which takes an ``args_type`` structure.

        ``fast_path`` (a ``native.CompleteEvent``) handles the common case natively
        and leaves the rest to ``function``.
        """

        def decorate(function):
            self.implementations[name] = (function, args_type)
            if fast_path is not None:
                self.fast_paths[name] = (fast_path, args_type)
            return function

        return decorate

    def header_getter(self, name: str, args_type, handle_field: str, **outputs: int) -> None:
        """``PJRT_<name>`` copies words of the header of ``args.<handle_field>``
        (:func:`header_handle`) into the outputs: ``args.<field> = header[index]``."""
        getter = native.HeaderWords(handle_field, tuple(outputs.items()))
        self.implements(name, args_type, getter)(lambda args: getter.python(args, header_word))

    def constant_getter(self, name: str, args_type, **outputs: int) -> None:
        """``PJRT_<name>`` writes the same values at every call: ``args.<field> = value``."""
        getter = native.Constants(tuple(outputs.items()))
        self.implements(name, args_type, getter)(getter.python)

    @classmethod
    def union(cls, *parts: Calls) -> Calls:
        """All the calls of ``parts``, which must not implement a PJRT function twice."""
        whole = cls()
        for part in parts:
            twice = whole.implementations.keys() & part.implementations.keys()
            if twice:
                raise ValueError(f"PJRT functions implemented twice: {sorted(twice)}")
            whole.implementations.update(part.implementations)
            whole.fast_paths.update(part.fast_paths)
        return whole
