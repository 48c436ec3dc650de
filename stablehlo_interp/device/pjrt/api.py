"""The PJRT_Api function table: every slot, its thunk, and the native code in front of it.

The calls come from the ``calls_*`` modules (each a :class:`calls.Calls`).
:class:`Table` wraps every implementation in a *thunk* (a ctypes callback) that
never lets an exception escape into C: an exception becomes a ``PJRT_Error``
carrying a code and the message (for interpreter failures, the failing op and
its source location), which JAX raises as ``JaxRuntimeError``. Slots without an
implementation return ``UNIMPLEMENTED``.
"""

from __future__ import annotations

import ctypes
import os
import sys
from ctypes import addressof, c_void_p

from . import abi
from . import calls_buffers
from . import calls_executables
from . import calls_layouts
from . import calls_platform
from . import native
from .abi import API_FUNCTION, VOID_API_FUNCTION
from .calls import COMPLETE_EVENT, Calls, ReturnError, error_handle
from ..runtime import PluginError

CALLS = Calls.union(calls_platform.CALLS, calls_buffers.CALLS, calls_executables.CALLS, calls_layouts.CALLS)

TRACE_VARIABLE = "STABLEHLO_INTERP_PJRT_TRACE"


def _thunk(name: str, function, args_type, traced: bool):
    """The C-callable wrapper of one implementation: returns NULL or a PJRT_Error*.
    Every thunk runs this one code object (``interrupts.py`` recognizes it).

    jaxlib makes a call from the same stack frame again and again, so its args
    structure is mostly at the same address: the thunk keeps the ctypes view of the
    last address it saw (a pair, replaced in one store: threads may share a thunk)."""
    from_address = args_type.from_address
    if traced:
        function = _traced(name, function)
    last = [(None, None)]   # (address, the args structure there)

    def thunk(address):
        try:
            seen_address, args = last[0]
            if address != seen_address:
                args = from_address(address)
                last[0] = (address, args)
            function(args)
            return None
        except ReturnError as returned:
            return returned.error_handle
        except BaseException as error:  # noqa: BLE001 - nothing may escape into C
            return error_handle(error)

    return thunk


def _unimplemented(name: str):
    def unimplemented(args):
        raise PluginError(abi.UNIMPLEMENTED, f"PJRT_{name} is not implemented by the interp plugin")

    return unimplemented


def _traced(name: str, function):
    """With STABLEHLO_INTERP_PJRT_TRACE set, every call is logged to stderr."""

    def traced(args):
        print(f"[interp pjrt] PJRT_{name}", file=sys.stderr)
        return function(args)

    return traced


class Table:
    """The PJRT_Api structure, its extensions (Layouts, then Shardings) and every thunk they point to.

    Each slot points at the native guard of its thunk, or at its native fast
    path (``native.py``; none while tracing calls, so the trace sees every
    call). The thunks are never freed (see ``plugin.py``): jaxlib may call them until the
    process ends.
    """

    _SHARDINGS_SLOTS = ("Shardings_ParameterShardings", "Shardings_OutputShardings")
    _LAYOUTS_SLOTS = tuple(f"Layouts_{name}" for name in abi.LAYOUTS_SLOTS)

    def __init__(self):
        traced = bool(os.environ.get(TRACE_VARIABLE))   # read as the plugin starts: every call of it, or none
        self.thunks = {name: self._thunk(name, traced)
                       for name in abi.API_SLOTS + self._SHARDINGS_SLOTS + self._LAYOUTS_SLOTS}
        self.entry_points = native.entry_points({name: ctypes.cast(thunk, c_void_p).value
                                                 for name, thunk in self.thunks.items()},
                                                {} if traced else CALLS.fast_paths, COMPLETE_EVENT)
        self.api = abi.PJRT_Api()
        self.api.struct_size = ctypes.sizeof(abi.PJRT_Api)
        self.api.pjrt_api_version.struct_size = ctypes.sizeof(abi.PJRT_Api_Version)
        self.api.pjrt_api_version.major_version = abi.API_MAJOR
        self.api.pjrt_api_version.minor_version = abi.API_MINOR
        for name in abi.API_SLOTS:
            setattr(self.api, f"PJRT_{name}", self.entry_points[name])
        self.shardings = abi.PJRT_Shardings_Extension()
        self.shardings.base.struct_size = ctypes.sizeof(abi.PJRT_Shardings_Extension)
        self.shardings.base.type = abi.EXTENSION_SHARDINGS
        for name in self._SHARDINGS_SLOTS:
            setattr(self.shardings, f"PJRT_Shardings_PJRT_Executable_{name.split('_', 1)[1]}",
                    self.entry_points[name])
        self.layouts = abi.PJRT_Layouts_Extension()
        self.layouts.base.struct_size = ctypes.sizeof(abi.PJRT_Layouts_Extension)
        self.layouts.base.type = abi.EXTENSION_LAYOUTS
        self.layouts.base.next = addressof(self.shardings)
        for name in self._LAYOUTS_SLOTS:
            setattr(self.layouts, f"PJRT_{name}", self.entry_points[name])
        self.api.extension_start = addressof(self.layouts)

    @staticmethod
    def _thunk(name: str, traced: bool):
        if name in CALLS.implementations:
            function, args_type = CALLS.implementations[name]
            python = _thunk(name, function, args_type, traced)
        else:
            python = _thunk(f"{name} (unimplemented)", _unimplemented(name), ctypes.c_void_p, traced)
        return (VOID_API_FUNCTION if name in abi.VOID_SLOTS else API_FUNCTION)(python)

    @property
    def address(self) -> int:
        return addressof(self.api)
