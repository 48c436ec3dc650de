"""Accumulation order (docs/semantics.md, "Accumulation"): under the semantics
"spec", float and complex sums of dot_general, convolution, reduce and
reduce_window are left folds in the spec's index order, every product and sum
rounded to the element type, so the results are bit for bit those of the C++
reference interpreter. Under "xla" (the JAX device's), ``reduce`` sums as XLA
CPU schedules it, bit for bit XLA CPU's results where that schedule is known.

The inputs mix magnitudes over many binades so that sums cancel: a different
order (pairwise, BLAS's blocks, a wider accumulator) lands ULPs away. Each case
also runs with tiny fold buffers, so the chunked paths give the same bits.
"""

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

import stablehlo_interp as si
from oracles import assert_same, run_xla_text, same_as_reference, tensor_type
from test_sharding_device import mesh, on_both
from stablehlo_interp.engine.accumulation import orders
from stablehlo_interp.ops import linalg

# Complex products are left out: the C++ reference interpreter's complex multiply
# rounds differently from the textbook formula NumPy uses (1 ULP in about one
# product in seven); complex sums are componentwise and are compared.
ELEMENT = {np.float32: "f32", np.float64: "f64", np.complex64: "complex<f32>"}


@pytest.fixture(params=["whole", "chunked"])
def fold_buffer(request, monkeypatch):
    """Folds staged in the default buffers, or in buffers of a few elements."""
    if request.param == "chunked":
        monkeypatch.setattr(orders, "FOLD_BUFFER_ELEMENTS", 5)
        monkeypatch.setattr(linalg, "FOLD_BUFFER_ELEMENTS", 5)


def cancelling(shape, dtype, seed):
    """Values whose sums cancel: random signs, magnitudes 2**-12 ... 2**12."""
    rng = np.random.default_rng(seed)

    def real():
        return rng.standard_normal(shape) * 2.0 ** rng.integers(-12, 13, shape)

    values = real() + 1j * real() if np.dtype(dtype).kind == "c" else real()
    return values.astype(dtype)


