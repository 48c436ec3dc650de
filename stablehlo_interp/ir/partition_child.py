"""The child process of partition.py: partitions each module it is sent with Shardy's
passes and replies with the per-device program (see
:mod:`~stablehlo_interp.ir.partition`)."""

from __future__ import annotations

import math
import re

import numpy as np
from jax._src.lib import _jax
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import sdy
from jaxlib.mlir.dialects import stablehlo as hlo

from .child_process import serve
from .decode import decode_location
from .edit import async_pairs_as_collectives, chlo_sharding_rule, inline_every_call
from .sources import CUSTOM_PARTITIONING_TARGET, make_context

# What jaxlib's ``sdy-propagation-pipeline`` runs (Shardy's propagation_pipeline.cc), with its
# export pipeline asked to insert every collective (``enable-insert-explicit-collectives``, which
# that registered pipeline leaves off): reshards, then reshards as collectives, on global shapes.
# The registered ``sdy-import-pipeline`` lacks two passes the C++ pipeline adds after importing calls:
# ``sdy-apply-sharding-constraints`` gives a constrained value's producer (a while's operand,
# an op with one user) the constraint's sharding; without it an unreduced loop carry
# was replicated, and all-reduced at every step (ir/partition_child's tests).
PROPAGATE_AND_INSERT_COLLECTIVES = (
    "sdy-import-pipeline", "sdy-import-func-calls", "symbol-dce", "sdy-apply-sharding-constraints",
    "sdy-sharding-group-import", "sdy-pre-order-funcs", "sdy-user-priority-propagate{keep-sharding-rules=true}",
    "sdy-export-named-computations", "sdy-export-pipeline{enable-insert-explicit-collectives=true}")
# Then each value's global type becomes its device's tile (Shardy's partitioner_pipeline.cc ends so).
GLOBAL_TO_LOCAL = ("sdy-convert-global-to-local", "sdy-drop-sharding-and-mesh")

WHILE_TARGET = "stablehlo_interp.outlined_while"   # the stand-in for a while while its regions are functions
STAND_IN_TARGET = "stablehlo_interp.stand_in"     # the stand-in for an op the global-to-local pass refuses
STAND_IN_ATTRIBUTES = "stablehlo_interp.attributes"
GATHER_FROM_SHARDS = "stablehlo_interp.gather_from_shards"   # a stand-in's gather from a split dimension
GLOBAL_SHAPE = "stablehlo_interp.global_shape"               # its operand's global shape
AXIS_REF = r'"[^"]*"(?::\(\d+\)\d+)?'   # an axis or sub-axis in an sdy attribute's text: "x", "y":(2)2


def _run(module: ir.Module, passes: tuple) -> None:
    passmanager.PassManager.parse(f"builtin.module({','.join(passes)})").run(module.operation)


def _walk(module: ir.Module, name: str) -> list:
    """The ops called ``name`` (every op of a dialect for a prefix such as ``"chlo."``, every
    op for ``""``), inner ones before the ops holding them."""
    found = []

    def visit(operation):
        if operation.name == name or ((not name or name.endswith(".")) and operation.name.startswith(name)):
            found.append(operation)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.POST_ORDER)
    return found


def _captures(operation) -> list:
    """``(op, operand index)`` of each use, in the regions of ``operation``, of a value
    defined outside them."""
    inside = set()

    def collect(inner):
        for region in inner.regions:
            for block in region.blocks:
                inside.update(block.arguments)
        inside.update(inner.results)
        return ir.WalkResult.ADVANCE

    operation.walk(collect)
    captured = []

    def check(inner):
        if inner != operation:
            captured.extend((inner, index) for index, value in enumerate(inner.operands) if value not in inside)
        return ir.WalkResult.ADVANCE

    operation.walk(check)
    return captured


def _sink_captured_constants(loop) -> bool:
    """Give each use in ``loop``'s regions of a constant defined outside them (XLA's
    compile path hoists constants) a copy of its own; whether no other capture is left."""
    captured = _captures(loop)
    for user, index in captured:
        value = user.operands[index]
        producer = value.owner if isinstance(value, ir.OpResult) else None
        producer = getattr(producer, "operation", producer)
        if producer is None or len(producer.operands) or len(producer.regions):
            return False
        user.operands[index] = producer.clone(ip=ir.InsertionPoint(user)).results[value.result_number]
    return True


