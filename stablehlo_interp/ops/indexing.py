"""Indexing (spec: gather, scatter, select_and_scatter; StableHLO dialect ops
outside the spec: dynamic_gather, torch_index_select).

Gather builds one NumPy index array per indexed operand dimension over the
result's (batch, offset) index space and reads everything with one fancy-index;
dimensions taken whole are sliced instead, so an embedding lookup is a plain
row take. Scatter computes, for every update element in the order the updates
apply, the flat index of the result element it updates, then applies the
updates with a strategy chosen at load time (see :func:`scatter_combiner`).
"""

from __future__ import annotations

import math
import numpy as np

from ..ir.decode import GatherDimensionNumbers
from ..engine.registry import op
from ..engine.regions import is_elementwise, monoid_of, monoid_ufunc
from ..engine.semantics import XLA
from .reduction import Windows
from ..engine.numerics import ExtremumOfZeros
from ..engine.dtypes import integer_compute_dtype, static_shape

_INT64_MAX = np.iinfo(np.int64).max


def _as_index(values) -> np.ndarray:
    """Integer index values as int64; uint64 values beyond int64's range saturate."""
    values = np.asarray(values)
    if values.dtype == np.uint64:
        values = np.minimum(values, np.uint64(_INT64_MAX))
    return values.astype(np.int64)


def _index_vectors(indices, index_vector_dim: int) -> np.ndarray:
    """``indices`` as int64 with the index vector last (a trailing 1 if implicit)."""
    indices = _as_index(indices)
    if index_vector_dim == indices.ndim:
        return indices[..., None]
    return np.moveaxis(indices, index_vector_dim, -1)


def _along(values, axis: int, ndim: int) -> np.ndarray:
    """A 1-d array reshaped to lie along ``axis`` of an ``ndim``-d broadcast."""
    shape = [1] * ndim
    shape[axis] = len(values)
    return np.reshape(values, shape)


# -------------------------------------------------------------------------- gather


def gather_function(operand_shape, dims: GatherDimensionNumbers, slice_sizes):
    """``(operand, start_indices) -> result`` for static gather attributes (spec: gather).

    Start indices are clamped to ``[0, dim(operand) - slice_sizes]``, so every
    read is in bounds. The result is first built in a canonical layout (batch
    dimensions, then the offset dimensions that need an index array, then the
    ones taken whole) and transposed into place.
    """
    rank = len(operand_shape)
    index_vector_dim = dims.index_vector_dim
    start_position = {d: k for k, d in enumerate(dims.start_index_map)}
    batching_axis = {d: s - (s > index_vector_dim)
                     for d, s in zip(dims.operand_batching_dims, dims.start_indices_batching_dims)}
    offset_operand_dims = [d for d in range(rank)
                           if d not in dims.collapsed_slice_dims and d not in dims.operand_batching_dims]
    whole = [d for d in offset_operand_dims
             if d not in start_position and slice_sizes[d] == operand_shape[d]]
    partial = [d for d in offset_operand_dims if d not in whole]
    indexed = [d for d in range(rank) if d not in whole]
    layout = indexed + whole
    upper = {d: operand_shape[d] - slice_sizes[d] for d in start_position}
    offset_ranges = {d: np.arange(slice_sizes[d]) for d in partial}

    def run(operand, start_indices):
        vectors = _index_vectors(start_indices, index_vector_dim)
        batch_shape = vectors.shape[:-1]
        nb = len(batch_shape)
        ndim = nb + len(partial)
        arrays = []
        for d in indexed:
            index = np.zeros((1,) * ndim, np.int64)
            if d in start_position:
                start = np.clip(vectors[..., start_position[d]], 0, upper[d])
                index = index + start.reshape(batch_shape + (1,) * len(partial))
            if d in batching_axis:
                axis = batching_axis[d]
                index = index + _along(np.arange(batch_shape[axis]), axis, ndim)
            if d in offset_ranges:
                index = index + _along(offset_ranges[d], nb + partial.index(d), ndim)
            arrays.append(index)
        moved = np.transpose(operand, layout)
        picked = moved[tuple(arrays)] if arrays else moved.reshape((1,) * ndim + moved.shape)
        canonical = batch_shape + tuple(slice_sizes[d] for d in partial) + tuple(operand_shape[d] for d in whole)
        picked = np.broadcast_to(picked, canonical)
        batch_axes = iter(range(nb))
        canonical_axis = {d: nb + i for i, d in enumerate(partial + whole)}
        offset_axes = {r: canonical_axis[d] for r, d in zip(dims.offset_dims, offset_operand_dims)}
        permutation = [offset_axes[r] if r in offset_axes else next(batch_axes) for r in range(picked.ndim)]
        return np.transpose(picked, permutation)

    return run


