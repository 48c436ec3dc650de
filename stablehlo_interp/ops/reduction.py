"""Reductions (spec: reduce).

The spec lets ``reduce`` apply ``body`` along any full binary tree whose leaves
are the input elements in order, with init values at implementation-defined
positions. Three strategies, chosen at load time:

1. ``body`` is one monoid op (add, multiply, maximum, minimum, and, or, xor) on
   its two arguments: NumPy's reduction of that op (pairwise for float sums).
2. ``body`` is made of element-wise ops only (argmax/argmin pairs, ...): a
   balanced tree evaluated level by level, each level one vectorized call of
   ``body`` on whole tensors.
3. anything else: ``body`` called on one pair of 0-d values at a time.
"""

from __future__ import annotations

import numpy as np

from ..registry import ELEMENTWISE_OPS, op
from .support import integer_compute_dtype

MONOID_OPS = ("stablehlo.add", "stablehlo.multiply", "stablehlo.maximum", "stablehlo.minimum",
              "stablehlo.and", "stablehlo.or", "stablehlo.xor")


def monoid_of(region) -> str | None:
    """The op name if ``region`` computes ``op(arg0, arg1)`` of one monoid op, else None."""
    if len(region.steps) != 1 or region.n_args != 2 or region.n_captures:
        return None
    step = region.steps[0]
    if step.info.name not in MONOID_OPS or set(step.operands) != {0, 1} or len(step.operands) != 2:
        return None
    if region.outputs != step.results:
        return None
    return step.info.name


def is_elementwise(region) -> bool:
    return all(step.info.name in ELEMENTWISE_OPS for step in region.steps)


def monoid_reducer(name: str, ttype):
    """``reduce(values, axes, init)`` for a monoid op on element type ``ttype`` (init combined once)."""
    dtype, kind = ttype.dtype, ttype.kind
    if kind == "bool":
        ufunc = {"stablehlo.add": np.logical_or, "stablehlo.multiply": np.logical_and,
                 "stablehlo.maximum": np.logical_or, "stablehlo.minimum": np.logical_and,
                 "stablehlo.and": np.logical_and, "stablehlo.or": np.logical_or,
                 "stablehlo.xor": np.logical_xor}[name]
        return lambda values, axes, init: ufunc.reduce(values, axis=axes, initial=bool(init))
    if kind in ("signed", "unsigned"):
        compute = integer_compute_dtype(dtype)
        ufunc = {"stablehlo.add": np.add, "stablehlo.multiply": np.multiply,
                 "stablehlo.maximum": np.maximum, "stablehlo.minimum": np.minimum,
                 "stablehlo.and": np.bitwise_and, "stablehlo.or": np.bitwise_or,
                 "stablehlo.xor": np.bitwise_xor}[name]

        def integer(values, axes, init):
            values = np.asarray(values).astype(compute, copy=False)
            reduced = ufunc.reduce(values, axis=axes, dtype=compute)
            return ufunc(np.asarray(init).astype(compute), reduced).astype(dtype)

        return integer
    if name in ("stablehlo.maximum", "stablehlo.minimum"):
        if kind == "complex":
            return None  # lexicographic order: use the tree strategy
        return _float_extremum(name == "stablehlo.maximum", dtype)
    ufunc = {"stablehlo.add": np.add, "stablehlo.multiply": np.multiply}.get(name)
    if ufunc is None:
        return None

    def floating(values, axes, init):
        reduced = ufunc.reduce(values, axis=axes, dtype=dtype)
        return ufunc(init, reduced).astype(dtype)

    return floating


