"""Shape and data-movement ops against XLA's CPU backend (through jax.lax) and,
for what JAX cannot emit, against the C++ StableHLO reference interpreter."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

import stablehlo_interp as si
from oracles import assert_same, dtype_id, edge_values, same_as_reference, same_as_xla
from stablehlo_interp.ir.types import element_type_of

# Data movement must be bit-exact for every element type, sub-byte and complex included.
DTYPES = [np.bool_, np.int8, np.uint16, np.int32, np.uint32, np.int64, ml_dtypes.int4, ml_dtypes.uint4,
          ml_dtypes.bfloat16, np.float16, np.float32, np.float64, np.complex64, np.complex128,
          ml_dtypes.float8_e4m3fn]
dtypes = pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)


def values(shape, dtype, seed=0):
    """Edge values of ``dtype`` (NaN, inf, -0.0, min, max ...) then random ones, in ``shape``."""
    count = int(np.prod(shape))
    return np.resize(edge_values(dtype, max(count, 1), seed), shape).astype(dtype)


# ---------------------------------------------------------------- constant, iota


# Known bug outside this module: decode.parse_elements_text returns shape (1,) for
@pytest.mark.parametrize("dtype, shape", [
    pytest.param(dtype, shape, id=f"{dtype_id(dtype)}-{shape}")
    for shape in [(), (0,), (3,), (2, 3)] for dtype in DTYPES])
def test_constant(dtype, shape):
    splat = np.full(shape, values((), dtype, seed=1)[()], dtype)
    dense = values(shape, dtype, seed=2)
    same_as_xla(lambda: (jnp.asarray(splat), jnp.asarray(dense)))


@pytest.mark.parametrize("dtype", [np.int8, np.uint32, np.int64, ml_dtypes.int4, ml_dtypes.bfloat16,
                                   np.float16, np.float32, np.complex64], ids=dtype_id)
@pytest.mark.parametrize("shape, dimension", [((5,), 0), ((0,), 0), ((2, 3, 4), 1), ((3, 0), 0),
                                              ((40,), 0)], ids=str)
def test_iota(dtype, shape, dimension):
    # 40 elements overflow int4 and int8-exact bf16: both sides wrap or round alike.
    same_as_xla(lambda: jax.lax.broadcasted_iota(dtype, shape, dimension))


# ------------------------------------------------------------------- broadcasts


@dtypes
def test_broadcast_in_dim(dtype):
    x = values((3, 1), dtype)
    same_as_xla(lambda x: jax.lax.broadcast_in_dim(x, (2, 3, 4), (1, 2)), x)


@dtypes
def test_broadcast_in_dim_of_a_0d_value_copies_its_bits(dtype):
    """A 0-d operand fills its small result (ndarray.fill): every element holds the
    operand's bits (NaN payloads, signalling NaNs, signed zeros), whether the operand
    is a 0-d array (an argument) or a NumPy scalar (what runners on 0-d values give:
    here a reshape's)."""
    element = element_type_of(dtype)
    program = si.load(f"""
func.func @main(%x: tensor<{element}>, %v: tensor<1x{element}>) -> (tensor<2x3x{element}>, tensor<2x3x{element}>) {{
  %s = stablehlo.reshape %v : (tensor<1x{element}>) -> tensor<{element}>
  %0 = stablehlo.broadcast_in_dim %x, dims = [] : (tensor<{element}>) -> tensor<2x3x{element}>
  %1 = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<{element}>) -> tensor<2x3x{element}>
  return %0, %1 : tensor<2x3x{element}>, tensor<2x3x{element}>
}}""")
    operands = list(values((16,), dtype, seed=3))
    if np.dtype(dtype).kind == "f" and np.dtype(dtype).itemsize >= 2:   # NaNs of other payloads, a signalling one
        bits = np.dtype(f"u{np.dtype(dtype).itemsize}")
        quiet, infinity = np.array(np.nan, dtype).view(bits), np.array(np.inf, dtype).view(bits)
        sign = bits.type(1 << (8 * bits.itemsize - 1))
        operands += [np.array(pattern, bits).view(dtype)[()]
                     for pattern in (quiet | bits.type(5), quiet | sign | bits.type(3), infinity | bits.type(1))]
    for operand in operands:
        x = np.array(operand, dtype)
        expected = np.broadcast_to(x, (2, 3)).tobytes()
        for result in program.run(x, x.reshape(1)):
            assert result.dtype == np.dtype(dtype) and result.shape == (2, 3)
            assert result.tobytes() == expected, (x, result)


@pytest.mark.parametrize("operand, shape, dims", [
    ((), (2, 3), ()), ((1,), (4,), (0,)), ((0,), (2, 0), (1,)), ((2, 1, 3), (2, 5, 3, 7), (0, 1, 2)),
    ((3,), (3, 0), (0,)),
], ids=str)
def test_broadcast_in_dim_shapes(operand, shape, dims):
    x = values(operand, np.float32)
    same_as_xla(lambda x: jax.lax.broadcast_in_dim(x, shape, dims), x)


def test_broadcast_in_dim_with_unsorted_dimensions(reference):
    """The spec allows any order of broadcast_dimensions: here a transpose too.
    JAX only emits increasing ones."""
    text = """
func.func @main(%x: tensor<2x3xi16>) -> tensor<3x4x2xi16> {
  %0 = stablehlo.broadcast_in_dim %x, dims = [2, 0] : (tensor<2x3xi16>) -> tensor<3x4x2xi16>
  return %0 : tensor<3x4x2xi16>
}"""
    x = np.arange(6, dtype=np.int16).reshape(2, 3)
    (out,) = same_as_reference(reference, text, x)
    np.testing.assert_array_equal(out, np.broadcast_to(x.T[:, None, :], (3, 4, 2)))


def test_broadcast():
    """stablehlo.broadcast prepends broadcast_sizes to the operand's dimensions.
    (Deprecated; neither JAX nor the C++ reference interpreter handles it.)"""
    text = """
func.func @main(%x: tensor<1x3xf32>) -> tensor<2x4x1x3xf32> {
  %0 = "stablehlo.broadcast"(%x) {broadcast_sizes = array<i64: 2, 4>}
      : (tensor<1x3xf32>) -> tensor<2x4x1x3xf32>
  return %0 : tensor<2x4x1x3xf32>
}"""
    x = values((1, 3), np.float32)
    (out,) = si.run(text, x)
    assert_same(out, np.broadcast_to(x, (2, 4, 1, 3)))


# ------------------------------------------------------- reshape, transpose, reverse


@dtypes
def test_reshape_transpose_reverse(dtype):
    x = values((2, 3, 4), dtype)
    same_as_xla(lambda x: (jax.lax.reshape(x, (4, 6)), jax.lax.reshape(x, (24,)),
                           jax.lax.reshape(x, (6, 4), dimensions=(2, 0, 1)),
                           jax.lax.transpose(x, (2, 0, 1)), jax.lax.rev(x, (0, 2))), x)


@pytest.mark.parametrize("shape, new_shape", [((), (1, 1)), ((1, 1), ()), ((0, 3), (3, 0, 5)),
                                              ((6,), (2, 3))], ids=str)
def test_reshape_shapes(shape, new_shape):
    x = values(shape, np.int32)
    same_as_xla(lambda x: jax.lax.reshape(x, new_shape), x)


@pytest.mark.parametrize("shape, permutation", [((), ()), ((0, 2), (1, 0)), ((2, 3, 1, 2), (3, 1, 0, 2))],
                         ids=str)
def test_transpose_shapes(shape, permutation):
    x = values(shape, np.float64)
    same_as_xla(lambda x: jax.lax.transpose(x, permutation), x)


@pytest.mark.parametrize("shape, dimensions", [((), ()), ((4,), ()), ((4,), (0,)), ((0, 3), (0, 1)),
                                               ((2, 3, 4), (1,))], ids=str)
def test_reverse_shapes(shape, dimensions):
    x = values(shape, np.uint8)
    same_as_xla(lambda x: jax.lax.rev(x, dimensions), x)


# ------------------------------------------------------------------------ slices


@dtypes
def test_slice(dtype):
    x = values((5, 7), dtype)
    same_as_xla(lambda x: (jax.lax.slice(x, (1, 0), (4, 7), (2, 3)), jax.lax.slice(x, (2, 2), (2, 5))), x)


@pytest.mark.parametrize("shape, start, limit, strides", [
    ((), (), (), None), ((0,), (0,), (0,), None), ((9,), (8,), (9,), (5,)), ((4, 6), (0, 1), (4, 6), (4, 2)),
], ids=str)
def test_slice_shapes(shape, start, limit, strides):
    x = values(shape, np.int64)
    same_as_xla(lambda x: jax.lax.slice(x, start, limit, strides), x)


@dtypes
def test_dynamic_slice_and_update(dtype):
    x = values((4, 5), dtype)
    update = values((2, 3), dtype, seed=3)
    i, j = np.int32(1), np.int32(2)
    same_as_xla(lambda x, u, i, j: (jax.lax.dynamic_slice(x, (i, j), (2, 3)),
                                    jax.lax.dynamic_update_slice(x, u, (i, j))), x, update, i, j)


# Starts outside [0, dim - size] are clamped into it (spec: dynamic_slice,
# dynamic_update_slice). jax.lax first wraps negative starts once, Python style.
STARTS = [(0, 0), (3, 4), (-1, -1), (-100, 2), (100, -100), (2, 7)]


@pytest.mark.parametrize("index_dtype, starts", [
    pytest.param(t, s, id=f"{dtype_id(t)}-{s}") for t in [np.int32, np.int64, np.uint8, np.int8]
    for s in STARTS if np.dtype(t).kind == "i" or min(s) >= 0])
def test_dynamic_slice_clamps_starts(index_dtype, starts):
    x = values((4, 6), np.float32)
    update = values((3, 2), np.float32, seed=5)
    i, j = (np.asarray(s).astype(index_dtype) for s in starts)
    same_as_xla(lambda x, u, i, j: (jax.lax.dynamic_slice(x, (i, j), (3, 2)),
                                    jax.lax.dynamic_update_slice(x, u, (i, j))), x, update, i, j)


def test_dynamic_slice_clamping_without_jax_wrapping(reference):
    """Negative and too-large starts go straight to the ops (no JAX index wrapping)."""
    text = """
func.func @main(%x: tensor<4x6xi32>, %u: tensor<3x2xi32>, %i: tensor<i64>, %j: tensor<i64>)
    -> (tensor<3x2xi32>, tensor<4x6xi32>) {
  %0 = stablehlo.dynamic_slice %x, %i, %j, sizes = [3, 2] : (tensor<4x6xi32>, tensor<i64>, tensor<i64>) -> tensor<3x2xi32>
  %1 = stablehlo.dynamic_update_slice %x, %u, %i, %j : (tensor<4x6xi32>, tensor<3x2xi32>, tensor<i64>, tensor<i64>) -> tensor<4x6xi32>
  return %0, %1 : tensor<3x2xi32>, tensor<4x6xi32>
}"""
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    u = -np.arange(1, 7, dtype=np.int32).reshape(3, 2)
    for i, j in [(-1, -1), (-100, 9), (1, 3), (2**40, -2**40)]:
        sliced, updated = same_as_reference(reference, text, x, u, np.int64(i), np.int64(j))
        ci, cj = min(max(i, 0), 1), min(max(j, 0), 4)
        np.testing.assert_array_equal(sliced, x[ci:ci + 3, cj:cj + 2])
        expected = x.copy()
        expected[ci:ci + 3, cj:cj + 2] = u
        np.testing.assert_array_equal(updated, expected)


def test_dynamic_update_slice_leaves_operand_alone():
    x = np.zeros((3,), np.int32)
    same_as_xla(lambda x: jax.lax.dynamic_update_slice(x, jnp.ones(2, np.int32), (1,)), x)
    np.testing.assert_array_equal(x, [0, 0, 0])


# --------------------------------------------------------------- concatenate, pad


@dtypes
def test_concatenate(dtype):
    a, b, c = values((2, 3), dtype), values((2, 0), dtype), values((2, 1), dtype, seed=4)
    same_as_xla(lambda a, b, c: (jax.lax.concatenate([a, b, c], 1), jax.lax.concatenate([a], 0),
                                 jax.lax.concatenate([a, a], 0)), a, b, c)


@dtypes
def test_pad(dtype):
    x = values((3, 4), dtype)
    pad_value = values((), dtype, seed=9)
    same_as_xla(lambda x, p: jax.lax.pad(x, p, [(1, 2, 1), (-1, 3, 2)]), x, pad_value)


@pytest.mark.parametrize("shape, config", [
    ((), []),
    ((5,), [(0, 0, 0)]),
    ((5,), [(-2, -1, 0)]),           # negative edges crop
    ((5,), [(-3, -4, 2)]),           # cropping into the interior padding
    ((5,), [(-5, 0, 1)]),            # cropping whole elements and gaps
    ((0,), [(2, 1, 3)]),             # empty operand: padding only
    ((1,), [(0, 0, 5)]),             # interior padding of one element adds nothing
    ((2, 3), [(0, -2, 0), (2, -5, 1)]),
    ((3, 2), [(-3, 0, 0), (0, 0, 0)]),  # empty result
], ids=str)
def test_pad_shapes(shape, config):
    x = values(shape, np.int16)
    same_as_xla(lambda x: jax.lax.pad(x, np.int16(-7), config), x)


@given(st.data())
def test_pad_random_configurations(data):
    rank = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=rank, max_size=rank)))
    config = []
    for size in shape:
        interior = data.draw(st.integers(0, 2))
        spread = size + max(size - 1, 0) * interior
        low = data.draw(st.integers(-spread, 3))
        high = data.draw(st.integers(-(spread + low), 3))  # result size >= 0
        config.append((low, high, interior))
    x = values(shape, np.float32, seed=len(config))
    same_as_xla(lambda x: jax.lax.pad(x, np.float32(0.5), config), x)