def clamped_starts(operand_shape, dims: GatherDimensionNumbers, slice_sizes):
    """``check(operand, start_indices, result)`` for ``OpInfo.watch``: how many start
    index vectors gather clamps (engine/semantics.py, gather-start-clamped)."""
    limits = [(k, operand_shape[d] - slice_sizes[d]) for k, d in enumerate(dims.start_index_map)]

    def check(operand, start_indices, result):
        vectors = _index_vectors(start_indices, dims.index_vector_dim)
        outside = np.zeros(vectors.shape[:-1], bool)
        for k, upper in limits:
            outside |= (vectors[..., k] < 0) | (vectors[..., k] > upper)
        count = np.count_nonzero(outside)
        return (f"{count} of {outside.size} start indices are clamped to keep the slice inside the operand"
                if count else None)

    return check


@op("stablehlo.gather")
def gather(info):
    operand_shape, dims = static_shape(info.operand_types[0], info), info.attr("dimension_numbers")
    slice_sizes = tuple(info.attr("slice_sizes"))
    info.watch("gather-start-clamped", clamped_starts(operand_shape, dims, slice_sizes))
    return gather_function(operand_shape, dims, slice_sizes)


@op("stablehlo.dynamic_gather")
def dynamic_gather(info):
    """gather with ``slice_sizes`` as a third operand (StableHLO dialect, outside the spec).

    The sizes are known only at run time, so gather's constraints on them are
    checked there (spec: gather, ``size(slice_sizes) = rank(operand)``,
    ``0 <= slice_sizes <= shape(operand)``, ``slice_sizes[collapsed_slice_dims...] <= 1``,
    ``slice_sizes[operand_batching_dims...] <= 1``), and so is the result shape they give."""
    operand_shape = static_shape(info.operand_types[0], info)
    dims = info.attr("dimension_numbers")
    declared = info.result_type
    dropped = sorted(set(dims.collapsed_slice_dims) | set(dims.operand_batching_dims))

    def run(operand, start_indices, slice_sizes):
        sizes = tuple(int(s) for s in _as_index(slice_sizes))
        if len(sizes) != len(operand_shape) or any(not 0 <= s <= n for s, n in zip(sizes, operand_shape)):
            raise ValueError(f"slice_sizes {list(sizes)} do not fit operand shape {list(operand_shape)}: "
                             "one size per operand dimension, 0 <= slice_sizes <= shape(operand)")
        if any(sizes[d] > 1 for d in dropped):
            raise ValueError(f"slice_sizes {list(sizes)} exceed 1 in collapsed or operand batching "
                             f"dimensions {dropped}")
        result = gather_function(operand_shape, dims, sizes)(operand, start_indices)
        if any(d is not None and d != n for d, n in zip(declared.shape, result.shape)):
            raise ValueError(f"slice_sizes {list(sizes)} give a result of shape {list(result.shape)}, "
                             f"not the result type {declared}")
        return result

    return run


