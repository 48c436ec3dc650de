"""gather, scatter, select_and_scatter, dynamic_gather and torch_index_select
against XLA's CPU backend (JAX programs and single-op MLIR modules) and the C++
reference interpreter, on random configurations valid per the spec
(tests/strategies.py) and on the programs JAX emits.

Where XLA and the spec differ, the spec wins and the test says so:
* scatter skips out-of-bounds updates element by element (XLA: whole windows);
* scatter with an empty index vector applies every update (XLA: only one);
* the order of duplicate updates is implementation-defined; ours is XLA's
  (scatter index outermost), the reference interpreter's is row-major over
  the updates, so order-sensitive comparisons with it use layouts where the
  two agree.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from jax import lax

import stablehlo_interp as si
import strategies
from oracles import (assert_same, dtype_id, edge_values, run_interp_text, run_xla_text, same_as_reference,
                     same_as_xla, same_as_xla_text)
from stablehlo_interp.ir.types import element_type_of
from stablehlo_interp.ops import indexing


def values(shape, dtype, seed=0):
    count = int(np.prod(shape))
    return np.resize(edge_values(dtype, max(count, 1), seed), shape).astype(dtype)


def iota(shape, dtype=np.int32, scale=1, offset=0):
    return (np.arange(int(np.prod(shape))) * scale + offset).astype(dtype).reshape(shape)


DTYPES = [np.bool_, np.int8, np.uint16, np.int32, np.int64, ml_dtypes.int4, ml_dtypes.uint4,
          ml_dtypes.bfloat16, np.float16, np.float32, np.float64, np.complex64,
          ml_dtypes.float8_e4m3fn]

# ------------------------------------------------------------------------ gather


@given(strategies.gather_configs())
def test_gather_random_configs_match_xla_and_reference(reference, config):
    operand = iota(config.space.operand_shape)
    text = config.text("i32")
    same_as_xla_text(text, operand, config.start_indices)
    same_as_reference(reference, text, operand, config.start_indices)


GATHER_BATCHED = strategies.GatherConfig(
    strategies.IndexSpace(operand_shape=(2, 3, 4, 2), operand_batching_dims=(0,), indices_batching_dims=(1,),
                          index_map=(2, 1), index_vector_dim=3, indices_shape=(2, 2, 3, 2), batch_shape=(2, 2, 3)),
    offset_dims=(3, 4), collapsed_slice_dims=(1,), slice_sizes=(1, 1, 2, 2),
    start_indices=np.array([[[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 9]]],
                            [[[0, 0], [2, 1], [2, 2]], [[1, 2], [0, 1], [1, 0]]]], np.int32),
    result_shape=(2, 2, 3, 2, 2))


def test_gather_spec_example(reference):
    """The batching example of the spec (index [0, 9] clamps)."""
    operand = iota((2, 3, 4, 2), offset=1)
    text = GATHER_BATCHED.text("i32")
    same_as_xla_text(text, operand, GATHER_BATCHED.start_indices)
    same_as_reference(reference, text, operand, GATHER_BATCHED.start_indices)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_gather_element_types(dtype):
    operand = values(GATHER_BATCHED.space.operand_shape, dtype, seed=3)
    same_as_xla_text(GATHER_BATCHED.text(element_type_of(dtype)), operand, GATHER_BATCHED.start_indices)


@pytest.mark.parametrize("index_dtype", [np.int8, np.uint8, np.int16, np.uint32, np.int64, np.uint64,
                                         ml_dtypes.int4], ids=dtype_id)
def test_gather_index_types_clamp(index_dtype):
    info = ml_dtypes.iinfo(index_dtype)
    starts = np.array([int(info.min), int(info.max), 0, 1, int(info.max) - 1], object).astype(index_dtype)[:, None]
    operand = iota((7, 3), np.float32)
    config = strategies.GatherConfig(
        strategies.IndexSpace((7, 3), (), (), (0,), 1, (5, 1), (5,)),
        offset_dims=(1, 2), collapsed_slice_dims=(), slice_sizes=(2, 3), start_indices=starts,
        result_shape=(5, 2, 3))
    same_as_xla_text(config.text("f32", element_type_of(index_dtype)), operand, starts)


def test_gather_degenerate_shapes():
    # Empty batch, zero-size slices, an operand dimension of size 0.
    operand = iota((3, 0, 4), np.float32)
    for starts, slice_sizes, offset_dims, result in [
            (np.zeros((0, 2), np.int32), (1, 0, 2), (1, 2), (0, 0, 2)),
            (np.array([[2, 0], [-5, 3]], np.int32), (1, 0, 4), (1, 2), (2, 0, 4))]:
        config = strategies.GatherConfig(
            strategies.IndexSpace((3, 0, 4), (), (), (0, 2), 1, starts.shape, starts.shape[:1]),
            offset_dims=offset_dims, collapsed_slice_dims=(0,), slice_sizes=slice_sizes, start_indices=starts,
            result_shape=result)
        same_as_xla_text(config.text("f32"), operand, starts)


def test_gather_indexing_no_operand_dimension(reference):
    """An empty start_index_map (index vectors of size 0): every slice is the whole
    operand, repeated over the batch (here between the offset dimensions) or taken once."""
    operand = iota((3, 4), np.float32, offset=1)
    for starts, index_vector_dim, batch_shape, offset_dims, result in [
            (np.zeros((2, 0), np.int32), 1, (2,), (0, 2), (3, 2, 4)),
            (np.zeros((0,), np.int32), 0, (), (0, 1), (3, 4))]:
        config = strategies.GatherConfig(
            strategies.IndexSpace((3, 4), (), (), (), index_vector_dim, starts.shape, batch_shape),
            offset_dims=offset_dims, collapsed_slice_dims=(), slice_sizes=(3, 4), start_indices=starts,
            result_shape=result)
        same_as_xla_text(config.text("f32"), operand, starts)
        same_as_reference(reference, config.text("f32"), operand, starts)


@pytest.mark.parametrize("mode", ["clip", "fill"])
def test_take_and_fancy_indexing(mode):
    table = values((9, 5, 3), np.float32)
    rows = np.array([0, 8, -1, 12, -20, 3], np.int32)
    cols = np.array([[1], [4]], np.int32)
    same_as_xla(lambda t, r: jnp.take(t, r, axis=0, mode=mode), table, rows)
    same_as_xla(lambda t, r, c: t.at[r[:2], :, c].get(mode=mode), table, rows, cols)
    same_as_xla(lambda t, r: t[r[:, None] % 9, 2:, ::2], table, rows)


def test_vmapped_dynamic_slice_uses_batching_dims():
    x = values((4, 6, 3), np.int32)
    starts = np.array([0, 5, 2, -1], np.int32)
    fn = jax.vmap(lambda row, s: lax.dynamic_slice_in_dim(row, s, 2, axis=0))
    assert "operand_batching_dims" in jax.jit(fn).lower(x, starts).as_text()
    same_as_xla(fn, x, starts)


def test_embedding_lookup_then_segment_sum():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((100, 8)).astype(np.float32)
    ids = rng.integers(0, 100, 300).astype(np.int32)
    segments = np.sort(rng.integers(0, 10, 300)).astype(np.int32)

    def model(table, ids, segments):
        return jax.ops.segment_sum(jnp.take(table, ids, axis=0), segments, 10)

    same_as_xla(model, table, ids, segments)


def test_dynamic_gather_matches_gather_on_xla():
    operand = values((5, 4, 3), np.float32)
    starts = np.array([[0, 1], [4, 3], [-2, 9]], np.int32)
    dims = ("#stablehlo.gather<offset_dims = [1, 2], collapsed_slice_dims = [0], start_index_map = [0, 1], "
            "index_vector_dim = 1>")
    types = "(tensor<5x4x3xf32>, tensor<3x2xi32>"
    dynamic = f"""
