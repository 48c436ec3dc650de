"""Steps for partial sums: reduce-scatters of a dot's or a gather's partials written as an
all-reduce and a slice, all-reduces that combine with the reduction's own op, and
neighbouring all-reduces combined as XLA's CPU compiler combines them."""

from __future__ import annotations

import re

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from .rewriting import AXIS_REF, move_block, reducer_of, walk

# Ops whose partial results over a split operand dimension Shardy's global-to-local pass
# expects to be all-reduced (a failed Check that aborts its process otherwise).
ALL_REDUCED_PRODUCERS = ("stablehlo.dot_general", "stablehlo.gather")


def split_reduce_scatters_of_partial_sums(module: ir.Module) -> None:
    """A ``sdy.reduce_scatter`` of a ``dot_general``'s partial sums (a row-parallel matmul
    whose result stays sharded along a free dimension) or of a gather's from a split
    dimension (``take_along_axis`` on logits split by vocabulary, its batch split on the
    same axis) as a ``sdy.all_reduce`` and a ``sdy.all_slice``: the global-to-local pass
    expects those all-reduced, and :func:`stand_in_for_gathers_from_shards` rewrites a
    gather whose partial results are. Each device then adds the devices' partial sums in
    the same order, and keeps its slice."""
    for scatter in walk(module, "sdy.reduce_scatter"):
        producer = scatter.operands[0].owner
        producer = getattr(producer, "operation", producer)
        if not isinstance(producer, ir.Operation) or producer.name not in ALL_REDUCED_PRODUCERS:
            continue
        axes = re.findall(AXIS_REF, str(scatter.attributes["reduce_scatter_axes"]))
        per_value = sdy.TensorShardingPerValueAttr(producer.attributes["sdy.sharding"])
        with ir.InsertionPoint(scatter), scatter.location:
            reduced = ir.Operation.create(
                "sdy.all_reduce", results=[scatter.results[0].type], operands=[scatter.operands[0]],
                attributes={"reduction_axes": ir.Attribute.parse(
                    f"#sdy<axis_ref_list{{{', '.join(axes)}}}>"),
                    "out_sharding": per_value.shardings[0]})
            sliced = ir.Operation.create(
                "sdy.all_slice", results=[scatter.results[0].type], operands=[reduced.results[0]],
                attributes={"slicing_axes": scatter.attributes["reduce_scatter_axes"],
                            "out_sharding": scatter.attributes["out_sharding"]})
        scatter.results[0].replace_all_uses_with(sliced.results[0])
        scatter.erase()


def reduce_partials_by_their_op(module: ir.Module) -> None:
    """After the global-to-local pass: an ``all_reduce`` of a one-input ``reduce``'s
    partial results (each device reduced its part of a split dimension), or of a
    ``scatter``'s (each device scattered its part of the updates, the others starting
    from the op's identity), combines them with the op's own (:func:`~.rewriting.reducer_of`: a
    maximum, a product ...), as XLA's partitioner does; Shardy's export writes a sum
    whatever the op did."""
    for all_reduce in walk(module, "stablehlo.all_reduce"):
        if len(all_reduce.operands) != 1 or not isinstance(all_reduce.operands[0], ir.OpResult):
            continue
        producer = all_reduce.operands[0].owner
        producer = getattr(producer, "operation", producer)
        reducer = reducer_of(producer)
        body = [inner.operation for inner in all_reduce.regions[0].blocks[0].operations]
        if reducer in (None, "stablehlo.add") or body[0].name != "stablehlo.add":
            continue
        with ir.InsertionPoint(body[0]), body[0].location:
            combined = ir.Operation.create(reducer, results=[body[0].results[0].type],
                                           operands=list(body[0].operands))
        body[0].results[0].replace_all_uses_with(combined.results[0])
        body[0].erase()


def _operands_within(operation) -> list:
    """The operands of ``operation`` and of every op in its regions."""
    found = []

    def collect(inner):
        found.extend(inner.operands)
        return ir.WalkResult.ADVANCE

    operation.walk(collect)
    return found


def _all_reduce_kind(operation) -> tuple:
    """What two all-reduces must share to become one: element type, attributes but the
    channel, and the reduction's text."""
    attributes = tuple(sorted((name, str(operation.attributes[name])) for name in operation.attributes
                              if name != "channel_handle"))
    element = ir.RankedTensorType(operation.operands[0].type).element_type
    return str(element), attributes, str(operation.regions[0].blocks[0].operations[0].operation)


def _combine(group: list) -> None:
    """One variadic ``all_reduce`` (at the last one's place) for the all-reduces of ``group``."""
    last = group[-1]
    with ir.InsertionPoint(last), last.location:
        combined = ir.Operation.create(
            "stablehlo.all_reduce", results=[r.type for op in group for r in op.results],
            operands=[value for op in group for value in op.operands],
            attributes={name: group[0].attributes[name] for name in group[0].attributes}, regions=1)
    move_block(group[0].regions[0].blocks[0], combined.regions[0], "stablehlo.return")
    results = iter(combined.results)
    for operation in group:
        for result in operation.results:
            result.replace_all_uses_with(next(results))
        operation.erase()


def combine_all_reduces(module: ir.Module) -> None:
    """Neighbouring all-reduces of one kind (:func:`_all_reduce_kind`) in a block, none
    using another's result and none's result used between them, become one variadic
    all-reduce, as XLA's CPU compiler combines them (its all-reduce combiner): a training
    step's gradients of several weights are all-reduced in one collective."""
    blocks = []

    def collect(operation):
        blocks.extend(block for region in operation.regions for block in region.blocks)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    for block in blocks:
        groups: list[list] = []
        group: list = []
        produced: set = set()
        for operation in block.operations:
            uses_group = any(value in produced for value in _operands_within(operation))
            if (operation.name == "stablehlo.all_reduce" and group and not uses_group
                    and _all_reduce_kind(operation) == _all_reduce_kind(group[0])):
                group.append(operation)
                produced.update(operation.results)
            elif operation.name == "stablehlo.all_reduce":
                groups.append(group)
                group, produced = [operation], set(operation.results)
            elif uses_group:
                groups.append(group)
                group, produced = [], set()
        groups.append(group)
        for found in groups:
            if len(found) > 1:
                _combine(found)
