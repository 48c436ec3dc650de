"""The interpreter's side of host callbacks: ``stablehlo.custom_call
@stablehlo_interp.host_callback`` calls a registered Python function.

The ``interp`` device lowers jax.debug.print, debug.callback, pure_callback and
io_callback to this custom call (device/host_callbacks.py); its
``backend_config`` is the key of a :class:`HostCallback` in a process-wide
table, which lives as long as the compiled executable that may call it.
"""

from __future__ import annotations

import itertools
import threading
import weakref

import numpy as np

from ..engine.registry import custom_call
from ..ir.types import TOKEN, TokenType

TARGET = "stablehlo_interp.host_callback"

_callbacks: "weakref.WeakValueDictionary[int, HostCallback]" = weakref.WeakValueDictionary()
_keys = itertools.count(1)
_lock = threading.Lock()


class HostCallback:
    """A Python function called from a program, and the table key the program names it by."""

    def __init__(self, function):
        self.function = function
        with _lock:
            self.key = next(_keys)
            _callbacks[self.key] = self


def lookup(key: int) -> HostCallback | None:
    return _callbacks.get(key)


@custom_call(TARGET, variadic=True)
def host_callback(info):
    """Call the registered function with the operands (a leading token passes through)."""
    key = int(info.attr("backend_config"))
    entry = lookup(key)
    if entry is None:
        raise info.unsupported(f"host callback #{key} no longer exists: the jitted function that "
                               "registered it is gone")
    function = entry.function
    takes_token = bool(info.operand_types) and isinstance(info.operand_types[0], TokenType)
    outputs = info.result_types[1:] if takes_token else info.result_types

    def run(*operands):
        values = function(*(operands[1:] if takes_token else operands))
        results = _checked(values, outputs)
        return (TOKEN, *results) if takes_token else results

    return run


def _checked(values, types) -> list:
    values = list(values or ())
    if len(values) != len(types):
        raise RuntimeError(f"the host callback returned {len(values)} values, expected {len(types)}")
    results = []
    for index, (value, expected) in enumerate(zip(values, types)):
        array = np.asarray(value)
        if array.shape != tuple(expected.shape) or array.dtype != expected.dtype:
            raise RuntimeError(f"the host callback returned {array.dtype}{list(array.shape)} for result "
                               f"#{index}, expected {expected.dtype}{list(expected.shape)}")
        results.append(array)
    return results