def _move_block_into_function(block: ir.Block, module: ir.Module, name: str, argument_shardings: list,
                              result_shardings: list | None) -> None:
    """A private ``func.func @name`` whose body is ``block``'s ops (its ``stablehlo.return``
    a ``func.return``), its arguments and results sharded as given (None: left open)."""
    argument_types = [argument.type for argument in block.arguments]
    terminator = block.operations[len(block.operations) - 1]
    result_types = [value.type for value in terminator.operands]
    with ir.InsertionPoint(module.body), terminator.location:
        function = ir.Operation.create(
            "func.func", regions=1,
            attributes={"sym_name": ir.StringAttr.get(name), "sym_visibility": ir.StringAttr.get("private"),
                        "function_type": ir.TypeAttr.get(ir.FunctionType.get(argument_types, result_types))})
    _set_shardings(function, "arg_attrs", argument_shardings)
    if result_shardings is not None:
        _set_shardings(function, "res_attrs", result_shardings)
    _move_block(block, function.regions[0], "func.return")


def _move_block(block: ir.Block, region: ir.Region, terminator: str) -> None:
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


def _set_shardings(function, key: str, shardings: list) -> None:
    if any(sharding is not None for sharding in shardings):
        function.attributes[key] = ir.ArrayAttr.get([
            ir.DictAttr.get({} if sharding is None else {"sdy.sharding": sharding}) for sharding in shardings])


def outline_whiles(module: ir.Module) -> None:
    """``sdy-convert-global-to-local`` gives a while's operands and results their local types
    but not its regions' block arguments, and then fails. So each while (that captures no
    value from outside) becomes a stand-in custom call, and its condition and body private
    functions with the while's shardings, which the pass converts like any function;
    constants it captures are copied in first;
    :func:`inline_whiles` puts them back."""
    for number, loop in enumerate(_walk(module, "stablehlo.while")):
        if not _sink_captured_constants(loop):
            continue
        count = len(loop.operands)
        shardings = ([sdy.TensorShardingAttr(s) for s in sdy.TensorShardingPerValueAttr(
            loop.attributes["sdy.sharding"]).shardings] if "sdy.sharding" in loop.attributes else [None] * count)
        names = (f"{WHILE_TARGET}_cond_{number}", f"{WHILE_TARGET}_body_{number}")
        _move_block_into_function(loop.regions[0].blocks[0], module, names[0], shardings, None)
        _move_block_into_function(loop.regions[1].blocks[0], module, names[1], shardings, shardings)
        attributes = {"call_target_name": ir.StringAttr.get(WHILE_TARGET),
                      "backend_config": ir.StringAttr.get(",".join(names))}
        if "sdy.sharding" in loop.attributes:
            attributes["sdy.sharding"] = loop.attributes["sdy.sharding"]
        with ir.InsertionPoint(loop), loop.location:
            stand_in = ir.Operation.create("stablehlo.custom_call", results=[r.type for r in loop.results],
                                           operands=list(loop.operands), attributes=attributes)
        for old, new in zip(loop.results, stand_in.results):
            old.replace_all_uses_with(new)
        loop.erase()


def inline_whiles(module: ir.Module) -> None:
    """Each stand-in of :func:`outline_whiles` a ``stablehlo.while`` again, with the
    (now local) types of its functions."""
    functions = {ir.StringAttr(op.attributes["sym_name"]).value: op
                 for op in module.body.operations if op.operation.name == "func.func"}
    stand_ins = [op for op in _walk(module, "stablehlo.custom_call")
                 if ir.StringAttr(op.attributes["call_target_name"]).value == WHILE_TARGET]
    for stand_in in stand_ins:
        names = ir.StringAttr(stand_in.attributes["backend_config"]).value.split(",")
        with ir.InsertionPoint(stand_in), stand_in.location:
            loop = ir.Operation.create("stablehlo.while", results=[r.type for r in stand_in.results],
                                       operands=list(stand_in.operands), regions=2)
        for region, name in zip(loop.regions, names):
            function = functions[name].operation
            _move_block(function.regions[0].blocks[0], region, "stablehlo.return")
            function.erase()
        for old, new in zip(stand_in.results, loop.results):
            old.replace_all_uses_with(new)
        stand_in.erase()


def _stand_in(operation, sharding: dict | None = None) -> None:
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


def _split_dimensions(sharding) -> list:
    """Whether each dimension of a value sharded as ``sharding`` is split (names axes)."""
    return [bool(len(sdy.DimensionShardingAttr(dimension).axes)) for dimension in sharding.dimension_shardings]


