"""The orders in which sums and products of floats are folded.

The spec leaves the order of a reduction's combinations to the implementation
(spec: reduce, "the order of evaluation is implementation-defined"); the
interpreter folds in fixed orders that a reader can follow, and in XLA's CPU
backend's where ``--semantics xla`` asks for it (docs/semantics.md,
"Accumulation"): :func:`fold_reduce` and :func:`fold_rows` fold left to right;
:func:`xla_cpu_fold` and :func:`fold_in_lanes` fold as XLA's CPU code does, in
vector lanes whose count :mod:`.xla_cpu` measures on this host.
"""

from __future__ import annotations

import math

import numpy as np


# Sums and products of floats are folded in a fixed order (docs/semantics.md,
# "Accumulation"); the terms of a fold are staged in buffers of about this many
# elements, so memory stays bounded and each NumPy call has work enough.
FOLD_BUFFER_ELEMENTS = 1 << 18


def fold_rows(ufunc, rows):
    """``((rows[0] ∘ rows[1]) ∘ rows[2]) ∘ ...``: the left fold of ``ufunc`` over
    axis 0 of ``rows``, each step rounded in its dtype.

    NumPy reduces an outer axis of a C-contiguous array row after row, vectorized
    across the row, starting from the ufunc's identity: for add that is given as
    -0.0, the exact identity (+0.0 + -0.0 is +0.0). A row of one element would be
    summed pairwise instead, so that case is a running ``accumulate``, which is
    sequential by definition.
    """
    flat = np.ascontiguousarray(rows).reshape(rows.shape[0], -1)  # (row-major order is what is folded)
    if flat.shape[1] >= 2:
        return _fold_contiguous_rows(ufunc, flat).reshape(rows.shape[1:])
    return ufunc.accumulate(flat, axis=0)[-1].reshape(rows.shape[1:])


def _fold_contiguous_rows(ufunc, flat):
    """:func:`fold_rows` of a C-contiguous 2-d array of rows of two elements or more."""
    if ufunc is np.add:
        return ufunc.reduce(flat, axis=0, initial=complex(-0.0, -0.0) if flat.dtype.kind == "c" else -0.0)
    return ufunc.reduce(flat, axis=0)