def _float_extremum(is_max: bool, dtype):
    """max/min with NaN propagation and -0.0 < +0.0, as stablehlo.maximum/minimum."""
    ufunc = np.maximum if is_max else np.minimum

    def run(values, axes, init):
        values = np.asarray(values)
        extremum = ufunc.reduce(values, axis=axes, initial=np.asarray(init, dtype)[()]) \
            if values.size else np.full(_reduced_shape(values.shape, axes), init, dtype)
        extremum = np.asarray(extremum, dtype)
        zero = extremum == 0
        if zero.any():
            positive = (values == 0) & ~np.signbit(values)
            negative = (values == 0) & np.signbit(values)
            init_positive = (init == 0) and not np.signbit(init)
            if is_max:
                pick_positive = np.any(positive, axis=axes) | init_positive
            else:
                pick_positive = ~(np.any(negative, axis=axes) | ((init == 0) and np.signbit(init)))
            signed_zero = np.where(pick_positive, dtype.type(0), -dtype.type(0)).astype(dtype)
            extremum = np.where(zero, signed_zero, extremum)
        return extremum

    return run


def _reduced_shape(shape, axes):
    return tuple(size for i, size in enumerate(shape) if i not in axes)


def tree_reduce(body, inputs, inits, axes, n: int):
    """Balanced-tree reduction with one vectorized ``body`` call per level.

    The reduced axes move to the end and flatten into one axis whose order is the
    lexicographic order of their indices; adjacent pairs combine level by level
    (an odd last element carries over), and the init values join at the left.
    """
    rank = np.ndim(inputs[0])
    kept = [d for d in range(rank) if d not in axes]
    outer = tuple(np.shape(inputs[0])[d] for d in kept)
    values = [np.transpose(x, kept + list(axes)).reshape(outer + (-1,)) for x in inputs]
    count = values[0].shape[-1]
    while count > 1:
        pairs = count // 2
        combined = body(*[v[..., 0:2 * pairs:2] for v in values], *[v[..., 1:2 * pairs:2] for v in values])
        if count % 2:
            combined = [np.concatenate([c, v[..., -1:]], axis=-1) for c, v in zip(combined, values)]
        values = combined
        count = values[0].shape[-1]
    inits = [np.broadcast_to(init, outer) for init in inits]
    if count == 0:
        return list(inits)
    return body(*inits, *[v[..., 0] for v in values])


def sequential_reduce(body, inputs, inits, axes, n: int, result_types):
    """``body`` applied to 0-d values, one output element at a time (any body)."""
    rank = np.ndim(inputs[0])
    kept = [d for d in range(rank) if d not in axes]
    outer = tuple(np.shape(inputs[0])[d] for d in kept)
    moved = [np.transpose(x, kept + list(axes)).reshape(outer + (-1,)) for x in inputs]
    results = [np.empty(outer, t.dtype) for t in result_types]
    for index in np.ndindex(*outer):
        accumulators = [np.asarray(init) for init in inits]
        for k in range(moved[0].shape[-1]):
            accumulators = body(*accumulators, *[np.asarray(m[index + (k,)]) for m in moved])
        for result, value in zip(results, accumulators):
            result[index] = value
    return results


@op("stablehlo.reduce")
def reduce(info):
    n = len(info.result_types)
    axes = tuple(info.attr("dimensions"))
    body_region = info.regions[0]
    body_types = body_region.arg_types[n:]
    body_dtypes = [t.dtype for t in body_types]
    input_dtypes = [t.dtype for t in info.operand_types[:n]]
    convert = body_dtypes != input_dtypes  # promoted accumulation (spec: reduce, conversions)
    result_dtypes = [t.dtype for t in info.result_types]
    monoid = monoid_of(body_region) if n == 1 else None
    reducer = monoid and monoid_reducer(monoid, body_types[0])
    vectorized = is_elementwise(body_region)
    single = n == 1

    def run(regions, *operands):
        (body,) = regions
        inputs, inits = list(operands[:n]), list(operands[n:])
        if convert:
            inputs = [np.asarray(x).astype(d) for x, d in zip(inputs, body_dtypes)]
        if reducer is not None:
            results = [reducer(inputs[0], axes, inits[0])]
        elif vectorized:
            results = tree_reduce(body, inputs, inits, axes, n)
        else:
            results = sequential_reduce(body, inputs, inits, axes, n, info.result_types)
        results = [np.asarray(r).astype(d, copy=False) for r, d in zip(results, result_dtypes)]
        return results[0] if single else tuple(results)

    return run