@op("stablehlo.torch_index_select")
def torch_index_select(info):
    """``torch.index_select`` with leading batch dimensions (StableHLO dialect,
    outside the spec): ``result[b..., i..., r...] = operand[b..., index[b..., i...], r...]``
    of shape ``operand[:dim] + index[batch_dims:] + operand[dim + 1:]``. Negative
    ``dim`` / ``batch_dims`` count from the end. Runs as the equivalent gather, so
    out-of-bounds indices clamp as gather's do."""
    operand_shape = static_shape(info.operand_types[0], info)
    rank, index_rank = len(operand_shape), info.operand_types[1].rank
    dim, batch_dims = info.attr("dim"), info.attr("batch_dims")
    dim, batch_dims = dim + rank * (dim < 0), batch_dims + index_rank * (batch_dims < 0)
    if not (0 <= batch_dims <= dim < rank and batch_dims <= index_rank):
        raise info.error(f"dim {dim} and batch_dims {batch_dims} do not fit ranks {rank} and {index_rank}")
    batching = tuple(range(batch_dims))
    kept = [d for d in range(rank) if d != dim and d >= batch_dims]
    selected = index_rank - batch_dims  # result dims from the index after the batch ones
    dims = GatherDimensionNumbers(
        offset_dims=tuple(d if d < dim else d - 1 + selected for d in kept),
        collapsed_slice_dims=(dim,), operand_batching_dims=batching,
        start_indices_batching_dims=batching, start_index_map=(dim,), index_vector_dim=index_rank)
    slice_sizes = tuple(1 if d == dim or d < batch_dims else n for d, n in enumerate(operand_shape))
    return gather_function(operand_shape, dims, slice_sizes)


# ------------------------------------------------------------------------- scatter


def scatter_combiner(info, n: int):
    """Load time: ``combine(body, results, targets, updates)`` for the op's update region.

    ``results`` are flat writable arrays updated in place; ``targets`` the flat
    result index of each update, in the order the updates apply.

    * a body that returns its update arguments (``replace``): the last update of
      each target wins;
    * one built-in monoid op on one operand: ``ufunc.at``, which applies duplicates one
      after another in order (so float sums round as a sequential loop);
    * built-in element-wise bodies: rounds of one vectorized ``body`` call, round ``r``
      applying the ``r``-th update of every target;
    * any other body (an op a user registered among them: engine/regions.py):
      one 0-d call per update.
    """
    region = info.regions[-1]
    ttype = region.arg_types[0]
    if not region.n_captures and region.outputs == tuple(range(n, 2 * n)):
        return _replace
    monoid = monoid_of(region) if n == 1 else None
    if monoid and (ttype.kind != "complex" or monoid in ("stablehlo.add", "stablehlo.multiply")):
        return _monoid_at(monoid, ttype)
    return _in_rounds if is_elementwise(region) else _one_by_one


def _replace(body, results, targets, updates):
    last = len(targets) - 1 - np.unique(targets[::-1], return_index=True)[1]
    for result, update in zip(results, updates):
        result[targets[last]] = update[last]


def _monoid_at(name: str, ttype):
    dtype, kind = ttype.dtype, ttype.kind
    compute = integer_compute_dtype(dtype) if kind in ("signed", "unsigned") else dtype
    if kind == "float" and name in ("stablehlo.maximum", "stablehlo.minimum"):
        return _float_extremum_at(name == "stablehlo.maximum")
    ufunc = monoid_ufunc(name, kind)

    def combine(body, results, targets, updates):
        (result,), (update,) = results, updates
        if compute == dtype:
            ufunc.at(result, targets, update)
        else:
            wide = result.astype(compute)
            ufunc.at(wide, targets, update.astype(compute))
            result[...] = wide.astype(dtype)

    return combine


def _float_extremum_at(is_max: bool):
    """``maximum.at`` / ``minimum.at`` with stablehlo's -0.0 < +0.0: where the result
    is zero, the zero comes from a sum over each target's value and updates (ExtremumOfZeros)."""
    ufunc = np.maximum if is_max else np.minimum
    zeros = ExtremumOfZeros(is_max)

    def combine(body, results, targets, updates):
        (result,), (update,) = results, updates
        total = zeros.terms(result)
        ufunc.at(result, targets, update)
        np.add.at(total, targets, zeros.terms(update))
        zero = result == 0
        result[zero] = zeros.from_sum(total[zero])

    return combine


def _in_rounds(body, results, targets, updates):
    body = body.as_vectorized()
    order = np.argsort(targets, kind="stable")
    ordered = targets[order]
    first = np.ones(len(order), bool)
    first[1:] = ordered[1:] != ordered[:-1]
    positions = np.arange(len(order))
    rank = positions - np.maximum.accumulate(np.where(first, positions, 0))
    for r in range(int(rank.max(initial=-1)) + 1):
        chosen = order[rank == r]
        where = targets[chosen]
        combined = body(*[result[where] for result in results], *[update[chosen] for update in updates])
        for result, value in zip(results, combined):
            result[where] = value