def stand_in_for_unconverted_ops(module: ir.Module) -> None:
    """Ops the global-to-local pass refuses though their local form is the same op on
    local types become stand-ins (:func:`_stand_in`):

    * a ``dynamic_slice`` whose result's sharded dimensions it takes whole (a scan's step
      takes a whole row of its sharded input): the pass keeps its global ``slice_sizes``
      and fails;
    * a ``dot_general`` whose result stays unreduced (a partial sum kept for later, as a
      gradient accumulated over a scan): the pass expects such a dot to be all-reduced at
      once (a failed Check that aborts its process). Each device's local dot is its part
      of the sum, which the unreduced value is."""
    for operation in _walk(module, "stablehlo.dynamic_slice"):
        if "sdy.sharding" not in operation.attributes:
            continue
        sizes = list(ir.DenseI64ArrayAttr(operation.attributes["slice_sizes"]))
        whole = ir.RankedTensorType(operation.operands[0].type).shape
        if not any(sharded and size != full
                   for sharded, size, full in zip(_split_dimensions(_sharding_of(operation.results[0])), sizes, whole)):
            _stand_in(operation)
    for operation in _walk(module, "stablehlo.dot_general"):
        if "sdy.sharding" in operation.attributes and len(sdy.TensorShardingAttr(sdy.TensorShardingPerValueAttr(
                operation.attributes["sdy.sharding"]).shardings[0]).unreduced_axes):
            _stand_in(operation)


def stand_in_for_chlo(module: ir.Module) -> None:
    """Each element-wise CHLO op (``chlo.square`` of a LayerNorm's variance, ``chlo.erf``
    ...) and ``chlo.top_k`` a stand-in with a ``sdy.sharding_rule`` (ir/edit.py's
    :func:`chlo_sharding_rule`), before propagation: Shardy has no sharding rule for CHLO's
    ops (it gave a ``chlo.square`` another sharding than its operand's, and no reshard
    between them) and its global-to-local pass refuses them as illegal.
    :func:`restore_stand_ins` makes them the op again, on local types."""
    for operation in _walk(module, "chlo."):
        rule = chlo_sharding_rule(operation)
        if rule is not None:
            _stand_in(operation, {"sdy.sharding_rule": rule})


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
    for scatter in _walk(module, "sdy.reduce_scatter"):
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


def _custom_rule(call):
    """The sharding rule of a custom call marked ``custom`` (LAPACK's calls: Cholesky, QR,
    SVD ...), which Shardy's reshards leave to XLA's partitioner, or None. A
    ``custom_partitioning`` call (also marked ``custom``) is left out: XLA partitions it by
    the user's callback."""
    if ("sdy.sharding_rule" not in call.attributes
            or ir.StringAttr(call.attributes["call_target_name"]).value == CUSTOM_PARTITIONING_TARGET):
        return None
    rule = sdy.OpShardingRuleAttr(call.attributes["sdy.sharding_rule"])
    return rule if rule.is_custom else None


def _factors(mappings) -> set:
    """The factors of a rule's operand or result mappings."""
    return {factor for mapping in mappings for dimension in sdy.TensorMappingAttr(mapping).dim_mappings
            for factor in sdy.DimMappingAttr(dimension).factor_indices}


def _split_outside(sharding, mapping, shared: set) -> list:
    """Whether each dimension of a value sharded as ``sharding`` (its rule's ``mapping``)
    is split though none of its factors is in ``shared``."""
    return [split and not shared & set(sdy.DimMappingAttr(dimension).factor_indices)
            for split, dimension in zip(_split_dimensions(sharding), sdy.TensorMappingAttr(mapping).dim_mappings)]


def _reshard_operand(operation, index: int, sharding) -> None:
    """Give ``operation`` its operand ``index`` resharded to ``sharding`` (an ``sdy.reshard``
    before it, which the export makes a collective)."""
    value = operation.operands[index]
    with ir.InsertionPoint(operation), operation.location:
        reshard = ir.Operation.create("sdy.reshard", results=[value.type], operands=[value],
                                      attributes={"sharding": sharding})
    operation.operands[index] = reshard.results[0]


def _whole_along(sharding, whole: list):
    """``sharding`` with the dimensions marked in ``whole`` not split (its replicated and
    unreduced axes kept)."""
    return sdy.TensorShardingAttr.get(
        sharding.mesh_or_ref, [sdy.DimensionShardingAttr.get([], True) if unsplit else dimension
                               for dimension, unsplit in zip(sharding.dimension_shardings, whole)],
        list(sharding.replicated_axes), list(sharding.unreduced_axes))


# The reductions whose partial results a collective may combine with the same op.
MONOIDS = frozenset({"stablehlo.add", "stablehlo.multiply", "stablehlo.maximum", "stablehlo.minimum",
                     "stablehlo.and", "stablehlo.or", "stablehlo.xor"})