def test_pad_by_hand():
    text = """
func.func @main(%x: tensor<2x3xi32>, %p: tensor<i32>) -> tensor<4x5xi32> {
  %0 = stablehlo.pad %x, %p, low = [0, -1], high = [1, 1], interior = [1, 1]
      : (tensor<2x3xi32>, tensor<i32>) -> tensor<4x5xi32>
  return %0 : tensor<4x5xi32>
}"""
    (out,) = si.run(text, np.array([[1, 2, 3], [4, 5, 6]], np.int32), np.int32(0))
    np.testing.assert_array_equal(out, [[0, 2, 0, 3, 0],
                                        [0, 0, 0, 0, 0],
                                        [0, 5, 0, 6, 0],
                                        [0, 0, 0, 0, 0]])



def test_pad_by_nothing_is_the_operand(reference):
    """All paddings zero (JAX's gradient of a VALID max pool pads so): the operand itself."""
    text = """
func.func @main(%x: tensor<2x3xf32>, %p: tensor<f32>) -> tensor<2x3xf32> {
  %0 = stablehlo.pad %x, %p, low = [0, 0], high = [0, 0], interior = [0, 0]
      : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %1 = stablehlo.add %0, %0 : tensor<2x3xf32>
  return %1 : tensor<2x3xf32>
}"""
    x = np.array([[1, -0.0, 3], [np.nan, 5, -np.inf]], np.float32)
    (out,) = same_as_reference(reference, text, x, np.float32(7))
    assert_same(out, x + x)

