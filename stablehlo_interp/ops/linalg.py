"""Linear algebra (spec: dot_general, triangular_solve, cholesky; dot, einsum and
unary_einsum, which the spec lists as "not in HLO").

Dot products follow the spec's formula: operands are converted to the result
element type (i8 x i8 -> i32 multiplies in i32, as XLA and the C++ reference
interpreter do) and summed in it, products rounded and summed left to right in
the order of the contracting indices (docs/semantics.md, "Accumulation").
Floats narrower than f32 are summed in f32 and rounded once (XLA CPU does the
same); integers wrap. ``precision_config``
only matters on accelerators: every dot runs at full precision. A ``DotAlgorithm``
is honoured (see :func:`_algorithm_product`), except on integers, which it cannot
round (ignored, as in the C++ reference interpreter).
"""

from __future__ import annotations

import math
import operator
import numpy as np
import scipy.linalg.blas

from ..ir.decode import DotDimensionNumbers
from ..engine.registry import op
from ..ir.types import dtype_of
from ..engine.accumulation.orders import FOLD_BUFFER_ELEMENTS, fold_rows
from ..engine.dtypes import integer_compute_dtype

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def accumulation_dtype(ttype) -> np.dtype:
    """The dtype in which dot products with result type ``ttype`` are summed.

    i1 results are logical OR of ANDs: counted in f32, whose sums of ones are
    exact up to 2**24 and never come back to zero.
    """
    if ttype.kind == "bool":
        return _F32
    if ttype.kind in ("signed", "unsigned"):
        return integer_compute_dtype(ttype.dtype)
    if ttype.kind == "float" and ttype.dtype.itemsize < 4:
        return _F32
    return ttype.dtype


def result_converter(ttype):
    """Sums in :func:`accumulation_dtype` -> values of the result type."""
    if ttype.kind == "bool":
        return lambda product: product != 0
    dtype = ttype.dtype
    return lambda product: product.astype(dtype, copy=False)


# Float contractions of at most this many products are folded in index order
# (ordered_matmul); larger ones go to BLAS (docs/semantics.md, "Accumulation").
FOLD_PRODUCTS_LIMIT = 1 << 20


def batched_matmul(ttype, products: int | None = None):
    """``(B, M, K) x (B, K, N) -> (B, M, N)`` summed in :func:`accumulation_dtype` of
    the result type ``ttype``. Floats and complex numbers: :func:`ordered_matmul`
    up to ``FOLD_PRODUCTS_LIMIT`` products, BLAS beyond (decided now when the number
    of ``products`` B*M*K*N is known); integers (exact, wrapping) and booleans
    (counts): NumPy's matmul."""
    compute = accumulation_dtype(ttype)

    def blas(a, b):
        return np.matmul(a.astype(compute, copy=False), b.astype(compute, copy=False))

    if ttype.kind not in ("float", "complex"):
        return blas
    ordered = ordered_matmul(compute)
    if products is not None:
        return ordered if products <= FOLD_PRODUCTS_LIMIT else blas

    def run(a, b):
        small = a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2] <= FOLD_PRODUCTS_LIMIT
        return ordered(a, b) if small else blas(a, b)

    return run