def _reducer(operation) -> str | None:
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


def _shape(value: ir.Value) -> list:
    return ir.RankedTensorType(value.type).shape


def _marked(dimensions, rank: int) -> list:
    """Whether each of ``rank`` dimensions is one of ``dimensions``."""
    dimensions = set(dimensions)
    return [dimension in dimensions for dimension in range(rank)]


def _integers(attributes, key: str, default: list) -> list:
    return list(ir.DenseI64ArrayAttr(attributes[key])) if key in attributes else default


def _padded(attributes, rank: int) -> list:
    """Whether each dimension of a window's ``padding`` attribute (``[[low, high], ...]``) is padded."""
    if "padding" not in attributes:
        return [False] * rank
    return [bool(low or high) for low, high in np.array(ir.DenseIntElementsAttr(attributes["padding"])).reshape(-1, 2)]


# Each function below: for an op whose per-device form Shardy's global-to-local pass gets
# wrong when some of its dimensions are split (it runs the global op on the device's part,
# or aborts), ``(operands, results)``: the indices of the operands and of the results that
# have those dimensions and, for each, which dimensions must be whole; None to leave it.

def _random_numbers(operation):
    """Random bits depend on the whole shape: each device would make the first rows."""
    return [], [(index, [True] * len(_shape(result))) for index, result in enumerate(operation.results)]


def _reversed(operation):
    whole = _marked(ir.DenseI64ArrayAttr(operation.attributes["dimensions"]), len(_shape(operation.operands[0])))
    return [(0, whole)], [(0, whole)]


def _padded_dimensions(operation):
    edges = [_integers(operation.attributes, key, []) for key in ("edge_padding_low", "edge_padding_high",
                                                                 "interior_padding")]
    whole = [any(edge[dimension] for edge in edges) for dimension in range(len(_shape(operation.operands[0])))]
    return [(0, whole)], [(0, whole)]


def _sliced(operation):
    attributes = operation.attributes
    whole = [(start, limit, stride) != (0, size, 1) for start, limit, stride, size in zip(
        *(_integers(attributes, key, []) for key in ("start_indices", "limit_indices", "strides")),
        _shape(operation.operands[0]))]
    return [(0, whole)], [(0, whole)]


def _concatenated(operation):
    whole = _marked([ir.IntegerAttr(operation.attributes["dimension"]).value], len(_shape(operation.operands[0])))
    return [(index, whole) for index in range(len(operation.operands))], [(0, whole)]


def _updated_slice(operation):
    whole = [part != size for part, size in zip(_shape(operation.operands[1]), _shape(operation.operands[0]))]
    return [(0, whole), (1, whole)], [(0, whole)]


def _windowed(operation):
    """A window of more than one element, a stride, padding or dilation along a dimension
    reaches across the devices' parts of it."""
    attributes = operation.attributes
    windows = _integers(attributes, "window_dimensions", [])
    rank = len(windows)
    strides = _integers(attributes, "window_strides", [1] * rank)
    dilations = [max(base, window) for base, window in zip(_integers(attributes, "base_dilations", [1] * rank),
                                                           _integers(attributes, "window_dilations", [1] * rank))]
    whole = [window > 1 or stride > 1 or pad or dilation > 1
             for window, stride, pad, dilation in zip(windows, strides, _padded(attributes, rank), dilations)]
    if operation.name == "stablehlo.select_and_scatter":
        return [(0, whole), (1, whole)], [(0, whole)]
    inputs = len(operation.operands) // 2
    return [(index, whole) for index in range(inputs)], [(index, whole) for index in range(inputs)]


def _convolved(operation):
    """As :func:`_windowed`, for the input's spatial dimensions and the result's."""
    attributes = operation.attributes
    numbers = hlo.ConvDimensionNumbers(attributes["dimension_numbers"])
    kernel = _shape(operation.operands[1])
    spatial = len(numbers.input_spatial_dimensions)
    settings = [_integers(attributes, key, [1] * spatial) for key in ("window_strides", "lhs_dilation", "rhs_dilation")]
    padded = _padded(attributes, spatial)
    windowed = [kernel[kernel_dimension] > 1 or padded[k] or any(values[k] > 1 for values in settings)
                for k, kernel_dimension in enumerate(numbers.kernel_spatial_dimensions)]
    inputs = [d for d, w in zip(numbers.input_spatial_dimensions, windowed) if w]
    kernels = [d for d, w in zip(numbers.kernel_spatial_dimensions, windowed) if w]
    outputs = [d for d, w in zip(numbers.output_spatial_dimensions, windowed) if w]
    # The kernel's too: in a kernel's gradient (a convolution of the activations by their
    # gradients) the "kernel" is the split image, and the export split the input again to match it.
    return ([(0, _marked(inputs, len(_shape(operation.operands[0])))),
             (1, _marked(kernels, len(kernel)))],
            [(0, _marked(outputs, len(_shape(operation.results[0]))))])


