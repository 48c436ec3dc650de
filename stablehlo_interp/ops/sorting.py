"""sort (spec: sort), and the ``ApproxTopK`` custom call (``jax.lax.approx_max_k``).

Slices along ``dimension`` are sorted together, ordered by ``comparator``
(``lhs < rhs`` of the element tuples). Strategies, chosen at load time:

1. Key comparators: ``comparator`` is a strict lexicographic comparison of
   element-wise *keys* of the elements, each key compared with LT or GT (the
   comparators JAX emits: ``jnp.sort``'s NaN- and zero-canonicalizing TOTALORDER
   key, ``lax.sort(num_keys=...)``, complex real-then-imag ...). The keys are
   computed once on whole tensors by the comparator's own ops and mapped to
   integers that order the same way; then one stable NumPy sort.
2. Element-wise comparators: a bottom-up merge sort whose merges place every
   element by a binary search in the other run, one vectorized comparator call
   per search step across all elements of all rows.
3. Any other comparator (or one that is not a strict weak order, which makes
   the merge inconsistent, or one with an op a user registered: engine/regions.py):
   Python's stable sort per row, comparator called on 0-d values.

Every strategy sorts stably, which the spec allows whatever ``is_stable`` says.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..engine.plan import OpInfo
from ..engine.registry import custom_call, op
from ..engine.regions import is_elementwise, is_elementwise_step, runs_builtin
from ..engine.dtypes import integer_compute_dtype

_INDEX_BITS = 32  # keys of up to 32 bits sort packed with their index in one uint64


@dataclass(frozen=True)
class _Key:
    slot: int  # the comparator's slot holding the key of the lhs elements
    compare_type: str  # TOTALORDER, FLOAT, SIGNED or UNSIGNED
    descending: bool


class _Dataflow:
    """Which step computes each slot of a comparator region (load time)."""

    def __init__(self, region):
        self.region = region
        self.producers = {slot: step for step in region.steps for slot in step.results}

    def mirrored(self, lhs: int, rhs: int) -> bool:
        """Whether ``rhs`` is computed from the rhs arguments exactly as ``lhs`` is
        from the lhs arguments (arguments 2k and 2k + 1), by element-wise ops."""
        if lhs == rhs:
            return not self.depends_on_arguments(lhs)
        if lhs < self.region.n_args or rhs < self.region.n_args:
            return lhs % 2 == 0 and rhs == lhs + 1
        a, b = self.producers[lhs], self.producers[rhs]
        if a.info.name != b.info.name or len(a.operands) != len(b.operands):
            return False
        if not is_elementwise_step(a):
            return False
        if not _same_attributes(a.info.attributes, b.info.attributes):
            return False
        return all(self.mirrored(x, y) for x, y in zip(a.operands, b.operands))

    def depends_on_arguments(self, slot: int) -> bool:
        if slot < self.region.n_args:
            return True
        return any(self.depends_on_arguments(s) for s in self.producers[slot].operands)

    def compare(self, slot: int, directions):
        """(lhs slot, rhs slot, direction, step) if ``slot`` is a compare in ``directions``."""
        step = self.producers.get(slot)
        if step is None or step.info.name != "stablehlo.compare":
            return None
        direction = step.info.attributes["comparison_direction"]
        return (*step.operands, direction, step) if direction in directions else None

    def lexicographic(self, slot: int):
        """The keys if ``slot`` is ``less(key0) or (equal(key0) and lexicographic(rest))``."""
        strict = self._strict(slot)
        if strict:
            return [strict]
        step = self.producers.get(slot)
        if step is None or step.info.name != "stablehlo.or":
            return None
        for first, rest in (step.operands, step.operands[::-1]):
            key, tie = self._strict(first), self.producers.get(rest)
            if not key or tie is None or tie.info.name != "stablehlo.and":
                continue
            for equal, more in (tie.operands, tie.operands[::-1]):
                same = self.compare(equal, ("EQ",))
                tail = self.lexicographic(more)
                if same and tail and _same_pair(same, self.compare(first, ("LT", "GT"))):
                    return [key] + tail
        return None

    def _strict(self, slot: int) -> _Key | None:
        found = self.compare(slot, ("LT", "GT"))
        if not found:
            return None
        lhs, rhs, direction, step = found
        if self.mirrored(rhs, lhs):  # rhs < lhs: the opposite order
            lhs, rhs, direction = rhs, lhs, {"LT": "GT", "GT": "LT"}[direction]
        if not self.mirrored(lhs, rhs) or not self.depends_on_arguments(lhs):
            return None
        ttype = step.info.operand_types[0]
        default = {"float": "FLOAT", "signed": "SIGNED", "unsigned": "UNSIGNED", "bool": "UNSIGNED"}
        if ttype.kind not in default:
            return None
        compare_type = step.info.attributes.get("compare_type") or default[ttype.kind]
        return _Key(lhs, compare_type, direction == "GT")

    def evaluate(self, slots, arguments: dict) -> list:
        """The values of ``slots`` computed from argument values by the region's own steps."""
        values = dict(arguments)

        def value(slot):
            if slot not in values:
                step = self.producers[slot]
                values[slot] = step.run(*[value(s) for s in step.operands])
            return values[slot]

        return [value(slot) for slot in slots]