def ordered_matmul(compute):
    """``(B, M, K) x (B, K, N) -> (B, M, N)`` in ``compute``, each result element the
    left fold ``((0 + l[0] r[0]) + l[1] r[1]) + ...`` over k, every product and sum
    rounded to ``compute`` (docs/semantics.md, "Accumulation").

    The spec defines dot_general's ``dot_product`` as ``reduce`` of ``multiply``:
    each product is rounded (no fused multiply-add) and the sum's tree is the
    implementation's; this is the C++ reference interpreter's (and XLA's, for
    small dots). Vectorized across the result: one multiply and one folding
    reduce per chunk of k.
    """

    def run(lhs, rhs):
        lhs, rhs = lhs.astype(compute, copy=False), rhs.astype(compute, copy=False)
        batch, rows, depth = lhs.shape
        if batch == rows == rhs.shape[2] == 1 and 0 < depth <= FOLD_BUFFER_ELEMENTS and compute.kind == "f":
            return _dot_of_vectors(lhs, rhs, depth, compute)
        accumulator = np.zeros((batch, rows, rhs.shape[2]), compute)
        if depth == 0 or accumulator.size == 0:
            return accumulator
        step = max(1, min(depth, FOLD_BUFFER_ELEMENTS // accumulator.size))
        lhs_by_k = np.moveaxis(lhs, 2, 0)[..., None]      # (K, B, M, 1)
        rhs_by_k = np.moveaxis(rhs, 1, 0)[:, :, None, :]  # (K, B, 1, N)
        terms = np.empty((step + 1,) + accumulator.shape, compute)
        for start in range(0, depth, step):
            count = min(depth, start + step) - start
            terms[0] = accumulator
            np.multiply(lhs_by_k[start:start + count], rhs_by_k[start:start + count], out=terms[1:count + 1])
            accumulator = fold_rows(np.add, terms[:count + 1])
        return accumulator

    return run


def _dot_of_vectors(lhs, rhs, depth: int, compute):
    """:func:`ordered_matmul` of one row by one column (a (1, 1, 1) result): the same
    left fold from +0.0, the products in one buffer after the zero and summed by one
    running ``accumulate`` (fold_rows' sum of rows of one element), without the
    moved axes and the staging of the general case (a dot of two 3-vectors cost 10x
    NumPy's dot). Real floats only: NumPy's complex multiply of a vector and of the
    general case's broadcast operands give NaNs of other signs and payloads."""
    terms = np.empty(depth + 1, compute)
    terms[0] = 0
    np.multiply(lhs.reshape(depth), rhs.reshape(depth), out=terms[1:])
    return np.add.accumulate(terms)[-1:].reshape(1, 1, 1)


# ------------------------------------------------------------- dot algorithms

# num_primitive_operations of the split-precision algorithms (bf16_3x, bf16_6x,
# bf16_9x, tf32_3x) -> components per operand and the products summed, smallest
# terms first (Henry et al. 2019, "Leveraging the bfloat16 AI datatype").
_SPLIT_PRODUCTS = {
    1: (1, ((0, 0),)),
    3: (2, ((1, 0), (0, 1), (0, 0))),
    6: (3, ((2, 0), (1, 1), (0, 2), (1, 0), (0, 1), (0, 0))),
    9: (3, ((2, 2), (2, 1), (1, 2), (2, 0), (1, 1), (0, 2), (1, 0), (0, 1), (0, 0))),
}


def _round_to_tf32(values):
    """Round f32 values to TensorFloat-32 (10 explicit mantissa bits), ties to even."""
    bits = values.view(np.uint32)
    rounded = ((bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1)))
               & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(values), rounded, values)


def _rounder(precision: str, compute):
    """Values of ``compute`` dtype rounded to the precision type ``precision``."""
    if precision == "tf32":
        return lambda x: _round_to_tf32(x.astype(_F32)).astype(compute)
    dtype = dtype_of(precision)
    return lambda x: x.astype(dtype).astype(compute)


def _components(x, round_to, count: int) -> list:
    """Split ``x`` into ``count`` parts exactly representable in the precision type."""
    parts = []
    for _ in range(count):
        part = round_to(x)
        parts.append(part)
        x = x - part
    return parts


def _algorithm_product(info, algorithm, operand_types):
    """Batched matmul under a DotAlgorithm (spec: dot_general, ``algorithm``).

    Each operand is rounded to its precision type (TF32 = f32 with a 10-bit
    mantissa), or split into 2-3 components of that type for the 3/6/9-pass
    algorithms; the products are summed in f32 (f64 for an f64 accumulation)
    and rounded once to a narrower accumulation type. Sums are never less
    precise than that, so ``allow_imprecise_accumulation`` changes nothing.
    (XLA CPU ignores the bf16 algorithms and computes the plain f32 dot.)
    """
    if (algorithm.lhs_component_count, algorithm.rhs_component_count) != (1, 1) \
            or algorithm.num_primitive_operations not in _SPLIT_PRODUCTS:
        raise info.unsupported(f"dot algorithm {algorithm} is not supported")
    if any(t.kind not in ("float", "signed", "unsigned") for t in operand_types):
        raise info.unsupported("dot algorithms apply to real operands only")
    accumulation = algorithm.accumulation_type
    compute = _F64 if accumulation == "f64" else _F32
    narrow = accumulation == "tf32" or dtype_of(accumulation).itemsize < compute.itemsize
    accumulate_round = _rounder(accumulation, compute) if narrow else None
    count, products = _SPLIT_PRODUCTS[algorithm.num_primitive_operations]
    round_lhs = _rounder(algorithm.lhs_precision_type, compute)
    round_rhs = _rounder(algorithm.rhs_precision_type, compute)

    def product(a, b):
        a_parts = _components(a.astype(compute), round_lhs, count)
        b_parts = _components(b.astype(compute), round_rhs, count)
        total = None
        for i, j in products:
            term = np.matmul(a_parts[i], b_parts[j])
            total = term if total is None else total + term
        return total if accumulate_round is None else accumulate_round(total)

    return product


