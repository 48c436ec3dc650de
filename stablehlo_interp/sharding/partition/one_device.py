"""Ops JAX places on one device (a host callback's maximal sharding): that device alone
runs them, on whole operands, and broadcasts their results, as XLA does."""

from __future__ import annotations

import re

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy
from jaxlib.mlir.dialects import stablehlo as hlo

from ...ir.decode import decode_location
from .rewriting import mesh_axes, reshard_operand, sharding_of, split_dimensions, walk, zeros

ON_DEVICE = "stablehlo_interp.on_device"   # an op of a maximal sharding: the device that runs it


def _maximal_meshes(module: ir.Module) -> dict:
    """``{mesh name: device}`` of each maximal mesh (``<[], device_ids=[d]>``, JAX's for
    host callbacks)."""
    found = {}
    for operation in module.body.operations:
        if operation.operation.name == "sdy.mesh":
            mesh = sdy.MeshAttr(operation.attributes["mesh"])
            if not list(mesh.axes) and len(list(mesh.device_ids)) == 1:
                found[ir.StringAttr(operation.attributes["sym_name"]).value] = int(list(mesh.device_ids)[0])
    return found


def replicate_maximal_ops(module: ir.Module) -> None:
    """Before the export's reshards: an op JAX places on one device (a host callback's
    maximal sharding), which Shardy's global-to-local pass leaves with its global types,
    takes its operands whole (``sdy.reshard``: all-gathers) and gives whole results, on the
    program's mesh; :func:`run_on_their_device` then makes its device alone run it and
    broadcast its results, as XLA's partitioner does with a maximal sharding."""
    maximal = _maximal_meshes(module)
    meshes = mesh_axes(module)
    for operation in walk(module, ""):
        if "sdy.sharding" not in operation.attributes:
            continue
        shardings = [sdy.TensorShardingAttr(sharding) for sharding in
                     sdy.TensorShardingPerValueAttr(operation.attributes["sdy.sharding"]).shardings]
        names = {ir.FlatSymbolRefAttr(sharding.mesh_or_ref).value for sharding in shardings}
        if not names or not names <= set(maximal):
            continue
        if len(meshes) != 1:
            raise ValueError(f"{operation.name} at {decode_location(operation.location)} runs on one device (a maximal "
                              f"sharding), and the program has {len(meshes)} meshes of devices in their own order, "
                              "not one, to broadcast its results over")
        mesh_name = ir.FlatSymbolRefAttr.get(next(iter(meshes)))

        def whole(value_type, mesh_name=mesh_name):
            rank = value_type.rank if isinstance(value_type, ir.RankedTensorType) else 0
            return sdy.TensorShardingAttr.get(mesh_name, [sdy.DimensionShardingAttr.get([], True)] * rank, [], [])

        for index, value in enumerate(operation.operands):
            sharding = sharding_of(value)
            if sharding is None or not any(split_dimensions(sharding)) and not list(sharding.unreduced_axes):
                continue
            reshard_operand(operation, index, whole(value.type))
        operation.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(
            [whole(result.type) for result in operation.results])
        operation.attributes[ON_DEVICE] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                             maximal[names.pop()])


def run_on_their_device(module: ir.Module) -> None:
    """After the global-to-local pass: each op :func:`replicate_maximal_ops` marked runs in
    the ``if`` branch of its device (``partition_id`` equal to it), the other devices
    make zeros, and a ``collective_broadcast`` from that device gives every device its
    results (a token result stays each device's own)."""
    marked = [operation for operation in walk(module, "") if ON_DEVICE in operation.attributes]
    if not marked:
        return
    num_devices = ir.IntegerAttr(module.operation.attributes["mhlo.num_partitions"]).value
    channel = 1 + max([int(value) for value in re.findall(r"channel_handle<handle = (\d+)", str(module))] + [0])
    unsigned = ir.IntegerType.get_unsigned(32)
    for operation in marked:
        device = ir.IntegerAttr(operation.attributes[ON_DEVICE]).value
        attributes = {name: operation.attributes[name] for name in operation.attributes if name != ON_DEVICE}
        result_types = [result.type for result in operation.results]
        with ir.InsertionPoint(operation), operation.location:
            scalar = ir.RankedTensorType.get([], unsigned)
            mine = hlo.CompareOp(hlo.PartitionIdOp().result,
                                 hlo.ConstantOp(ir.DenseElementsAttr.get_splat(scalar, ir.IntegerAttr.get(unsigned, device))).result,
                                 hlo.ComparisonDirectionAttr.get("EQ")).result
            branch = hlo.IfOp(result_types, mine)
            then_block = branch.true_branch.blocks.append()
            with ir.InsertionPoint(then_block):
                ran = ir.Operation.create(operation.name, results=result_types, operands=list(operation.operands),
                                          attributes=attributes)
                hlo.ReturnOp(list(ran.results))
            else_block = branch.false_branch.blocks.append()
            with ir.InsertionPoint(else_block):
                hlo.ReturnOp([zeros(value_type) for value_type in result_types])
            group = [device] + [other for other in range(num_devices) if other != device]
            results = []
            for value in branch.results:
                if not isinstance(value.type, ir.RankedTensorType):
                    results.append(value)
                    continue
                broadcast = ir.Operation.create(
                    "stablehlo.collective_broadcast", results=[value.type], operands=[value],
                    attributes={"replica_groups": ir.DenseElementsAttr.get(np.array([group], np.int64)),
                                "channel_handle": ir.Attribute.parse(f"#stablehlo.channel_handle<handle = {channel}, type = 1>")})
                channel += 1
                results.append(broadcast.results[0])
        for old, new in zip(operation.results, results):
            old.replace_all_uses_with(new)
        operation.erase()
