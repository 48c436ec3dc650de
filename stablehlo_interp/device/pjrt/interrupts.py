"""Ctrl-C during a call to the device: never lost, never fatal, ``KeyboardInterrupt`` in the caller.

Python runs a SIGINT handler at its next check for signals, in whatever Python
code runs then, and its default handler raises ``KeyboardInterrupt`` there. Around
this plugin that code may be:

1. the first line of a PJRT thunk (``api._thunk``; jaxlib calls ``Buffer_Destroy``
   from deallocators at any moment), before its ``try``: the exception escapes
   into C, ctypes returns garbage and jaxlib aborts the process;
2. anywhere else inside a PJRT call but the run of a program: the thunk returns
   the exception as an error, which jaxlib treats as fatal in most calls (a failed
   ``Buffer_Destroy``, ``AcquireExternalReference``, ``Executable_Fingerprint``
   is a ``LOG(FATAL)``) and as a ``JaxRuntimeError`` in the others;
3. code that Python runs *between* two lines of other code and whose exceptions
   it prints as "Exception ignored in ..." and drops: the garbage collector's
   callbacks (JAX registers one, and a run of the interpreter collects often),
   finalizers (``__del__``), weakref callbacks. A ``KeyboardInterrupt`` raised
   there is lost and the run goes on (issue 26: a test's child ran a 10^9-step
   loop for minutes after its SIGINT, "Exception ignored in: <function
   _xla_gc_callback>" on its stderr);
4. JAX's code right after a call into the plugin, which has a bare ``except:``
   around some (``pxla._get_layouts_from_executable``), or an import in progress,
   which the exception leaves half done (jaxlib's MLIR dialect modules then cannot
   be imported again, and JAX cannot lower anything more).

So :func:`install` puts :func:`_on_sigint` in place of the SIGINT handler the
program has (Python's default one, usually) when the plugin initializes. It calls
the handler it replaced only to learn what that raises (the *owed* exception), and
raises it only where it does no harm:

* Inside a PJRT call it asks the run in progress to stop
  (``engine.run.request_interrupt``: the run raises ``KeyboardInterrupt`` at its
  next op, in any thread, which Execute turns into outputs that fail with
  ``CANCELLED``, ``runtime.Interrupted``, and :func:`raise_in_caller` owes the
  caller a ``KeyboardInterrupt``: jaxlib turns a failed ``Execute`` into a
  ``JaxRuntimeError``, whatever the error). In the user's code of a host callback
  it raises it right there too (it reaches the run like any error of the callback).
* Under a frame of 3. or an import, it waits; in JAX's code (4.) it waits for
  :data:`JAX_WAIT_SECONDS` after the last PJRT call (JAX tracing a large function
  does not return soon).
* While it owes the exception it sets the interrupt again every
  :data:`RETRY_SECONDS` (after a stopped run or under a frame of 3., at once),
  until Python handles it in the caller's code: it raises it there. That is what
  the CPU does, where the ``KeyboardInterrupt`` comes from jaxlib's wait for the
  result (and the run goes on in the background).

Only the main thread runs signal handlers, so all this holds for calls made on
the main thread; a program that installs its own SIGINT handler after JAX has
started the device replaces this one (and a handler that raises brings back
1. to 4.).
"""

from __future__ import annotations

import _thread
import ctypes
import gc
import signal
import threading
import time

from ...engine import run as engine_run

_new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_SET_INTERRUPT = ctypes.cast(ctypes.pythonapi.PyErr_SetInterrupt, ctypes.c_void_p).value
_CAPSULE_POINTER = ctypes.c_char(0)

_THUNK_MODULE = f"{__package__}.api"
_HOST_CALLBACK_MODULE = f"{__package__.rsplit('.', 2)[0]}.ops.host_callback"
# Modules whose functions Python calls as weakref callbacks (WeakValueDictionary,
# WeakKeyDictionary, WeakSet, finalize): their exceptions are dropped. And the import
# machinery: an exception in the middle of an import leaves a module half made (a
# dialect of jaxlib's MLIR bindings then cannot be imported again: "Dialect namespace
# 'mhlo' is already registered", and JAX cannot lower any more).
_WEAKREF_MODULES = ("weakref", "_weakrefset")
_IMPORT_MODULES = ("importlib._bootstrap", "importlib._bootstrap_external")

# JAX's code, which catches every exception in places (a bare ``except:`` around calls
# into the plugin, as pxla._get_layouts_from_executable has): an owed exception waits
# until JAX's code returns, or for this long after the last PJRT call (JAX tracing a
# large function on Ctrl-C does not return soon).
_JAX_PACKAGES = ("jax", "jaxlib")
JAX_WAIT_SECONDS = 0.5

# Where the main thread is when the handler runs (see _place).
OUTSIDE, IN_CALL, IN_HOST_CALLBACK, DROPPING, IMPORTING, IN_JAX = (
    "outside", "in a PJRT call", "in a host callback", "dropping", "importing", "in JAX")