# ------------------------------------------------------------------ dot ops


def _dot_general_numbers(info) -> DotDimensionNumbers:
    return info.attr("dot_dimension_numbers")


def _dot_numbers(info) -> DotDimensionNumbers:
    return DotDimensionNumbers((), (), (info.operand_types[0].rank - 1,), (0,))


def _to_0d(numbers_of):
    """Builder of a dot's runner for a 0-d result (registry.Implementation.scalar): the
    small dot's sum as a NumPy scalar (what runners on 0-d values compute on), or None."""
    return lambda info: _contraction(info, numbers_of(info), to_0d=True)


@op("stablehlo.dot_general", scalar=_to_0d(_dot_general_numbers))
def dot_general(info):
    """Contract ``lhs_contracting`` with ``rhs_contracting`` per batch; the result
    dims are batch dims, then lhs free dims, then rhs free dims (spec: dot_general)."""
    return _contraction(info, _dot_general_numbers(info))


@op("stablehlo.dot", scalar=_to_0d(_dot_numbers))
def dot(info):
    """dot_general contracting lhs's last dim with rhs's first (vector/matrix products)."""
    return _contraction(info, _dot_numbers(info))


def _contraction(info, numbers, to_0d=False):
    """The dot's runner; with ``to_0d`` the runner of a small real float dot of a 0-d
    result giving a NumPy scalar, or None for any other dot."""
    lhs_type, rhs_type = info.operand_types[:2]
    result = info.result_type
    lhs_batch, rhs_batch = list(numbers.lhs_batching_dimensions), list(numbers.rhs_batching_dimensions)
    lhs_contract, rhs_contract = list(numbers.lhs_contracting_dimensions), list(numbers.rhs_contracting_dimensions)
    lhs_free = [d for d in range(lhs_type.rank) if d not in lhs_batch + lhs_contract]
    rhs_free = [d for d in range(rhs_type.rank) if d not in rhs_batch + rhs_contract]
    lhs_order, rhs_order = lhs_batch + lhs_free + lhs_contract, rhs_batch + rhs_contract + rhs_free
    n_batch, n_free_l, n_contract = len(lhs_batch), len(lhs_free), len(lhs_contract)
    algorithm = info.attributes.get("algorithm")
    if all(t.is_integer or t.is_bool for t in (lhs_type, rhs_type, result)):
        # An integer dot product is exact (it wraps): an algorithm's precision types
        # have nothing to round, so it is ignored, as the C++ reference interpreter does.
        algorithm = None
    if algorithm is not None and result.kind != "float":
        raise info.unsupported(f"dot algorithm with result type {result.element_type}")
    def matmul_shapes(lhs_shape, rhs_shape):
        """The (B, M, K) and (B, K, N) shapes of the transposed operands, and the result's."""
        batch = lhs_shape[:n_batch]
        free_l = lhs_shape[n_batch:n_batch + n_free_l]
        free_r = rhs_shape[n_batch + n_contract:]
        size_b, size_c = math.prod(batch), math.prod(lhs_shape[n_batch + n_free_l:])
        return (size_b, math.prod(free_l), size_c), (size_b, size_c, math.prod(free_r)), batch + free_l + free_r

    static = None not in lhs_type.shape + rhs_type.shape
    fixed = static and matmul_shapes(tuple(lhs_type.shape[d] for d in lhs_order),
                                     tuple(rhs_type.shape[d] for d in rhs_order))
    products = math.prod(fixed[0]) * fixed[1][2] if fixed else None
    multiply = (_algorithm_product(info, algorithm, (lhs_type, rhs_type)) if algorithm is not None
                else batched_matmul(result, products))
    finish = result_converter(result)
    lhs_moves, rhs_moves = lhs_order != sorted(lhs_order), rhs_order != sorted(rhs_order)
    small = algorithm is None and fixed and result.kind == "float" and 0 < products <= FOLD_BUFFER_ELEMENTS
    if to_0d:
        return _small_real_dot((lhs_type, rhs_type), lhs_contract + lhs_batch + lhs_free,
                               rhs_contract + rhs_batch + rhs_free, fixed, accumulation_dtype(result), result.dtype,
                               to_0d=True) if small else None
    if (algorithm is None and n_batch == 0 and n_contract == 1 and lhs_type.rank == rhs_type.rank == 2 and fixed
            and lhs_type.dtype == rhs_type.dtype == accumulation_dtype(result) == result.dtype
            and (result.kind not in ("float", "complex") or products > FOLD_PRODUCTS_LIMIT)):
        # batched_matmul's NumPy matmul of one matrix by another, in the operands' own
        # dtype: the same call without the reshapes to and from a batch of one.
        def matrix_product(lhs, rhs):
            return np.matmul(lhs.transpose() if lhs_moves else lhs, rhs.transpose() if rhs_moves else rhs)

        return matrix_product

    if small:
        return _small_real_dot((lhs_type, rhs_type), lhs_contract + lhs_batch + lhs_free,
                               rhs_contract + rhs_batch + rhs_free, fixed, accumulation_dtype(result), result.dtype)

    def run(lhs, rhs):
        lhs, rhs = lhs.transpose(lhs_order) if lhs_moves else lhs, rhs.transpose(rhs_order) if rhs_moves else rhs
        lhs_shape, rhs_shape, result_shape = fixed or matmul_shapes(lhs.shape, rhs.shape)
        return finish(multiply(lhs.reshape(lhs_shape), rhs.reshape(rhs_shape)).reshape(result_shape))

    return run


