"""Host callbacks (jax.debug.print, debug.callback, pure_callback, io_callback) on the interp device.

On the CPU, JAX lowers a host callback to a custom call
(``xla_ffi_python_cpu_callback``) whose ``index`` attribute points into the
list of Python callables that JAX hands to jaxlib's *C++* compiler; a PJRT C
API plugin never sees that list. And ``emit_python_callback``, which every
callback primitive's lowering rule calls, refuses platforms other than
cpu/cuda/rocm/tpu.

So for the ``interp`` platform, :func:`register` wraps
``jax._src.callback.emit_python_callback``: it registers the callable in a
process-wide table and emits ``stablehlo.custom_call @stablehlo_interp.host_callback``
whose ``backend_config`` is the table key (other platforms go to JAX's
function unchanged). The lowering adds the entry to the module's keep-alives,
so it lives as long as the compiled executable that may call it; the op carries
the callback's sharding as JAX's lowering for the CPU writes it, and what the
function returns takes JAX's canonical types, as JAX's wrapper does. The
interpreter's implementation of that custom call (ops/host_callback.py) calls
the function with NumPy arrays, in program order, and checks what it returns.
A partitioned callback (``partitioned=True``) is a ``@stablehlo_interp.partitioned_host_callback``,
which calls the function once per device with the device's shards, as XLA does.

As on the CPU, JAX runs the user's function with its arguments on a CPU
device: with ``JAX_PLATFORMS``, list ``cpu`` too (``JAX_PLATFORMS=interp,cpu``).
"""

from __future__ import annotations

import numpy as np

from ..ops.host_callback import PARTITIONED_TARGET, TARGET, HostCallback
from ..program.calls import INTERP_PLATFORM as PLATFORM



def emit(ctx, callback, token, operands, operand_avals, result_avals, *, has_side_effect,
         returns_token=True, partitioned=False, sharding=None):
    """Our ``emit_python_callback`` for the interp platform: same arguments, same results."""
    from jax._src.interpreters import mlir

    del operand_avals, returns_token
    entry = HostCallback(_canonicalizing(callback))
    ctx.module_context.add_keepalive(entry)
    result_types = [mlir.aval_to_ir_type(ctx.module_context, aval) for aval in result_avals]
    operands = list(operands)
    if token is not None:
        operands = [token, *operands]
        result_types = [mlir.token_type(), *result_types]
    op = mlir.custom_call(PARTITIONED_TARGET if partitioned else TARGET, result_types=result_types, operands=operands,
                          backend_config=str(entry.key), has_side_effect=has_side_effect)
    if sharding is not None:
        mlir.set_sharding(ctx.module_context, op, _with_token_sharding(sharding, token, result_avals))
    results = list(op.results)
    if token is not None:
        token, *results = results
    return results, token, None


def _with_token_sharding(sharding, token, result_avals):
    """The op's sharding as JAX's lowering for the CPU sets it (the device the callback
    runs on, maximal, e.g. ``io_callback(..., sharding=...)``): with Shardy, a token result
    before other results gets one of its own on the same device."""
    from jax._src.sharding_impls import SdyArray, SdyArrayList

    if token is None or not result_avals or not isinstance(sharding, SdyArrayList):
        return sharding
    device_ids = sharding.shardings[0].logical_device_ids
    return SdyArrayList((SdyArray(mesh_shape=(), dim_shardings=(), logical_device_ids=device_ids),
                         *sharding.shardings))


def _canonicalizing(callback):
    """The callback returning what JAX's wrapper on the CPU makes of its values
    (``emit_python_callback``'s ``_wrapped_callback``): arrays of JAX's canonical
    types, so a Python literal ``42.0``, or a float64 array with x64 off, is float32.
    The interpreter then checks them against the op's result types."""
    from jax._src import dtypes

    def call(*args):
        return tuple(dtypes.canonicalize_value(np.asarray(value)) for value in callback(*args) or ())

    return call


def register() -> None:
    """Route host callbacks lowered for the interp platform through :func:`emit`.

    Every module that binds ``emit_python_callback`` by name gets the wrapper: JAX's
    own and the public ``jax.interpreters.mlir``, which lowering rules outside JAX's
    core call (``jax.experimental.sparse.linalg.spsolve`` on the CPU)."""
    from jax._src import callback as jax_callback
    from jax._src.interpreters import mlir
    from jax.interpreters import mlir as public_mlir

    original = jax_callback.emit_python_callback
    if getattr(original, "interp_original", None) is not None:
        return

    def emit_python_callback(ctx, *args, **kwargs):
        if tuple(ctx.module_context.platforms) == (PLATFORM,):
            return emit(ctx, *args, **kwargs)
        return original(ctx, *args, **kwargs)

    emit_python_callback.interp_original = original
    emit_python_callback.__doc__ = original.__doc__
    jax_callback.emit_python_callback = emit_python_callback
    mlir.emit_python_callback = emit_python_callback
    public_mlir.emit_python_callback = emit_python_callback