def _same_pair(a, b) -> bool:
    """Two compares of the same two operands (in either order) under the same compare type."""
    return bool(a and b) and {a[0], a[1]} == {b[0], b[1]} and \
        a[3].info.attributes.get("compare_type") == b[3].info.attributes.get("compare_type")


def _same_attributes(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for name in a:
        x, y = a[name], b[name]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.dtype == y.dtype
                    and x.shape == y.shape and x.tobytes() == y.tobytes()):
                return False
        elif x != y:
            return False
    return True


def _rank_key(key, key_info: _Key):
    """Unsigned integers ordered as the comparator orders ``key`` (None if it is not
    a strict weak order on these values)."""
    key = np.asarray(key)
    if key.dtype.kind == "b":
        ranks = key.astype(np.uint8)
    elif key_info.compare_type in ("TOTALORDER", "FLOAT") and not np.issubdtype(key.dtype, np.integer):
        if key_info.compare_type == "FLOAT":
            if np.isnan(key).any():
                return None  # NaN is unordered: the comparator is not a strict weak order
            key = key + key.dtype.type(0)  # -0.0 + 0.0 = +0.0: zeros compare equal
        ranks = _total_order_bits(key)
    else:
        key = key.astype(integer_compute_dtype(key.dtype), copy=False)
        ranks = key.view(f"u{key.itemsize}")
        if key.dtype.kind == "i":
            ranks = ranks ^ ranks.dtype.type(1 << (8 * key.itemsize - 1))  # flip the sign bit
    return ~ranks if key_info.descending else ranks


def _total_order_bits(values) -> np.ndarray:
    """Unsigned integers in the spec's totalOrder of floats (-NaN < -Inf < ... < +NaN):
    the order of comparison.total_order_key, as radix-sort keys (sign bit flipped
    for positive values, all bits for negative ones)."""
    wide = np.float64 if values.dtype == np.float64 else np.float32
    bits = values.astype(wide, copy=False).view(np.int64 if wide == np.float64 else np.int32)
    sign = bits.dtype.type(np.iinfo(bits.dtype).min)
    return (bits ^ ((bits >> (bits.dtype.itemsize * 8 - 1)) | sign)).view(f"u{bits.dtype.itemsize}")


def _stable_order(ranks: list) -> np.ndarray:
    """Stable argsort along the last axis by unsigned integer keys, most significant first."""
    length = ranks[0].shape[-1]
    if len(ranks) == 1 and ranks[0].itemsize * 8 <= _INDEX_BITS and length < 2 ** _INDEX_BITS:
        # One unstable sort of (key, index) pairs packed into uint64 is a stable argsort.
        packed = ranks[0].astype(np.uint64) << np.uint64(_INDEX_BITS)
        packed |= np.arange(length, dtype=np.uint64)
        packed.sort(axis=-1)
        return (packed & np.uint64(2 ** _INDEX_BITS - 1)).astype(np.intp)
    return np.lexsort(ranks[::-1], axis=-1)


def _sorted_by_rank(values, ranks) -> np.ndarray | None:
    """A single input sorted by its key ranks without an argsort: (rank, value bits)
    pairs packed into uint64 and sorted. None if two elements with different bits
    have the same rank (their order must then come from their positions) or the
    values are wider than 32 bits."""
    if ranks.itemsize * 8 > _INDEX_BITS or values.itemsize * 8 > _INDEX_BITS:
        return None
    bits = values.view(f"u{values.itemsize}")
    packed = ranks.astype(np.uint64) << np.uint64(_INDEX_BITS)
    packed |= bits
    packed.sort(axis=-1)
    step = packed[..., 1:] ^ packed[..., :-1]
    if ((step != 0) & (step < np.uint64(2 ** _INDEX_BITS))).any():  # same rank, other bits
        return None
    return packed.astype(bits.dtype).view(values.dtype)  # the low bits: the values


