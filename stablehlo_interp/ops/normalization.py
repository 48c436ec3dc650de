"""Batch normalization (spec: batch_norm_inference, batch_norm_training,
batch_norm_grad).

Each op follows the spec's decomposition (the two-pass variance
``mean((x - mean)^2)``; the gradient formula of XLA's batchnorm_expander that
the spec quotes), evaluated in a wider type (f64 for f32/f64, f32 for narrower
floats) and rounded once per result. Statistics reduce over every dim but
``feature_index``. (XLA CPU differs: its training variance is E[x^2] - E[x]^2,
which cancels badly for a large mean, and it keeps f16/bf16 intermediates.)
"""

from __future__ import annotations

import numpy as np

from ..engine.registry import op


def _layout(info):
    """(reduced axes, shape that broadcasts a per-feature vector, wide dtype)."""
    operand = info.operand_types[0]
    if operand.kind != "float":
        raise info.unsupported(f"element type {operand.element_type}: batch norm needs floats")
    feature = int(info.attr("feature_index"))
    axes = tuple(d for d in range(operand.rank) if d != feature)
    shape = tuple(-1 if d == feature else 1 for d in range(operand.rank))
    return axes, shape, np.dtype(np.float64 if operand.dtype.itemsize >= 4 else np.float32)


@op("stablehlo.batch_norm_inference")
def batch_norm_inference(info):
    """``scale * (x - mean) / sqrt(variance + epsilon) + offset``."""
    _, shape, wide = _layout(info)
    epsilon = float(info.attr("epsilon"))
    dtype = info.result_type.dtype

    def run(operand, scale, offset, mean, variance):
        x, scale, offset, mean, variance = (np.asarray(v).astype(wide) for v in (operand, scale, offset, mean,
                                                                                  variance))
        stddev = np.sqrt(variance + epsilon).reshape(shape)
        normalized = (x - mean.reshape(shape)) / stddev
        return (scale.reshape(shape) * normalized + offset.reshape(shape)).astype(dtype)

    return run


@op("stablehlo.batch_norm_training", variadic=True)
def batch_norm_training(info):
    """Normalize with the batch statistics; returns (output, batch_mean, batch_var)."""
    axes, shape, wide = _layout(info)
    epsilon = float(info.attr("epsilon"))
    dtype = info.result_type.dtype

    def run(operand, scale, offset):
        x = np.asarray(operand).astype(wide)
        count = x.size // np.size(scale) if np.size(scale) else 0
        # Spec: mean = divide(reduce(operand, add), N): 0 / 0 = NaN for an empty batch.
        mean = np.sum(x, axis=axes) / wide.type(count)
        centered = x - mean.reshape(shape)
        variance = np.sum(centered * centered, axis=axes) / wide.type(count)
        stddev = np.sqrt(variance + epsilon).reshape(shape)
        output = np.asarray(scale).astype(wide).reshape(shape) * (centered / stddev) \
            + np.asarray(offset).astype(wide).reshape(shape)
        return output.astype(dtype), mean.astype(dtype), variance.astype(dtype)

    return run


@op("stablehlo.batch_norm_grad", variadic=True)
def batch_norm_grad(info):
    """Gradients of batch_norm_training w.r.t. operand, scale and offset, given the
    mean and variance it used (spec: batch_norm_grad)."""
    axes, shape, wide = _layout(info)
    epsilon = float(info.attr("epsilon"))
    dtype = info.result_type.dtype

    def run(operand, scale, mean, variance, grad_output):
        x, scale, mean, variance, grad = (np.asarray(v).astype(wide) for v in (operand, scale, mean, variance,
                                                                               grad_output))
        count = x.size // scale.size if scale.size else 0
        centered = x - mean.reshape(shape)
        variance_eps = (variance + epsilon).reshape(shape)
        stddev = np.sqrt(variance_eps)
        sum_grad = np.sum(grad, axis=axes)
        sum_grad_centered = np.sum(grad * centered, axis=axes).reshape(shape)
        i1 = grad * count
        i5 = sum_grad_centered * centered / variance_eps
        grad_operand = (scale.reshape(shape) / stddev / count) * (i1 - sum_grad.reshape(shape) - i5)
        grad_scale = np.sum(grad * (centered / stddev), axis=axes)
        return grad_operand.astype(dtype), grad_scale.astype(dtype), sum_grad.astype(dtype)

    return run
