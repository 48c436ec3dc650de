"""Shape and data movement (spec: constant, iota, broadcast_in_dim, broadcast,
reshape, transpose, reverse, slice, dynamic_slice, dynamic_update_slice,
concatenate, pad, get_dimension_size)."""

from __future__ import annotations

import math

import numpy as np

from ..engine.registry import op
from ..engine.dtypes import static_shape
from ..ir.types import TensorType


@op("stablehlo.constant")
def constant(info):
    value = info.attr("value")
    if not isinstance(value, np.ndarray):
        raise info.unsupported(f"constant value {str(value)[:80]}")
    return lambda: value


@op("stablehlo.iota")
def iota(info):
    ttype = info.result_type
    shape = static_shape(ttype, info)
    dimension = info.attr("iota_dimension")
    counts = np.arange(shape[dimension]).astype(ttype.dtype)
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    value = np.broadcast_to(counts.reshape(view), shape)
    return lambda: value


# Results of at most this many elements that a broadcast stretches are made whole: a
# small array costs 0.3 us to fill where np.broadcast_to's view costs 3-5 us (Python
# checks of its arguments); above it, the view (no copy of a large result).
SMALL_BROADCAST = 4096


@op("stablehlo.broadcast_in_dim")
def broadcast_in_dim(info):
    """Operand dimension i becomes result dimension broadcast_dimensions[i]; size-1
    operand dimensions stretch. Where none stretches, the result is the operand
    reshaped (a view); a small result that stretches is a new array
    (SMALL_BROADCAST), a large one a read-only broadcast view."""
    shape = static_shape(info.result_type, info)
    dims = info.attr("broadcast_dimensions")
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    needs_transpose = order != list(range(len(dims)))
    operand_shape = info.operand_types[0].shape
    if None in operand_shape:   # (a dynamic operand: its shape is known at run time only)
        return _broadcast_in_dim_of_any_shape(shape, dims, order, needs_transpose)
    expanded = [1] * len(shape)
    for i, size in zip(sorted(dims), (operand_shape[i] for i in order)):
        expanded[i] = size
    expanded = tuple(expanded)
    if expanded == tuple(shape):
        if needs_transpose:
            return lambda operand: np.transpose(operand, order).reshape(expanded)
        return lambda operand: operand.reshape(expanded)
    if math.prod(shape) > SMALL_BROADCAST:
        def view(operand):
            operand = np.transpose(operand, order) if needs_transpose else operand
            return np.broadcast_to(operand.reshape(expanded), shape)

        return view
    dtype = info.result_type.dtype
    if not operand_shape:
        def filled_with_one(operand):
            """(``ndarray.fill`` copies a 0-d operand's bits: 0.25 us where the assignment
            of the operand reshaped costs 0.6)"""
            result = np.empty(shape, dtype)
            result.fill(operand)
            return result

        return filled_with_one

    def filled(operand):
        result = np.empty(shape, dtype)
        result[...] = (np.transpose(operand, order) if needs_transpose else operand).reshape(expanded)
        return result

    return filled


def _broadcast_in_dim_of_any_shape(shape, dims, order, needs_transpose):
    view = [1] * len(shape)

    def run(operand):
        if needs_transpose:
            operand = np.transpose(operand, order)
        expanded = list(view)
        for i, size in zip(sorted(dims), np.shape(operand)):
            expanded[i] = size
        return np.broadcast_to(np.reshape(operand, expanded), shape)

    return run


@op("stablehlo.broadcast")
def broadcast(info):
    shape = static_shape(info.result_type, info)
    return lambda operand: np.broadcast_to(operand, shape)


def _reshape_to_0d(info):
    """reshape's runner for a 0-d result (registry.Implementation.scalar): the one
    element as a NumPy scalar (0-d operations compute on scalars: ops/scalars.py)."""
    ttype = info.operand_types[0]
    if type(ttype) is not TensorType or not ttype.is_static:
        return None
    index = (0,) * len(ttype.shape)
    return lambda operand: operand[index]