def _merge_sort(less, rows: list, length: int) -> np.ndarray | None:
    """Stable order of each row (rows: arrays of shape (R, length)); None if the
    comparator proves inconsistent (positions that do not form a permutation)."""
    count = rows[0].shape[0]
    order = np.broadcast_to(np.arange(length), (count, length)).copy()
    row = np.arange(count)[:, None]
    position = np.arange(length)
    width = 1
    while width < length:
        start = position - position % (2 * width)
        in_second = position - start >= width
        other_start = np.where(in_second, start, start + width)
        other_length = np.where(in_second, width, np.clip(length - start - width, 0, width))
        current = [np.take_along_axis(r, order, axis=1) for r in rows]
        low = np.zeros((count, length), np.int64)
        high = np.broadcast_to(other_length, (count, length)).copy()
        while True:
            active = low < high
            if not active.any():
                break
            middle = (low + high) // 2
            probe = np.minimum(other_start + middle, length - 1)
            other = [np.take_along_axis(c, probe, axis=1) for c in current]
            # Another run's element goes first if it is less (this element in the
            # first run) or not greater (this element in the second run): stable.
            lhs = [np.where(in_second, c, o) for c, o in zip(current, other)]
            rhs = [np.where(in_second, o, c) for c, o in zip(current, other)]
            first = less(lhs, rhs) ^ in_second
            low = np.where(active & first, middle + 1, low)
            high = np.where(active & ~first, middle, high)
        target = position - np.where(in_second, start + width, start) + start + low
        filled = np.zeros((count, length), bool)
        filled[row, target] = True
        if not filled.all():
            return None
        merged = np.empty_like(order)
        merged[row, target] = order
        order = merged
        width *= 2
    return order


def _python_sort(comparator, rows: list, length: int) -> np.ndarray:
    """Python's stable sort of each row, comparator on 0-d values (any comparator)."""
    count = rows[0].shape[0]

    def row_order(r):
        def less(i, j):
            return bool(comparator(*[np.asarray(x[r, k]) for x in rows for k in (i, j)])[0])

        def compare(i, j):
            return -1 if less(i, j) else 1 if less(j, i) else 0

        return sorted(range(length), key=functools.cmp_to_key(compare))

    return np.array([row_order(r) for r in range(count)], np.intp).reshape(count, length)


def _gathered(inputs, order):
    return [x[order] if x.ndim == 1 else np.take_along_axis(x, order, axis=-1) for x in inputs]


@op("stablehlo.sort", variadic=True)
def sort(info):
    n = len(info.result_types)
    rank = info.operand_types[0].rank
    dimension = info.attr("dimension", -1)
    dimension += rank * (dimension < 0)
    region = info.regions[0]
    dataflow = _Dataflow(region)
    keys = dataflow.lexicographic(region.outputs[0]) if not region.n_captures and runs_builtin(region) else None
    vectorized = is_elementwise(region)
    lhs_slots = {2 * k: k for k in range(n)}

    def key_sort(inputs):
        values = dataflow.evaluate([key.slot for key in keys], {s: inputs[k] for s, k in lhs_slots.items()})
        ranks = [_rank_key(np.broadcast_to(v, inputs[0].shape), key) for v, key in zip(values, keys)]
        if any(r is None for r in ranks):
            return None
        if n == 1 and len(ranks) == 1:
            direct = _sorted_by_rank(inputs[0], ranks[0])
            if direct is not None:
                return [direct]
        return _gathered(inputs, _stable_order(ranks))

    def general_order(comparator, inputs):
        length = inputs[0].shape[-1]
        rows = [x.reshape(-1, length) for x in inputs]
        order = None
        if vectorized:
            quiet = comparator.as_vectorized()

            def less(lhs, rhs):
                return np.broadcast_to(quiet(*[v for pair in zip(lhs, rhs) for v in pair])[0], lhs[0].shape)

            order = _merge_sort(less, rows, length)
        if order is None:
            order = _python_sort(comparator, rows, length)
        return order.reshape(inputs[0].shape)

    def run(regions, *operands):
        inputs = [np.moveaxis(np.asarray(x), dimension, -1) for x in operands]
        if inputs[0].shape[-1] > 1 and inputs[0].size:
            inputs = (keys and key_sort(inputs)) or _gathered(inputs, general_order(regions[0], inputs))
        return [np.moveaxis(x, -1, dimension) for x in inputs]

    return run


@custom_call("ApproxTopK", variadic=True)
def approx_top_k(info):
    """``jax.lax.approx_max_k`` / ``approx_min_k``: the exact top ``top_k`` along
    ``reduction_dim``, which every recall target allows (JAX documents the result as
    at least ``recall_target`` of the exact one; XLA's CPU runs the same exact fallback).
    With ``aggregate_to_topk`` false the result keeps more candidates along that
    dimension (as many as the result type holds, JAX's and XLA's
    ``ApproxTopKReductionOutputSize``): XLA's fallback (``ApproxTopKFallback``) gives the
    exact top that many, in order, and so does this.
    The operands are the values, their indices (an iota) and two initial values, unused;
    the called comparator orders (value, index) pairs, as a sort's does."""
    config = info.attr("mhlo.backend_config")
    dimension = int(config["reduction_dim"])
    kept = int(config["top_k"]) if config.get("aggregate_to_topk", True) else info.result_types[0].shape[dimension]
    sorted_pairs = sort(OpInfo("stablehlo.sort", {"dimension": dimension, "is_stable": True},
                               info.operand_types[:2], info.operand_types[:2], info.regions[-1:], info.location,
                               info.module))

    def run(regions, values, indices, *initial):
        ordered = sorted_pairs(regions[-1:], values, indices)
        return [np.take(x, np.arange(kept), axis=dimension) for x in ordered]

    return run
