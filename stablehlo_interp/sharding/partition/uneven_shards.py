"""A value split along a dimension its devices do not divide evenly is refused with its
name: the global-to-local pass has no per-device type for it (XLA pads the last shards)."""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from ...ir.decode import decode_location
from .rewriting import mesh_axes, parts_along, walk


class UnevenShards(Exception):
    """A value split along a dimension its devices do not divide evenly (:func:`refuse_uneven_shards`)."""


def refuse_uneven_shards(module: ir.Module) -> None:
    """Raise :class:`UnevenShards` naming the first value (an op's result, a function's
    argument or result) split along a dimension its devices do not divide evenly: the
    global-to-local pass has no per-device type for it (it aborts its process) where XLA
    pads the last shards."""
    meshes = mesh_axes(module)

    def check(sharding, value_type, what: str) -> None:
        mesh = meshes.get(ir.FlatSymbolRefAttr(sharding.mesh_or_ref).value)
        value_type = value_type.maybe_downcast() if type(value_type) is ir.Type else value_type
        if mesh is None or not isinstance(value_type, ir.RankedTensorType):
            return
        shape = value_type.shape
        for dimension, dimension_sharding in enumerate(sharding.dimension_shardings):
            axes = [sdy.AxisRefAttr(axis) for axis in sdy.DimensionShardingAttr(dimension_sharding).axes]
            parts = parts_along(axes, mesh)
            if shape[dimension] % parts:
                raise UnevenShards(
                    f"{what} ({value_type}) is split {parts} ways along dimension {dimension}, of "
                    f"{shape[dimension]} elements; Shardy's partitioner has no per-device type for uneven shards "
                    "(XLA pads the last ones)")

    for operation in walk(module, ""):
        if "sdy.sharding" in operation.attributes:
            shardings = sdy.TensorShardingPerValueAttr(operation.attributes["sdy.sharding"]).shardings
            for index, (sharding, result) in enumerate(zip(shardings, operation.results)):
                check(sdy.TensorShardingAttr(sharding), result.type,
                      f"result {index} of {operation.name} at {decode_location(operation.location)}")
        for key in ("sharding", "out_sharding"):   # a reshard's or a collective's (sdy.all_slice ...)
            if key in operation.attributes and len(operation.results) == 1:
                check(sdy.TensorShardingAttr(operation.attributes[key]), operation.results[0].type,
                      f"{operation.name} at {decode_location(operation.location)}")
        if operation.name == "func.func":
            function_type = ir.FunctionType(ir.TypeAttr(operation.attributes["function_type"]).value)
            for key, types, what in (("arg_attrs", function_type.inputs, "argument"),
                                     ("res_attrs", function_type.results, "result")):
                if key not in operation.attributes:
                    continue
                for index, (attributes, value_type) in enumerate(zip(ir.ArrayAttr(operation.attributes[key]), types)):
                    attributes = ir.DictAttr(attributes)
                    if "sdy.sharding" in attributes:
                        check(sdy.TensorShardingAttr(attributes["sdy.sharding"]), value_type,
                              f"{what} {index} of @{ir.StringAttr(operation.attributes['sym_name']).value}")