def _one_by_one(body, results, targets, updates):
    for k, target in enumerate(targets):
        combined = body(*[np.asarray(result[target]) for result in results],
                        *[np.asarray(update[k]) for update in updates])
        for result, value in zip(results, combined):
            result[target] = value


def _order_free(info, n: int) -> bool:
    """Whether the update region gives the same result in any order of the updates
    of one element: one integer or boolean monoid op, or a maximum/minimum."""
    region = info.regions[-1]
    monoid = monoid_of(region) if n == 1 else None
    return monoid is not None and (region.arg_types[0].kind in ("bool", "signed", "unsigned")
                                   or monoid in ("stablehlo.maximum", "stablehlo.minimum"))


@op("stablehlo.scatter", variadic=True, execution=True)
def scatter(info):
    """Spec: scatter. Each update element's result index is its start index (not
    clamped), plus its batching index, plus its window index; updates whose
    result index is out of bounds are skipped element by element, as the spec
    says. XLA skips an update's whole window when any part of it is out of
    bounds, and JAX's ``mode="drop"``/``"fill"`` rely on it: with the run's
    semantics ``"xla"`` we do that (engine/semantics.py; both cases are reported
    as scatter-window-out-of-bounds, and duplicate result indices with an
    order-dependent body as scatter-duplicate-indices). The spec leaves the order of the updates (the
    ``schedule``) implementation-defined; it shows with duplicate result indices
    and a body that is not commutative (or ``replace``). Here it is XLA's CPU
    order: update scatter index outermost, window index innermost, each
    row-major (the C++ reference interpreter goes row-major over the whole
    update index, which differs when a window dimension precedes a scatter
    dimension). ``indices_are_sorted`` and ``unique_indices`` are promises that
    change nothing here."""
    n = len(info.result_types)
    input_shape = static_shape(info.operand_types[0], info)
    update_rank = info.operand_types[n + 1].rank
    dims = info.attr("scatter_dimension_numbers")
    index_vector_dim = dims.index_vector_dim
    start_position = {d: k for k, d in enumerate(dims.scattered_dims_to_operand_dims)}
    batching_axis = {d: s - (s > index_vector_dim)  # an axis of the batch (scatter) index
                     for d, s in zip(dims.input_batching_dims, dims.scatter_indices_batching_dims)}
    window_input_dims = [d for d in range(len(input_shape))
                         if d not in dims.inserted_window_dims and d not in dims.input_batching_dims]
    strides = np.cumprod((1,) + input_shape[:0:-1])[::-1]  # row-major strides of the inputs
    # The updates transposed to the order they apply in: scatter axes, then window axes.
    schedule = [a for a in range(update_rank) if a not in dims.update_window_dims] + list(dims.update_window_dims)
    body_dtypes = [t.dtype for t in info.regions[-1].arg_types[:n]]
    combine = scatter_combiner(info, n)
    if combine is not _in_rounds and combine is not _one_by_one:
        info.regions_called = False   # a replace or a monoid: the runner gets None for the body
    order_free = _order_free(info, n)
    n_window = len(dims.update_window_dims)

    def targets_of(indices, window_shape):
        """Flat result index of every update (schedule order: ``batch + window`` shape)
        and, unless all are in bounds, the mask of those that are."""
        vectors = _index_vectors(indices, index_vector_dim)
        batch_shape = vectors.shape[:-1]
        nb, nw = len(batch_shape), len(window_shape)
        starts, offsets = [], []  # per input dim: over the batch index, over the window index
        for d in range(len(input_shape)):
            start = np.zeros(batch_shape, np.int64)
            if d in start_position:
                start = start + vectors[..., start_position[d]]
            if d in batching_axis:
                start = start + _along(np.arange(batch_shape[batching_axis[d]]), batching_axis[d], nb)
            offset = np.zeros((1,) * nw, np.int64)
            if d in window_input_dims:
                j = window_input_dims.index(d)
                offset = _along(np.arange(window_shape[j]), j, nw)
            starts.append(start.reshape(batch_shape + (1,) * nw))
            offsets.append(offset.reshape((1,) * nb + offset.shape))
        flat = sum(s * int(k) for s, k in zip(starts, strides)) + sum(o * int(k) for o, k in zip(offsets, strides))
        flat = np.broadcast_to(flat, batch_shape + window_shape)
        inside = [(s >= 0) & (s + o.max(initial=0) < size) for s, o, size in zip(starts, offsets, input_shape)]
        if all(np.all(i) for i in inside):
            return flat, None
        valid = np.ones(flat.shape, bool)
        for s, o, size in zip(starts, offsets, input_shape):
            valid &= (s + o >= 0) & (s + o < size)
        return flat, valid

    def in_whole_windows(execution, valid):
        """``valid`` as the run's semantics reads it: element by element ("spec"), or
        only the windows entirely inside the operand ("xla"); reports partial windows."""
        window_axes = tuple(range(valid.ndim - n_window, valid.ndim))
        whole = valid.all(axis=window_axes, keepdims=True)
        partial = np.count_nonzero(valid.any(axis=window_axes, keepdims=True) & ~whole)
        if not partial:
            return valid
        xla = execution.semantics == XLA
        if execution.reporting:
            effect = "dropped whole (semantics 'xla')" if xla else "their in-bounds elements updated (semantics 'spec')"
            execution.report(info, "scatter-window-out-of-bounds",
                             f"{partial} of {whole.size} update windows lie partly outside the operand: {effect}")
        return valid & whole if xla else valid

    def run(execution, regions, *operands):
        inputs, indices, updates = operands[:n], operands[n], operands[n + 1:]
        results = [np.array(x, dtype=d).reshape(-1) for x, d in zip(inputs, body_dtypes)]
        updates = [np.transpose(u, schedule) for u in updates]
        flat, valid = targets_of(indices, updates[0].shape[update_rank - n_window:])
        if valid is not None:
            valid = in_whole_windows(execution, valid)
        targets = flat.reshape(-1) if valid is None else flat[valid]
        if execution.reporting and not order_free and targets.size:
            repeated = targets.size - np.unique(targets).size
            if repeated:
                execution.report(info, "scatter-duplicate-indices",
                                 f"{repeated} of {targets.size} updates go to an element updated before; "
                                 "the update body is not associative and commutative, so their order shows")
        if targets.size:
            combine(regions[0], results, targets,
                    [(u.reshape(-1) if valid is None else u[valid]).astype(d, copy=False)
                     for u, d in zip(updates, body_dtypes)])
        return [r.reshape(input_shape) for r in results]

    return _one_window(info, n, combine, body_dtypes, window_input_dims, start_position, run) or run


