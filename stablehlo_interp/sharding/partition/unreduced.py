"""Whole values made unreduced: the first device along the unreduced axes keeps the value,
the others hold zeros (as XLA partitions ``replicated_to_unreduced``)."""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy
from jaxlib.mlir.dialects import stablehlo as hlo

from .rewriting import axis_refs, is_first_along, mesh_axes, sharding_of, walk


def lower_replicated_to_unreduced(module: ir.Module) -> None:
    """``sdy.replicated_to_unreduced`` makes a value that every device along ``axes`` holds
    whole into one whose sum over those devices is the value: the first device along them
    keeps it, the others hold zeros (as XLA partitions it: a ``select`` on
    ``partition_id``). The global-to-local pass has no rule for it; the ``select`` it
    converts like any op (sharded as the op's result). One without users is erased. An op
    that sums nothing (:data:`WHOLE_VALUE_OPS`: a constant, a conversion ...) of whole values
    (constants, the function's arguments that are not unreduced) constrained to be
    unreduced gets that sharding with no ``replicated_to_unreduced`` written (the ones of
    a sum's gradient, ``jnp.array(x, out_sharding=P(unreduced=...))``): its result is made so too, where the pass gave every device the whole value (a sum of
    n copies)."""
    meshes = mesh_axes(module)
    for operation in walk(module, "sdy.replicated_to_unreduced"):
        if not list(operation.results[0].uses):
            operation.erase()
            continue
        sharding = sdy.TensorShardingAttr(operation.attributes["out_sharding"])
        partial = _first_keeps(operation.operands[0], axis_refs(operation.attributes["axes"]), sharding, meshes,
                               ir.InsertionPoint(operation), operation.location)
        operation.results[0].replace_all_uses_with(partial)
        operation.erase()
    for operation in walk(module, ""):   # made unreduced from whole values: no replicated_to_unreduced written
        if operation.name not in WHOLE_VALUE_OPS or "sdy.sharding" not in operation.attributes:
            continue
        sharding = sdy.TensorShardingAttr(sdy.TensorShardingPerValueAttr(operation.attributes["sdy.sharding"]).shardings[0])
        axes = [sdy.AxisRefAttr(axis) for axis in sharding.unreduced_axes]
        unreduced = {str(axis) for axis in axes}
        if not axes or any(not isinstance(value, ir.BlockArgument) or (sharding_ := sharding_of(value)) is None
                           or unreduced & {str(axis) for axis in sharding_.unreduced_axes}
                           for value in operation.operands):
            continue   # whole values only: constants, and the function's own arguments (not a dot's partials)
        value = operation.results[0]
        users = [(use.owner, use.operand_number) for use in value.uses]
        partial = _first_keeps(value, axes, sharding, meshes, ir.InsertionPoint.after(operation), operation.location)
        for user, index in users:
            user.operands[index] = partial


# Ops that make, move or convert one value without adding anything to it: a result
# unreduced while their operand is whole is a whole value constrained to be unreduced.
WHOLE_VALUE_OPS = frozenset({"stablehlo.constant", "sdy.constant", "stablehlo.iota", "stablehlo.broadcast_in_dim",
                             "stablehlo.reshape", "stablehlo.transpose", "stablehlo.convert",
                             "stablehlo.bitcast_convert", "stablehlo.reduce_precision"})


def _first_keeps(value: ir.Value, axes: list, sharding, meshes: dict, ip: ir.InsertionPoint, location) -> ir.Value:
    """``value`` on the first device along ``axes`` and zeros on the others (at ``ip``; the
    new ops sharded as ``sharding``): a whole value made the partial of its own sum."""
    mesh = meshes.get(ir.FlatSymbolRefAttr(sharding.mesh_or_ref).value)
    if mesh is None:
        raise ValueError("an unreduced value on a mesh with its own device order is not supported")
    result_type = ir.RankedTensorType(value.type)
    with location:
        first = is_first_along(axes, mesh, ip)
        per_value = sdy.TensorShardingPerValueAttr.get([sharding])
        mask = hlo.BroadcastInDimOp(ir.RankedTensorType.get(result_type.shape, ir.IntegerType.get_signless(1)),
                                    first, [], ip=ip)
        false = hlo.ConstantOp(ir.DenseElementsAttr.get(np.array(False), type=ir.IntegerType.get_signless(1)), ip=ip)
        zero = hlo.BroadcastInDimOp(result_type, hlo.ConvertOp(ir.RankedTensorType.get(
            [], result_type.element_type), false.result, ip=ip).result, [], ip=ip)
        select = hlo.SelectOp(mask.result, value, zero.result, ip=ip)
        for made in (mask, zero, select):
            made.operation.attributes["sdy.sharding"] = per_value
    return select.result
