"""Dynamism ops (spec: dynamic_broadcast_in_dim, dynamic_iota, dynamic_pad,
dynamic_reshape, real_dynamic_slice; set_dimension_size as XLA; the
``shape_assertion`` custom call of JAX's shape-polymorphic exports).

Each dynamic op is its static twin (broadcast_in_dim, iota, pad, reshape,
slice) with the shape or attributes read from operands at run time: the twin's
builder runs once per distinct value of those operands. A shape operand that
contradicts a static dimension of the result type is an error.
"""

from __future__ import annotations

import math
import dataclasses
from collections.abc import Callable

import numpy as np

from ..engine import registry
from ..engine.registry import custom_call, op

_MAX_VARIANTS = 256  # static twins kept per op; more distinct shapes rebuild them


def _ints(value) -> tuple:
    return tuple(int(v) for v in np.asarray(value).reshape(-1))


def _static_twin(info, name: str, n_operands: int, fix):
    """``runner_for(key)``: the runner of the static op ``name`` for this op's
    first ``n_operands`` operands; ``fix(key)`` gives the result shape (None to
    keep the declared type) and the attributes the dynamic operands stand for."""
    builder = registry.op_builder(name)
    declared = info.result_type
    runners: dict[tuple, Callable] = {}   # by the dynamic operands' values

    def runner_for(key):
        runner = runners.get(key)
        if runner is None:
            shape, attributes = fix(key)
            result = declared
            if shape is not None:
                if len(shape) != declared.rank or any(
                        d is not None and d != n for d, n in zip(declared.shape, shape)):
                    raise ValueError(f"shape {list(shape)} does not match the result type {declared}")
                if any(n < 0 for n in shape):
                    raise ValueError(f"negative dimension size in shape {list(shape)}")
                result = dataclasses.replace(declared, shape=tuple(shape))
            static = dataclasses.replace(info, name=name, attributes={**info.attributes, **attributes},
                                         operand_types=info.operand_types[:n_operands],
                                         result_types=(result,), regions=())
            if len(runners) >= _MAX_VARIANTS:
                runners.clear()
            runner = runners[key] = builder(static)
        return runner

    return runner_for


@op("stablehlo.dynamic_broadcast_in_dim")
def dynamic_broadcast_in_dim(info):
    """broadcast_in_dim to the shape ``output_dimensions``. The optional
    ``known_(non)expanding_dimensions`` are hints and change nothing."""
    runner_for = _static_twin(info, "stablehlo.broadcast_in_dim", 1, lambda shape: (shape, {}))
    return lambda operand, output_dimensions: runner_for(_ints(output_dimensions))(operand)


@op("stablehlo.dynamic_iota")
def dynamic_iota(info):
    """iota of the shape ``output_shape``."""
    runner_for = _static_twin(info, "stablehlo.iota", 0, lambda shape: (shape, {}))
    return lambda output_shape: runner_for(_ints(output_shape))()


@op("stablehlo.dynamic_reshape")
def dynamic_reshape(info):
    """reshape to the shape ``output_shape`` (same number of elements)."""
    runner_for = _static_twin(info, "stablehlo.reshape", 1, lambda shape: (shape, {}))

    def run(operand, output_shape):
        shape = _ints(output_shape)
        if math.prod(shape) != np.size(operand):
            raise ValueError(f"cannot reshape {np.shape(operand)} ({np.size(operand)} elements) "
                             f"to {list(shape)}")
        return runner_for(shape)(operand)

    return run


@op("stablehlo.dynamic_pad")
def dynamic_pad(info):
    """pad with ``edge_padding_low``, ``edge_padding_high`` and ``interior_padding``
    given as operands."""
    def fix(key):
        low, high, interior = key
        if any(n < 0 for n in interior):
            raise ValueError(f"negative interior padding {list(interior)}")
        return None, {"edge_padding_low": low, "edge_padding_high": high, "interior_padding": interior}

    runner_for = _static_twin(info, "stablehlo.pad", 2, fix)
    return lambda operand, padding_value, low, high, interior: runner_for(
        (_ints(low), _ints(high), _ints(interior)))(operand, padding_value)


@op("stablehlo.real_dynamic_slice")
def real_dynamic_slice(info):
    """slice with ``start_indices``, ``limit_indices`` and ``strides`` given as
    operands; they must satisfy slice's constraints (0 <= start <= limit <= dim,
    0 < stride); nothing is clamped."""
    def run(operand, start_indices, limit_indices, strides):
        key = (_ints(start_indices), _ints(limit_indices), _ints(strides))
        for dim, start, limit, stride in zip(np.shape(operand), *key):
            if not (0 <= start <= limit <= dim and stride > 0):
                raise ValueError(f"slice [{start}:{limit}:{stride}] of a dimension of size {dim}")
        result_shape = tuple(-(-(limit - start) // stride) for start, limit, stride in zip(*key))
        return runner_for((result_shape, *key))(operand)

    def fix(key):
        shape, start, limit, stride = key
        return shape, {"start_indices": start, "limit_indices": limit, "strides": stride}

    runner_for = _static_twin(info, "stablehlo.slice", 1, fix)
    return run


@op("stablehlo.set_dimension_size")
def set_dimension_size(info):
    """The first ``size`` elements along ``dimension``, as XLA's SetDimensionSize
    makes them the tensor's dynamic size (the bounded result type has ``?``
    there, or ``size`` when it is a constant)."""
    dimension = info.attr("dimension")
    declared = info.result_type.shape[dimension]

    def run(operand, size):
        size = int(size)
        bound = np.shape(operand)[dimension]
        if not 0 <= size <= bound or (declared is not None and size != declared):
            raise ValueError(f"size {size} for dimension {dimension} of size {bound} "
                             f"(result type {info.result_type})")
        index = [slice(None)] * np.ndim(operand)
        index[dimension] = slice(0, size)
        return np.asarray(operand)[tuple(index)]

    return run


@custom_call("shape_assertion", variadic=True)
def shape_assertion(info):
    """JAX's check that the arguments fit the polymorphic shapes of an export: fails
    with ``error_message`` (``{0}``, ``{1}`` ... are the extra operands) when the
    predicate is false."""
    message = info.attr("error_message")

    def run(assertion, *values):
        if not bool(assertion):
            raise ValueError(message.format(*(np.asarray(v).item() for v in values)))
        return ()

    return run
