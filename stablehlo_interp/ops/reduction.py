"""Reductions (spec: reduce, reduce_window).

The spec lets ``reduce`` apply ``body`` along any full binary tree whose leaves
are the input elements in order, with init values at implementation-defined
positions. ``reduce_window`` is ``reduce`` over each window of the padded and
dilated inputs. Three strategies, chosen at load time from the body's pattern
(engine/regions.py):

1. ``body`` is one built-in monoid op (add, multiply, maximum, minimum, and, or,
   xor) on its two arguments: NumPy's reduction of that op. Float and complex sums and
   products of ``reduce`` follow the run's semantics (docs/semantics.md,
   "Accumulation"): under "spec", left folds, init first, in row-major order of
   the reduced indices (the C++ reference interpreter's schedule); under "xla",
   XLA CPU's schedule on this host (support.xla_cpu_fold,
   engine/accumulation/xla_cpu.py). ``reduce_window`` folds each
   window left under both: XLA CPU does too.
2. ``body`` is made of built-in element-wise ops only (argmax/argmin pairs, ...): the
   left fold of the C++ reference interpreter, init first, each step one
   vectorized call of ``body`` on whole tensors (:func:`vectorized_fold`).
3. anything else (an op a user registered among them): ``body`` called on one
   pair of 0-d values at a time.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..engine.registry import op
from ..engine.semantics import SEMANTICS, SPEC, XLA
from ..engine.regions import argminmax_of, is_elementwise, monoid_of, monoid_ufunc
from .shape import pad_array
from ..engine.accumulation.orders import FOLD_BUFFER_ELEMENTS, XLA_REDUCE_WINDOW, fold_reduce, xla_cpu_fold
from ..engine.numerics import ExtremumOfZeros
from ..engine.dtypes import NATIVE_FLOATS, count_nonzero, integer_compute_dtype
from .elementwise import float_extremum_of_two
from ..engine.accumulation.xla_cpu import lanes_on_this_host


def monoid_reducer(name: str, ttype, semantics: str = SPEC):
    """``reduce(values, axes, init)`` for a monoid op on element type ``ttype`` (init
    combined once); float and complex sums and products in the order of ``semantics``."""
    dtype, kind = ttype.dtype, ttype.kind
    if kind == "bool":
        ufunc = monoid_ufunc(name, kind)
        return lambda values, axes, init: ufunc.reduce(values, axis=axes, initial=bool(init))
    if kind in ("signed", "unsigned"):
        compute = integer_compute_dtype(dtype)
        ufunc = monoid_ufunc(name, kind)

        def integer(values, axes, init):
            values = np.asarray(values).astype(compute, copy=False)
            initial = np.asarray(init).astype(compute)[()]
            return ufunc.reduce(values, axis=axes, dtype=compute, initial=initial).astype(dtype)

        return integer
    if name in ("stablehlo.maximum", "stablehlo.minimum"):
        if kind == "complex":
            return None  # lexicographic order: fold the body (vectorized_fold)
        return _float_extremum_reduction(name == "stablehlo.maximum", dtype)
    if name not in ("stablehlo.add", "stablehlo.multiply"):
        return None
    if semantics == XLA:
        return functools.partial(xla_cpu_fold, monoid_ufunc(name, kind), dtype=dtype, lanes_of=lanes_on_this_host)
    return functools.partial(fold_reduce, monoid_ufunc(name, kind), dtype=dtype)


def _float_extremum_reduction(is_max: bool, dtype):
    """max/min with NaN propagation and -0.0 < +0.0, as stablehlo.maximum/minimum:
    where NumPy's extremum is zero, the zero comes from a sum over the reduced
    axes (ExtremumOfZeros)."""
    ufunc = np.maximum if is_max else np.minimum
    zeros = ExtremumOfZeros(is_max)

    def run(values, axes, init):
        if not values.size:
            return np.full(_reduced_shape(values.shape, axes), init, dtype)
        extremum = np.asarray(ufunc.reduce(values, axis=axes, initial=init[()]), dtype)
        if count_nonzero(extremum) == extremum.size:  # no zeros (NaN counts as nonzero)
            return extremum
        if not extremum.ndim:   # a whole reduction whose extremum is a zero: which one
            return np.asarray(zeros.of_reduction(values, axes, init, dtype), dtype)
        return np.where(extremum == 0, zeros.of_reduction(values, axes, init, dtype), extremum).astype(
            dtype, copy=False)

    return run


def _reduced_shape(shape, axes):
    return tuple(size for i, size in enumerate(shape) if i not in axes)


def _move_reduced_axes_last(inputs, axes):
    """Inputs transposed so the reduced axes come last, flattened into one axis."""
    shape = np.shape(inputs[0])
    kept = [d for d in range(len(shape)) if d not in axes]
    outer = tuple(shape[d] for d in kept)
    count = math.prod([shape[d] for d in axes])
    reduced = sorted(axes)   # (flattened in row-major order of the reduced indices)
    return outer, [np.transpose(x, kept + reduced).reshape(outer + (count,)) for x in inputs]


def vectorized_fold(body, inputs, inits, axes):
    """``body`` folded left, init first, over the reduced elements in row-major order
    of their indices -- the C++ reference interpreter's schedule (and XLA CPU's
    loop) -- with one vectorized call per reduced element, on every output element
    at once. (A balanced tree would take fewer calls, but a body that is not
    associative, ``a + b * b`` say, gives another value than the reference.)"""
    outer, values = _move_reduced_axes_last(inputs, axes)
    accumulators = [np.broadcast_to(init, outer) for init in inits]
    for k in range(values[0].shape[-1]):
        # (a body may return constants: every accumulator keeps the outputs' shape)
        accumulators = [np.broadcast_to(a, outer) for a in body(*accumulators, *[v[..., k] for v in values])]
    return accumulators


def sequential_reduce(body, inputs, inits, axes, result_types):
    """``body`` applied to 0-d values, one output element at a time (any body)."""
    outer, moved = _move_reduced_axes_last(inputs, axes)
    results = [np.empty(outer, t.dtype) for t in result_types]
    for index in np.ndindex(*outer):
        accumulators = [np.asarray(init) for init in inits]
        for k in range(moved[0].shape[-1]):
            accumulators = body(*accumulators, *[np.asarray(m[index + (k,)]) for m in moved])
        for result, value in zip(results, accumulators):
            result[index] = value
    return results


def argminmax_reduce(better, values, indices, init_value, init_index, axes):
    """JAX's argmax/argmin body folded left to right, init first (a schedule the
    spec allows), in closed form: the leftmost NaN wins with its index; otherwise
    the best value (the last one equal to it, which carries the sign of a zero)
    with the smallest index among the values equal to it."""
    outer, (values, indices) = _move_reduced_axes_last([values, indices], axes)
    if values.shape[-1] == 0:
        return [np.broadcast_to(init_value, outer), np.broadcast_to(init_index, outer)]
    nan = values != values
    any_nan = bool(nan.any())
    comparable = np.where(nan, values[..., :1], values) if any_nan else values
    best = (np.max if better is np.greater else np.min)(comparable, axis=-1, keepdims=True)
    equal = comparable == best
    if any_nan:
        equal &= ~nan
    last_equal = values.shape[-1] - 1 - np.argmax(equal[..., ::-1], axis=-1)
    value = np.take_along_axis(values, last_equal[..., None], axis=-1)[..., 0]
    index = np.where(equal, indices, np.iinfo(indices.dtype).max).min(axis=-1)
    if any_nan:
        first_nan = np.argmax(nan, axis=-1)[..., None]
        has_nan = nan.any(axis=-1)
        value = np.where(has_nan, np.take_along_axis(values, first_nan, axis=-1)[..., 0], value)
        index = np.where(has_nan, np.take_along_axis(indices, first_nan, axis=-1)[..., 0], index)
    # One more application of the body: the init value on the left.
    init_nan = init_value != init_value
    take_init = init_nan | better(init_value, value)
    tie = ~take_init & (init_value == value) & (value == value)
    return [np.where(take_init, init_value, value),
            np.where(take_init | (tie & (init_index < index)), init_index, index)]


def reduction(info, n: int):
    """Load time: ``reduce(body, inputs, inits, axes, semantics) -> results`` for the op's
    body region, and the body's element types.

    Inputs and init values are first converted to the body's element types, which
    may be wider than the inputs' (spec: reduce, reduce_window: ``is_promotable``).
    ``semantics`` ("spec" or "xla") picks the order of float sums and products.
    """
    body_region = info.regions[0]
    body_types = body_region.arg_types[n:]
    body_dtypes = [t.dtype for t in body_types]
    result_types = info.result_types
    monoid = monoid_of(body_region) if n == 1 else None
    reducers = monoid and {semantics: monoid_reducer(monoid, body_types[0], semantics) for semantics in SEMANTICS}
    argminmax = argminmax_of(body_region) if n == 2 else None
    vectorized = is_elementwise(body_region)
    if reducers and reducers[SPEC] is not None:
        info.regions_called = False   # the runner gets None for the body
        body_dtype, result_dtype = body_dtypes[0], result_types[0].dtype

        def run_monoid(body, inputs, inits, axes, semantics):
            values, init = np.asarray(inputs[0], body_dtype), np.asarray(inits[0], body_dtype)
            return [np.asarray(reducers[semantics](values, axes, init), result_dtype)]

        return run_monoid, body_dtypes

    def run(body, inputs, inits, axes, semantics):
        inputs = [np.asarray(x).astype(d, copy=False) for x, d in zip(inputs, body_dtypes)]
        inits = [np.asarray(x).astype(d, copy=False) for x, d in zip(inits, body_dtypes)]
        if argminmax is not None:
            results = argminmax_reduce(argminmax, *inputs, *inits, axes)
        elif vectorized:
            results = vectorized_fold(body.as_vectorized(), inputs, inits, axes)
        else:
            results = sequential_reduce(body, inputs, inits, axes, result_types)
        return [np.asarray(r).astype(t.dtype, copy=False) for r, t in zip(results, result_types)]

    return run, body_dtypes


def _reduce_to_0d(info):
    """reduce's runner for 0-d results (registry.Implementation.scalar): a fold of a
    vector or of one element per result giving its result as a NumPy scalar (what the
    runners on 0-d values after it compute on), or None for any other reduce."""
    return _reduce(info, to_0d=True)


@op("stablehlo.reduce", variadic=True, execution=True, scalar=_reduce_to_0d)
def reduce(info):
    """Float sums and products in the order of the run's semantics (docs/semantics.md,
    "Accumulation")."""
    return _reduce(info)


def _reduce(info, to_0d: bool = False):
    n = len(info.result_types)
    axes = tuple(info.attr("dimensions"))
    run_reduction, _ = reduction(info, n)

    def run(execution, regions, *operands):
        return run_reduction(regions[0], operands[:n], operands[n:], axes, execution.semantics)

    folds = (_vector_fold(info, axes, run, to_0d) or _one_element_folds(info, axes, run, to_0d)
             or _order_free_fold(info, axes, to_0d) or _vector_extremum(info, axes, run, to_0d))
    return folds if to_0d else folds or run


def _one_element_folds(info, axes: tuple, general, to_0d: bool = False):
    """The runner of a reduce whose result elements each fold one input element (the
    reduced dimensions' sizes multiply to 1, or none is reduced: ``jnp.sum`` of a 0-d
    value) with a body of one monoid op: add or multiply on floats and complex numbers,
    maximum or minimum on f16, f32 and f64 (the ops' own runner), any on booleans and
    integers; None for any other reduce. Under the semantics
    "spec" each result element is then ``init ∘ x``, the one fold there is (the
    general way's ``fold_reduce`` and integer reduce compute it with several
    microseconds of steps: 7.6 us -> 1.5 for a 0-d sum); "xla" goes to ``general``.
    Values as the general way's: integers in their compute type (wrapping), the
    result converted to the body's type, then the result's (with ``to_0d`` the element
    of a 0-d result, a NumPy scalar)."""
    body = info.regions[0]
    operand_type, monoid = info.operand_types[0], monoid_of(body)
    body_type = body.arg_types[1] if body.n_args == 2 else None
    if (len(info.result_types) != 1 or not operand_type.is_static or body_type is None or monoid is None
            or math.prod(operand_type.shape[d] for d in axes) != 1):
        return None
    body_dtype, result_dtype = body_type.dtype, info.result_types[0].dtype
    if body_type.kind in ("float", "complex") and monoid not in ("stablehlo.add", "stablehlo.multiply"):
        if body_dtype not in NATIVE_FLOATS:   # (complex: lexicographic; bf16, f8: their own runners)
            return None
        # stablehlo.maximum's and minimum's own runner: -0.0 < +0.0, NaNs as the reduction's
        ufunc = float_extremum_of_two(np.maximum if monoid == "stablehlo.maximum" else np.minimum, body_dtype)
    else:
        ufunc = monoid_ufunc(monoid, body_type.kind)
    compute = integer_compute_dtype(body_dtype) if body_type.kind in ("signed", "unsigned") else body_dtype
    shape = info.result_types[0].shape
    # NumPy scalars of the body's type, to a 0-d result of that type: ``init ∘ x`` on them as they are
    scalar_type = body_dtype.type if to_0d and not shape and compute == body_dtype == result_dtype else None

    def run(execution, regions, values, init):
        if execution.semantics != SPEC:
            return general(execution, regions, values, init)
        if type(values) is scalar_type and type(init) is scalar_type:
            result = ufunc(init, values)
            return [result if type(result) is scalar_type else result[()]]
        values = np.asarray(values, body_dtype).astype(compute, copy=False).reshape(shape)
        init = np.asarray(init, body_dtype).astype(compute, copy=False)
        result = np.asarray(ufunc(init, values)).astype(body_dtype, copy=False).astype(result_dtype, copy=False)
        return [result[()] if to_0d else result]

    return run   # (the body is not called: reduction() said so for its monoid)


def _order_free_fold(info, axes: tuple, to_0d: bool = False):
    """The runner of a reduce of booleans or integers with a body of one monoid op (any
    order of which gives the same bits: integers wrap), or None for any other reduce:
    the general way's NumPy reduce from init in the compute type, without its steps
    (``jnp.all`` of 16 booleans: 2.2 us -> 1.4); ``to_0d``: a 0-d result as a NumPy scalar."""
    body = info.regions[0]
    monoid = monoid_of(body)
    body_type = body.arg_types[1] if body.n_args == 2 else None
    if (len(info.result_types) != 1 or monoid is None or body_type is None
            or body_type.kind not in ("bool", "signed", "unsigned")):
        return None
    ufunc = monoid_ufunc(monoid, body_type.kind)
    body_dtype, result_dtype = body_type.dtype, info.result_types[0].dtype
    compute = integer_compute_dtype(body_dtype) if body_type.kind != "bool" else body_dtype

    def run(execution, regions, values, init):
        values = np.asarray(values, body_dtype).astype(compute, copy=False)
        initial = np.asarray(init, body_dtype).astype(compute)[()]
        result = np.asarray(ufunc.reduce(values, axis=axes, dtype=compute, initial=initial))
        result = result.astype(body_dtype, copy=False).astype(result_dtype, copy=False)
        return [result[()] if to_0d else result]

    return run   # (the body is not called: reduction() said so for its monoid)


def _vector_extremum(info, axes: tuple, general, to_0d: bool = False):
    """The runner of the maximum or minimum of a whole f16, f32 or f64 vector, or None
    for any other reduce: NumPy's extremum from init where it is no zero (a NaN
    propagates as the general way's: the same reduce), the general way where it is
    one (which zero: ExtremumOfZeros); ``jnp.max`` of 16 values 4 us -> 1.5."""
    body = info.regions[0]
    operand_type, monoid = info.operand_types[0], monoid_of(body)
    body_type = body.arg_types[1] if body.n_args == 2 else None
    if (len(info.result_types) != 1 or axes != (0,) or operand_type.rank != 1 or not operand_type.is_static
            or body_type is None or body_type.dtype not in NATIVE_FLOATS
            or monoid not in ("stablehlo.maximum", "stablehlo.minimum")):
        return None
    ufunc = np.maximum if monoid == "stablehlo.maximum" else np.minimum
    body_dtype, result_dtype = body_type.dtype, info.result_types[0].dtype

    def run(execution, regions, values, init):
        extremum = ufunc.reduce(np.asarray(values, body_dtype), initial=np.asarray(init, body_dtype)[()])
        if not extremum:   # a zero: which one is the general way's to say
            (extremum,) = general(execution, regions, values, init)
            return [extremum[()] if to_0d else extremum]
        extremum = np.asarray(extremum, result_dtype)
        return [extremum[()] if to_0d else extremum]

    return run   # (the body is not called: reduction() said so for its monoid)


def _vector_fold(info, axes: tuple, general, to_0d: bool = False):
    """The runner of a float or complex sum or product of a whole vector (``jnp.sum(v)``,
    the most common reduce), or None for any other reduce.

    It folds left from init in one ``accumulate``, which is sequential by definition:
    ``init ∘ v0 ∘ v1 ∘ ...``, each step rounded to the body's type. That is the "spec"
    schedule (``fold_reduce``; up to the length it stages at once), and XLA CPU's
    (``xla_cpu_fold``: no window, one row) up to 32 elements; a longer vector under
    "xla" goes to ``general``. The general way costs several microseconds of Python
    steps that decide, at every run, what the vector's shape decides here once. With
    ``to_0d`` the sum comes as a NumPy scalar."""
    body = info.regions[0]
    operand_type, monoid = info.operand_types[0], monoid_of(body)
    body_type = body.arg_types[1] if body.n_args == 2 else None
    if (len(info.result_types) != 1 or axes != (0,) or operand_type.rank != 1 or not operand_type.is_static
            or body_type is None or not (body_type.is_float or body_type.is_complex)
            or monoid not in ("stablehlo.add", "stablehlo.multiply")):
        return None
    ufunc = monoid_ufunc(monoid, body_type.kind)
    size = operand_type.shape[0]
    folds = {SPEC: size <= FOLD_BUFFER_ELEMENTS, XLA: size <= XLA_REDUCE_WINDOW}
    body_dtype, result_dtype = body_type.dtype, info.result_types[0].dtype
    narrow = result_dtype != body_dtype

    def run(execution, regions, values, init):
        if not folds[execution.semantics]:
            return general(execution, regions, values, init)
        terms = np.empty(size + 1, body_dtype)
        terms[0], terms[1:] = init, values
        total = ufunc.accumulate(terms)[-1]   # (a NumPy scalar)
        if to_0d:
            return [total.astype(result_dtype) if narrow else total]
        return [np.asarray(total, result_dtype)]

    info.regions_called = False   # the runner gets None for the body
    return run


# ------------------------------------------------------------------------ windows


@dataclass(frozen=True)
class Windows:
    """The window attributes of reduce_window and select_and_scatter (spec: reduce_window).

    ``padding`` is ``((low, high), ...)``; negative values crop, as in ``pad``.
    """

    dimensions: tuple
    strides: tuple
    padding: tuple
    base_dilations: tuple
    window_dilations: tuple

    @classmethod
    def of(cls, info, rank: int) -> "Windows":
        padding = info.attributes.get("padding")
        padding = ((0, 0),) * rank if padding is None else tuple(map(tuple, np.reshape(padding, (rank, 2))))
        ones = (1,) * rank
        return cls(tuple(info.attr("window_dimensions")), tuple(info.attributes.get("window_strides") or ones),
                   padding, tuple(info.attributes.get("base_dilations") or ones),
                   tuple(info.attributes.get("window_dilations") or ones))

    def padded(self, operand, pad_value):
        """``pad(operand, pad_value, low, high, interior = base_dilations - 1)``."""
        if all(p == (0, 0) for p in self.padding) and all(d == 1 for d in self.base_dilations):
            return np.asarray(operand)
        low, high = zip(*self.padding) if self.padding else ((), ())
        return pad_array(operand, pad_value, low, high, [d - 1 for d in self.base_dilations])

    def view(self, padded):
        """Windows as a strided view of shape ``result_shape + window_dimensions``."""
        dilated = tuple((w - 1) * d + 1 for w, d in zip(self.dimensions, self.window_dilations))
        counts = tuple(0 if size < span else (size - span) // stride + 1
                       for size, span, stride in zip(padded.shape, dilated, self.strides))
        if 0 in counts:
            return np.empty(counts + self.dimensions, padded.dtype)
        if padded.dtype.isbuiltin == 2:
            # a type another package registers (ml_dtypes' f8, int4 ...): NumPy's as_strided
            # reads its type string ('<f1') as no type; its bits make the same windows (found by fuzz)
            return self.view(padded.view(f"u{padded.dtype.itemsize}")).view(padded.dtype)
        windows = np.lib.stride_tricks.sliding_window_view(padded, dilated)
        step = tuple(slice(None, None, s) for s in self.strides + self.window_dilations)
        return windows[step]


@op("stablehlo.reduce_window", variadic=True)
def reduce_window(info):
    """``reduce`` over each window of the inputs padded with the init values and
    dilated by ``base_dilations`` (spec: reduce_window). Monoid bodies reduce a
    strided view of all windows at once; element-wise bodies are folded over each
    window's elements, one call per element across all windows.

    XLA's CPU backend differs from the spec when init_value is not the body's
    identity: it skips padding and the holes of base dilation instead of
    reducing init_value there."""
    n = len(info.result_types)
    rank = info.operand_types[0].rank
    windows = Windows.of(info, rank)
    axes = tuple(range(rank, 2 * rank))
    run_reduction, body_dtypes = reduction(info, n)

    def run(regions, *operands):
        inputs, inits = operands[:n], operands[n:]
        views = [windows.view(windows.padded(np.asarray(x).astype(d, copy=False), np.asarray(init).astype(d)))
                 for x, init, d in zip(inputs, inits, body_dtypes)]
        return run_reduction(regions[0], views, inits, axes, SPEC)  # XLA CPU folds each window too

    return run
