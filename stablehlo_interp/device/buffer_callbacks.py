"""``jax.experimental.buffer_callback`` on the interp device.

JAX lowers ``buffer_callback_p`` for cpu, cuda and rocm only
(jax/_src/buffer_callback.py, ``_buffer_callback_lowering``): a typed FFI custom
call ``xla_buffer_python_cpu_callback`` whose ``index`` points into the list of
Python callables JAX hands to jaxlib's compiler, which a PJRT C API plugin never
sees; any other platform is refused. For the ``interp`` platform, :func:`lower`
registers the callback in the host-callback table instead, as host callbacks do
(host_callbacks.py), and emits ``stablehlo_interp.buffer_callback`` with the
table key as ``backend_config``, the CPU's ``has_side_effect`` and its
``output_operand_aliases`` (``input_output_aliases``). The interpreter's side
(ops/buffer_callback.py) calls it with buffers that behave as jaxlib's do on the
CPU. ``vmap`` needs nothing here: JAX's batching rule rewrites the primitive
before it is lowered. ``command_buffer_compatible`` only changes the GPU's target.
"""

from __future__ import annotations

from ..ops.buffer_callback import TARGET
from ..ops.host_callback import HostCallback
from ..program.calls import INTERP_PLATFORM as PLATFORM



def lower(ctx, *args, callback, in_tree, out_tree, has_side_effect, input_output_aliases, **_):
    """The lowering rule of ``buffer_callback_p`` for the interp platform."""
    from jax._src import tree_util
    from jax._src.interpreters import mlir

    if len(ctx.module_context.platforms) > 1:
        raise NotImplementedError("multi-platform lowering for buffer_callback")
    num_inputs = in_tree.num_leaves

    def call(exec_ctx, *buffers):
        """JAX's calling convention: ``callback(ctx, out, *args, **kwargs)`` with the pytrees rebuilt."""
        py_args, py_kwargs = tree_util.tree_unflatten(in_tree, buffers[:num_inputs])
        out = tree_util.tree_unflatten(out_tree, buffers[num_inputs:])
        if callback(exec_ctx, out, *py_args, **py_kwargs) is not None:
            raise ValueError("buffer_callback callback must not return any values.")

    entry = HostCallback(call)
    ctx.module_context.add_keepalive(entry)
    result_types = [mlir.aval_to_ir_type(ctx.module_context, aval) for aval in ctx.avals_out]
    op = mlir.custom_call(TARGET, result_types=result_types, operands=list(args), backend_config=str(entry.key),
                          has_side_effect=has_side_effect, operand_output_aliases=dict(input_output_aliases))
    return list(op.results)


def register() -> None:
    from jax._src import buffer_callback
    from jax._src.interpreters import mlir

    mlir.register_lowering(buffer_callback.buffer_callback_p, lower, platform=PLATFORM)