# ----------------------------------------------------------- get_dimension_size


def test_get_dimension_size(reference):
    text = """
func.func @main(%x: tensor<2x0x7xf32>) -> tensor<3xi32> {
  %0 = stablehlo.get_dimension_size %x, dim = 0 : (tensor<2x0x7xf32>) -> tensor<i32>
  %1 = stablehlo.get_dimension_size %x, dim = 1 : (tensor<2x0x7xf32>) -> tensor<i32>
  %2 = stablehlo.get_dimension_size %x, dim = 2 : (tensor<2x0x7xf32>) -> tensor<i32>
  %3 = stablehlo.broadcast_in_dim %0, dims = [] : (tensor<i32>) -> tensor<1xi32>
  %4 = stablehlo.broadcast_in_dim %1, dims = [] : (tensor<i32>) -> tensor<1xi32>
  %5 = stablehlo.broadcast_in_dim %2, dims = [] : (tensor<i32>) -> tensor<1xi32>
  %6 = stablehlo.concatenate %3, %4, %5, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
  return %6 : tensor<3xi32>
}"""
    (out,) = same_as_reference(reference, text, np.zeros((2, 0, 7), np.float32))
    np.testing.assert_array_equal(out, [2, 0, 7])


# ----------------------------------------------------------------- composition


def test_jax_program_of_data_movement():
    """A realistic mix: jnp indexing, stacking, padding, flipping, tiling."""
    def f(x, i):
        y = jnp.concatenate([x, jnp.flip(x, 1)], axis=0)
        z = jnp.pad(y, ((1, 0), (0, 2)), constant_values=-1.0)
        w = jax.lax.dynamic_slice_in_dim(z, i, 3, axis=0)
        return jnp.tile(w.T, (2, 1)), jnp.stack([x, x * 2])[:, ::2, 1:], y.reshape(-1)[::3]

    x = values((3, 4), np.float32)
    same_as_xla(f, x, np.int32(2))


@pytest.mark.parametrize("dtype", [np.int32, np.float32], ids=dtype_id)
def test_results_are_typed_like_the_module(dtype):
    program = si.load(jax.jit(lambda x: jax.lax.broadcast_in_dim(x, (2, 3), (1,))).lower(
        np.zeros(3, dtype)))
    (out,) = program.run(np.arange(3).astype(dtype))
    assert out.dtype == dtype and out.shape == (2, 3) and out.flags.writeable
    assert element_type_of(out.dtype) == element_type_of(dtype)