def fold_reduce(ufunc, values, axes, init, dtype):
    """``init ∘ v0 ∘ v1 ∘ ...`` for each result element, folded left to right over
    the elements of ``values`` on ``axes`` in row-major index order, each step
    rounded to ``dtype`` (the schedule of the C++ reference interpreter; the
    spec's reduce allows any tree). ``values`` may be a strided view (the windows
    of reduce_window): it is copied a slice of its first reduced axis at a time."""
    values = np.asarray(values, dtype)
    reduced = len(axes)
    if reduced and max(axes) == reduced - 1:  # the reduced axes lead (they are distinct)
        moved = values
    else:  # the reduced axes first: a view
        moved = values.transpose(sorted(axes) + [d for d in range(values.ndim) if d not in axes])
    outer = moved.shape[reduced:]
    if reduced and values.size and moved.flags.c_contiguous:
        width = math.prod(outer)
        if width >= 2:
            # NumPy reduces rows of two elements or more one after another (fold_rows),
            # here from init: init ∘ v0 ∘ v1 ∘ ..., with no copy.
            folded = ufunc.reduce(moved if moved.ndim == 2 else moved.reshape(-1, width), axis=0, initial=init)
            return folded if len(outer) == 1 else folded.reshape(outer)
        if _is_identity(ufunc, init):
            # init ∘ (v0 ∘ v1 ∘ ...) equals the fold from an identity init.
            folded = fold_rows(ufunc, moved.reshape(-1, 1)).reshape(outer)
            return ufunc(init, folded, out=folded)
    if reduced and values.size and sorted(axes) == list(range(values.ndim - reduced, values.ndim)) \
            and math.prod(outer) >= 2:
        return _fold_trailing_axes(ufunc, values, math.prod(moved.shape[:reduced]), init).reshape(outer)
    accumulator = np.broadcast_to(np.asarray(init, dtype), outer)  # (np.broadcast_to costs microseconds)
    if not reduced or values.size == 0:
        return np.array(ufunc(accumulator, values) if not reduced else accumulator, dtype)
    per_first = moved[0].size  # terms per index of the first reduced axis, times the outer size
    step = max(1, FOLD_BUFFER_ELEMENTS // per_first)
    for first in range(0, moved.shape[0], step):
        piece = moved[first:first + step].reshape((-1,) + outer)
        rows = np.empty((len(piece) + 1,) + outer, dtype)
        rows[0], rows[1:] = accumulator, piece
        accumulator = fold_rows(ufunc, rows)
    return np.asarray(accumulator, dtype)


# Rows turned into columns this many elements at a time (a block that stays in the cache).
_TRANSPOSE_BLOCK_ELEMENTS = 1 << 16


def _fold_trailing_axes(ufunc, values, count: int, init):
    """:func:`fold_reduce` of the rows of ``count`` trailing elements of ``values`` (at least
    two rows): a block of rows at a time is copied into columns, and NumPy's reduce over
    the block's outer axis folds it row after row from ``init`` (as in :func:`fold_rows`),
    vectorized across the block. Reading the rows in place instead, one strided pass per
    reduced index, costs 10x as much: each pass reads every cache line of the input again."""
    rows = values.reshape(-1, count)
    width = rows.shape[0]
    block = max(2, _TRANSPOSE_BLOCK_ELEMENTS // max(count, 1))
    folded = np.empty(width, values.dtype)
    start = 0
    while start < width:
        stop = start + block if width - start - block >= 2 else width   # never a block of one row
        folded[start:stop] = ufunc.reduce(np.ascontiguousarray(rows[start:stop].T), axis=0, initial=init)
        start = stop
    return folded


# XLA's TreeReductionRewriter (xla/hlo/transforms/simplifiers/tree_reduction_rewriter.cc,
# window size 32 on CPU): a reduction with a reduced dimension longer than this first
# reduces windows of this many elements.
XLA_REDUCE_WINDOW = 32


def xla_cpu_fold(ufunc, values, axes, init, dtype, lanes_of):
    """``reduce`` of ``ufunc`` (add or multiply) on floats as XLA's CPU backend schedules it
    on this host (docs/semantics.md, "Accumulation"):

    * XLA's TreeReductionRewriter: where a reduced dimension is longer than 32, the
      operand is first reduced in windows of ``min(size, 32)`` along every reduced
      dimension (padding split evenly before and after, as its ``Padding::kSame``;
      padding adds nothing), each window a left fold from ``init``; the windows'
      results are then reduced the same way, until no reduced dimension exceeds 32.
    * Within that, a reduction over the minor dimension and others before it: XLA
      emits a loop over the *rows* (each index of the other reduced dimensions), each
      row's elements added in order with ``fadd reassoc``, and LLVM may vectorize that
      loop: :func:`fold_in_lanes`, with as many lanes as ``lanes_of(ufunc, shape,
      axes, dtype)`` answers (1 is a left fold in row-major order, as ``fold_reduce``).
      How many lanes LLVM uses is its cost model's choice for the host's vector unit
      (4 f32 lanes with SSE, 8 with AVX2, and with AVX-512 a choice that depends on the
      row length), so the semantics "xla" asks XLA CPU itself (engine/accumulation/xla_cpu.py).

    Not reproduced: row counts that are not a multiple of the lane count (LLVM's
    scalar remainder loop), reductions whose minor dimension is kept while several
    others are reduced, and the large f32/f64 reductions XLA hands to YNNPACK; there
    the result lands within a few ULP.
    """
    axes = sorted(axes)
    values = np.asarray(values, dtype)
    if any(values.shape[d] > XLA_REDUCE_WINDOW for d in axes):
        windows, window_axes = _fold_windows(ufunc, values, axes, init, dtype)
        return xla_cpu_fold(ufunc, windows, window_axes, init, dtype, lanes_of)
    if not values.size or len(axes) < 2 or axes[-1] != values.ndim - 1:
        return fold_reduce(ufunc, values, axes, init, dtype)
    lanes = lanes_of(ufunc, values.shape, tuple(axes), dtype)
    if lanes <= 1:
        return fold_reduce(ufunc, values, axes, init, dtype)
    return fold_in_lanes(ufunc, values, axes, init, dtype, lanes)


def fold_in_lanes(ufunc, values, axes, init, dtype, lanes: int):
    """The rows of a reduction (each index of the reduced dimensions but the minor one,
    the minor one reduced) summed in ``lanes`` accumulators, as LLVM's loop vectorizer
    schedules a ``fadd reassoc`` loop over the rows: lane ``l`` folds rows ``l``,
    ``l + lanes``, ``l + 2·lanes`` ... left, each row's elements in order, lane 0 from
    ``init`` and the others from the exact identity; then the lanes are combined by
    halves (``lane[i] ∘ lane[i + half]``), as LLVM's vector reduction does. The row
    count must be a multiple of ``lanes``."""
    kept = [d for d in range(values.ndim) if d not in axes]
    rows = math.prod(values.shape[d] for d in axes[:-1])
    by_row = np.transpose(values, kept + list(axes)).reshape(tuple(values.shape[d] for d in kept) + (rows, -1))
    # (..., lane, row of that lane, element): each lane's terms in the order it adds them
    terms = np.swapaxes(by_row.reshape(by_row.shape[:-2] + (rows // lanes, lanes, -1)), -3, -2)
    terms = terms.reshape(terms.shape[:-2] + (-1,))
    last = terms.ndim - 1
    lane_sums = np.array(fold_reduce(ufunc, terms, (last,), _exact_identity(ufunc, dtype), dtype))
    lane_sums[..., 0] = fold_reduce(ufunc, terms[..., 0, :], (last - 1,), init, dtype)
    while lane_sums.shape[-1] > 1:
        half = lane_sums.shape[-1] // 2
        lane_sums = ufunc(lane_sums[..., :half], lane_sums[..., half:])
    return np.asarray(lane_sums[..., 0], dtype)


def _fold_windows(ufunc, values, axes, init, dtype):
    """One step of XLA's TreeReductionRewriter: each window of ``min(size, 32)`` elements
    along the reduced ``axes`` folded left from ``init``; returns the windows' results
    and the axes that index the windows."""
    identity = _exact_identity(ufunc, dtype)
    padding, shape, inner, outer = [], [], [], []
    for d, size in enumerate(values.shape):
        if d not in axes:
            padding.append((0, 0))
            shape.append(size)
            continue
        window = min(size, XLA_REDUCE_WINDOW)
        count = -(-size // window)
        total = count * window - size
        padding.append((total // 2, total - total // 2))
        outer.append(len(shape))
        inner.append(len(shape) + 1)
        shape += [count, window]
    padded = np.pad(values, padding, constant_values=identity) if any(map(any, padding)) else values
    windows = fold_reduce(ufunc, padded.reshape(shape), inner, init, dtype)
    remaining = [d for d in range(len(shape)) if d not in inner]
    return windows, [remaining.index(d) for d in outer]


def _exact_identity(ufunc, dtype):
    """The value that ``ufunc`` combines with any x to give x exactly (-0.0 for add)."""
    if ufunc is np.add:
        return np.array(complex(-0.0, -0.0) if np.dtype(dtype).kind == "c" else -0.0, dtype)
    return np.array(1, dtype)


def _is_identity(ufunc, init) -> bool:
    """Whether starting a fold of ``ufunc`` from ``init`` changes nothing but the sign
    of a zero result, which ``init ∘ result`` then restores: any zero for add
    (-0.0 + x = x; +0.0 + x = x unless x is -0.0), 1 for real multiply."""
    if ufunc is np.add:
        return init.item() == 0
    return ufunc is np.multiply and init.dtype.kind == "f" and init.item() == 1
