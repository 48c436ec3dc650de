"""What the partitioner's steps share: finding ops, moving blocks, stand-ins, and reading
shardings and meshes off the module (Shardy's attributes, through jaxlib's sdy bindings)."""

from __future__ import annotations

import math
import re

import numpy as np
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import sdy
from jaxlib.mlir.dialects import stablehlo as hlo

STAND_IN_TARGET = "stablehlo_interp.stand_in"     # the stand-in for an op the global-to-local pass refuses


STAND_IN_ATTRIBUTES = "stablehlo_interp.attributes"


GATHER_FROM_SHARDS = "stablehlo_interp.gather_from_shards"   # a stand-in's gather from a split dimension


GLOBAL_SHAPE = "stablehlo_interp.global_shape"               # its operand's global shape


AXIS_REF = r'"[^"]*"(?::\(\d+\)\d+)?'   # an axis or sub-axis in an sdy attribute's text: "x", "y":(2)2


def run_passes(module: ir.Module, passes: tuple) -> None:
    passmanager.PassManager.parse(f"builtin.module({','.join(passes)})").run(module.operation)


def walk(module: ir.Module, name: str) -> list:
    """The ops called ``name`` (every op of a dialect for a prefix such as ``"chlo."``, every
    op for ``""``), inner ones before the ops holding them."""
    found = []

    def visit(operation):
        if operation.name == name or ((not name or name.endswith(".")) and operation.name.startswith(name)):
            found.append(operation)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.POST_ORDER)
    return found


def move_block(block: ir.Block, region: ir.Region, terminator: str) -> None:
    """Move ``block``'s arguments and ops into a new block of ``region``, its terminator
    replaced by a ``terminator`` op returning the same values."""
    moved = region.blocks.append(*[argument.type for argument in block.arguments],
                                 arg_locs=[argument.location for argument in block.arguments])
    for old, new in zip(block.arguments, moved.arguments):
        old.replace_all_uses_with(new)
    for operation in list(block.operations):
        operation.detach_from_parent()
        ir.InsertionPoint(moved).insert(operation)
    returned = moved.operations[len(moved.operations) - 1]
    with ir.InsertionPoint(returned), returned.location:
        ir.Operation.create(terminator, operands=list(returned.operands))
    returned.erase()


def make_stand_in(operation, sharding: dict | None = None) -> None:
    """Replace ``operation`` by a custom call the global-to-local pass converts
    like any op sharded as its result; the op's name and attributes ride along for
    :func:`restore_stand_ins`. ``sharding``: the stand-in's sharding attributes (default:
    the op's ``sdy.sharding``)."""
    kept = {name: operation.attributes[name] for name in operation.attributes if name != "sdy.sharding"}
    with ir.InsertionPoint(operation), operation.location:
        stand_in = ir.Operation.create(
            "stablehlo.custom_call", results=[result.type for result in operation.results],
            operands=list(operation.operands),
            attributes={"call_target_name": ir.StringAttr.get(STAND_IN_TARGET),
                        "backend_config": ir.StringAttr.get(operation.name),
                        STAND_IN_ATTRIBUTES: ir.DictAttr.get(kept),
                        **(sharding or {"sdy.sharding": operation.attributes["sdy.sharding"]})})
    for result, replacement in zip(operation.results, stand_in.results):
        result.replace_all_uses_with(replacement)
    operation.erase()


def split_dimensions(sharding) -> list:
    """Whether each dimension of a value sharded as ``sharding`` is split (names axes)."""
    return [bool(len(sdy.DimensionShardingAttr(dimension).axes)) for dimension in sharding.dimension_shardings]


def reshard_operand(operation, index: int, sharding) -> None:
    """Give ``operation`` its operand ``index`` resharded to ``sharding`` (an ``sdy.reshard``
    before it, which the export makes a collective)."""
    value = operation.operands[index]
    with ir.InsertionPoint(operation), operation.location:
        reshard = ir.Operation.create("sdy.reshard", results=[value.type], operands=[value],
                                      attributes={"sharding": sharding})
    operation.operands[index] = reshard.results[0]


def whole_along(sharding, whole: list):
    """``sharding`` with the dimensions marked in ``whole`` not split (its replicated and
    unreduced axes kept)."""
    return sdy.TensorShardingAttr.get(
        sharding.mesh_or_ref, [sdy.DimensionShardingAttr.get([], True) if unsplit else dimension
                               for dimension, unsplit in zip(sharding.dimension_shardings, whole)],
        list(sharding.replicated_axes), list(sharding.unreduced_axes))


# The reductions whose partial results a collective may combine with the same op.
MONOIDS = frozenset({"stablehlo.add", "stablehlo.multiply", "stablehlo.maximum", "stablehlo.minimum",
                     "stablehlo.and", "stablehlo.or", "stablehlo.xor"})


def reducer_of(operation) -> str | None:
    """The op a one-input ``reduce``'s or ``scatter``'s body applies to its two arguments
    when that is all the body does and the op is one of :data:`MONOIDS`, else None."""
    if (operation.name, len(operation.operands)) not in (("stablehlo.reduce", 2), ("stablehlo.scatter", 3)):
        return None
    block = operation.regions[0].blocks[0]
    body = [inner.operation for inner in block.operations]
    arguments = list(block.arguments)
    if (len(body) != 2 or body[0].name not in MONOIDS or body[1].name != "stablehlo.return"
            or sorted(arguments.index(value) for value in body[0].operands if value in arguments) != [0, 1]
            or list(body[1].operands) != [body[0].results[0]]):
        return None
    return body[0].name