func.func @main(%x: tensor<5x4x3xf32>, %i: tensor<3x2xi32>, %s: tensor<3xi32>) -> tensor<3x2x3xf32> {{
  %0 = "stablehlo.dynamic_gather"(%x, %i, %s) {{dimension_numbers = {dims}}}
    : {types}, tensor<3xi32>) -> tensor<3x2x3xf32>
  return %0 : tensor<3x2x3xf32>
}}"""
    static = f"""
func.func @main(%x: tensor<5x4x3xf32>, %i: tensor<3x2xi32>) -> tensor<3x2x3xf32> {{
  %0 = "stablehlo.gather"(%x, %i) {{dimension_numbers = {dims}, slice_sizes = array<i64: 1, 2, 3>}}
    : {types}) -> tensor<3x2x3xf32>
  return %0 : tensor<3x2x3xf32>
}}"""
    (actual,) = run_interp_text(dynamic, operand, starts, np.array([1, 2, 3], np.int32))
    assert_same(actual, run_xla_text(static, operand, starts)[0])
    # gather's constraints on slice_sizes (spec: gather), checked when the sizes arrive
    for sizes, reason in [([1, 5, 3], r"0 <= slice_sizes <= shape\(operand\)"),
                          ([1, -1, 3], r"0 <= slice_sizes <= shape\(operand\)"),
                          ([2, 2, 3], r"exceed 1 in collapsed or operand batching dimensions \[0\]"),
                          ([1, 1, 3], r"result of shape \[3, 1, 3\], not the result type tensor<3x2x3xf32>")]:
        with pytest.raises(si.OpExecutionError, match=rf"dynamic_gather.*slice_sizes \{sizes}.*{reason}"):
            si.run(dynamic, operand, starts, np.array(sizes, np.int32))


TORCH_INDEX_SELECT = """
func.func @main(%x: tensor<{x}xi32>, %i: tensor<{i}xi32>) -> tensor<{r}xi32> {{
  %0 = "stablehlo.torch_index_select"(%x, %i) {{batch_dims = {b} : i64, dim = {d} : i64}}
    : (tensor<{x}xi32>, tensor<{i}xi32>) -> tensor<{r}xi32>
  return %0 : tensor<{r}xi32>
}}"""


def test_torch_index_select_iree_example():
    """IREE's e2e test torch_index_select1 (negative dim and batch_dims)."""
    x = np.array([[[100, 101], [110, 111]], [[200, 201], [210, 211]]], np.int32)
    i = np.array([[[0, 1], [1, 0]], [[0, 0], [1, 1]]], np.int32)
    (out,) = run_interp_text(TORCH_INDEX_SELECT.format(x="2x2x2", i="2x2x2", r="2x2x2", b=-1, d=-1), x, i)
    np.testing.assert_array_equal(out, [[[100, 101], [111, 110]], [[200, 200], [211, 211]]])


