"""Registration with JAX, and the process-lifetime rules a ctypes plugin must follow.

JAX discovers the plugin through the ``jax_plugins`` entry point and calls
:func:`initialize`, which registers the ``PJRT_Api`` table (in a ``PyCapsule``
named ``"pjrt_c_api"``) under the platform name ``interp``.

Three hazards of a ctypes plugin, each seen to abort the process, and what
this module does about them:

1. *A call entered while a Python exception is pending* (a ``Destroy`` from a
   deallocator while an exception unwinds the stack): ctypes would return
   garbage to C. Every slot of the table points at a native guard that sets
   the exception aside around the Python thunk (``native.py``).
2. *Thunks freed before jaxlib's last call*: the table and every thunk are
   kept alive for the whole process (an extra reference that is never
   dropped), since jaxlib's client may outlive every Python module.
3. *Releasing calls on a jaxlib thread while CPython finalizes* must not take
   the GIL: CPython 3.11 ends a thread that tries (``PyThread_exit_thread``),
   and when that thread is a worker of one of jaxlib's Eigen thread pools, the
   pool's destructor then waits for it forever (the process hangs at exit).
   At exit (``atexit`` runs before finalization) every slot that only releases
   something (:data:`RELEASING_SLOTS`: ``*_Destroy``, ``*_Delete``, the end of
   an external reference) is pointed at a native function that does nothing
   and returns NULL, so late calls never enter Python (the deleters the plugin
   hands out are that native function from the start). A call that entered its
   guard just before is already waiting for the GIL (seen under gdb: a pool
   thread's ``Executable_Destroy`` ended in ``PyThread_exit_thread``): the
   handler then lets the GIL go for :data:`DRAIN_SECONDS`, so that it runs
   before finalization begins.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import time

from .pjrt import abi
from .pjrt import api
from .pjrt import interrupts
from .pjrt import native
from ..program.calls import INTERP_PLATFORM as PLATFORM

# Below the CPU's 0: the CPU stays JAX's default device unless the user picks interp
# (jax.devices("interp"), JAX_PLATFORMS=interp, jax_default_device).
PRIORITY = -100

_CAPSULE_NAME = b"pjrt_c_api"
_table: api.Table | None = None
_capsule = None


def table() -> api.Table:
    """The process-wide PJRT_Api table (built on first use, never freed)."""
    global _table
    if _table is None:
        _table = api.Table()
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(_table))   # hazard 2: never freed
        atexit.register(_silence_releasing_calls)
    return _table


def capsule():
    """``PyCapsule("pjrt_c_api")`` holding ``const PJRT_Api*``, as register_plugin expects."""
    global _capsule
    if _capsule is None:
        new_capsule = ctypes.pythonapi.PyCapsule_New
        new_capsule.restype = ctypes.py_object
        new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        _capsule = new_capsule(table().address, _CAPSULE_NAME, None)
    return _capsule


def initialize() -> None:
    """The ``jax_plugins`` entry point: register the interp platform with JAX."""
    from jax._src import xla_bridge

    # Without this, JAX logs "Platform 'interp' is experimental" each time it
    # initializes its backends, in every program of a machine that has the package.
    xla_bridge._nonexperimental_plugins.add(PLATFORM)
    xla_bridge.register_plugin(PLATFORM, priority=PRIORITY, c_api=capsule())
    from . import lowering

    lowering.register()
    interrupts.install()   # Ctrl-C in a call: pjrt/interrupts.py
    if os.environ.get("STABLEHLO_INTERP_TRACE") or os.environ.get("STABLEHLO_INTERP_NONFINITE"):
        from .session import install_from_environment   # (the tools it brings load only when asked for)

        install_from_environment()
    if os.environ.get("STABLEHLO_INTERP_DEBUG_NANS", "") not in ("", "0"):
        from ..tools import debug_nans   # the NaN guard of jitted calls on every platform

        debug_nans.install_from_environment()


# The calls that only give something back (memory, a handle, a reference): at exit,
# doing nothing instead leaks only what the process is about to lose anyway.
RELEASING_SLOTS = tuple(name for name in abi.API_SLOTS
                        if name.endswith(("_Destroy", "_Delete")) or name == "Buffer_DecreaseExternalReferenceCount")


DRAIN_SECONDS = 0.02


def _silence_releasing_calls() -> None:
    """Hazard 3: from now on, releasing calls must not enter Python; those already
    waiting for the GIL get it now, before CPython finalizes."""
    no_op = native.no_op()
    for name in RELEASING_SLOTS:
        setattr(table().api, f"PJRT_{name}", no_op)
    time.sleep(DRAIN_SECONDS)
