"""A Ctrl-C that stops a run on the device reaches the user as ``KeyboardInterrupt``.

jaxlib turns a failed ``PJRT_LoadedExecutable_Execute`` into a ``JaxRuntimeError``
(``ValueError`` on its fast path), whatever the plugin's error says. So a run that
a KeyboardInterrupt stops does not fail: Execute hands out outputs that fail with
CANCELLED when used (``runtime.Interrupted``) and :func:`raise_in_caller` arranges
for the KeyboardInterrupt to be raised again in the caller's Python code, where the
call returns. That is what the user gets on the CPU, where the KeyboardInterrupt
comes from jaxlib's wait for the result (while the computation runs on).

Raising it again means setting the interrupt (``PyErr_SetInterrupt``, as SIGINT
does), which Python handles at its next check of pending signals, in whatever
Python code runs next (an error returned to jaxlib would propagate before any such
check). That code may be this plugin's own: the rest of the Execute thunk, or
another PJRT call jaxlib makes before it returns (``Buffer_Destroy`` of a temporary
argument), where an exception would escape into C. So a SIGINT handler is
installed for one use: called inside a PJRT call (a thunk's frame on the stack), it
sets the interrupt again once it has returned (a capsule whose destructor is
``PyErr_SetInterrupt``, freed with the handler's frame: set earlier, the interrupt
would be handled again inside the handler); called anywhere else, it puts the
previous handler back and calls it, which raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

import _thread
import ctypes
import signal
import threading
from ctypes import c_void_p

_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, c_void_p, ctypes.c_char_p, c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_SET_INTERRUPT = ctypes.cast(ctypes.pythonapi.PyErr_SetInterrupt, c_void_p).value
_CAPSULE_POINTER = ctypes.c_char(0)


def _interrupt_when_freed():
    """An object whose destruction calls ``PyErr_SetInterrupt`` (which ignores the
    capsule a destructor gets)."""
    return _new_capsule(ctypes.addressof(_CAPSULE_POINTER), None, _SET_INTERRUPT)


_THUNK_MODULE = f"{__package__}.api"


def _inside_pjrt_call(frame) -> bool:
    """Whether a PJRT thunk (``api._thunk``) is on the stack of ``frame``."""
    while frame is not None:
        if frame.f_code.co_name == "thunk" and frame.f_globals.get("__name__") == _THUNK_MODULE:
            return True
        frame = frame.f_back
    return False


def raise_in_caller() -> bool:
    """Raise KeyboardInterrupt in the first Python code that runs outside a PJRT call.
    False where it cannot (a thread other than the main one cannot install a signal
    handler): the caller reports an error instead."""
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGINT)

    def deferred(signum, frame):
        if _inside_pjrt_call(frame):
            interrupt = _interrupt_when_freed()  # noqa: F841 - set when this frame is gone
            return
        signal.signal(signal.SIGINT, previous)
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, deferred)
    _thread.interrupt_main(signal.SIGINT)
    return True
