"""Small helpers shared by op implementations."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

try:
    # np.count_nonzero of a whole array without the wrapper that dispatches it to other
    # array types (__array_function__), which costs three times the count itself on small
    # arrays; runners count NumPy arrays only. (NumPy's private module: the public
    # function where a NumPy keeps it elsewhere.)
    from numpy._core.multiarray import count_nonzero
except ImportError:
    count_nonzero = np.count_nonzero

_SUB_BYTE_COMPUTE = {
    np.dtype(ml_dtypes.int2): np.dtype(np.int8),
    np.dtype(ml_dtypes.int4): np.dtype(np.int8),
    np.dtype(ml_dtypes.uint2): np.dtype(np.uint8),
    np.dtype(ml_dtypes.uint4): np.dtype(np.uint8),
}

# Float types NumPy has its own kernels for; bf16 and the f8/f6/f4 types of
# ml_dtypes are computed in f32, which holds each of their values exactly.
NATIVE_FLOATS = frozenset(map(np.dtype, (np.float16, np.float32, np.float64)))
_F32 = np.dtype(np.float32)

# Transcendental functions are evaluated in a wider type and rounded once, so
# results are (almost always) the correctly rounded values: every float type
# narrower than f64 goes through f64; f64 and complex<f64> go through the x87
# extended type when the platform has it (64-bit significand), else stay as is.
_EXTENDED = np.finfo(np.longdouble).nmant >= 63
_WIDER = {
    np.dtype(np.float64): np.dtype(np.longdouble if _EXTENDED else np.float64),
    np.dtype(np.complex64): np.dtype(np.complex128),
    np.dtype(np.complex128): np.dtype(np.clongdouble if _EXTENDED else np.complex128),
}


def integer_compute_dtype(dtype) -> np.dtype:
    """The dtype to compute integer ops in: int8/uint8 for the sub-byte types.

    ml_dtypes' int2/int4 ufuncs do not all wrap at their own width, so callers
    compute in this type and convert back with ``.astype(dtype)``, which wraps.
    """
    dtype = np.dtype(dtype)
    return _SUB_BYTE_COMPUTE.get(dtype, dtype)


def wider_float(dtype) -> np.dtype:
    """The dtype in which to evaluate a transcendental function of ``dtype``."""
    dtype = np.dtype(dtype)
    return _WIDER.get(dtype, np.dtype(np.float64))


def _cast_operands(fn, compute, dtype):
    """``fn`` on its operands converted to ``compute``, its result converted to ``dtype``.
    A unary ufunc (sine, exp, log ...: most of these) gets a runner without the list
    of operands and its unpacking, a third of its cost on small arrays. A ufunc converts
    its operands itself (``dtype=compute``), a buffer at a time: on large arrays 4x faster
    than a converted copy of each, the same values."""
    if isinstance(fn, np.ufunc) and fn.nin == 1:
        def run_ufunc(operand):
            return fn(operand, dtype=compute).astype(dtype)

        return run_ufunc
    if getattr(fn, "nin", None) == 1:
        def run_unary(operand):
            return fn(np.asarray(operand, dtype=compute)).astype(dtype)

        return run_unary

    def run(*operands):
        return fn(*[np.asarray(x, dtype=compute) for x in operands]).astype(dtype)

    return run


def in_wider_precision(fn, dtype):
    """``fn`` evaluated in :func:`wider_float` of ``dtype`` and rounded back to ``dtype``."""
    dtype = np.dtype(dtype)
    wide = wider_float(dtype)
    return fn if wide == dtype else _cast_operands(fn, wide, dtype)


def in_float32_if_needed(fn, dtype):
    """``fn`` itself for f16/f32/f64 (and complex), else computed in f32 and rounded back.

    For ops whose exact result is representable (floor, maximum, fmod ...) or
    correctly rounded after one rounding from f32 (+, -, *, / and sqrt of
    types with at most 11 significand bits), this gives the exact answer.
    """
    dtype = np.dtype(dtype)
    if dtype in NATIVE_FLOATS or dtype.kind == "c":
        return fn
    return _cast_operands(fn, _F32, dtype)


def same_ufunc(ufunc):
    """Builder of an op that is one NumPy ufunc on every element type it allows
    (integers wrap at their own width, sub-byte ones too).

    For i1, NumPy's add/multiply and bitwise ufuncs are the logical OR/AND/XOR/NOT
    the spec asks for. For bf16 and the f8/f6/f4 types, ml_dtypes computes in f32
    and rounds once, which is correctly rounded for them."""

    def build(info):
        return in_integer_precision(ufunc, info.operand_types[0].dtype)

    return build


def in_integer_precision(fn, dtype):
    """``fn`` applied in the compute dtype of ``dtype`` and wrapped back to it."""
    dtype = np.dtype(dtype)
    compute = integer_compute_dtype(dtype)
    if compute == dtype:
        return fn  # NumPy integer ufuncs keep the operands' dtype and wrap
    return _cast_operands(fn, compute, dtype)


def contiguous(x) -> np.ndarray:
    """x as a C-contiguous array of the same shape (np.ascontiguousarray makes 0-d arrays 1-d)."""
    return np.array(x, order="C", copy=None)


def unsigned_view_dtype(dtype) -> np.dtype:
    """The unsigned integer dtype of the same storage width (for bit tricks)."""
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def static_shape(ttype, op_info) -> tuple:
    if not ttype.is_static:
        raise op_info.unsupported(f"dynamic shape {ttype} needs shape refinement")
    return ttype.shape


class ExtremumOfZeros:
    """Which zero ``stablehlo.maximum`` / ``minimum`` of floats return among zeros.

    Spec (maximum, minimum): IEEE-754 maximum and minimum, which order -0.0 below
    +0.0; reduce, reduce_window and scatter with such a body combine by the same
    op. NumPy's maximum and minimum return either zero, so where their result is
    zero the sign has to be decided again: the maximum of zeros is +0.0 unless
    all are -0.0, which is exactly their IEEE-754 sum (-0.0 + -0.0 = -0.0,
    -0.0 + +0.0 = +0.0); the minimum of zeros is -0.0 unless all are +0.0, the
    negated sum of the negated zeros. With ``sign`` 1 for maximum and -1 for
    minimum the zero is ``sign * sum(sign * zeros)``; a value that is not zero
    adds the term -0.0, which changes no sum of zeros. (The scalars are Python
    numbers, so values keep their float type.)
    """

    def __init__(self, is_max: bool):
        self.is_max = is_max
        self.sign = 1 if is_max else -1

    def of_two(self, lhs, rhs):
        """The extremum of two zeros: the sum of their two terms, without the multiplications."""
        return lhs + rhs if self.is_max else -(-lhs - rhs)

    def of_reduction(self, values, axes, init, dtype):
        """The extremum's zero of ``values`` reduced over ``axes`` from ``init``.

        NumPy's sum starts from +0.0, which turns a sum of -0.0 terms into +0.0:
        this one starts from the init's term (a scalar: ``terms`` of a 0-d array
        costs more than the rest)."""
        init = np.asarray(init)[()]
        initial = self.sign * init if init == 0 else -0.0
        return self.from_sum(np.add.reduce(self.terms(values), axis=axes, dtype=dtype, initial=initial))

    def terms(self, values):
        """What each value adds to the sum: ``sign * value`` for a zero, -0.0 for any
        other value of a sum that is used. Only the sums where the extremum is zero are
        used, and all their values lie on one side of zero (at most zero for maximum,
        at least zero for minimum; a NaN would have made the extremum NaN), so there
        ``sign * value`` is at most zero and its sign is the term: the zero with the
        sign of ``sign * value``, in one or two ufunc calls."""
        return np.copysign(0.0, values if self.is_max else np.negative(values))

    def from_sum(self, total):
        """The extremum's zero, from a sum of :meth:`terms` that starts from a term."""
        return self.sign * total


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
      row length), so the semantics "xla" asks XLA CPU itself (ops/xla_cpu_schedule.py).

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
