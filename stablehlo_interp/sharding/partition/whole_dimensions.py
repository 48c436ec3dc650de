"""Ops whose per-device form Shardy gets wrong on a split dimension take their operands
whole along it (a reshard: an all-gather), as XLA's partitioner replicates what it
cannot split; one small rule per op in :data:`DIMENSIONS_TO_GATHER`."""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy
from jaxlib.mlir.dialects import stablehlo as hlo

from ...ir.sources import CUSTOM_PARTITIONING_TARGET
from .rewriting import reducer_of, reshard_operand, shape, sharding_of, split_dimensions, walk, whole_along


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
            for split, dimension in zip(split_dimensions(sharding), sdy.TensorMappingAttr(mapping).dim_mappings)]


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
    return [], [(index, [True] * len(shape(result))) for index, result in enumerate(operation.results)]


def _reversed(operation):
    whole = _marked(ir.DenseI64ArrayAttr(operation.attributes["dimensions"]), len(shape(operation.operands[0])))
    return [(0, whole)], [(0, whole)]


def _padded_dimensions(operation):
    edges = [_integers(operation.attributes, key, []) for key in ("edge_padding_low", "edge_padding_high",
                                                                 "interior_padding")]
    whole = [any(edge[dimension] for edge in edges) for dimension in range(len(shape(operation.operands[0])))]
    return [(0, whole)], [(0, whole)]


def _sliced(operation):
    attributes = operation.attributes
    whole = [(start, limit, stride) != (0, size, 1) for start, limit, stride, size in zip(
        *(_integers(attributes, key, []) for key in ("start_indices", "limit_indices", "strides")),
        shape(operation.operands[0]))]
    return [(0, whole)], [(0, whole)]


def _concatenated(operation):
    whole = _marked([ir.IntegerAttr(operation.attributes["dimension"]).value], len(shape(operation.operands[0])))
    return [(index, whole) for index in range(len(operation.operands))], [(0, whole)]


def _updated_slice(operation):
    whole = [part != size for part, size in zip(shape(operation.operands[1]), shape(operation.operands[0]))]
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
    kernel = shape(operation.operands[1])
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
    return ([(0, _marked(inputs, len(shape(operation.operands[0])))),
             (1, _marked(kernels, len(kernel)))],
            [(0, _marked(outputs, len(shape(operation.results[0]))))])


def _scattered(operation):
    """Shardy moves each start index by the device's offset along its dimension: right for a
    window of one element (an index outside the part skips the update), wrong for a wider
    one (a whole dimension's window at 0 moved out of bounds: its update skipped)."""
    numbers = hlo.ScatterDimensionNumbers(operation.attributes["scatter_dimension_numbers"])
    operands = list(operation.operands)
    inputs, rank, updates = len(operands) // 2, len(shape(operands[0])), shape(operands[-1])
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
        shardings = [sharding_of(value) for value in values]
        sides.append([(index, _split_outside(sharding, mapping, shared))
                      for index, (sharding, mapping) in enumerate(zip(shardings, mappings)) if sharding is not None])
    return sides[0], sides[1]


def _reduced(operation):
    """A sum, or one op whose parts an all-reduce combines (reduce_partials_by_their_op), is
    left to Shardy; an argmax's pair of values and indices is gathered."""
    reducer = reducer_of(operation)
    sharding = sharding_of(operation.results[0])
    unreduced = sharding is not None and len(sharding.unreduced_axes)
    if reducer == "stablehlo.add" or (reducer is not None and not unreduced):
        return None
    whole = _marked(ir.DenseI64ArrayAttr(operation.attributes["dimensions"]), len(shape(operation.operands[0])))
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
    for operation in walk(module, "stablehlo."):
        rule = DIMENSIONS_TO_GATHER.get(operation.name)
        found = rule(operation) if rule is not None else None
        if found is None:
            continue
        operands, results = found
        for index, whole in operands:
            value = operation.operands[index]
            sharding = sharding_of(value)
            if sharding is None or not any(w and split for w, split in zip(whole, split_dimensions(sharding))):
                continue
            reshard_operand(operation, index, whole_along(sharding, whole))
        if results and "sdy.sharding" in operation.attributes:
            shardings = [sdy.TensorShardingAttr(sharding) for sharding in
                         sdy.TensorShardingPerValueAttr(operation.attributes["sdy.sharding"]).shardings]
            masks = dict(results)
            operation.attributes["sdy.sharding"] = sdy.TensorShardingPerValueAttr.get([
                whole_along(sharding, masks[index]) if index in masks else sharding
                for index, sharding in enumerate(shardings)])