@pytest.mark.parametrize("x_shape, i_shape, dim, batch_dims", [
    ((5, 3), (4,), 0, 0), ((5, 3), (2, 2), 1, 0), ((2, 5, 3), (2, 4), 1, 1), ((2, 3, 5, 4), (2, 3, 6), 2, 2),
    ((2, 5, 4), (2, 3, 2), -2, 1), ((3, 5), (3,), 1, 1)])
def test_torch_index_select_against_numpy(x_shape, i_shape, dim, batch_dims):
    rank = len(x_shape)
    axis = dim % rank
    x = iota(x_shape)
    i = np.random.default_rng(1).integers(0, x_shape[axis], i_shape).astype(np.int32)
    # numpy: result[b, j..., rest] = x[b, index[b, j...], rest]
    batch = x_shape[:batch_dims]
    flat_x = x.reshape((-1,) + x_shape[batch_dims:])
    flat_i = i.reshape((-1,) + i_shape[batch_dims:])
    expected = np.stack([np.take(xb, ib, axis=axis - batch_dims) for xb, ib in zip(flat_x, flat_i)])
    expected = expected.reshape(batch + expected.shape[1:])
    text = TORCH_INDEX_SELECT.format(x="x".join(map(str, x_shape)), i="x".join(map(str, i_shape)),
                                     r="x".join(map(str, expected.shape)), b=batch_dims, d=dim)
    (out,) = run_interp_text(text, x, i)
    np.testing.assert_array_equal(out, expected)


def test_torch_index_select_clamps_out_of_bounds_indices_as_gather():
    """It runs as gather, whose start indices clamp into the operand (spec: gather):
    by hand, NumPy's take with the indices clipped."""
    x = iota((5, 3))
    i = np.array([7, -2, 4, 0], np.int32)
    text = TORCH_INDEX_SELECT.format(x="5x3", i="4", r="4x3", b=0, d=0)
    (out,) = run_interp_text(text, x, i)
    np.testing.assert_array_equal(out, np.take(x, np.clip(i, 0, 4), axis=0))


# ------------------------------------------------------------------------ scatter

XLA_BODIES = ["add", "replace", "maximum", "subtract", "affine", "reshaped_subtract"]


