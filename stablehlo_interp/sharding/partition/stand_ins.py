"""Stand-ins: ops the global-to-local pass refuses become custom calls it converts like
any op, and become the op again, on local types, after it."""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from ...ir.edit import chlo_sharding_rule
from .gathers_from_shards import gather_from_shards
from .rewriting import (GATHER_FROM_SHARDS, STAND_IN_ATTRIBUTES, STAND_IN_TARGET, make_stand_in, sharding_of,
    split_dimensions, walk)


def stand_in_for_unconverted_ops(module: ir.Module) -> None:
    """Ops the global-to-local pass refuses though their local form is the same op on
    local types become stand-ins (:func:`~.rewriting.make_stand_in`):

    * a ``dynamic_slice`` whose result's sharded dimensions it takes whole (a scan's step
      takes a whole row of its sharded input): the pass keeps its global ``slice_sizes``
      and fails;
    * a ``dot_general`` whose result stays unreduced (a partial sum kept for later, as a
      gradient accumulated over a scan): the pass expects such a dot to be all-reduced at
      once (a failed Check that aborts its process). Each device's local dot is its part
      of the sum, which the unreduced value is."""
    for operation in walk(module, "stablehlo.dynamic_slice"):
        if "sdy.sharding" not in operation.attributes:
            continue
        sizes = list(ir.DenseI64ArrayAttr(operation.attributes["slice_sizes"]))
        whole = ir.RankedTensorType(operation.operands[0].type).shape
        if not any(sharded and size != full
                   for sharded, size, full in zip(split_dimensions(sharding_of(operation.results[0])), sizes, whole)):
            make_stand_in(operation)
    for operation in walk(module, "stablehlo.dot_general"):
        if "sdy.sharding" in operation.attributes and len(sdy.TensorShardingAttr(sdy.TensorShardingPerValueAttr(
                operation.attributes["sdy.sharding"]).shardings[0]).unreduced_axes):
            make_stand_in(operation)


def stand_in_for_chlo(module: ir.Module) -> None:
    """Each element-wise CHLO op (``chlo.square`` of a LayerNorm's variance, ``chlo.erf``
    ...) and ``chlo.top_k`` a stand-in with a ``sdy.sharding_rule`` (ir/edit.py's
    :func:`chlo_sharding_rule`), before propagation: Shardy has no sharding rule for CHLO's
    ops (it gave a ``chlo.square`` another sharding than its operand's, and no reshard
    between them) and its global-to-local pass refuses them as illegal.
    :func:`restore_stand_ins` makes them the op again, on local types."""
    for operation in walk(module, "chlo."):
        rule = chlo_sharding_rule(operation)
        if rule is not None:
            make_stand_in(operation, {"sdy.sharding_rule": rule})


def restore_stand_ins(module: ir.Module) -> None:
    """Each stand-in (:func:`stand_in_for_unconverted_ops`, :func:`stand_in_for_chlo`,
    :func:`stand_in_for_gathers_from_shards`) its op again, of its result's (local) type; a
    ``dynamic_slice`` takes the local shape as its ``slice_sizes``; a gather from a split
    dimension becomes :func:`gather_from_shards`."""
    for stand_in in walk(module, "stablehlo.custom_call"):
        if ir.StringAttr(stand_in.attributes["call_target_name"]).value != STAND_IN_TARGET:
            continue
        name = ir.StringAttr(stand_in.attributes["backend_config"]).value
        attributes = {named.name: named.attr for named in ir.DictAttr(stand_in.attributes[STAND_IN_ATTRIBUTES])}
        result_type = stand_in.results[0].type
        if name == "stablehlo.dynamic_slice":
            attributes["slice_sizes"] = ir.DenseI64ArrayAttr.get(ir.RankedTensorType(result_type).shape)
        with ir.InsertionPoint(stand_in), stand_in.location:
            if name == GATHER_FROM_SHARDS:
                operand, indices, *offsets = stand_in.operands
                results = [gather_from_shards(operand, indices, offsets, attributes, result_type)]
            else:
                results = list(ir.Operation.create(name, results=[result.type for result in stand_in.results],
                                                   operands=list(stand_in.operands), attributes=attributes).results)
        for stood_in, result in zip(stand_in.results, results):
            stood_in.replace_all_uses_with(result)
        stand_in.erase()