@op("stablehlo.reshape", scalar=_reshape_to_0d)
def reshape(info):
    """A view of the operand (``ndarray.reshape``: np.reshape's dispatch costs 4x the reshape)."""
    shape = static_shape(info.result_type, info)
    return lambda operand: operand.reshape(shape)


@op("stablehlo.transpose")
def transpose(info):
    permutation = info.attr("permutation")
    return lambda operand: np.transpose(operand, permutation)


@op("stablehlo.reverse")
def reverse(info):
    dimensions = info.attr("dimensions")
    return lambda operand: np.flip(operand, axis=dimensions)


@op("stablehlo.slice")
def slice_(info):
    index = tuple(slice(start, limit, stride) for start, limit, stride in
                  zip(info.attr("start_indices"), info.attr("limit_indices"), info.attr("strides")))
    return lambda operand: np.asarray(operand)[index]


def _clamped_starts(starts, operand_shape, sizes):
    """Start indices clamped to [0, dim - size] (spec: dynamic_slice, dynamic_update_slice)."""
    return [min(max(int(start), 0), dim - size) for start, dim, size in zip(starts, operand_shape, sizes)]


@op("stablehlo.dynamic_slice")
def dynamic_slice(info):
    sizes = info.attr("slice_sizes")
    if info.operand_types[0].is_static:
        # each start clamped to [0, dim - size] (_clamped_starts) against the static shape
        # known here (a row of a 7x7 matrix: 3.1 us -> 1.5)
        bounds = tuple((size, dim - size) for size, dim in zip(sizes, info.operand_types[0].shape))

        def run_static(operand, *starts):
            index = []
            for start, (size, last) in zip(starts, bounds):
                start = min(max(int(start), 0), last)
                index.append(slice(start, start + size))
            return np.asarray(operand)[tuple(index)]

        return run_static

    def run(operand, *starts):
        starts = _clamped_starts(starts, np.shape(operand), sizes)
        return np.asarray(operand)[tuple(slice(s, s + n) for s, n in zip(starts, sizes))]

    return run


@op("stablehlo.dynamic_update_slice")
def dynamic_update_slice(info):
    def run(operand, update, *starts):
        starts = _clamped_starts(starts, np.shape(operand), np.shape(update))
        result = np.array(operand, copy=True)
        result[tuple(slice(s, s + n) for s, n in zip(starts, np.shape(update)))] = update
        return result

    return run


@op("stablehlo.concatenate")
def concatenate(info):
    dimension = info.attr("dimension")
    return lambda *inputs: np.concatenate(inputs, axis=dimension)


def pad_array(operand, padding_value, low, high, interior) -> np.ndarray:
    """``pad`` (spec: pad): edge padding (negative values crop) and interior
    padding between elements, filled with ``padding_value``."""
    operand = np.asarray(operand)
    canvas_shape, place, crop = [], [], []
    for size, lo, hi, gap in zip(operand.shape, low, high, interior):
        spread = size + max(size - 1, 0) * gap
        canvas_shape.append(max(lo, 0) + spread + max(hi, 0))
        place.append(slice(max(lo, 0), max(lo, 0) + spread, gap + 1))
        crop.append(slice(-min(lo, 0), canvas_shape[-1] + min(hi, 0)))
    canvas = np.full(canvas_shape, padding_value, operand.dtype)
    canvas[tuple(place)] = operand
    return canvas[tuple(crop)]


@op("stablehlo.pad")
def pad(info):
    low = info.attr("edge_padding_low")
    high = info.attr("edge_padding_high")
    interior = info.attr("interior_padding")
    if not any(low) and not any(high) and not any(interior):   # (JAX's gradient of a VALID max pool)
        return lambda operand, padding_value: operand
    return lambda operand, padding_value: pad_array(operand, padding_value, low, high, interior)


@op("stablehlo.get_dimension_size")
def get_dimension_size(info):
    dimension = info.attr("dimension")
    return lambda operand: np.array(np.shape(operand)[dimension], np.int32)