def _one_window(info, n: int, combine, body_dtypes: list, window_input_dims: list, start_position: dict, general):
    """The runner of a scatter of one update window (``x.at[i].set(v)``, ``.add``: one
    index vector, no batching dimensions, static shapes), or None for any other:
    where the window lies inside the operand its elements are distinct targets, so
    the update is ``combine`` on those targets, known at load but for the start (a
    replace: the window's elements assigned, which is what ``_replace`` makes of
    distinct targets); a window partly outside goes to ``general``, which decides
    and reports it. Spares the general way's index arithmetic on arrays at every
    run (a row of a 4x5 matrix: 61 us -> 5)."""
    dims = info.attr("scatter_dimension_numbers")
    indices_type, update_type = info.operand_types[n], info.operand_types[n + 1]
    if dims.input_batching_dims or not (indices_type.is_static and update_type.is_static):
        return None
    batch_shape = [size for d, size in enumerate(indices_type.shape) if d != dims.index_vector_dim]
    if math.prod(batch_shape) != 1:
        return None
    input_shape = info.operand_types[0].shape
    window_shape = [update_type.shape[d] for d in dims.update_window_dims]
    extents = [1] * len(input_shape)
    for d, size in zip(window_input_dims, window_shape):
        extents[d] = size
    strides = [int(k) for k in np.cumprod((1,) + input_shape[:0:-1])[::-1]]
    offsets = np.zeros(window_shape, np.int64)   # each window element's flat offset, row-major
    for j, d in enumerate(window_input_dims):
        offsets = offsets + _along(np.arange(window_shape[j]) * strides[d], j, len(window_shape))
    offsets = offsets.reshape(-1)
    scattered = [start_position.get(d) for d in range(len(input_shape))]
    bounds = list(zip(scattered, extents, input_shape, strides))
    replace = combine is _replace

    def run(execution, regions, *operands):
        vector = operands[n].reshape(-1).tolist()   # (Python ints: a uint64 beyond int64 is outside)
        flat = 0
        for position, extent, size, stride in bounds:
            start = 0 if position is None else vector[position]
            if start < 0 or start + extent > size:
                return general(execution, regions, *operands)
            flat += start * stride
        targets = offsets + flat
        results = [np.array(x, dtype=d).reshape(-1) for x, d in zip(operands[:n], body_dtypes)]
        updates = [np.asarray(u).reshape(-1).astype(d, copy=False) for u, d in zip(operands[n + 1:], body_dtypes)]
        if replace:
            for result, update in zip(results, updates):
                result[targets] = update
        else:
            combine(regions[0], results, targets, updates)
        return [r.reshape(input_shape) for r in results]

    return run