def _scattered(operation):
    """Shardy moves each start index by the device's offset along its dimension: right for a
    window of one element (an index outside the part skips the update), wrong for a wider
    one (a whole dimension's window at 0 moved out of bounds: its update skipped)."""
    numbers = hlo.ScatterDimensionNumbers(operation.attributes["scatter_dimension_numbers"])
    operands = list(operation.operands)
    inputs, rank, updates = len(operands) // 2, len(_shape(operands[0])), _shape(operands[-1])
    skipped = set(numbers.inserted_window_dims) | set(numbers.input_batching_dims)
    window_of = dict(zip([d for d in range(rank) if d not in skipped], numbers.update_window_dims))
    wide = [d for d in numbers.scattered_dims_to_operand_dims if d in window_of and updates[window_of[d]] > 1]
    whole, update_whole = _marked(wide, rank), _marked([window_of[d] for d in wide], len(updates))
    return ([(index, whole) for index in range(inputs)] + [(index, update_whole)
                                                          for index in range(inputs + 1, len(operands))],
            [(index, whole) for index in range(inputs)])


def _custom_rule_call(operation):
    """A LAPACK call (:func:`_custom_rule`) takes its operands whole along the dimensions
    whose factors no result shares (a matrix's rows and columns; a batch of matrices stays
    split) and gives its results whole along those no operand shares, as XLA's partitioner
    gathers them and slices the whole result (a ``dynamic-slice`` by ``partition-id``)
    for a user that wants it split: the export left a matrix split while its result,
    aliased to it (``output_operand_aliases``), was whole, which the verifier refused."""
    rule = _custom_rule(operation)
    if rule is None:
        return None
    sides = []
    for values, mappings, others in ((operation.operands, rule.operand_mappings, rule.result_mappings),
                                     (operation.results, rule.result_mappings, rule.operand_mappings)):
        shared = _factors(others)
        shardings = [_sharding_of(value) for value in values]
        sides.append([(index, _split_outside(sharding, mapping, shared))
                      for index, (sharding, mapping) in enumerate(zip(shardings, mappings)) if sharding is not None])
    return sides[0], sides[1]