@given(strategies.scatter_configs())
def test_scatter_random_configs_match_xla(config):
    operand = iota(config.space.operand_shape)
    updates = iota(config.updates_shape, scale=100, offset=7)
    same_as_xla_text(config.text("i32", XLA_BODIES, operands=2), operand, 3 * operand, config.scatter_indices,
                     updates, updates + 1)


@settings(max_examples=25)
@given(strategies.scatter_configs(in_or_out=False))
def test_scatter_random_configs_match_reference(reference, config):
    """Any indices (out-of-bounds parts of windows too), two operands. One scatter
    per module: the reference interpreter updates an input in place, which a
    second scatter of the same input would see."""
    operand = iota(config.space.operand_shape)
    updates = iota(config.updates_shape, scale=100, offset=7)
    for body in ["add", "replace", "subtract"] if config.orders_agree else ["add"]:
        same_as_reference(reference, config.text("i32", [body], operands=2), operand, 3 * operand,
                          config.scatter_indices, updates, updates + 1)


def _rows_scatter(element_type, bodies, rows=6, width=3, updates=8):
    """Scatter rows of updates into a (rows, width) operand at indices[k]."""
    config = strategies.ScatterConfig(
        strategies.IndexSpace((rows, width), (), (), (0,), 1, (updates, 1), (updates,)),
        update_window_dims=(1,), inserted_window_dims=(0,), updates_shape=(updates, width),
        scatter_indices=np.array([[0], [3], [0], [5], [3], [0], [9], [-1]], np.int32)[:updates])
    return config.text(element_type, bodies), config.scatter_indices


SCATTER_DTYPES = [np.bool_, np.int8, np.uint32, np.int64, ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.bfloat16,
                  np.float16, np.float32, np.float64, np.complex64, np.complex128]


@pytest.mark.parametrize("dtype", SCATTER_DTYPES, ids=dtype_id)
def test_scatter_element_types_with_duplicates(dtype):
    bodies = ["add", "multiply", "replace"]
    if np.dtype(dtype) != np.bool_:
        bodies.append("subtract")  # no subtract on i1
    if np.dtype(dtype).kind != "c":
        bodies += ["maximum", "minimum"]  # XLA CPU has no complex max/min
    text, indices = _rows_scatter(element_type_of(dtype), bodies)
    operand, updates = values((6, 3), dtype, seed=1), values((8, 3), dtype, seed=2)
    if np.dtype(dtype).kind in "fc" or np.dtype(dtype) == ml_dtypes.bfloat16:
        # Small integers: exact in every order, so only the semantics can differ.
        operand = np.random.default_rng(1).integers(-4, 5, (6, 3)).astype(dtype)
        updates = np.random.default_rng(2).integers(-4, 5, (8, 3)).astype(dtype)
    same_as_xla_text(text, operand, indices, updates)


def test_scatter_binds_only_a_body_it_calls():
    """A replace or one monoid op is applied without calling the update body, so the run
    loop binds none (OpInfo.regions_called); other bodies are called. Both kinds give
    XLA's values, observed (each op seen) and not."""
    text, indices = _rows_scatter("f32", ["add", "replace", "subtract", "maximum"])
    operand = np.random.default_rng(1).integers(-4, 5, (6, 3)).astype(np.float32)
    updates = np.random.default_rng(2).integers(-4, 5, (8, 3)).astype(np.float32)
    program = si.load(text)
    scatters = [step for step in program.function("main").region.steps if step.name == "stablehlo.scatter"]
    assert [step.info.regions_called for step in scatters] == [False, False, True, False]
    expected = run_xla_text(text, operand, indices, updates)
    for actual in (program.run(operand, indices, updates),
                   program.run(operand, indices, updates, listeners=[si.Listener()])):
        assert len(actual) == len(expected) == 4
        for ours, theirs in zip(actual, expected):
            assert_same(ours, theirs)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=dtype_id)
def test_scatter_float_edge_values(dtype):
    """NaN propagation, -0.0 < +0.0 in max/min, infinities; sums in XLA's order."""
    text, indices = _rows_scatter(element_type_of(dtype), ["maximum", "minimum", "add"])
    operand, updates = values((6, 3), dtype, seed=4), values((8, 3), dtype, seed=5)
    zeros = np.array([0.0, -0.0], dtype)
    operand[0] = zeros[[1, 0, 1]]
    updates[[0, 2, 5]] = zeros[[[0, 1, 1], [1, 1, 0], [1, 0, 1]]]
    same_as_xla_text(text, operand, indices, updates)