# -------------------------------------------------------------- select_and_scatter


@op("stablehlo.select_and_scatter")
def select_and_scatter(info):
    """Spec: select_and_scatter. In each window of the padded operand, ``select``
    picks an element: the first one, then each next one replaces it unless
    ``select(current, next)`` holds (row-major over the window; padding is never
    picked, and a window of padding only scatters nothing). Every source value
    then goes to the element its window picked, combined there by ``scatter``
    starting from ``init_value``, in row-major order of the source (as XLA does).

    With the ``GE`` select JAX emits this picks what XLA's CPU backend picks; with
    other selects XLA was seen to pick another element among equal ones (it
    visits a window in another order)."""
    operand_type = info.operand_types[0]
    shape = static_shape(operand_type, info)
    windows = Windows.of(info, operand_type.rank)
    select_vectorized = is_elementwise(info.regions[0])
    combine = scatter_combiner(info, 1)
    positions = np.arange(math.prod(shape)).reshape(shape)
    rank = operand_type.rank
    # Without padding or base dilation every window element is an operand element.
    all_inside = all(p == (0, 0) for p in windows.padding) and all(d == 1 for d in windows.base_dilations)

    def columns(view, count):
        """The windows of ``view`` (``result shape + window shape``) as columns: row ``k``
        holds element ``k`` of every window, contiguous (one copy)."""
        return np.transpose(view, tuple(range(rank, 2 * rank)) + tuple(range(rank))).reshape(-1, count)

    def pick(select, values, where):
        """Per window (columns of ``values``), the position of the selected element or -1."""
        picked_value, picked = values[0], where[0]
        for k in range(1, len(values)):
            value, position = values[k], where[k]
            if select_vectorized:
                keep = np.broadcast_to(select(picked_value, value)[0], picked.shape)
            else:
                keep = np.array([bool(select(np.asarray(a), np.asarray(b))[0])
                                 for a, b in zip(picked_value, value)], bool)
            take = ~keep if all_inside else (position >= 0) & ((picked < 0) | ~keep)
            picked_value = np.where(take, value, picked_value)
            picked = np.where(take, position, picked)
        return picked

    def run(regions, operand, source, init_value):
        select, scatter_body = regions
        if select_vectorized:
            select = select.as_vectorized()
        operand = np.asarray(operand)
        where = windows.view(windows.padded(positions, -1))
        values = windows.view(windows.padded(operand, np.zeros((), operand.dtype)))
        count = math.prod(where.shape[:operand.ndim])
        picked = pick(select, columns(values, count), columns(where, count)) if count else np.zeros(0, np.int64)
        result = np.full(operand.size, init_value, operand.dtype)
        chosen = picked >= 0
        if chosen.any():
            combine(scatter_body, [result], picked[chosen], [np.reshape(source, -1)[chosen]])
        return result.reshape(shape)

    return run
