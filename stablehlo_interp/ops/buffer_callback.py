"""The interpreter's side of ``jax.experimental.buffer_callback``: a custom call
that calls a Python function with buffers to write its results into.

The function is JAX's wrapper of the user's callback (jax/_src/buffer_callback.py,
``_buffer_callback_lowering``): ``function(ctx, *inputs, *outputs)``, one
:class:`Buffer` per operand, then one per result, and it returns nothing. Two
targets, one per way JAX lowers it:

* ``stablehlo_interp.buffer_callback``: the ``interp`` platform's lowering
  (device/buffer_callbacks.py), whose ``backend_config`` is the key of a
  :class:`~.host_callback.HostCallback` in the host-callback table.
* ``xla_buffer_python_cpu_callback``: the CPU's lowering (what ``si.run(f, ...)``
  lowers for), whose ``mhlo.backend_config = {index = N}`` points into the list of
  Python callables the ``jax.stages.Lowered`` keeps, as for host callbacks.

The buffers behave as jaxlib's do on the CPU (xla/python/ffi.cc): ``shape``,
``dtype``, ``ndim``, ``writeable``, ``__array__`` (a NumPy view), ``__dlpack__``
and ``__dlpack_device__`` (the host, ``(kDLCPU, 0)``); ``__cuda_array_interface__``
raises, as off a GPU. An operand's buffer is read-only, a view of its value
(jaxlib's ``__array__`` hands out a writable view of an input it calls read-only,
which lets a callback overwrite an operand other ops still read; here such a write
raises NumPy's error). A result's buffer is writable and starts as zeros (XLA's
is uninitialized memory), or, for a result that aliases an operand
(``input_output_aliases``, the op's ``output_operand_aliases``), as a copy of the
operand, which the operand's buffer then views: the same memory, as in XLA. The
op's results are what the function left in the result buffers.

The context (:class:`ExecutionContext`) has the ``stage`` XLA runs the callback in,
``EXECUTE``, and no ``stream``: asking for one raises, as on XLA's CPU. A
function that raises, or returns a value, stops the run with an error naming
the op (the exception is its ``__cause__``).
"""

from __future__ import annotations

import numpy as np

from ..engine.registry import custom_call
from .host_callback import callback_lowered_for_the_cpu, callback_runner, registered_callback

TARGET = "stablehlo_interp.buffer_callback"
CPU_TARGET = "xla_buffer_python_cpu_callback"
DLPACK_CPU_DEVICE = (1, 0)   # (kDLCPU, device 0)


class Buffer:
    """An operand's or a result's memory as the callback sees it (jaxlib's ``ffi.Buffer`` on the CPU)."""

    def __init__(self, array: np.ndarray, writeable: bool):
        self._array = array if writeable else _read_only_view(array)

    @property
    def shape(self) -> tuple:
        return self._array.shape

    @property
    def dtype(self) -> np.dtype:
        return self._array.dtype

    @property
    def ndim(self) -> int:
        return self._array.ndim

    @property
    def writeable(self) -> bool:
        return bool(self._array.flags.writeable)

    def __array__(self, dtype=None, copy=None):
        if copy is False and dtype is not None and np.dtype(dtype) != self._array.dtype:
            raise ValueError(f"a {self._array.dtype} buffer cannot be viewed as {np.dtype(dtype)} without a copy")
        array = self._array.astype(dtype) if dtype is not None else self._array
        return array.copy() if copy and array is self._array else array

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self._array.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple:
        return DLPACK_CPU_DEVICE

    @property
    def __cuda_array_interface__(self):
        from jax.errors import JaxRuntimeError

        raise JaxRuntimeError("UNIMPLEMENTED: Buffer.__cuda_array_interface__ is only supported on CUDA and ROCm "
                              "(the interp device's buffers are host memory: use __array__ or __dlpack__)")


class ExecutionContext:
    """The callback's ``ctx``: XLA's FFI execution context as the CPU gives it."""

    @property
    def stage(self):
        from jax.experimental.buffer_callback import ExecutionStage

        return ExecutionStage.EXECUTE

    @property
    def stream(self):
        from jax.errors import JaxRuntimeError

        raise JaxRuntimeError("UNIMPLEMENTED: XLA FFI GPU context is not available (the interp device runs "
                              "buffer callbacks on the host, as XLA's CPU does)")


@custom_call(TARGET, variadic=True)
def buffer_callback(info):
    """Call the registered function with buffers of the operands and of fresh results."""
    name, call = registered_callback(info, "buffer callback")
    return callback_runner(info, name, _in_place(info, call))


@custom_call(CPU_TARGET, variadic=True)
def cpu_buffer_callback(info):
    """Call the function JAX lowered for the CPU at ``index`` with buffers, as the interp target does."""
    name, call = callback_lowered_for_the_cpu(info, "buffer callback")
    return callback_runner(info, name, _in_place(info, call))


def _in_place(info, call):
    """``call`` (which takes the token, if any, and the callback's arguments) as a function of
    the operands that returns what the callback wrote into the result buffers."""
    aliased = {}
    for alias in info.attr("output_operand_aliases", None) or ():
        if alias.output_tuple_indices[1:] or alias.operand_tuple_indices:
            raise info.unsupported(f"an output_operand_alias into a tuple: {alias}")
        aliased[alias.output_tuple_indices[0] if alias.output_tuple_indices else 0] = alias.operand_index
    result_types = info.result_types

    def run(token, operands):
        inputs = [np.asarray(value) for value in operands]
        outputs = []
        for index, result_type in enumerate(result_types):
            if index in aliased:
                outputs.append(np.array(inputs[aliased[index]], copy=True))
                inputs[aliased[index]] = outputs[-1]
            else:
                outputs.append(np.zeros(result_type.shape, result_type.dtype))
        call(token, [ExecutionContext(), *(Buffer(value, writeable=False) for value in inputs),
                     *(Buffer(value, writeable=True) for value in outputs)])
        return outputs

    return run


def _read_only_view(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view