# One update window (``x.at[i].set(v)``): its own runner (indexing._one_window).
ONE_WINDOW = {
    "row": (strategies.ScatterConfig(strategies.IndexSpace((6, 3), (), (), (0,), 1, (1, 1), (1,)),
                                     update_window_dims=(1,), inserted_window_dims=(0,), updates_shape=(1, 3),
                                     scatter_indices=None), [[0], [5], [2], [-1], [6], [9]]),
    "window of 2": (strategies.ScatterConfig(strategies.IndexSpace((5,), (), (), (0,), 1, (1, 1), (1,)),
                                             update_window_dims=(1,), inserted_window_dims=(), updates_shape=(1, 2),
                                             scatter_indices=None), [[0], [3], [4], [-1], [-2]]),
    "element of a matrix": (strategies.ScatterConfig(strategies.IndexSpace((4, 5), (), (), (1, 0), 0, (2,), ()),
                                                     update_window_dims=(), inserted_window_dims=(0, 1),
                                                     updates_shape=(), scatter_indices=None),
                            [[0, 0], [4, 3], [1, 2], [5, 0], [0, -1]]),
    "implicit index vector": (strategies.ScatterConfig(strategies.IndexSpace((7,), (), (), (0,), 0, (), ()),
                                                       update_window_dims=(), inserted_window_dims=(0,),
                                                       updates_shape=(), scatter_indices=None), [0, 6, 7, -1]),
}


@pytest.mark.parametrize("layout", ONE_WINDOW)
@pytest.mark.parametrize("dtype", SCATTER_DTYPES, ids=dtype_id)
def test_scatter_of_one_window_matches_the_general_way(monkeypatch, layout, dtype):
    """A scatter of one update window runs its own runner: bit for bit what the general
    way gives (each element type, NaNs, signed zeros; windows inside, partly outside and
    outside the operand), which XLA's CPU matches where the window is inside."""
    config, starts = ONE_WINDOW[layout]
    bodies = ["add", "multiply", "replace"]
    if np.dtype(dtype) != np.bool_:
        bodies.append("subtract")
    if np.dtype(dtype).kind != "c":
        bodies += ["maximum", "minimum"]
        if np.dtype(dtype) != np.bool_:
            bodies.append("affine")   # (a body that is not one op: called on the window)
    text = config.text(element_type_of(dtype), bodies)
    operand = values(config.space.operand_shape, dtype, seed=1)
    updates = values(config.updates_shape, dtype, seed=2)
    fast = si.load(text)
    assert {step.run.__qualname__.split(".")[0] for step in fast.function("main").region.steps} == {"_one_window"}
    monkeypatch.setattr(indexing, "_one_window", lambda *args: None)
    general = si.load(text)
    for start in starts:
        indices = np.array(start, np.int32).reshape(config.space.indices_shape)
        expected = general.run(operand, indices, updates)
        for ours, theirs in zip(fast.run(operand, indices, updates), expected):
            assert_same(ours, theirs, context=f"{layout} at {start}: ")
        inside = all(0 <= i for i in np.reshape(start, -1)) and start not in ([6], [4], [5, 0], 7, [9])
        if inside and np.dtype(dtype).kind != "c":   # (XLA's complex multiply rounds otherwise)
            same_as_xla_text(text, operand, indices, updates)


def test_scatter_partial_window_out_of_bounds_follows_spec(reference):
    """The spec skips each out-of-bounds element of a window; XLA skips the window."""
    config = strategies.ScatterConfig(
        strategies.IndexSpace((5,), (), (), (0,), 1, (4, 1), (4,)),
        update_window_dims=(1,), inserted_window_dims=(), updates_shape=(4, 2),
        scatter_indices=np.array([[3], [-1], [4], [5]], np.int32))
    text = config.text("f32")
    args = (np.zeros(5, np.float32), config.scatter_indices, np.ones((4, 2), np.float32))
    (ours,) = same_as_reference(reference, text, *args)
    (xla,) = run_xla_text(text, *args)
    assert not np.array_equal(ours, xla)  # the documented difference; update the docs if XLA changes


def test_scatter_empty_index_vector_follows_spec(reference):
    """All updates of an empty index vector go to the window at 0 (XLA applies one)."""
    config = strategies.ScatterConfig(
        strategies.IndexSpace((3,), (), (), (), 0, (0, 4), (4,)),
        update_window_dims=(), inserted_window_dims=(0,), updates_shape=(4,),
        scatter_indices=np.zeros((0, 4), np.int32))
    same_as_reference(reference, config.text("i32"), iota((3,)), config.scatter_indices,
                      iota((4,), scale=10, offset=1))


