"""A gather of single elements from dimensions split over devices: each device gathers
from its own part, zeros where an index falls outside it, and the all-reduce Shardy
wrote adds them (the pass itself has no rule for it)."""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy
from jaxlib.mlir.dialects import stablehlo as hlo

from .rewriting import (GATHER_FROM_SHARDS, GLOBAL_SHAPE, STAND_IN_ATTRIBUTES, STAND_IN_TARGET, axis_refs, index_along,
    mesh_axes, parts_along, sharding_of, u32_constant, walk)


def stand_in_for_gathers_from_shards(module: ir.Module) -> None:
    """A ``gather`` of single elements from operand dimensions split over devices (an
    embedding table split by vocabulary, a loss's labels from logits split so, a point
    ``t[i, j]`` from a table split both ways, a permutation of rows split by row), which
    Shardy leaves global and all-reduces over the dimensions' axes (as XLA's partitioner
    does it): each device gathers from its own part, its indices moved by its part's
    offsets, and gives zeros where an index falls outside it; the all-reduce adds one
    device's element to the others' zeros. The global-to-local pass has no rule for it
    (it left a broken module, which crashed the process printing it, or failed a check):
    the gather becomes a stand-in, whose last operands are the device's offset along each
    indexed dimension (made from ``partition_id``; 0 where the dimension is whole), and
    :func:`restore_stand_ins` writes the masked local gather. Dimensions split but not
    indexed must be sliced whole (each device's slice is then its part of it) or be
    batching dimensions (split as the indices' batch dimensions)."""
    meshes = mesh_axes(module)
    for gather in walk(module, "stablehlo.gather"):
        operand, indices = gather.operands
        sharding = sharding_of(operand)
        mesh = None if sharding is None else meshes.get(ir.FlatSymbolRefAttr(sharding.mesh_or_ref).value)
        if mesh is None:
            continue
        numbers = hlo.GatherDimensionNumbers(gather.attributes["dimension_numbers"])
        start_index_map, sizes = list(numbers.start_index_map), list(ir.DenseI64ArrayAttr(gather.attributes["slice_sizes"]))
        shape = ir.RankedTensorType(operand.type).shape
        axes_of = {dimension: [sdy.AxisRefAttr(axis) for axis in sdy.DimensionShardingAttr(dimension_sharding).axes]
                   for dimension, dimension_sharding in enumerate(sharding.dimension_shardings)}
        split = {dimension: axes for dimension, axes in axes_of.items() if axes}
        parts = {dimension: parts_along(axes, mesh) for dimension, axes in split.items()}
        indexed = [dimension for dimension in start_index_map if dimension in split]
        batching = list(numbers.operand_batching_dims)   # split as the indices' batch, which each device holds
        if (not indexed or any(sizes[dimension] != 1 or shape[dimension] % parts[dimension] for dimension in indexed)
                or any(sizes[dimension] != shape[dimension] for dimension in split
                       if dimension not in start_index_map and dimension not in batching)
                or not _all_reduced_over(gather.results[0], [axis for d in indexed for axis in split[d]])):
            continue
        offsets = []
        with gather.location:
            for dimension in start_index_map:
                if dimension in split:
                    position, _ = index_along(split[dimension], mesh, ir.InsertionPoint(gather))
                    offsets.append(hlo.MulOp(position, u32_constant(shape[dimension] // parts[dimension],
                                                                     ir.InsertionPoint(gather)),
                                             ip=ir.InsertionPoint(gather)).result)
                else:
                    offsets.append(u32_constant(0, ir.InsertionPoint(gather)))
        kept = {name: gather.attributes[name] for name in gather.attributes if name != "sdy.sharding"}
        kept[GLOBAL_SHAPE] = ir.DenseI64ArrayAttr.get(shape)
        result_sharding = {"sdy.sharding": gather.attributes["sdy.sharding"]} if "sdy.sharding" in gather.attributes else {}
        with ir.InsertionPoint(gather), gather.location:
            stand_in = ir.Operation.create(
                "stablehlo.custom_call", results=[gather.results[0].type], operands=[operand, indices, *offsets],
                attributes={"call_target_name": ir.StringAttr.get(STAND_IN_TARGET),
                            "backend_config": ir.StringAttr.get(GATHER_FROM_SHARDS),
                            STAND_IN_ATTRIBUTES: ir.DictAttr.get(kept), **result_sharding})
        gather.results[0].replace_all_uses_with(stand_in.results[0])
        gather.erase()


