"""The CHLO dialect ("client HLO", stablehlo/dialect/ChloOps.td), evaluated directly.

- Math functions (acos ... zeta) come from NumPy and SciPy's special functions,
  evaluated in a wider type and rounded once: NumPy's through
  ``support.in_wider_precision``, SciPy's (which stop at f64) in f64. Where a function has a pole or is undefined,
  the result is the one XLA's CHLO decomposition
  (stablehlo/transforms/ChloLegalizeToStablehlo.cpp) gives, as described at
  :func:`_digamma`, :func:`_lgamma` and :func:`_zeta`. lgamma next to its zeros
  1 and 2 is its Taylor series (:func:`_lgamma_near_zeros`): gammaln is only
  accurate to an absolute f64 eps there, which f64 results need.
- ``broadcast_*`` ops broadcast their operands (numpy-style, or by an explicit
  ``broadcast_dimensions`` map) and then run the stablehlo (or chlo) op they
  mirror, through that op's own builder: see :func:`_broadcasting`.
- ``top_k``, ``ragged_dot`` and ``scan`` as described at their builders.

StableHLO's test files that pipe through ``stablehlo-opt --chlo-pre-serialization-pipeline``
run CHLO's StableHLO decomposition instead, as upstream's interpreter does
(conformance/testfile.py, ir/chlo_legalization.py).
"""

from __future__ import annotations


import numpy as np
import scipy.special

from ..ir.decode import DotDimensionNumbers
from ..engine.registry import op, op_builder
from ..ir.types import TensorType
from .comparison import total_order_key
from ..engine.dtypes import NATIVE_FLOATS, contiguous, in_wider_precision, integer_compute_dtype, unsigned_view_dtype


# ------------------------------------------------------------------ element-wise math


def _real_or_complex_op(real=None, complex_=None, *, widen=in_wider_precision):
    """Builder of an element-wise function: ``real`` for float operands,
    ``complex_`` for complex ones, evaluated in a wider type (``widen``) and rounded."""

    def build(info):
        ttype = info.operand_types[0]
        fn = {"float": real, "complex": complex_}.get(ttype.kind)
        if fn is None:
            raise info.unsupported(f"element type {ttype.element_type} is not allowed for this op")
        wide = widen(fn, ttype.dtype)

        def run(*operands):
            with np.errstate(all="ignore"):
                return wide(*operands)

        return run

    return build


