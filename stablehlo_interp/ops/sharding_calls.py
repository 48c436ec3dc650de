"""Custom calls that only annotate values: shardings, memory placement, DCE sinks, scheduling.

The interpreter computes on global arrays in one process, so each of these
returns its operands unchanged, as XLA does when it does not partition
(XLA's ShardingRemover forwards the operand of ``Sharding``,
``SPMDFullToShardShape``, ``SPMDShardToFullShape``, ``xla.sdy.ShardingGroup``
and ``xla.sdy.FuncResultSharding``):

* ``Sharding`` (``mhlo.sharding`` attribute): ``with_sharding_constraint`` and
  sharded arguments/results when JAX lowers without Shardy;
* ``xla.sdy.GlobalToLocalShape`` / ``xla.sdy.LocalToGlobalShape``, the Shardy
  round-trip forms of the borders of a ``shard_map`` body: identities when every
  shard is the whole array (a mesh of one device). (``SPMDFullToShardShape`` and
  ``SPMDShardToFullShape`` run per process: ops/shardy.py.)
* ``xla.sdy.FuncResultSharding``, ``xla.sdy.ShardingGroup``: Shardy's
  annotations in modules exported through HLO;
* ``annotate_device_placement`` (``_xla_buffer_placement`` frontend attribute),
  ``MoveToHost`` / ``MoveToDevice``: memory kinds (``pinned_host``, ``device``);
* ``LayoutConstraint`` (``with_sharding_constraint(x, Format(layout, sharding))``):
  the result takes the layout the ``result_layouts`` attribute names, a physical
  matter; its value is the operand (the interpreter computes on logical arrays;
  the device reports the layout, device/layouts.py);
* ``dce_sink`` (``lax.dce_sink(x, prevent_mlir_dce=True)``): keeps a value alive,
  has no results;
* ``control_dep`` (``jax.experimental.control_deps.control_dep(src, dst)``): asks
  XLA's scheduler to run the op making ``src`` before the one making ``dst``; no
  results, and no value depends on it. The interpreter runs ops one at a time in
  program order, where both operands exist before the call;
* ``stablehlo_interp.inspect_sharding``: ``jax.debug.inspect_array_sharding``
  on the interp device, answered when the device compiles the program
  (device/inspect_sharding.py).
"""

from __future__ import annotations

from ..engine.registry import custom_call


@custom_call("Sharding", "xla.sdy.GlobalToLocalShape", "xla.sdy.LocalToGlobalShape", "xla.sdy.FuncResultSharding",
             "xla.sdy.ShardingGroup", "annotate_device_placement", "MoveToHost", "MoveToDevice", "LayoutConstraint", "dce_sink",
             "control_dep", "stablehlo_interp.inspect_sharding", variadic=True)
def forward(info):
    """Result i is operand i (no results: nothing to do)."""
    target = info.attr("call_target_name")
    operands, results = info.operand_types, info.result_types
    if len(results) != len(operands) and results:
        raise info.error(f"{target}: {len(operands)} operands but {len(results)} results")
    for index, (operand, result) in enumerate(zip(operands, results)):
        if operand != result:
            raise info.unsupported(
                f"{target}: operand {index} is {operand} but result {index} is {result}; a shard shape "
                "other than the global shape needs one program per device (lower for a single device)")
    return lambda *values: values[:len(results)]