def _all_reduced_over(value: ir.Value, axes: list) -> bool:
    """Whether every use of ``value`` is an ``sdy.all_reduce`` over (at least) ``axes``."""
    wanted = {str(axis) for axis in axes}
    users = [use.owner for use in value.uses]
    return bool(users) and all(
        getattr(user, "operation", user).name == "sdy.all_reduce"
        and wanted <= {str(axis) for axis in axis_refs(getattr(user, "operation", user).attributes["reduction_axes"])}
        for user in users)


def gather_from_shards(operand: ir.Value, indices: ir.Value, offsets: list, attributes: dict,
                        result_type) -> ir.Value:
    """The local form of :func:`stand_in_for_gathers_from_shards`' gather (at the insertion
    point): each start index clamped into its whole dimension (as the spec's gather clamps
    its start indices) less its ``offsets`` entry, gathered from the device's part
    ``operand`` (slices of a whole dimension taken whole on the part), zeros where an index
    is outside the part."""
    operand_shape, whole = ir.RankedTensorType(operand.type).shape, list(ir.DenseI64ArrayAttr(attributes.pop(GLOBAL_SHAPE)))
    numbers = hlo.GatherDimensionNumbers(attributes["dimension_numbers"])
    start_index_map, vector_dimension = list(numbers.start_index_map), numbers.index_vector_dim
    global_sizes = list(ir.DenseI64ArrayAttr(attributes["slice_sizes"]))
    attributes["slice_sizes"] = ir.DenseI64ArrayAttr.get(
        [local if size == full else size for size, full, local in zip(global_sizes, whole, operand_shape)])
    index_type = ir.RankedTensorType(indices.type)
    boolean = ir.IntegerType.get_signless(1)
    batch_shape = [size for axis, size in enumerate(index_type.shape) if axis != vector_dimension]
    batch_type = ir.RankedTensorType.get(batch_shape, index_type.element_type)

    def spread(number: int | None = None, value: ir.Value | None = None) -> ir.Value:
        """An index-typed tensor of the batch's shape, of ``number`` or of the scalar ``value``."""
        scalar = ir.RankedTensorType.get([], index_type.element_type)
        if value is None:
            value = hlo.ConstantOp(ir.DenseElementsAttr.get_splat(
                scalar, ir.IntegerAttr.get(scalar.element_type, number))).result
        else:
            value = hlo.ConvertOp(scalar, value).result
        return hlo.BroadcastInDimOp(batch_type, value, []).result

    components, inside = [], None
    for k, (dimension, offset) in enumerate(zip(start_index_map, offsets)):
        if vector_dimension < index_type.rank:
            limits = list(index_type.shape)
            limits[vector_dimension] = k + 1
            starts = [0] * index_type.rank
            starts[vector_dimension] = k
            component: ir.Value = hlo.ReshapeOp(
                batch_type, hlo.SliceOp(indices, starts, limits, [1] * index_type.rank).result).result
        else:
            component = indices
        clamped = hlo.ClampOp(spread(0), component, spread(whole[dimension] - global_sizes[dimension])).result
        local = hlo.SubtractOp(clamped, spread(value=offset)).result
        within = hlo.AndOp(
            hlo.CompareOp(local, spread(0), hlo.ComparisonDirectionAttr.get("GE")).result,
            hlo.CompareOp(local, spread(operand_shape[dimension]), hlo.ComparisonDirectionAttr.get("LT")).result).result
        inside = within if inside is None else hlo.AndOp(inside, within).result
        components.append(hlo.ReshapeOp(ir.RankedTensorType.get(
            batch_shape[:vector_dimension] + [1] + batch_shape[vector_dimension:], index_type.element_type),
            local).result if vector_dimension < index_type.rank else local)
    local_indices = components[0] if len(components) == 1 else hlo.ConcatenateOp(components, vector_dimension).result
    result = ir.RankedTensorType(result_type)
    batch_dimensions = [axis for axis in range(result.rank) if axis not in list(numbers.offset_dims)]
    inside = hlo.BroadcastInDimOp(ir.RankedTensorType.get(result.shape, boolean), inside, batch_dimensions).result
    gathered = ir.Operation.create("stablehlo.gather", results=[result_type], operands=[operand, local_indices],
                                   attributes=attributes).results[0]
    false = hlo.ConstantOp(ir.DenseElementsAttr.get(np.array(False), type=boolean)).result
    zeros = hlo.BroadcastInDimOp(result, hlo.ConvertOp(ir.RankedTensorType.get([], result.element_type),
                                                       false).result, []).result
    return hlo.SelectOp(inside, gathered, zeros).result
