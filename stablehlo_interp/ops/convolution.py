"""Convolution (spec: convolution; dynamic_conv, which takes its padding as an operand).

The input is put in ``[batch, spatial..., feature]`` order, dilated and padded
in one strided assignment (negative padding crops), and every window is read
through ``sliding_window_view`` (strides and kernel dilation are slices of
that view). The windows are then gathered into one matrix per group (im2col,
features innermost so the copy reads contiguous memory for channels-last
data) and multiplied with the kernel by a batched matmul: products and sums as
in dot_general (see linalg.py), so i8 -> i32 convolutions multiply in i32, and
each output sums over the kernel's positions in row-major order, the input
features innermost (the spec's dot_general of the window and the kernel).

Feature groups split the input features and the output features into
``feature_group_count`` matching groups; batch groups split the batch and the
output features into ``batch_group_count`` groups (spec: convolution). Both are
one extra batch dimension of the matmul.
"""

from __future__ import annotations

import math
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..engine.registry import op
from .linalg import accumulation_dtype, batched_matmul, result_converter


def _inverse(permutation):
    return tuple(int(i) for i in np.argsort(permutation))


def _dilate_and_pad(x, dilation, padding):
    """``pad(x, 0, low, high, interior=dilation - 1)`` on the spatial axes 1 ... n
    (between batch and feature); a negative ``low``/``high`` removes that many
    elements (spec: pad)."""
    if all(d == 1 for d in dilation) and all(low == 0 and high == 0 for low, high in padding):
        return x
    out_shape, target, source = [x.shape[0]], [slice(None)], [slice(None)]
    for size, step, (low, high) in zip(x.shape[1:-1], dilation, padding):
        dilated = (size - 1) * step + 1 if size else 0
        total = max(low + dilated + high, 0)
        # Input i lands at low + i * step: keep the i with 0 <= low + i * step < total.
        first = -(low // step) if low < 0 else 0
        stop = min(size, -(-(total - low) // step)) if total > low else 0
        count = max(stop - first, 0)
        start = low + first * step
        out_shape.append(total)
        target.append(slice(start, start + (count - 1) * step + 1 if count else start, step))
        source.append(slice(first, first + count))
    out = np.zeros(out_shape + [x.shape[-1]], x.dtype)
    out[tuple(target)] = x[tuple(source)]
    return out


def _output_size(padded: int, window: int, stride: int) -> int:
    """Number of windows (spec: convolution, C26)."""
    if padded == 0 or window > padded:
        return 0
    return (padded - window) // stride + 1


def _convolver(info):
    """The convolution as ``run(lhs, rhs, padding)``; everything but padding decoded here."""
    numbers = info.attr("dimension_numbers")
    n = len(numbers.input_spatial_dimensions)
    strides = tuple(info.attr("window_strides", None) or (1,) * n)
    lhs_dilation = tuple(info.attr("lhs_dilation", None) or (1,) * n)
    rhs_dilation = tuple(info.attr("rhs_dilation", None) or (1,) * n)
    reversal = tuple(info.attr("window_reversal", None) or (False,) * n)
    feature_groups = int(info.attr("feature_group_count", 1))
    batch_groups = int(info.attr("batch_group_count", 1))
    if feature_groups > 1 and batch_groups > 1:
        raise info.error("feature_group_count and batch_group_count cannot both exceed 1")
    lhs_order = (numbers.input_batch_dimension, *numbers.input_spatial_dimensions,
                 numbers.input_feature_dimension)
    rhs_order = (numbers.kernel_output_feature_dimension, *numbers.kernel_spatial_dimensions,
                 numbers.kernel_input_feature_dimension)
    result_order = _inverse((numbers.output_batch_dimension, *numbers.output_spatial_dimensions,
                             numbers.output_feature_dimension))
    reversed_axes = tuple(1 + i for i, r in enumerate(reversal) if r)
    compute = accumulation_dtype(info.result_type)
    matmul = batched_matmul(info.result_type)
    finish = result_converter(info.result_type)
    spatial_axes = tuple(range(1, 1 + n))
    groups = feature_groups * batch_groups

    def run(lhs, rhs, padding):
        x = np.transpose(lhs, lhs_order).astype(compute, copy=False)   # [batch, spatial..., feature]
        w = np.transpose(rhs, rhs_order).astype(compute, copy=False)   # [out, kernel..., in per group]
        x = np.ascontiguousarray(_dilate_and_pad(x, lhs_dilation, padding))
        outputs, kernel, group_features = w.shape[0], w.shape[1:-1], w.shape[-1]
        extents = tuple((k - 1) * d + 1 for k, d in zip(kernel, rhs_dilation))
        out_spatial = tuple(_output_size(p, e, s) for p, e, s in zip(x.shape[1:-1], extents, strides))
        batch_per_group = x.shape[0] // batch_groups
        if 0 in out_spatial or batch_per_group == 0 or outputs == 0:
            out = np.zeros((batch_per_group,) + out_spatial + (outputs,), compute)
            return finish(np.transpose(out, result_order))
        windows = sliding_window_view(x, extents, axis=spatial_axes)  # [batch, positions..., feature, window...]
        windows = windows[(slice(None),) + tuple(slice(None, (o - 1) * s + 1, s) for o, s in zip(out_spatial, strides))
                          + (slice(None),) + tuple(slice(None, None, d) for d in rhs_dilation)]
        if reversed_axes:  # the spec reverses the input's window, and the sum runs over the kernel's order
            windows = np.flip(windows, tuple(n + 1 + axis for axis in reversed_axes))
        # -> [batch groups, feature groups, batch, out spatial..., kernel..., features]
        windows = windows.reshape((batch_groups, batch_per_group) + out_spatial
                                  + (feature_groups, group_features) + kernel)
        windows = np.transpose(windows, (0, 2 + n, 1, *range(2, 2 + n), *range(4 + n, 4 + 2 * n), 3 + n))
        rows = batch_per_group * math.prod(out_spatial)
        columns = math.prod(kernel) * group_features
        matrix = windows.reshape(groups, rows, columns)
        weights = w.reshape(groups, outputs // groups, columns).transpose(0, 2, 1)
        product = matmul(matrix, weights)  # [groups, rows, outputs per group]
        out = product.reshape((groups, batch_per_group) + out_spatial + (outputs // groups,))
        out = np.moveaxis(out, 0, -2).reshape((batch_per_group,) + out_spatial + (outputs,))
        return finish(np.transpose(out, result_order))

    return run, n


@op("stablehlo.convolution")
def convolution(info):
    run, n = _convolver(info)
    padding = info.attr("padding", None)
    padding = ((0, 0),) * n if padding is None else tuple(map(tuple, np.asarray(padding).reshape(n, 2).tolist()))
    return lambda lhs, rhs: run(lhs, rhs, padding)


@op("stablehlo.dynamic_conv")
def dynamic_conv(info):
    """convolution with ``padding`` as a ``tensor<Nx2xi>`` operand."""
    run, n = _convolver(info)
    return lambda lhs, rhs, padding: run(lhs, rhs, tuple(map(tuple, np.asarray(padding).reshape(n, 2).tolist())))