def _small_real_dot(operand_types: tuple, lhs_order: list, rhs_order: list, shapes: tuple, compute: np.dtype,
                    result_dtype: np.dtype, to_0d: bool = False):
    """The runner of a real float dot_general whose products fit one buffer of
    ``FOLD_BUFFER_ELEMENTS``, given each operand's dimensions in the order (K, B, M)
    and (K, B, N) and :func:`_contraction`'s matmul shapes: what ``batched_matmul``'s
    :func:`ordered_matmul` computes, the same products summed in the same order,
    without the general case's transposes, reshapes and staging at every run (a
    (24, 3) matrix by a 3-vector: 23 us -> 3). Several result elements: NumPy's
    reduce of the (K, B*M*N) products over their outer axis, from +0.0, row after
    row (fold_rows; ``(-0.0 + 0) + p0`` there is ``0 + p0`` here), or for one product
    each (an outer product) ``p0 + 0``; one result element: :func:`_dot_of_vectors`'
    running ``accumulate`` from 0, with ``to_0d`` the same sum as a NumPy scalar."""
    (batch, rows, depth), (_, _, columns), result_shape = shapes
    width = batch * rows * columns
    lhs_shape, rhs_shape = ((depth,), (depth,)) if width == 1 else ((depth, batch, rows, 1), (depth, batch, 1, columns))
    move_lhs = _mover(operand_types[0].dtype, lhs_order, lhs_shape, compute)
    move_rhs = _mover(operand_types[1].dtype, rhs_order, rhs_shape, compute)
    narrow = result_dtype != compute   # (f16 and bf16 are summed in f32)
    if narrow:
        def finish(folded):
            return folded.reshape(result_shape).astype(result_dtype)
    else:
        finish = operator.methodcaller("reshape", result_shape)   # (no Python frame)

    if width == 1 and to_0d:
        zero = compute.type(0)

        def vectors_to_0d(lhs, rhs):
            """``((p0 + p1) + ...) + 0``: the fold from 0 but for its first step, which
            makes a difference only where every product so far is -0.0 (0 + -0.0 is
            +0.0), so the last step makes the same one (products' NaNs are quiet)."""
            total = np.add.accumulate(np.multiply(move_lhs(lhs), move_rhs(rhs)))[-1] + zero
            return total.astype(result_dtype) if narrow else total

        return vectors_to_0d
    if width == 1:
        def vectors(lhs, rhs):
            terms = np.empty(depth + 1, compute)
            terms[0] = 0
            np.multiply(move_lhs(lhs), move_rhs(rhs), out=terms[1:])
            return finish(np.add.accumulate(terms, out=terms)[depth:])

        return vectors
    if depth == 1:
        def outer(lhs, rhs):
            products = np.multiply(move_lhs(lhs), move_rhs(rhs))
            return finish(np.add(products, 0.0, out=products))

        return outer
    products_shape = (depth, batch, rows, columns)

    def run(lhs, rhs):
        products = np.empty(products_shape, compute)
        np.multiply(move_lhs(lhs), move_rhs(rhs), out=products)
        return finish(np.add.reduce(products.reshape(depth, width), axis=0, initial=0.0))

    return run