_previous = None            # the handler that _on_sigint replaced
_tried_install = False
_owed: BaseException | None = None
_waiting_since = 0.0        # when it was owed, or last seen in a PJRT call
_retry: threading.Timer | None = None
RETRY_SECONDS = 0.01
_promptly = False           # owed by raise_in_caller: ask again at once (see _ask_again)
_owing = threading.Lock()   # held while the owed exception is handed over, or a timer asks again


def install() -> bool:
    """Put :func:`_on_sigint` in place of the program's SIGINT handler (once per
    process, on the main thread, over a handler set from Python: not over
    ``SIG_IGN``); whether it is in place."""
    global _previous, _tried_install
    if signal.getsignal(signal.SIGINT) is _on_sigint:
        return True
    if _tried_install or threading.current_thread() is not threading.main_thread():
        return False   # once: a handler that chains to ours must not be wrapped again
    _tried_install = True
    current = signal.getsignal(signal.SIGINT)
    if not callable(current):
        return False
    _previous = current
    signal.signal(signal.SIGINT, _on_sigint)
    return True


def raise_in_caller() -> bool:
    """After a run a KeyboardInterrupt stopped: raise it in the caller (see the module
    docstring). False where it cannot (a thread other than the main one, or without
    this module's handler): the caller reports an error instead."""
    global _owed, _waiting_since, _promptly
    if threading.current_thread() is not threading.main_thread() or not install():
        return False
    _owed = KeyboardInterrupt() if _owed is None else _owed.with_traceback(None)
    _waiting_since = time.monotonic()
    _promptly = True
    _thread.interrupt_main(signal.SIGINT)
    return True


def _on_sigint(signum, frame):
    global _owed, _waiting_since, _promptly
    if _owed is None:
        try:
            _previous(signum, frame)
            return   # a handler that does not raise: the program has its own plans for Ctrl-C
        except BaseException as error:  # noqa: BLE001 - owed, raised where nothing drops it
            _owed = error.with_traceback(None)   # raised again elsewhere: a traceback from here misleads
            _waiting_since = time.monotonic()
    place = _place(frame)
    if place in (IN_CALL, IN_HOST_CALLBACK):
        _waiting_since = time.monotonic()
        engine_run.request_interrupt()
        if place == IN_HOST_CALLBACK:
            raise _owed   # it reaches the run; raise_in_caller owes it again
    elif place == OUTSIDE or (place == IN_JAX and time.monotonic() - _waiting_since > JAX_WAIT_SECONDS):
        with _owing:   # a retry timer asks no more
            owed, _owed, _promptly = _owed, None, False
        engine_run.request_interrupt(False)
        raise owed
    if _promptly or place == DROPPING:
        interrupt = _interrupt_when_freed()  # noqa: F841 - set again when this frame is gone
    else:
        _ask_again()


def _place(frame) -> str:
    """Where ``frame`` (the innermost frame of the main thread) runs: inside a PJRT
    call (a thunk's frame below it), in the user's code of a host callback of a run
    (nothing between that drops exceptions), under a frame whose exceptions Python
    drops, in an import, in JAX's code or code JAX called, or outside all of these."""
    gc_callbacks = {getattr(callback, "__code__", None) for callback in gc.callbacks}
    dropping = importing = callback = jax = False
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        code = frame.f_code
        if code.co_name == "thunk" and module == _THUNK_MODULE:
            return IN_HOST_CALLBACK if callback else IN_CALL
        if code.co_name == "run" and module == _HOST_CALLBACK_MODULE and not (dropping or importing):
            callback = True
        dropping = dropping or code in gc_callbacks or code.co_name == "__del__" or module in _WEAKREF_MODULES
        importing = importing or module in _IMPORT_MODULES
        jax = jax or module.partition(".")[0] in _JAX_PACKAGES
        frame = frame.f_back
    return DROPPING if dropping else IMPORTING if importing else IN_JAX if jax else OUTSIDE


def _interrupt_when_freed():
    """An object whose destruction calls ``PyErr_SetInterrupt`` (which ignores the
    capsule a destructor gets): held by the handler's frame, it sets the interrupt
    again once the handler has returned (set earlier, it would be handled again inside
    the handler), for Python's next check. After a run a KeyboardInterrupt stopped, and
    after a frame that drops exceptions (a garbage-collector callback ...), the code
    that comes next must get it, not code that runs RETRY_SECONDS later (an ``atexit``
    handler, say, which drops it too); and what remains of the call or the frame is
    short (unlike an import, or JAX's tracing)."""
    return _new_capsule(ctypes.addressof(_CAPSULE_POINTER), None, _SET_INTERRUPT)


def _ask_again() -> None:
    """Set the interrupt again in RETRY_SECONDS (from a timer thread: set at once, it
    would be handled again at each of Python's checks, which slowed JAX's tracing and
    compiling many times over)."""
    global _retry
    if _retry is None or not _retry.is_alive():
        _retry = threading.Timer(RETRY_SECONDS, _ask_if_owed)
        _retry.daemon = True
        _retry.start()


def _ask_if_owed() -> None:
    with _owing:
        if _owed is not None:   # else a stale timer would make a Ctrl-C of its own
            _thread.interrupt_main(signal.SIGINT)