def _reduced(operation):
    """A sum, or one op whose parts an all-reduce combines (reduce_partials_by_their_op), is
    left to Shardy; an argmax's pair of values and indices is gathered."""
    reducer = _reducer(operation)
    sharding = _sharding_of(operation.results[0])
    unreduced = sharding is not None and len(sharding.unreduced_axes)
    if reducer == "stablehlo.add" or (reducer is not None and not unreduced):
        return None
    whole = _marked(ir.DenseI64ArrayAttr(operation.attributes["dimensions"]), len(_shape(operation.operands[0])))
    return [(index, whole) for index in range(len(operation.operands) // 2)], []


DIMENSIONS_TO_GATHER = {
    "stablehlo.rng_bit_generator": _random_numbers, "stablehlo.rng": _random_numbers,
    "stablehlo.reverse": _reversed, "stablehlo.pad": _padded_dimensions, "stablehlo.slice": _sliced,
    "stablehlo.concatenate": _concatenated, "stablehlo.dynamic_update_slice": _updated_slice,
    "stablehlo.reduce_window": _windowed, "stablehlo.select_and_scatter": _windowed,
    "stablehlo.convolution": _convolved, "stablehlo.scatter": _scattered, "stablehlo.reduce": _reduced,
    "stablehlo.custom_call": _custom_rule_call,
}


def gather_dimensions_shardy_cannot_split(module: ir.Module) -> None:
    """Before the export's reshards: an op whose per-device form Shardy gets wrong on a
    split dimension (:data:`DIMENSIONS_TO_GATHER`: a ``reverse``, ``pad`` or partial
    ``slice`` of it, a ``concatenate`` along it, a ``dynamic_update_slice`` into it,
    random numbers made in it (each device would make the first of the whole's), a
    ``scatter`` of windows wider than one element into it, windows slid over it, a
    ``reduce`` over it that is not a sum or a monoid combined by an all-reduce, a LAPACK
    call on a matrix split by rows or columns) takes
    its operands whole along those dimensions (an ``sdy.reshard``, an all-gather) and
    gives its results whole along them; the export slices them again for users that
    want them split. So XLA's partitioner does with ops it cannot split (it replicates
    them); for windows it exchanges only the neighbours' halo, so the per-device
    program here sends more bytes than XLA's there (docs/sharding.md)."""
    for operation in _walk(module, "stablehlo."):
        rule = DIMENSIONS_TO_GATHER.get(operation.name)
        found = rule(operation) if rule is not None else None
        if found is None:
            continue
        operands, results = found
        for index, whole in operands:
            value = operation.operands[index]
            sharding = _sharding_of(value)
            if sharding is None or not any(w and split for w, split in zip(whole, _split_dimensions(sharding))):
                continue
            _reshard_operand(operation, index, _whole_along(sharding, whole))
        if results and "sdy.sharding" in operation.attributes:
            shardings = [sdy.TensorShardingAttr(sharding) for sharding in
                         sdy.TensorShardingPerValueAttr(operation.attributes["sdy.sharding"]).shardings]
            masks = dict(results)
            operation.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get([
                _whole_along(sharding, masks[index]) if index in masks else sharding
                for index, sharding in enumerate(shardings)])


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
    meshes = _mesh_axes(module)
    for operation in _walk(module, ""):
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
            sharding = _sharding_of(value)
            if sharding is None or not any(_split_dimensions(sharding)) and not list(sharding.unreduced_axes):
                continue
            _reshard_operand(operation, index, whole(value.type))
        operation.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get(
            [whole(result.type) for result in operation.results])
        operation.attributes[ON_DEVICE] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                             maximal[names.pop()])


def run_on_their_device(module: ir.Module, num_devices: int) -> None:
    """After the global-to-local pass: each op :func:`replicate_maximal_ops` marked runs in
    the ``if`` branch of its device (``partition_id`` equal to it), the other devices
    make zeros, and a ``collective_broadcast`` from that device gives every device its
    results (a token result stays each device's own)."""
    marked = [operation for operation in _walk(module, "") if ON_DEVICE in operation.attributes]
    if not marked:
        return
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
                hlo.ReturnOp([_zeros(value_type) for value_type in result_types])
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


def _zeros(value_type) -> ir.Value:
    """Zeros of a tensor type (``false`` converted: any element type), or a fresh token."""
    if not isinstance(value_type, ir.RankedTensorType):
        return hlo.AfterAllOp([]).result
    tensor = ir.RankedTensorType(value_type)
    boolean = ir.IntegerType.get_signless(1)
    false = hlo.ConstantOp(ir.DenseElementsAttr.get(np.array(False), type=boolean)).result
    return hlo.BroadcastInDimOp(tensor, hlo.ConvertOp(ir.RankedTensorType.get([], tensor.element_type), false).result,
                                []).result


class UnevenShards(Exception):
    """A value split along a dimension its devices do not divide evenly (:func:`refuse_uneven_shards`)."""


def refuse_uneven_shards(module: ir.Module) -> None:
    """Raise :class:`UnevenShards` naming the first value (an op's result, a function's
    argument or result) split along a dimension its devices do not divide evenly: the
    global-to-local pass has no per-device type for it (it aborts its process) where XLA
    pads the last shards."""
    meshes = _mesh_axes(module)

    def check(sharding, value_type, what: str) -> None:
        mesh = meshes.get(ir.FlatSymbolRefAttr(sharding.mesh_or_ref).value)
        value_type = value_type.maybe_downcast() if type(value_type) is ir.Type else value_type
        if mesh is None or not isinstance(value_type, ir.RankedTensorType):
            return
        shape = value_type.shape
        for dimension, dimension_sharding in enumerate(sharding.dimension_shardings):
            axes = [sdy.AxisRefAttr(axis) for axis in sdy.DimensionShardingAttr(dimension_sharding).axes]
            parts = _parts(axes, mesh)
            if shape[dimension] % parts:
                raise UnevenShards(
                    f"{what} ({value_type}) is split {parts} ways along dimension {dimension}, of "
                    f"{shape[dimension]} elements; Shardy's partitioner has no per-device type for uneven shards "
                    "(XLA pads the last ones)")

    for operation in _walk(module, ""):
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


def reduce_partials_by_their_op(module: ir.Module) -> None:
    """After the global-to-local pass: an ``all_reduce`` of a one-input ``reduce``'s
    partial results (each device reduced its part of a split dimension), or of a
    ``scatter``'s (each device scattered its part of the updates, the others starting
    from the op's identity), combines them with the op's own (:func:`_reducer`: a
    maximum, a product ...), as XLA's partitioner does; Shardy's export writes a sum
    whatever the op did."""
    for all_reduce in _walk(module, "stablehlo.all_reduce"):
        if len(all_reduce.operands) != 1 or not isinstance(all_reduce.operands[0], ir.OpResult):
            continue
        producer = all_reduce.operands[0].owner
        producer = getattr(producer, "operation", producer)
        reducer = _reducer(producer)
        body = [inner.operation for inner in all_reduce.regions[0].blocks[0].operations]
        if reducer in (None, "stablehlo.add") or body[0].name != "stablehlo.add":
            continue
        with ir.InsertionPoint(body[0]), body[0].location:
            combined = ir.Operation.create(reducer, results=[body[0].results[0].type],
                                           operands=list(body[0].operands))
        body[0].results[0].replace_all_uses_with(combined.results[0])
        body[0].erase()


def restore_stand_ins(module: ir.Module) -> None:
    """Each stand-in (:func:`stand_in_for_unconverted_ops`, :func:`stand_in_for_chlo`,
    :func:`stand_in_for_gathers_from_shards`) its op again, of its result's (local) type; a
    ``dynamic_slice`` takes the local shape as its ``slice_sizes``; a gather from a split
    dimension becomes :func:`_gather_from_shards`."""
    for stand_in in _walk(module, "stablehlo.custom_call"):
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
                results = [_gather_from_shards(operand, indices, offsets, attributes, result_type)]
            else:
                results = list(ir.Operation.create(name, results=[result.type for result in stand_in.results],
                                                   operands=list(stand_in.operands), attributes=attributes).results)
        for stood_in, result in zip(stand_in.results, results):
            stood_in.replace_all_uses_with(result)
        stand_in.erase()


def _mesh_axes(module: ir.Module) -> dict:
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


def _axis_refs(axis_ref_list: ir.Attribute) -> list:
    """The ``sdy.AxisRefAttr`` of an ``#sdy<axis_ref_list{"x", "y":(2)2}>``, which has no
    Python binding of its own: read from its text."""
    return [sdy.AxisRefAttr(ir.Attribute.parse(f"#sdy<axis_ref {reference}>"))
            for reference in re.findall(AXIS_REF, str(axis_ref_list))]


def _u32_constant(number: int, ip: ir.InsertionPoint) -> ir.Value:
    scalar = ir.RankedTensorType.get([], ir.IntegerType.get_unsigned(32))
    return hlo.ConstantOp(ir.DenseElementsAttr.get_splat(scalar, ir.IntegerAttr.get(scalar.element_type, number)),
                          ip=ip).result


def _index_along(axes: list, mesh: list, ip: ir.InsertionPoint) -> tuple[ir.Value, int]:
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
        index = hlo.RemOp(hlo.DivOp(device, _u32_constant(stride, ip), ip=ip).result, _u32_constant(size, ip),
                          ip=ip).result
        position = index if position is None else hlo.AddOp(
            hlo.MulOp(position, _u32_constant(size, ip), ip=ip).result, index, ip=ip).result
        count *= size
    return position, count


def _is_first_along(axes: list, mesh: list, ip: ir.InsertionPoint) -> ir.Value:
    """A scalar ``i1``: whether this device's index along each of ``axes`` (sdy axis refs
    of ``mesh``) is 0."""
    position, _ = _index_along(axes, mesh, ip)
    return hlo.CompareOp(position, _u32_constant(0, ip), hlo.ComparisonDirectionAttr.get("EQ"), ip=ip).result


def _sharding_of(value: ir.Value):
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
    meshes = _mesh_axes(module)
    for gather in _walk(module, "stablehlo.gather"):
        operand, indices = gather.operands
        sharding = _sharding_of(operand)
        mesh = None if sharding is None else meshes.get(ir.FlatSymbolRefAttr(sharding.mesh_or_ref).value)
        if mesh is None:
            continue
        numbers = hlo.GatherDimensionNumbers(gather.attributes["dimension_numbers"])
        start_index_map, sizes = list(numbers.start_index_map), list(ir.DenseI64ArrayAttr(gather.attributes["slice_sizes"]))
        shape = ir.RankedTensorType(operand.type).shape
        axes_of = {dimension: [sdy.AxisRefAttr(axis) for axis in sdy.DimensionShardingAttr(dimension_sharding).axes]
                   for dimension, dimension_sharding in enumerate(sharding.dimension_shardings)}
        split = {dimension: axes for dimension, axes in axes_of.items() if axes}
        parts = {dimension: _parts(axes, mesh) for dimension, axes in split.items()}
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
                    position, _ = _index_along(split[dimension], mesh, ir.InsertionPoint(gather))
                    offsets.append(hlo.MulOp(position, _u32_constant(shape[dimension] // parts[dimension],
                                                                     ir.InsertionPoint(gather)),
                                             ip=ir.InsertionPoint(gather)).result)
                else:
                    offsets.append(_u32_constant(0, ir.InsertionPoint(gather)))
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


def _parts(axes: list, mesh: list) -> int:
    """How many parts sdy axis refs ``axes`` of ``mesh`` split a dimension into."""
    return math.prod(_axis_size(axis, mesh) for axis in axes)


def _axis_size(axis, mesh: list) -> int:
    """How many positions an sdy axis ref (an axis of ``mesh``, or a sub-axis) has."""
    if axis.sub_axis_info is not None:
        return sdy.SubAxisInfoAttr(axis.sub_axis_info).size
    return dict(mesh)[axis.name]


def _all_reduced_over(value: ir.Value, axes: list) -> bool:
    """Whether every use of ``value`` is an ``sdy.all_reduce`` over (at least) ``axes``."""
    wanted = {str(axis) for axis in axes}
    users = [use.owner for use in value.uses]
    return bool(users) and all(
        getattr(user, "operation", user).name == "sdy.all_reduce"
        and wanted <= {str(axis) for axis in _axis_refs(getattr(user, "operation", user).attributes["reduction_axes"])}
        for user in users)


def _gather_from_shards(operand: ir.Value, indices: ir.Value, offsets: list, attributes: dict,
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
    meshes = _mesh_axes(module)
    for operation in _walk(module, "sdy.replicated_to_unreduced"):
        if not list(operation.results[0].uses):
            operation.erase()
            continue
        sharding = sdy.TensorShardingAttr(operation.attributes["out_sharding"])
        partial = _first_keeps(operation.operands[0], _axis_refs(operation.attributes["axes"]), sharding, meshes,
                               ir.InsertionPoint(operation), operation.location)
        operation.results[0].replace_all_uses_with(partial)
        operation.erase()
    for operation in _walk(module, ""):   # made unreduced from whole values: no replicated_to_unreduced written
        if operation.name not in WHOLE_VALUE_OPS or "sdy.sharding" not in operation.attributes:
            continue
        sharding = sdy.TensorShardingAttr(sdy.TensorShardingPerValueAttr(operation.attributes["sdy.sharding"]).shardings[0])
        axes = [sdy.AxisRefAttr(axis) for axis in sharding.unreduced_axes]
        unreduced = {str(axis) for axis in axes}
        if not axes or any(not isinstance(value, ir.BlockArgument) or (sharding_ := _sharding_of(value)) is None
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
        first = _is_first_along(axes, mesh, ip)
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
    _move_block(group[0].regions[0].blocks[0], combined.regions[0], "stablehlo.return")
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


def partition(text: str) -> str:
    """The per-device program of the module ``text``, as StableHLO text that jaxlib's
    StableHLO-to-HLO converter accepts."""
    with make_context():
        module = ir.Module.parse(text)
        # The global-to-local pass leaves a call's results their global types (and MLIR's
        # inliner declines calls in StableHLO's regions); XLA inlines calls too.
        inline_every_call(module)
        async_pairs_as_collectives(module)   # XLA's converter refuses async ops; XLA's CPU shows the collective
        stand_in_for_chlo(module)
        _run(module, ("symbol-dce",) + PROPAGATE_AND_INSERT_COLLECTIVES[:-1])
        gather_dimensions_shardy_cannot_split(module)
        replicate_maximal_ops(module)
        _run(module, PROPAGATE_AND_INSERT_COLLECTIVES[-1:])
        refuse_uneven_shards(module)
        split_reduce_scatters_of_partial_sums(module)
        stand_in_for_gathers_from_shards(module)
        lower_replicated_to_unreduced(module)
        stand_in_for_unconverted_ops(module)
        outline_whiles(module)
        _run(module, GLOBAL_TO_LOCAL)
        inline_whiles(module)
        run_on_their_device(module, ir.IntegerAttr(module.operation.attributes["mhlo.num_partitions"]).value)
        restore_stand_ins(module)
        reduce_partials_by_their_op(module)
        combine_all_reduces(module)
        module.operation.verify()
        local = module.operation.get_asm(enable_debug_info=True)
    _jax.mlir.mlir_module_to_xla_computation(local, use_tuple_args=False, return_tuple=False)
    return local


if __name__ == "__main__":
    serve(lambda request: partition(request.decode("utf-8")).encode("utf-8"),
          reported=(Exception,),   # a pass's or the converter's failure, of several types: reported to the parent
          describe=lambda error: str(error).strip() or type(error).__name__)