def _in_float64(fn, dtype):
    """SciPy's special functions are computed in f64 at most: narrower floats go
    through f64 and are rounded once."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return fn
    return lambda *operands: fn(*[np.asarray(x, np.float64) for x in operands]).astype(dtype)


def _square(x):
    """x * x; complex: ((re - im) * (re + im), 2 * re * im), which does not
    overflow where re**2 - im**2 would (ChloOps.td, square)."""
    if np.iscomplexobj(x):
        result = np.empty(x.shape, x.dtype)
        result.real = (x.real - x.imag) * (x.real + x.imag)
        result.imag = 2 * x.real * x.imag
        return result
    return x * x


def _digamma(x):
    """psi(x); NaN at the poles 0, -1, -2 ... as in XLA CPU and jaxlib's
    decomposition (newer StableHLO decompositions give -inf at 0)."""
    return np.where((x <= 0) & (x == np.floor(x)), np.nan, scipy.special.psi(x))


_EULER_GAMMA = np.longdouble("0.57721566490153286060651209008240243104215933593992")
_LGAMMA_SERIES_TERMS = 70
_LGAMMA_SERIES_RADIUS = 0.5


def _lgamma_series_coefficients(at):
    """c_1 ... c_K of lgamma(at + d) = sum of c_k * d**k for ``at`` = 1 or 2, in
    long double (Abramowitz & Stegun 6.1.33): c_1 = -euler_gamma (+ 1 at 2),
    c_k = (-1)**k * zeta(k) / k (zeta(k) - 1 at 2, as lgamma(2 + d) =
    lgamma(1 + d) + log(1 + d))."""
    k = np.arange(2, _LGAMMA_SERIES_TERMS + 1)
    zeta_minus_one = scipy.special.zetac(k.astype(np.float64)).astype(np.longdouble)
    tail = np.where(k % 2 == 0, 1, -1) * (zeta_minus_one + (at == 1)) / k
    return np.concatenate([[(at == 2) - _EULER_GAMMA], tail])


_LGAMMA_SERIES = {at: _lgamma_series_coefficients(at) for at in (1, 2)}


def _lgamma_near_zeros(x, at):
    """lgamma(x) for |x - at| <= 1/2 by its Taylor series at its zero ``at``
    (1 or 2), evaluated by Horner's rule in long double: accurate relative to the
    small result, where gammaln's log(gamma) only has an absolute error of an
    f64 eps (lgamma(1 + 2**-52) is -1.28e-16, gammaln gives -2.22e-16). x - at
    is exact there (Sterbenz)."""
    d = (x - at).astype(np.longdouble)
    total = np.zeros_like(d)
    for coefficient in _LGAMMA_SERIES[at][::-1]:
        total = (total + coefficient) * d
    return total.astype(np.float64)


def _lgamma(x):
    """log|gamma(x)|; +inf at the poles and at +-inf. For subnormal x it is
    -log|x| to within rounding (SciPy's gammaln overflows there); near the zeros
    1 and 2 it is :func:`_lgamma_near_zeros`."""
    tiny = np.abs(x) < np.finfo(np.float64).smallest_normal
    result = np.where(np.isinf(x), np.inf, np.where(tiny, -np.log(np.abs(x)), scipy.special.gammaln(x)))
    for at in (1, 2):
        near = (np.abs(x - at) <= _LGAMMA_SERIES_RADIUS) & (x != at)  # lgamma(at) is +0
        if near.any():
            result[near] = _lgamma_near_zeros(x[near], at)
    return result


def _odd(fn):
    """An odd function that keeps the sign of zero (SciPy's erfinv and i1e drop it)."""
    return lambda x: np.where(x == 0, x, fn(x))


def _zeta(x, q):
    """Hurwitz zeta(x, q) = sum over n >= 0 of (q + n)**-x. As XLA defines it:
    NaN for x < 1; for q <= 0, NaN unless x is an integer; at the poles (q a
    non-positive integer) +inf for even x, else NaN; +inf for x = 1. For q > 1
    and huge x, where SciPy gives NaN, the value q**-x (it underflows to 0)."""
    result = scipy.special.zeta(x, q)
    result = np.where(np.isnan(result) & (x > 1) & (q > 1), np.power(q, -x), result)
    x_integer = x == np.floor(x)
    result = np.where((x < 1) | ((q <= 0) & ~x_integer), np.nan, result)
    pole = (q <= 0) & (q == np.floor(q))
    result = np.where(pole, np.where(x_integer & (np.fmod(x, 2) == 0), np.inf, np.nan), result)
    return np.where(x == 1, np.inf, result)


def _polygamma(n, x):
    """The n-th derivative of digamma: digamma for n = 0, else
    (-1)**(n + 1) * n! * zeta(n + 1, x); NaN unless n is a natural number."""
    sign = np.where(np.fmod(n, 2) == 0, -1.0, 1.0)
    result = np.where(n == 0, _digamma(x), sign * scipy.special.gamma(n + 1) * _zeta(n + 1, x))
    return np.where((n < 0) | (n != np.floor(n)), np.nan, result)


def _asin_acos_kernel(z):
    """w such that asin(z) = (atan2(re z, re w), sign(im z) * im w) and
    acos(z) = (atan2(re w, re z), -sign(im z) * im w) (ChloOps.td): re w is
    re(sqrt(1 - z) * sqrt(1 + z)) (Kahan's formula, never negative) and
    im w = |im asin(z)|."""
    w = np.empty(z.shape, z.dtype)
    w.real = (np.sqrt(1 - z) * np.sqrt(1 + z)).real
    w.imag = np.abs(np.arcsin(z).imag)
    return w


for _name, _real, _complex in [
    ("acos", np.arccos, np.arccos),
    ("acosh", np.arccosh, np.arccosh),
    ("asin", np.arcsin, np.arcsin),
    ("asinh", np.arcsinh, np.arcsinh),
    ("atan", np.arctan, np.arctan),
    ("atanh", np.arctanh, np.arctanh),
    ("cosh", np.cosh, np.cosh),
    ("sinh", np.sinh, np.sinh),
    ("_asin_acos_kernel", None, _asin_acos_kernel),
]:
    op(f"chlo.{_name}", elementwise=True)(_real_or_complex_op(_real, _complex))


def _real_in_own_type(fn, dtype):
    """Real ``x * x`` in the element type itself: the exact product rounded once, as
    through a wider type (bf16 and the f8 types multiply in f32, where the product is
    exact, and round once), and for f64 without the extended type's double rounding;
    with no converted copies of a large array. Complex squares go wider."""
    return fn if np.dtype(dtype).kind != "c" else in_wider_precision(fn, dtype)


op("chlo.square", elementwise=True)(_real_or_complex_op(_square, _square, widen=_real_in_own_type))

for _name, _real in [
    ("bessel_i1e", _odd(scipy.special.i1e)),
    ("digamma", _digamma),
    ("erf", scipy.special.erf),
    ("erfc", scipy.special.erfc),
    ("erf_inv", _odd(scipy.special.erfinv)),
    ("lgamma", _lgamma),
    ("polygamma", _polygamma),
    ("zeta", _zeta),
]:
    op(f"chlo.{_name}", elementwise=True)(_real_or_complex_op(_real, widen=_in_float64))


@op("chlo.tan", elementwise=True)
def tan(info):
    """The same op as stablehlo.tan."""
    return op_builder("stablehlo.tan")(info)


@op("chlo.conj", elementwise=True)
def conj(info):
    """(re, -im); the identity on real operands."""
    return np.conj if info.operand_types[0].is_complex else (lambda x: x)


@op("chlo.is_inf", elementwise=True)
def is_inf(info):
    return np.isinf


@op("chlo.is_pos_inf", elementwise=True)
def is_pos_inf(info):
    return np.isposinf


@op("chlo.is_neg_inf", elementwise=True)
def is_neg_inf(info):
    return np.isneginf


def _next_after_of_scalars(info):
    """next_after's runner on 0-d values (registry.Implementation.scalar) of f16, f32
    and f64: the same steps of the bit pattern as :func:`next_after`'s, on Python ints
    (1 us where the op's runner on a 0-d value costs 10: eight array operations);
    values that are not NumPy scalars of the type go to the op's runner."""
    dtype = info.operand_types[0].dtype
    if dtype not in NATIVE_FLOATS:
        return None
    runner, scalar_type = next_after(info), dtype.type
    bits = unsigned_view_dtype(dtype).type
    sign = 1 << (8 * dtype.itemsize - 1)
    nan = np.array(np.nan, dtype)[()]

    def run(x, y):
        if type(x) is not scalar_type or type(y) is not scalar_type:
            return runner(x, y)
        if x != x or y != y:
            return nan
        if x == y:
            return y
        x_bits, y_bits = int(x.view(bits)), int(y.view(bits))
        if not x_bits & ~sign:
            stepped = (y_bits & sign) | 1
        elif (x_bits & ~sign) > (y_bits & ~sign) or (x_bits ^ y_bits) & sign:
            stepped = x_bits - 1
        else:
            stepped = x_bits + 1
        return bits(stepped).view(dtype)

    return run


@op("chlo.next_after", elementwise=True, scalar=_next_after_of_scalars)
def next_after(info):
    """The representable value next to x in the direction of y (C++
    std::nextafter), by stepping x's bit pattern as XLA's decomposition does:
    y if x == y, NaN if either is NaN, the smallest subnormal signed like y if
    x is zero."""
    ttype = info.operand_types[0]
    if not ttype.is_float:  # chlo.broadcast_next_after's verifier lets complex operands through
        raise info.error(f"expects floating-point operands, got {ttype}")
    dtype = ttype.dtype
    if ttype.bit_width != 8 * dtype.itemsize:
        raise info.unsupported(f"element type {ttype.element_type}")
    bits = unsigned_view_dtype(dtype)
    sign = bits.type(1 << (8 * dtype.itemsize - 1))
    one, nan = bits.type(1), np.array(np.nan, dtype)

    def run(x, y):
        x_bits = contiguous(x).view(bits)
        y_bits = contiguous(y).view(bits)
        x_magnitude, y_magnitude = x_bits & ~sign, y_bits & ~sign
        toward_zero = (x_magnitude > y_magnitude) | (((x_bits ^ y_bits) & sign) != 0)
        stepped = np.where(toward_zero, x_bits - one, x_bits + one)
        stepped = np.where(x_magnitude == 0, (y_bits & sign) | one, stepped).view(dtype)
        result = np.where(x == y, y, stepped)
        return np.where(np.isnan(x) | np.isnan(y), nan, result)

    return run


@op("chlo.mulhi", elementwise=True)
def mulhi(info):
    """The high N bits of the 2N-bit product of two N-bit integers."""
    ttype = info.operand_types[0]
    if not ttype.is_integer:
        raise info.unsupported(f"element type {ttype.element_type} is not an integer")
    dtype, bits, signed = ttype.dtype, ttype.bit_width, ttype.kind == "signed"
    if bits == 64:
        return lambda lhs, rhs: _mulhi64(lhs, rhs, signed)
    wide = np.dtype(np.int64 if signed else np.uint64)
    return lambda lhs, rhs: ((np.asarray(lhs).astype(wide) * np.asarray(rhs).astype(wide)) >> bits).astype(dtype)


def _mulhi64(lhs, rhs, signed: bool):
    """High word of a 64 x 64-bit product from 32-bit halves; for signed operands
    the unsigned high word is corrected by the operands' sign bits."""
    a, b = np.asarray(lhs).view(np.uint64), np.asarray(rhs).view(np.uint64)
    low, shift = np.uint64(0xFFFFFFFF), np.uint64(32)
    a_lo, a_hi, b_lo, b_hi = a & low, a >> shift, b & low, b >> shift
    hi_lo = a_hi * b_lo
    middle = ((a_lo * b_lo) >> shift) + (hi_lo & low) + a_lo * b_hi
    high = a_hi * b_hi + (hi_lo >> shift) + (middle >> shift)
    if not signed:
        return high
    zero = np.uint64(0)
    high = high - np.where(lhs < 0, b, zero) - np.where(rhs < 0, a, zero)
    return high.view(np.int64)


# ------------------------------------------------------------------ constants


@op("chlo.constant")
def constant(info):
    value = info.attr("value")
    return lambda: value


@op("chlo.constant_like")
def constant_like(info):
    """A splat of ``value`` in the shape of the operand."""
    value = info.attr("value")
    result = info.result_type
    if isinstance(value, str):
        raise info.error(f"cannot decode constant value {value}")
    scalar = np.array(value).astype(result.dtype)
    return lambda operand: np.full(np.shape(operand), scalar, result.dtype)


# ------------------------------------------------------------------ broadcasting ops


def _broadcasting(target: str, attributes=lambda info: {}):
    """Builder of a ``chlo.broadcast_*`` op: broadcast the operands to the result
    shape, then run ``target`` (its registered builder, given the broadcast
    operand types and the attributes ``attributes(info)`` returns).

    Without ``broadcast_dimensions``, numpy-style broadcasting (ranks padded on
    the left, size-1 dimensions stretched). With it, dimension i of the
    lower-rank operand (lhs when the ranks are equal) is dimension
    ``broadcast_dimensions[i]`` of the result (ChloOps.cpp, type inference).
    """

    def build(info):
        builder = op_builder(target)
        if builder is None:
            raise info.unsupported(f"needs {target}, which is not supported yet")
        result_shape = info.result_type.shape
        rank = len(result_shape)
        layouts = [_operand_layout(info, i, rank) for i in range(len(info.operand_types))]
        operand_types = tuple(TensorType.of(result_shape, t.element_type) for t in info.operand_types)
        inner = builder(info.derived(target, attributes(info), operand_types, info.result_types))

        def run(*operands):
            return inner(*np.broadcast_arrays(*[layout(x) for x, layout in zip(operands, layouts)]))

        return run

    return build


def _operand_layout(info, index: int, rank: int):
    """Operand ``index`` -> the same data with the result's rank, its dimensions
    where the result has them (for broadcasting)."""
    operand_rank = info.operand_types[index].rank
    dims = info.attributes.get("broadcast_dimensions")
    lhs_rank, rhs_rank = (t.rank for t in info.operand_types[:2])
    smaller = 0 if lhs_rank <= rhs_rank else 1
    if dims is None or index != smaller:
        dims = range(rank - operand_rank, rank)  # numpy-style: padded on the left
    dims = tuple(dims)
    if len(dims) != operand_rank:
        raise info.error(f"broadcast_dimensions {dims} do not match operand rank {operand_rank}")
    order = tuple(int(i) for i in np.argsort(dims))
    placed = sorted(dims)

    def layout(x):
        x = np.transpose(x, order)
        full = [1] * rank
        for dim, size in zip(placed, x.shape):
            full[dim] = size
        return x.reshape(full)

    return layout


def _compare_attributes(info):
    attributes = {"comparison_direction": info.attr("comparison_direction")}
    compare_type = info.attributes.get("compare_type")
    if compare_type is not None and compare_type != "NOTYPE":
        attributes["compare_type"] = compare_type
    return attributes


for _name, _target in [
    ("add", "stablehlo.add"), ("and", "stablehlo.and"), ("atan2", "stablehlo.atan2"),
    ("complex", "stablehlo.complex"), ("divide", "stablehlo.divide"), ("maximum", "stablehlo.maximum"),
    ("minimum", "stablehlo.minimum"), ("multiply", "stablehlo.multiply"), ("or", "stablehlo.or"),
    ("power", "stablehlo.power"), ("remainder", "stablehlo.remainder"),
    ("shift_left", "stablehlo.shift_left"),
    ("shift_right_arithmetic", "stablehlo.shift_right_arithmetic"),
    ("shift_right_logical", "stablehlo.shift_right_logical"), ("subtract", "stablehlo.subtract"),
    ("xor", "stablehlo.xor"), ("next_after", "chlo.next_after"), ("polygamma", "chlo.polygamma"),
    ("zeta", "chlo.zeta"),
]:
    op(f"chlo.broadcast_{_name}")(_broadcasting(_target))
op("chlo.broadcast_compare")(_broadcasting("stablehlo.compare", _compare_attributes))
op("chlo.broadcast_select")(_broadcasting("stablehlo.select"))


# ------------------------------------------------------------------ top_k


@op("chlo.top_k", variadic=True)
def top_k(info):
    """The k largest entries along the last dimension and their indices, largest
    first; equal entries in index order. Floats are ordered as XLA's sort with a
    TOTALORDER comparator orders them: +NaN first, -NaN last, +0.0 before -0.0."""
    k = info.attr("k")
    ttype = info.operand_types[0]
    if ttype.is_complex:
        raise info.unsupported("complex operands have no order")
    if ttype.is_float:
        key = total_order_key
    else:
        compute = integer_compute_dtype(ttype.dtype)
        key = lambda x: np.asarray(x).astype(compute)  # noqa: E731 - one of two keys, as the branch above
    index_dtype = info.result_types[1].dtype

    def run(operand):
        order = np.argsort(~key(operand), axis=-1, kind="stable")[..., :k]
        return np.take_along_axis(operand, order, axis=-1), order.astype(index_dtype)

    return run


# ------------------------------------------------------------------ ragged_dot


@op("chlo.ragged_dot")
def ragged_dot(info):
    """dot_general where one lhs dimension is split into groups of consecutive
    sizes ``group_sizes`` (ChloOps.td, ragged_dot; its shape is [prefix..., g],
    or [g] for every prefix). By the kind of the lhs ragged dimension:

    1. non-contracting (m): each row uses the rhs slice of its group (the rhs
       group dimension); rows past the last group are zero.
       [b,m,k] x [g,b,k,n] -> [b,m,n].
    2. contracting (k): one result per group, contracting only that group's
       part of k. [b,m,k] x [b,k,n] -> [g,b,m,n].
    3. batch (b): a plain batched dot_general. [b,m,k] x [b,k,n] -> [b,m,n].

    Only each row's own group enters its result (as in a grouped matmul kernel),
    so an inf or NaN in another group's rhs does not leak into it. Products and
    sums are those of stablehlo.dot_general, whose builder does the work.
    """
    numbers = info.attr("ragged_dot_dimension_numbers")
    lhs_batch, rhs_batch = numbers.lhs_batching_dimensions, numbers.rhs_batching_dimensions
    lhs_contract, rhs_contract = numbers.lhs_contracting_dimensions, numbers.rhs_contracting_dimensions
    (ragged,) = numbers.lhs_ragged_dimensions
    lhs_type, rhs_type, sizes_type = info.operand_types
    groups = sizes_type.shape[-1]

    def dot(lhs_b, rhs_b, lhs_c, rhs_c, lhs_shape, rhs_shape, result_shape):
        """The dot_general runner for these dimension numbers and shapes."""
        dot_info = info.derived("stablehlo.dot_general",
                                {"dot_dimension_numbers": DotDimensionNumbers(lhs_b, rhs_b, lhs_c, rhs_c)},
                                (TensorType.of(lhs_shape, lhs_type.element_type),
                                 TensorType.of(rhs_shape, rhs_type.element_type)),
                                (TensorType.of(result_shape, info.result_type.element_type),))
        return op_builder("stablehlo.dot_general")(dot_info)

    if ragged in lhs_batch:
        batched = dot(lhs_batch, rhs_batch, lhs_contract, rhs_contract, lhs_type.shape, rhs_type.shape,
                      info.result_type.shape)
        return lambda lhs, rhs, group_sizes: batched(lhs, rhs)
    shift = lambda dims: tuple(d + 1 for d in dims)  # noqa: E731  (a group dimension in front)
    grouped_lhs = (groups, *lhs_type.shape)
    if ragged in lhs_contract:
        position = lhs_contract.index(ragged)
        prefix = lhs_batch + lhs_contract[:position]
        lhs_mask = _group_mask(sizes_type, prefix, ragged, lhs_type.rank)
        rhs_prefix = rhs_batch + rhs_contract[:position]
        rhs_mask = _group_mask(sizes_type, rhs_prefix, rhs_contract[position], rhs_type.rank)
        product = dot((0, *shift(lhs_batch)), (0, *shift(rhs_batch)), shift(lhs_contract),
                      shift(rhs_contract), grouped_lhs, (groups, *rhs_type.shape), info.result_type.shape)
        zero = np.zeros((), lhs_type.dtype), np.zeros((), rhs_type.dtype)

        def contracting(lhs, rhs, group_sizes):
            return product(np.where(lhs_mask(group_sizes, lhs.shape), lhs, zero[0]),
                           np.where(rhs_mask(group_sizes, rhs.shape), rhs, zero[1]))

        return contracting

    (rhs_group,) = numbers.rhs_group_dimensions
    lhs_free = [d for d in range(lhs_type.rank) if d not in lhs_batch + lhs_contract]
    prefix = lhs_batch + tuple(d for d in lhs_free if d < ragged)
    result_rank = info.result_type.rank
    rows_rank = len(lhs_batch) + len(lhs_free)
    row_mask = _group_mask(sizes_type, tuple(range(len(prefix))), len(lhs_batch) + lhs_free.index(ragged),
                           rows_rank)
    product = dot((0, *shift(lhs_batch)), (rhs_group, *rhs_batch), shift(lhs_contract), rhs_contract,
                  grouped_lhs, rhs_type.shape, (groups, *info.result_type.shape))
    result_dtype = info.result_type.dtype

    def non_contracting(lhs, rhs, group_sizes):
        per_group = product(np.broadcast_to(lhs, (groups, *lhs.shape)), rhs)
        rows = per_group.shape[1:rows_rank + 1]
        mask = np.broadcast_to(row_mask(group_sizes, rows), (groups, *rows))
        group = mask.argmax(axis=0).reshape((1, *rows) + (1,) * (result_rank - rows_rank))
        inside = mask.any(axis=0).reshape(rows + (1,) * (result_rank - rows_rank))
        chosen = np.take_along_axis(per_group, group, axis=0)[0]
        return np.where(inside, chosen, np.zeros((), result_dtype))

    return non_contracting


def _group_mask(sizes_type, prefix_dims, ragged_dim, rank):
    """A function of (group_sizes, shape) -> bool array [g, *shape-like]: whether
    each index of dimension ``ragged_dim`` lies in group g. group_sizes has
    shape [sizes of ``prefix_dims``..., g] (or [g], the same for every prefix)."""
    prefix_dims = prefix_dims if sizes_type.rank > 1 else ()
    relevant = (*prefix_dims, ragged_dim)
    order = np.argsort(relevant)  # the relevant dims in increasing order, as in the operand

    def mask(group_sizes, shape):
        sizes = np.asarray(group_sizes).astype(np.int64)
        ends = np.cumsum(sizes, axis=-1)
        starts = ends - sizes
        index = np.arange(shape[ragged_dim])
        inside = (np.moveaxis(starts, -1, 0)[..., None] <= index) & (index < np.moveaxis(ends, -1, 0)[..., None])
        inside = np.transpose(inside, (0, *(order + 1)))
        return inside.reshape((inside.shape[0],) + tuple(shape[d] if d in relevant else 1 for d in range(rank)))

    return mask


# ------------------------------------------------------------------ scan


@op("chlo.scan", variadic=True)
def scan(info):
    """Run the body along ``dimension`` (from the end if ``is_reverse``): it takes
    the inputs' slices at the position and the carries, and returns the outputs'
    slices at the position, then the new carries. Results: the outputs stacked
    along ``dimension``, then the final carries."""
    n_inputs, n_carries = info.attr("operandSegmentSizes")
    dimension = info.attr("dimension")
    reverse = info.attr("is_reverse", False)
    output_types = info.result_types[:len(info.result_types) - n_carries]
    length = info.attributes.get("scan_dim_size")
    if length is None and output_types:
        length = output_types[0].shape[dimension]

    def run(regions, *operands):
        inputs, carries = operands[:n_inputs], operands[n_inputs:]
        size = inputs[0].shape[dimension] if inputs else length
        positions = range(size - 1, -1, -1) if reverse else range(size)
        slices = [[] for _ in output_types]
        for position in positions:
            results = regions[0](*[np.take(x, position, axis=dimension) for x in inputs], *carries)
            for collected, value in zip(slices, results):
                collected.append(value)
            carries = results[len(output_types):]
        outputs = [np.stack(s[::-1] if reverse else s, axis=dimension) if s else np.zeros(t.shape, t.dtype)
                   for s, t in zip(slices, output_types)]
        return (*outputs, *carries)

    return run