def same_as_reference_via_reals(reference, arguments, op: str, result_type: str, *values):
    """``%0 = op`` on ``arguments`` (``[(name, type), ...]``) here and on the C++
    reference interpreter, bit for bit. The reference harness passes and returns
    real tensors only: a complex argument comes in as its real and imaginary
    parts, a complex result goes out as its parts."""
    signature, prologue, inputs = [], [], []
    for (name, ttype), value in zip(arguments, values):
        if "complex" in ttype:
            part = ttype.replace("complex<f32>", "f32")
            signature += [f"%{name}_re: {part}", f"%{name}_im: {part}"]
            prologue.append(f"  %{name} = stablehlo.complex %{name}_re, %{name}_im : {ttype}")
            inputs += [np.real(value), np.imag(value)]
        else:
            signature.append(f"%{name}: {ttype}")
            inputs.append(value)
    lines = [*prologue, f"  %0 = {op}"]
    if "complex" in result_type:
        part = result_type.replace("complex<f32>", "f32")
        lines += [f"  %re = stablehlo.real %0 : ({result_type}) -> {part}",
                  f"  %im = stablehlo.imag %0 : ({result_type}) -> {part}", f"  return %re, %im : {part}, {part}"]
        results = f"({part}, {part})"
    else:
        lines.append(f"  return %0 : {result_type}")
        results = result_type
    text = "\n".join([f"func.func @main({', '.join(signature)}) -> {results} {{", *lines, "}"])
    same_as_reference(reference, text, *inputs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lhs_shape, rhs_shape, dims, result_shape", [
    ((4, 9), (9, 3), "contracting_dims = [1] x [0]", (4, 3)),
    ((40,), (40,), "contracting_dims = [0] x [0]", ()),  # one result element: a running sum
    ((2, 3, 5, 4), (4, 2, 5, 3), "batching_dims = [0] x [1], contracting_dims = [2, 3] x [2, 0]", (2, 3, 3)),
])
def test_dot_general_sums_like_the_reference(reference, fold_buffer, dtype, lhs_shape, rhs_shape, dims,
                                             result_shape):
    element = ELEMENT[dtype]
    lhs, rhs = cancelling(lhs_shape, dtype, 1), cancelling(rhs_shape, dtype, 2)
    lt, rt, ot = (tensor_type(s, element) for s in (lhs_shape, rhs_shape, result_shape))
    same_as_reference_via_reals(reference, [("a", lt), ("b", rt)],
                                f"stablehlo.dot_general %a, %b, {dims} : ({lt}, {rt}) -> {ot}", ot, lhs, rhs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("window, result_shape", [
    ("stride = [1, 2], pad = [[1, 0], [0, 2]], rhs_dilate = [1, 2]", (2, 6, 3, 6)),
    ("reverse = [true, false]", (2, 5, 5, 6)),  # the input's window is reversed, the sum follows the kernel
    ("lhs_dilate = [2, 1], reverse = [false, true]", (2, 11, 5, 6)),
])
def test_convolution_sums_like_the_reference(reference, fold_buffer, dtype, window, result_shape):
    element = ELEMENT[dtype]
    lhs, rhs = cancelling((2, 7, 6, 4), dtype, 3), cancelling((3, 2, 2, 6), dtype, 4)
    lt, rt, ot = (tensor_type(s, element) for s in (lhs.shape, rhs.shape, result_shape))
    same_as_reference_via_reals(
        reference, [("a", lt), ("b", rt)],
        f"stablehlo.convolution(%a, %b) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], "
        f"window = {{{window}}} {{batch_group_count = 1 : i64, feature_group_count = 2 : i64}} : ({lt}, {rt}) -> {ot}",
        ot, lhs, rhs)


@pytest.mark.parametrize("dtype, body", [(np.float32, "add"), (np.float64, "add"), (np.complex64, "add"),
                                         (np.float32, "multiply"), (np.float64, "multiply")])
@pytest.mark.parametrize("dimensions, result_shape", [([1], (5, 3)), ([2, 0], (6,)), ([0, 1, 2], ()), ([2], (5, 6)),
                                                     ([1, 2], (5,))])
def test_reduce_folds_like_the_reference(reference, fold_buffer, dtype, dimensions, result_shape, body):
    element = ELEMENT[dtype]
    values = cancelling((5, 6, 3), dtype, 5)
    if body == "multiply":  # products of values near 1, so they neither vanish nor overflow
        values = (1 + values / 8192).astype(dtype)
    vt, rt, st = tensor_type(values.shape, element), tensor_type(result_shape, element), f"tensor<{element}>"
    same_as_reference_via_reals(
        reference, [("x", vt), ("init", st)],
        f"stablehlo.reduce(%x init: %init) applies stablehlo.{body} across dimensions = {dimensions} : ({vt}, {st}) -> {rt}",
        rt, values, np.asarray(cancelling((), dtype, 6)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("attributes, result_shape", [
    ("window_dimensions = array<i64: 2, 2>", (5, 6)),
    ("window_dimensions = array<i64: 3, 2>, window_strides = array<i64: 2, 1>, "
     "base_dilations = array<i64: 1, 2>, window_dilations = array<i64: 2, 1>, "
     "padding = dense<[[1, 2], [0, 1]]> : tensor<2x2xi64>", (3, 13)),
    ("window_dimensions = array<i64: 6, 1>, padding = dense<[[5, 0], [0, 0]]> : tensor<2x2xi64>", (6, 7)),
])
def test_reduce_window_adds_like_the_reference(reference, fold_buffer, dtype, attributes, result_shape):
    element = ELEMENT[dtype]
    values = cancelling((6, 7), dtype, 7)
    vt, rt, st = tensor_type(values.shape, element), tensor_type(result_shape, element), f"tensor<{element}>"
    text = f"""func.func @main(%x: {vt}, %init: {st}) -> {rt} {{
  %0 = "stablehlo.reduce_window"(%x, %init) <{{{attributes}}}> ({{
  ^bb0(%a: {st}, %b: {st}):
    %s = stablehlo.add %a, %b : {st}
    stablehlo.return %s : {st}
  }}) : ({vt}, {st}) -> {rt}
  return %0 : {rt}
}}"""
    same_as_reference(reference, text, values, np.asarray(cancelling((), dtype, 8)))



@pytest.mark.parametrize("init", [0.0, -0.0])
def test_reduce_of_negative_zeros_keeps_the_folds_sign(reference, fold_buffer, init):
    """(init + -0.0) + -0.0 ...: +0.0 from a +0.0 init, -0.0 from a -0.0 init."""
    values = np.full((3, 4), -0.0, np.float32)
    text = """func.func @main(%x: tensor<3x4xf32>, %init: tensor<f32>) -> tensor<4xf32> {
  %0 = stablehlo.reduce(%x init: %init) applies stablehlo.add across dimensions = [0] : (tensor<3x4xf32>, tensor<f32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}"""
    (result,) = same_as_reference(reference, text, values, np.float32(init))
    assert np.all(np.signbit(result) == np.signbit(init))


# ------------------------------------------- reductions of leading axes: NumPy's own reduce

FOLD_ELEMENT = {np.float16: "f16", ml_dtypes.bfloat16: "bf16", np.float32: "f32", np.float64: "f64"}
LEADING_AXES = [((6, 5), [0]), ((4, 3, 2), [0, 1]), ((5, 2, 3), [0]), ((700, 2), [0])]


def with_specials(values):
    """``values`` (reduced axes first) with, across the kept elements: a NaN in the
    first, +inf then -inf (a NaN) in the second, only -0.0 in the third, -0.0 here
    and there in the others."""
    rows = values.reshape(len(values), -1).copy()
    rows[len(rows) // 2, 0] = np.nan
    rows[1, 1], rows[-1, 1] = np.inf, -np.inf
    if rows.shape[1] > 2:
        rows[:, 2] = -0.0
        rows[::3, 3:] = -0.0
    return rows.reshape(values.shape)


def left_fold(ufunc, values, axes, init, dtype):
    """The spec's fold written out: ``acc = acc ∘ v`` over the reduced elements in
    row-major order, one rounded NumPy operation on all the results at a time."""
    kept = [d for d in range(values.ndim) if d not in axes]
    terms = np.transpose(values, sorted(axes) + kept).reshape((-1,) + tuple(values.shape[d] for d in kept))
    accumulator = np.full(terms.shape[1:], init, dtype)
    with np.errstate(all="ignore"):  # inf and NaN are values here
        for term in terms:
            accumulator = ufunc(accumulator, term).astype(dtype)
    return accumulator


@pytest.mark.parametrize("dtype", FOLD_ELEMENT)
@pytest.mark.parametrize("shape, dimensions", LEADING_AXES)
@pytest.mark.parametrize("init", [0.0, -0.0, "cancelling"])
def test_reduce_of_leading_axes_adds_like_the_reference(reference, dtype, shape, dimensions, init):
    """NumPy's ``np.add.reduce`` over the leading axes of a C-contiguous array adds whole
    rows one after another, each sum rounded to the element type, from ``initial``:
    the spec's left fold, bit for bit the C++ reference interpreter's, in f16 and bf16
    too (whose adds NumPy and ml_dtypes compute in f32 and round: with 24 bits for 11
    and 8 that double rounding changes no sum), with NaN, infinities and signed zeros."""
    element = FOLD_ELEMENT[dtype]
    values = with_specials(cancelling(shape, dtype, 13))
    init = cancelling((), dtype, 14) if init == "cancelling" else np.array(init, dtype)
    result_shape = shape[len(dimensions):]
    vt, rt, st = tensor_type(shape, element), tensor_type(result_shape, element), f"tensor<{element}>"
    text = f"""func.func @main(%x: {vt}, %init: {st}) -> {rt} {{
  %0 = stablehlo.reduce(%x init: %init) applies stablehlo.add across dimensions = {dimensions} : ({vt}, {st}) -> {rt}
  return %0 : {rt}
}}"""
    (result,) = same_as_reference(reference, text, values, init)
    assert_same(result, left_fold(np.add, values, dimensions, init, dtype))


@pytest.mark.parametrize("dtype", [*FOLD_ELEMENT, np.complex64])
@pytest.mark.parametrize("ufunc", [np.add, np.multiply])
@pytest.mark.parametrize("shape, dimensions", [*LEADING_AXES, ((3000, 4), [0]), ((40, 50, 3), [0, 1]), ((2, 3), [0])])
def test_fold_reduce_of_leading_axes_is_the_left_fold(dtype, ufunc, shape, dimensions):
    """orders.fold_reduce's path for leading axes against the fold written out, on
    arrays larger than NumPy's buffers (8192 elements) and on the narrowest rows."""
    assert_folds_left(ufunc, with_specials(cancelling(shape, dtype, 15)), dimensions, dtype)


def assert_folds_left(ufunc, values, dimensions, dtype):
    """orders.fold_reduce of ``values`` (scaled for ``ufunc``) from three inits: the fold
    written out, bit for bit."""
    with np.errstate(all="ignore"):  # complex infinities divide into NaN parts
        if ufunc is np.multiply:  # products of values near 1, so they neither vanish nor overflow
            values = (1 + values / 8192).astype(dtype)
        elif dtype is np.float16:  # sums of thousands of terms that stay below f16's largest, 65504
            values = (values / 64).astype(dtype)
    for init in (np.array(-0.0, dtype), np.array(0.0, dtype), cancelling((), dtype, 16)):
        expected = left_fold(ufunc, values, dimensions, init, dtype)
        with np.errstate(all="ignore"):
            actual = orders.fold_reduce(ufunc, values, dimensions, init, np.dtype(dtype))
        assert_same(actual, expected, context=f"init {init}: ")


@pytest.mark.parametrize("dtype", [*FOLD_ELEMENT, np.complex64])
@pytest.mark.parametrize("ufunc", [np.add, np.multiply])
@pytest.mark.parametrize("outer, reduced", [((2,), (3,)), ((5, 7), (11, 200)), ((2, 40000), (3,)),
                                            ((2 * (orders._TRANSPOSE_BLOCK_ELEMENTS // 3) + 1,), (3,)),
                                            ((3, 3), (5000, 1))])
def test_fold_reduce_of_trailing_axes_is_the_left_fold(dtype, ufunc, outer, reduced):
    """orders.fold_reduce's path for trailing axes (``x.sum(-1)``: rows folded a block of
    rows at a time) against the fold written out: one block, several, a last block of
    one row left over (folded with the one before), rows longer than a block."""
    first = with_specials(cancelling(reduced + outer, dtype, 17))   # (with_specials: reduced axes first)
    values = np.ascontiguousarray(np.transpose(first, [*range(len(reduced), first.ndim), *range(len(reduced))]))
    assert_folds_left(ufunc, values, list(range(len(outer), values.ndim)), dtype)


# ------------------------------------------------------------ semantics "xla": XLA CPU's order

@pytest.mark.parametrize("dtype, body", [(np.float32, "add"), (np.float64, "add"), (np.complex64, "add"),
                                         (np.float32, "multiply")])
@pytest.mark.parametrize("size", [0, 1, 7, 33, 300])
def test_a_whole_vector_folds_like_the_reference(reference, dtype, body, size):
    """``jnp.sum(v)``: the whole vector folded left from init (one ``accumulate``)."""
    element = ELEMENT[dtype]
    values = cancelling((size,), dtype, 7)
    if body == "multiply":
        values = (1 + values / 8192).astype(dtype)
    vt, st = tensor_type(values.shape, element), f"tensor<{element}>"
    same_as_reference_via_reals(
        reference, [("x", vt), ("init", st)],
        f"stablehlo.reduce(%x init: %init) applies stablehlo.{body} across dimensions = [0] : ({vt}, {st}) -> {st}",
        st, values, np.asarray(cancelling((), dtype, 8)))


XLA_ELEMENT = {np.float32: "f32", np.float64: "f64", np.complex64: "complex<f32>", np.complex128: "complex<f64>"}


@pytest.mark.parametrize("dtype, body", [(np.float32, "add"), (np.float64, "add"), (np.complex64, "add"),
                                         (np.complex128, "add"), (np.float32, "multiply"), (np.float64, "multiply")])
@pytest.mark.parametrize("shape, dimensions", [
    ((4, 8), [0, 1]),        # rows summed in the lanes of a vector (or not: AVX-512 and complex), then by halves
    ((4, 5), [0, 1]),
    ((8, 8), [0, 1]),        # more rows than some hosts' lanes: rows 0, 4 in lane 0 ...
    ((16, 32), [0, 1]),      # AVX-512: a left fold; AVX2: 8 f32 lanes
    ((8, 5), [0, 1]),
    ((2, 16, 8), [1, 2]),
    ((7, 5), [0, 1]),        # 7 rows do not fill a vector: a left fold
    ((3, 4, 5), [1, 2]),
    ((5, 6, 7), [0, 1]),
    ((3, 100), [1]),         # TreeReductionRewriter: windows of 32 (padded 14 + 14), then their sums
    ((50, 40), [0]),
    ((40, 50), [0, 1]),      # 32x32 windows
    ((3, 100, 7), [1]),
    ((1500,), [0]),          # two levels of windows
    ((5,), [0]),             # a whole vector of at most 32: a left fold (ops/reduction.py's _vector_fold)
    ((32,), [0]),
    ((33,), [0]),            # one more: windows
])
def test_reduce_sums_like_xla_cpu_under_xla_semantics(dtype, body, shape, dimensions):
    """Complex products are left out: XLA's complex multiply rounds otherwise (see the
    module docstring)."""
    element = XLA_ELEMENT[dtype]
    values = cancelling(shape, dtype, 11)
    if body == "multiply":  # products of values near 1, so they neither vanish nor overflow
        values = (1 + values / 8192).astype(dtype)
    result_shape = tuple(size for d, size in enumerate(shape) if d not in dimensions)
    vt, rt, st = tensor_type(shape, element), tensor_type(result_shape, element), f"tensor<{element}>"
    identity = {"add": "0.0", "multiply": "1.0"}[body]
    identity = f"({identity}, 0.0)" if np.dtype(dtype).kind == "c" else identity
    text = f"""func.func @main(%x: {vt}) -> {rt} {{
  %init = stablehlo.constant dense<{identity}> : {st}
  %0 = stablehlo.reduce(%x init: %init) applies stablehlo.{body} across dimensions = {dimensions} : ({vt}, {st}) -> {rt}
  return %0 : {rt}
}}"""
    (expected,) = run_xla_text(text, values)
    (actual,) = si.run(text, values, semantics="xla")
    assert_same(actual, expected)


# XLA's --xla_cpu_max_isa values and the CPU feature (NumPy's name) each needs. jaxlib
# needs AVX (and XLA CPU under SSE4_2 cannot compile f16 code), so AVX is the least.
XLA_CPU_INSTRUCTION_SETS = {"AVX": "AVX", "AVX2": "AVX2", "AVX512": "AVX512F"}


@pytest.mark.parametrize("instruction_set", XLA_CPU_INSTRUCTION_SETS)
def test_reduce_sums_like_xla_cpu_under_each_instruction_set_of_this_host(instruction_set):
    """XLA CPU's vector code, and so its order of a sum, follows the host's instruction
    set (``--xla_cpu_max_isa`` caps it): the cases above, in a child process whose XLA
    is limited to ``instruction_set``, give XLA's bits there too."""
    features = np._core._multiarray_umath.__cpu_features__
    if not features.get(XLA_CPU_INSTRUCTION_SETS[instruction_set]):
        pytest.skip(f"this host has no {instruction_set}")
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_max_isa={instruction_set}"
    try:
        child = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
             "-k", "test_reduce_sums_like_xla_cpu_under_xla_semantics"],
            env={**os.environ, "XLA_FLAGS": flags}, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(f"the child did not end in 600 s; its output so far:\n{timeout.stdout or ''}")
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
    assert " passed" in child.stdout.splitlines()[-1], child.stdout[-2000:]


def test_the_orders_differ_on_a_cancelling_sum():
    """The 32-term sum of the JAX test test_check_rep_false_grads: XLA CPU's order and the
    spec's left fold round differently (so the test above can tell them apart)."""
    text = """func.func @main(%x: tensor<4x8xf32>) -> tensor<f32> {
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [0, 1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}"""
    values = cancelling((4, 8), np.float32, 11)
    (expected,) = run_xla_text(text, values)
    (xla_order,), (spec_order,) = si.run(text, values, semantics="xla"), si.run(text, values)
    assert xla_order == expected != spec_order


def test_the_device_sums_a_sharded_array_as_xla_cpu():
    """``out.sum()`` of a (4, 8) array sharded over 4 devices (JAX's
    test_check_rep_false_grads differentiates it by finite differences): the same
    bits on interp as on XLA CPU."""
    def build(platform):
        m = mesh(platform, (4,), ("x",))
        q = jax.device_put(cancelling((4, 8), np.float32, 12), NamedSharding(m, P("x", None)))
        out = jax.shard_map(lambda q: q * 3, mesh=m, in_specs=P("x", None), out_specs=P("x", None))(q)
        return jnp.sum(out)

    on_both(build)