def shape(value: ir.Value) -> list:
    return ir.RankedTensorType(value.type).shape


def zeros(value_type) -> ir.Value:
    """Zeros of a tensor type (``false`` converted: any element type), or a fresh token."""
    if not isinstance(value_type, ir.RankedTensorType):
        return hlo.AfterAllOp([]).result
    tensor = ir.RankedTensorType(value_type)
    boolean = ir.IntegerType.get_signless(1)
    false = hlo.ConstantOp(ir.DenseElementsAttr.get(np.array(False), type=boolean)).result
    return hlo.BroadcastInDimOp(tensor, hlo.ConvertOp(ir.RankedTensorType.get([], tensor.element_type), false).result,
                                []).result


def mesh_axes(module: ir.Module) -> dict:
    """Each ``sdy.mesh``'s axes, ``{mesh name: [(axis name, size), ...]}``, of meshes whose
    devices are in the default order (device ``i`` at row-major position ``i``)."""
    meshes = {}
    for operation in module.body.operations:
        if operation.operation.name == "sdy.mesh":
            mesh = sdy.MeshAttr(operation.attributes["mesh"])
            if not list(mesh.device_ids):
                axes = [sdy.MeshAxisAttr(axis) for axis in mesh.axes]
                meshes[ir.StringAttr(operation.attributes["sym_name"]).value] = [(a.name, a.size) for a in axes]
    return meshes


def axis_refs(axis_ref_list: ir.Attribute) -> list:
    """The ``sdy.AxisRefAttr`` of an ``#sdy<axis_ref_list{"x", "y":(2)2}>``, which has no
    Python binding of its own: read from its text."""
    return [sdy.AxisRefAttr(ir.Attribute.parse(f"#sdy<axis_ref {reference}>"))
            for reference in re.findall(AXIS_REF, str(axis_ref_list))]


def u32_constant(number: int, ip: ir.InsertionPoint) -> ir.Value:
    scalar = ir.RankedTensorType.get([], ir.IntegerType.get_unsigned(32))
    return hlo.ConstantOp(ir.DenseElementsAttr.get_splat(scalar, ir.IntegerAttr.get(scalar.element_type, number)),
                          ip=ip).result


def index_along(axes: list, mesh: list, ip: ir.InsertionPoint) -> tuple[ir.Value, int]:
    """A scalar ``ui32``: this device's position along ``axes`` (sdy axis refs of ``mesh``,
    the first the major one), from ``partition_id`` (the device's row-major position in the
    mesh); and how many positions there are."""
    device = hlo.PartitionIdOp(ip=ip).result
    names = [name for name, _ in mesh]
    position, count = None, 1
    for axis in axes:
        where = names.index(axis.name)
        stride, size = int(np.prod([size for _, size in mesh[where + 1:]], dtype=np.int64)), mesh[where][1]
        if axis.sub_axis_info is not None:
            part = sdy.SubAxisInfoAttr(axis.sub_axis_info)
            stride, size = stride * part.pre_size, part.size
        index = hlo.RemOp(hlo.DivOp(device, u32_constant(stride, ip), ip=ip).result, u32_constant(size, ip),
                          ip=ip).result
        position = index if position is None else hlo.AddOp(
            hlo.MulOp(position, u32_constant(size, ip), ip=ip).result, index, ip=ip).result
        count *= size
    return position, count


def is_first_along(axes: list, mesh: list, ip: ir.InsertionPoint) -> ir.Value:
    """A scalar ``i1``: whether this device's index along each of ``axes`` (sdy axis refs
    of ``mesh``) is 0."""
    position, _ = index_along(axes, mesh, ip)
    return hlo.CompareOp(position, u32_constant(0, ip), hlo.ComparisonDirectionAttr.get("EQ"), ip=ip).result


def sharding_of(value: ir.Value):
    """The ``sdy.TensorShardingAttr`` of ``value`` after propagation (its producer's
    ``sdy.sharding``, a constraint's or reshard's ``sharding``, or its function
    argument's), or None."""
    if isinstance(value, ir.OpResult):
        owner = getattr(value.owner, "operation", value.owner)
        if owner.name in ("sdy.sharding_constraint", "sdy.reshard"):
            return sdy.TensorShardingAttr(owner.attributes["sharding"])
        if "sdy.sharding" not in owner.attributes:
            return None
        return sdy.TensorShardingAttr(sdy.TensorShardingPerValueAttr(
            owner.attributes["sdy.sharding"]).shardings[value.result_number])
    argument: ir.BlockArgument = ir.BlockArgument(value)
    function = argument.owner.owner
    function = getattr(function, "operation", function)
    if function.name != "func.func" or "arg_attrs" not in function.attributes:
        return None
    attributes = ir.DictAttr(ir.ArrayAttr(function.attributes["arg_attrs"])[argument.arg_number])
    return sdy.TensorShardingAttr(attributes["sdy.sharding"]) if "sdy.sharding" in attributes else None


def parts_along(axes: list, mesh: list) -> int:
    """How many parts sdy axis refs ``axes`` of ``mesh`` split a dimension into."""
    return math.prod(_axis_size(axis, mesh) for axis in axes)


def _axis_size(axis, mesh: list) -> int:
    """How many positions an sdy axis ref (an axis of ``mesh``, or a sub-axis) has."""
    if axis.sub_axis_info is not None:
        return sdy.SubAxisInfoAttr(axis.sub_axis_info).size
    return dict(mesh)[axis.name]
