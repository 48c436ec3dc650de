"""The MHLO ops that XLA's HLO passes leave when a pass's output is translated back
(jaxlib's ``hlo_to_stablehlo``; tools/passes.py runs each pass's output): HLO's
``fusion``, ``copy``, ``bitcast`` and ``topk`` (XLA's operation semantics,
https://openxla.org/xla/operation_semantics, and xla/hlo/ir/hlo_opcode.h), and the
custom call XLA's CPU pipeline makes of a top-k sort (``TopK``, its TopkRewriter).

Values here are logical tensors, as in StableHLO: a layout is how a tensor's elements
lie in memory, and only ``bitcast`` reads memory: its value is its operand's bytes in
the operand's layout, read in the result's layout.
"""

from __future__ import annotations

import numpy as np

from ..engine.plan import OpInfo, RegionCallRunner
from ..engine.registry import custom_call, op
from ..ir.types import TensorType
from .chlo import top_k
from .sorting import sort


@op("mhlo.fusion", variadic=True)
def fusion(info):
    """A fusion computes its region (the fused computation) on its operands: fusing
    changes how XLA emits code, not what the computation is."""
    return RegionCallRunner(0)


@op("mhlo.copy")
def copy(info):
    """A copy's value is its operand's (a layout change, after layout assignment, keeps the
    logical value)."""
    return lambda operand: np.array(operand, copy=True)


@op("mhlo.bitcast")
def bitcast(info):
    """The operand's elements in memory (its ``source_layout``, minor-to-major dimension
    order) read as the result's shape in ``result_layout``: a reshape or transpose that
    needs no data movement in memory."""
    source, result = info.attr("source_layout", None), info.attr("result_layout", None)
    if source is None or result is None:
        raise info.unsupported("a bitcast without source_layout and result_layout: its value depends on layouts "
                               "the module does not give")
    source, result = _minor_to_major(source), _minor_to_major(result)
    result_type = info.result_type
    if info.operand_types[0].dtype.itemsize != result_type.dtype.itemsize:
        raise info.unsupported("a bitcast between element types of different widths")
    physical_axes = tuple(reversed(result))   # the result's dimensions, major to minor
    physical_shape = tuple(result_type.shape[axis] for axis in physical_axes)
    logical_order = tuple(np.argsort(physical_axes))

    def run(operand):
        in_memory = np.transpose(np.asarray(operand), tuple(reversed(source))).reshape(-1)
        if in_memory.dtype != result_type.dtype:
            in_memory = in_memory.view(result_type.dtype)
        return in_memory.reshape(physical_shape).transpose(logical_order).copy()   # (ascontiguousarray makes 0-d 1-d)

    return run


@op("mhlo.topk", variadic=True)
def topk(info):
    """HLO's TopK: the ``k`` largest entries along the last dimension and their indices,
    as ``chlo.top_k`` (whose builder runs it); ``largest = false`` (the smallest) is not
    run."""
    if not info.attr("largest", True):
        raise info.unsupported("a TopK of the smallest entries (largest = false)")
    return top_k(info)


@custom_call("TopK", variadic=True)
def sorted_top_k(info):
    """XLA CPU's TopK custom call: its operand sorted along the last dimension with its
    indices (an iota) by the called comparator, which orders (value, index) pairs as a
    sort's does, stable; the first ``k`` of both (``k`` from the result type). (HLO
    returns the two as a tuple: the compiler hands this builder its elements.)"""
    values_type = info.operand_types[0]
    values_result, indices_result = info.result_types
    dimension = len(values_type.shape) - 1
    indices_type = TensorType.of(values_type.shape, indices_result.element_type)
    pairs = sort(OpInfo("stablehlo.sort", {"dimension": dimension, "is_stable": True}, (values_type, indices_type),
                        (values_type, indices_type), info.regions[-1:], info.location, info.module))
    k = values_result.shape[-1]

    def run(regions, values):
        values = np.asarray(values)
        iota = np.broadcast_to(np.arange(values.shape[-1], dtype=indices_type.dtype), values.shape)
        ordered_values, ordered_indices = pairs(regions[-1:], values, np.ascontiguousarray(iota))
        return ordered_values[..., :k].copy(), ordered_indices[..., :k].copy()

    return run


def _minor_to_major(layout) -> tuple:
    return tuple(int(axis) for axis in np.asarray(layout).reshape(-1))