def test_scatter_promoted_update_computation():
    """inputs i8, update_computation on i32 (spec: scatter C23, is_promotable):
    results are i32 and sums do not wrap at 8 bits. XLA CPU rejects the module and
    the reference interpreter aborts, so the oracle is np.add.at in int32."""
    text = """
func.func @main(%x: tensor<4xi8>, %i: tensor<3x1xi32>, %u: tensor<3xi8>) -> tensor<4xi32> {
  %0 = "stablehlo.scatter"(%x, %i, %u) ({
  ^bb0(%a: tensor<i32>, %b: tensor<i32>):
    %s = stablehlo.add %a, %b : tensor<i32>
    stablehlo.return %s : tensor<i32>
  }) {scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0],
      scatter_dims_to_operand_dims = [0], index_vector_dim = 1>} : (tensor<4xi8>, tensor<3x1xi32>, tensor<3xi8>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}"""
    x, i, u = np.array([120, 1, -128, 3], np.int8), np.array([[0], [0], [2]], np.int32), \
        np.array([100, 100, -100], np.int8)
    expected = x.astype(np.int32)
    np.add.at(expected, i[:, 0], u.astype(np.int32))
    (out,) = run_interp_text(text, x, i, u)
    assert_same(out, expected)


@pytest.mark.parametrize("update", ["set", "add", "multiply", "min", "max", "apply"])
def test_jax_at_updates(update):
    x = values((7, 4), np.float32, seed=6)
    i = np.array([1, 6, 1, -1, 9, 0, 1], np.int32)
    u = np.random.default_rng(3).integers(-3, 4, (7, 4)).astype(np.float32)

    def fn(x, i, u):
        ref = x.at[i]
        return ref.apply(lambda v: v * 3 - 1) * u[0, 0] if update == "apply" else getattr(ref, update)(u)

    same_as_xla(fn, x, i, u)


@pytest.mark.parametrize("segment_op", ["segment_sum", "segment_max", "segment_min", "segment_prod"])
@pytest.mark.parametrize("dtype", [np.int32, np.float32], ids=dtype_id)
def test_segment_reductions(segment_op, dtype):
    rng = np.random.default_rng(7)
    data = rng.integers(-5, 6, (40, 3)).astype(dtype)
    segments = rng.integers(-1, 7, 40).astype(np.int32)
    same_as_xla(lambda d, s: getattr(jax.ops, segment_op)(d, s, 6), data, segments)


def test_vmapped_scatter_uses_batching_dims():
    x = values((5, 6), np.float32)
    i = np.array([0, 5, 2, 2, 9], np.int32)
    fn = jax.vmap(lambda row, j, v: row.at[j].add(v))
    assert "input_batching_dims" in jax.jit(fn).lower(x, i, x[:, 0]).as_text()
    same_as_xla(fn, x, i, np.ones(5, np.float32))


# ------------------------------------------------------------- select_and_scatter


@pytest.mark.parametrize("padding", ["SAME", "VALID", ((1, 2), (0, 1))])
def test_max_pool_gradient(padding):
    # Small integers: many ties, which select (GE: first maximum wins) decides.
    x = np.random.default_rng(5).integers(-3, 4, (2, 7, 6, 3)).astype(np.float32)

    def pool_gradient(window, strides):
        def loss(x):
            y = lax.reduce_window(x, -jnp.inf, lax.max, (1,) + window + (1,), (1,) + strides + (1,),
                                  padding if isinstance(padding, str) else ((0, 0),) + padding + ((0, 0),))
            return jnp.sum(y * jnp.arange(y.size, dtype=y.dtype).reshape(y.shape))

        return jax.grad(loss)

    def gradients(x):
        return tuple(pool_gradient(w, s)(x) for w, s in [((3, 3), (2, 2)), ((2, 2), (1, 1)), ((1, 3), (1, 2))])

    assert "select_and_scatter" in jax.jit(gradients).lower(x).as_text()
    same_as_xla(gradients, x)


def test_min_pool_gradient_with_nan_and_infinities():
    x = values((9, 8), np.float32, seed=9)
    fn = jax.grad(lambda x: jnp.sum(lax.reduce_window(x, jnp.inf, lax.min, (3, 2), (2, 2), "SAME") ** 2))
    same_as_xla(fn, x)