def _mover(dtype: np.dtype, order: list, shape: tuple, compute: np.dtype):
    """An operand of ``dtype``, its dimensions transposed to ``order`` (where that moves
    any) and reshaped to ``shape``, in ``compute``."""
    moves, converts = order != sorted(order), dtype != compute
    if moves and converts:
        return lambda operand: operand.transpose(order).reshape(shape).astype(compute)
    if moves:
        return lambda operand: operand.transpose(order).reshape(shape)
    if converts:
        return lambda operand: operand.reshape(shape).astype(compute)
    return operator.methodcaller("reshape", shape)


@op("stablehlo.einsum", "stablehlo.unary_einsum")
def einsum(info):
    """Einstein summation of one or two operands, ``einsum_config`` in NumPy's
    notation (``"ab,bc->ac"``, ``"ab->a"``); products and sums as in dot_general."""
    config = info.attr("einsum_config")
    compute = accumulation_dtype(info.result_type)
    finish = result_converter(info.result_type)
    optimize = len(info.operand_types) > 1

    def run(*operands):
        operands = [np.asarray(x).astype(compute, copy=False) for x in operands]
        return finish(np.asarray(np.einsum(config, *operands, optimize=optimize)))

    return run


# ------------------------------------------------------------- factorizations


def _linalg_dtype(ttype):
    """LAPACK/BLAS work in f32/f64/c64/c128: narrower floats go through f32."""
    if ttype.kind not in ("float", "complex"):
        return None
    return ttype.dtype if ttype.dtype.itemsize >= 4 or ttype.kind == "complex" else _F32


@op("stablehlo.triangular_solve")
def triangular_solve(info):
    """Solve ``op(a) x = b`` (``left_side``) or ``x op(a) = b`` per batch matrix,
    reading only the ``lower`` (or upper) triangle of ``a``; op is the identity,
    transpose or conjugate transpose (``transpose_a``). Back substitution with
    BLAS trsm, so a zero pivot gives inf/NaN as in XLA rather than an error.
    """
    a_type, b_type = info.operand_types
    compute = _linalg_dtype(a_type)
    if compute is None:
        raise info.unsupported(f"element type {a_type.element_type}")
    options = dict(
        side=0 if info.attr("left_side") else 1,
        lower=int(bool(info.attr("lower"))),
        trans_a={"NO_TRANSPOSE": 0, "TRANSPOSE": 1, "ADJOINT": 2}[info.attr("transpose_a")],
        diag=int(bool(info.attr("unit_diagonal"))),
    )
    trsm = scipy.linalg.blas.get_blas_funcs("trsm", dtype=compute)
    result_dtype = info.result_type.dtype

    def run(a, b):
        a = np.asarray(a).astype(compute, copy=False)
        b = np.asarray(b).astype(compute, copy=False)
        x = np.empty(b.shape, compute)
        if x.size:
            for index in np.ndindex(b.shape[:-2]):
                x[index] = trsm(1.0, a[index], b[index], **options)
        return x.astype(result_dtype, copy=False)

    return run


@op("stablehlo.cholesky")
def cholesky(info):
    """Cholesky factor of each (Hermitian positive-definite) batch matrix, reading
    only the ``lower`` (or upper) triangle. The other triangle of the result is
    zero. For a matrix that is not positive definite the spec leaves the result
    undefined; like XLA CPU, that matrix comes back all NaN.
    """
    a_type = info.operand_types[0]
    compute = _linalg_dtype(a_type)
    if compute is None:
        raise info.unsupported(f"element type {a_type.element_type}")
    upper = not info.attr("lower", False)
    result_dtype = info.result_type.dtype

    def factor(matrices):
        try:
            return np.linalg.cholesky(matrices, upper=upper)
        except np.linalg.LinAlgError:
            if matrices.ndim == 2:
                return np.full(matrices.shape, np.nan, matrices.dtype)
            return np.stack([factor(m) for m in matrices])

    def run(a):
        a = np.asarray(a).astype(compute, copy=False)
        if a.size == 0:
            return np.zeros(a.shape, result_dtype)
        return factor(a).astype(result_dtype, copy=False)

    return run
