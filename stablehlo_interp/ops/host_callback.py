"""The interpreter's side of host callbacks (jax.debug.print, debug.callback,
pure_callback, io_callback): custom calls that call a Python function.

Two targets, one per way JAX lowers a callback:

* ``stablehlo_interp.host_callback``: the ``interp`` platform's lowering
  (device/host_callbacks.py). Its ``backend_config`` is the key of a
  :class:`HostCallback` in a process-wide table, which lives as long as the
  compiled executable that may call it.
* ``xla_ffi_python_cpu_callback``: the CPU's lowering (JAX's default platform,
  what ``si.run(f, ...)`` and the tools lower for). Its ``index`` attribute
  (``mhlo.backend_config = {index = N}``) points into the list of Python
  callables that JAX keeps beside the module, in the ``jax.stages.Lowered``, and
  would hand to XLA's compiler (jax/_src/callback.py, ``emit_python_callback``).
  A Program loaded from a ``Lowered`` keeps that list (``ModuleInfo.host_callbacks``);
  the module's text alone does not have it, and such a module fails to load
  with an error that says so.

Either way the function gets NumPy arrays, in program order (a callback with a
token is ordered by it, as every op with a side effect is run in program order
here), and what it returns is checked against the op's result types. A
callback that raises stops the run with an error naming the op, where the
callback was made in the user's code and what it raised (the exception is the
error's ``__cause__``).
"""

from __future__ import annotations

import itertools
import threading
import weakref

import numpy as np

from ..engine.registry import custom_call
from ..errors import OpExecutionError
from ..ir.types import TOKEN, TokenType

TARGET = "stablehlo_interp.host_callback"
CPU_TARGET = "xla_ffi_python_cpu_callback"

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
    return _runner(info, f"host callback #{key}",
                   lambda token, operands: function(*operands))


@custom_call(CPU_TARGET, variadic=True)
def cpu_host_callback(info):
    """Call the function JAX lowered for the CPU at ``index``: JAX's wrapper of the
    user's function, which takes and returns the token as well when there is one."""
    config = info.attr("mhlo.backend_config", None)
    index = config.get("index") if isinstance(config, dict) else None
    if index is None:
        raise info.error("a host callback needs its index: mhlo.backend_config = {index = N : ui64}")
    known = info.module.host_callbacks if info.module is not None else ()
    if not 0 <= index < len(known):
        raise info.unsupported(
            f"host callback #{index} of a module JAX lowered for the CPU: its Python function is known only to "
            "the jax.stages.Lowered the module came from, not to the module's text. Run the function, the jitted "
            "function or the Lowered itself (si.run(lowered, *args)), or register an implementation with "
            f"si.register_custom_call({CPU_TARGET!r}, ...)")
    function = known[index]

    def call(token, operands):
        if token is None:
            return function(*operands)
        return function(token, *operands)[1:]

    return _runner(info, f"host callback #{index}", call)


def _runner(info, name: str, call):
    """The runner of a host callback op: ``call(token or None, operands)`` returns the
    callback's values (without a token); the op's leading token, if any, passes through."""
    takes_token = bool(info.operand_types) and isinstance(info.operand_types[0], TokenType)
    outputs = info.result_types[1:] if takes_token else info.result_types

    def run(*operands):
        token, operands = (operands[0], operands[1:]) if takes_token else (None, operands)
        try:
            values = call(token, operands)
        except Exception as error:
            raise OpExecutionError(info.name, info.location,
                                   f"the {name} raised {type(error).__name__}: {error}") from error
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