SELECT_AND_SCATTER = """
func.func @main(%x: tensor<{x}x{t}>, %s: tensor<{s}x{t}>, %init: tensor<{t}>) -> tensor<{x}x{t}> {{
  %0 = "stablehlo.select_and_scatter"(%x, %s, %init) ({{
  ^bb0(%a: tensor<{t}>, %b: tensor<{t}>):
    {select}
  }}, {{
  ^bb0(%a: tensor<{t}>, %b: tensor<{t}>):
    %r = stablehlo.{scatter} %a, %b : tensor<{t}>
    stablehlo.return %r : tensor<{t}>
  }}) {{window_dimensions = array<i64: {w}>, window_strides = array<i64: {st}>, padding = dense<{p}> : tensor<2x2xi64>}}
  : (tensor<{x}x{t}>, tensor<{s}x{t}>, tensor<{t}>) -> tensor<{x}x{t}>
  return %0 : tensor<{x}x{t}>
}}"""
SELECTS = {
    "GE": "%c = stablehlo.compare GE, %a, %b : (tensor<{t}>, tensor<{t}>) -> tensor<i1>\n"
          "    stablehlo.return %c : tensor<i1>",
    "LT": "%c = stablehlo.compare LT, %a, %b : (tensor<{t}>, tensor<{t}>) -> tensor<i1>\n"
          "    stablehlo.return %c : tensor<i1>",
    # Not element-wise: picks one pair at a time.
    "reshaped_GT": "%c = stablehlo.compare GT, %a, %b : (tensor<{t}>, tensor<{t}>) -> tensor<i1>\n"
                   "    %v = stablehlo.reshape %c : (tensor<i1>) -> tensor<1xi1>\n"
                   "    %r = stablehlo.reshape %v : (tensor<1xi1>) -> tensor<i1>\n"
                   "    stablehlo.return %r : tensor<i1>",
}


IDENTITY = {"add": 0, "multiply": 1, "maximum": np.iinfo(np.int32).min}


@pytest.mark.parametrize("select", list(SELECTS))
@pytest.mark.parametrize("scatter", ["add", "multiply", "maximum"])
def test_select_and_scatter_bodies(reference, select, scatter):
    """Other select/scatter bodies (ties decided by window order), padding on both
    sides. Against the reference interpreter with the identity of ``scatter`` as
    init_value: it counts init_value twice where a value was scattered (once as
    the fill, once as the init of the spec's reduce), XLA and we once; the spec's
    reduce allows any number of init values, so both are conforming."""
    x = np.random.default_rng(2).integers(-3, 4, (6, 5)).astype(np.int32)
    source = iota((3, 3), offset=1)
    text = SELECT_AND_SCATTER.format(x="6x5", s="3x3", t="i32", select=SELECTS[select].format(t="i32"),
                                     scatter=scatter, w="3, 2", st="2, 2", p="[[1, 1], [1, 1]]")
    same_as_reference(reference, text, x, source, np.int32(IDENTITY[scatter]))


@pytest.mark.parametrize("scatter", ["add", "multiply", "maximum"])
def test_select_and_scatter_init_value_counts_once(scatter):
    """result = reduce(selected source values, init_value, scatter) with init_value once, as XLA."""
    x = np.random.default_rng(2).integers(-3, 4, (6, 5)).astype(np.int32)
    text = SELECT_AND_SCATTER.format(x="6x5", s="3x3", t="i32", select=SELECTS["GE"].format(t="i32"),
                                     scatter=scatter, w="3, 2", st="2, 2", p="[[1, 1], [1, 1]]")
    same_as_xla_text(text, x, iota((3, 3), offset=1), np.int32(2))


def test_select_and_scatter_window_of_padding_only():
    """Windows that hold padding only pick nothing: their source values are dropped."""
    text = SELECT_AND_SCATTER.format(x="3", s="4", t="f32", select=SELECTS["GE"].format(t="f32"),
                                     scatter="add", w="2", st="2", p="[[3, 2]]").replace("2x2xi64", "1x2xi64")
    args = (np.array([1.0, -2.0, 5.0], np.float32), np.array([10.0, 20.0, 30.0, 40.0], np.float32),
            np.float32(0.5))
    same_as_xla_text(text, *args)
