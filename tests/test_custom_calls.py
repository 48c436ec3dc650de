"""Custom calls besides LAPACK (ops/sharding_calls.py), against XLA CPU; and the
coverage of every CPU custom-call target jaxlib registers for its linalg."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

import stablehlo_interp as si
from oracles import op_module, run_interp, run_interp_text, run_xla_text
from stablehlo_interp import ops
from stablehlo_interp.engine import registry


def lowered_targets(fn, *args) -> str:
    return jax.jit(fn).lower(*args).as_text()


def same_as_xla(fn, *args):
    """fn through the interpreter and on XLA CPU (arguments uncommitted, so shardings
    over several devices apply)."""
    actual = run_interp(fn, *args)
    expected = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_array_equal(a, e)


@pytest.mark.parametrize("devices", [1, 2])
def test_sharding_constraint(without_shardy, devices):
    mesh = Mesh(np.array(jax.devices()[:devices]), ("x",))
    sharding = NamedSharding(mesh, P("x"))

    def fn(a):
        return jnp.exp2(lax.with_sharding_constraint(a * 2, sharding)) + 1

    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    assert "@Sharding" in lowered_targets(fn, x)
    same_as_xla(fn, x)


def test_annotate_device_placement():
    """A result placed in host memory (``out_shardings`` with memory kind pinned_host)."""
    host = SingleDeviceSharding(jax.devices()[0], memory_kind="pinned_host")
    fn = jax.jit(lambda a: a * 2 + 1, out_shardings=host)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    text = fn.lower(x).as_text()
    assert "@annotate_device_placement" in text and "pinned_host" in text
    out = si.run(fn.lower(x), x)
    np.testing.assert_array_equal(out, np.asarray(fn(x)))


def test_dce_sink():
    def fn(a):
        lax.dce_sink(a + 1, prevent_mlir_dce=True)
        return a * 3

    x = np.arange(4, dtype=np.int32)
    assert "@dce_sink" in lowered_targets(fn, x)
    same_as_xla(fn, x)


def test_control_dep():
    """``control_dep(src, dst)`` orders XLA's schedule; the values are those without it."""
    from jax.experimental.control_deps import control_dep

    def fn(a, b):
        first = jnp.sin(a) * 2
        second = b @ b.T
        control_dep(first, second)
        return first + 1, second

    a, b = np.linspace(-1, 1, 6, dtype=np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    assert "@control_dep" in lowered_targets(fn, a, b)
    same_as_xla(fn, a, b)


SPMD_TEXT = """
func.func @main(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = stablehlo.custom_call @Sharding(%x) {mhlo.sharding = "{devices=[1,1]0}"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %1 = stablehlo.custom_call @SPMDFullToShardShape(%0) {mhlo.sharding = "{manual}"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %2 = stablehlo.multiply %1, %1 : tensor<2x4xf32>
  %3 = stablehlo.custom_call @Sharding(%2) {mhlo.sharding = "{manual}"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %4 = stablehlo.custom_call @SPMDShardToFullShape(%3) {mhlo.sharding = "{devices=[1,1]0}"} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %5 = stablehlo.custom_call @annotate_device_placement(%4) {has_side_effect = true, mhlo.frontend_attributes = {_xla_buffer_placement = "pinned_host"}} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %6 = stablehlo.custom_call @MoveToHost(%5) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %7 = stablehlo.custom_call @MoveToDevice(%6) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %7 : tensor<2x4xf32>
}
"""


def test_spmd_and_memory_calls_on_one_device():
    """A shard_map body on a one-device mesh as JAX exports it with GSPMD shardings,
    then memory-space moves."""
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    (expected,) = run_xla_text(SPMD_TEXT, x)
    (actual,) = run_interp_text(SPMD_TEXT, x)
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("target", ["xla.sdy.FuncResultSharding", "xla.sdy.GlobalToLocalShape",
                                    "xla.sdy.LocalToGlobalShape", "xla.sdy.ShardingGroup"])
def test_shardy_round_trip_annotations_are_identities(target):
    """XLA only accepts these inside its Shardy round trip (it aborts on them in a
    plain module), where it forwards their operand (ShardingRemover)."""
    text = op_module("stablehlo.custom_call", ["tensor<3xi32>"], ["tensor<3xi32>"],
                     f'call_target_name = "{target}"')
    x = np.array([1, -2, 3], np.int32)
    (out,) = run_interp_text(text, x)
    np.testing.assert_array_equal(out, x)


def test_shard_shapes_run_one_program_per_device(without_shardy):
    """Between SPMDFullToShardShape and SPMDShardToFullShape each device runs on its
    shard (ops/sdy.py; more in tests/test_shard_map.py)."""
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
    fn = jax.shard_map(lambda a: a * 2 + lax.axis_index("x"), mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    same_as_xla(fn, x)


def test_operand_and_result_counts_must_match():
    text = op_module("stablehlo.custom_call", ["tensor<3xf32>", "tensor<3xf32>"], ["tensor<3xf32>"],
                     'call_target_name = "Sharding"')
    with pytest.raises(si.OpError, match="Sharding: 2 operands but 1 results"):
        si.load(text)


def test_unknown_target_is_named():
    text = op_module("stablehlo.custom_call", ["tensor<3xf32>"], ["tensor<3xf32>"],
                     'call_target_name = "my_kernel_ffi"')
    with pytest.raises(si.UnsupportedOpError, match="my_kernel_ffi"):
        si.load(text)


def test_every_jaxlib_cpu_linalg_target_is_implemented():
    """jaxlib registers these FFI targets for XLA CPU (jax._src.lax.linalg uses them)."""
    from jax._src.lib import lapack

    targets = {name for name, _, _ in lapack.registrations()["cpu"]}
    assert len(targets) >= 61  # 15 LAPACK routines x 4 types, and tridiagonal_solve_perturbed_ffi
    ops.load_all()
    assert sorted(targets - set(registry.registered_custom_calls())) == []


def inspect_sharding_program():
    """jax.debug.inspect_array_sharding over two devices: XLA's partitioner calls the
    callback; its ``backend_config`` is raw pointer bytes, seldom UTF-8."""
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))

    def fn(a):
        jax.debug.inspect_array_sharding(a, callback=lambda sharding: None)
        return a * 2

    x = jax.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P("x")))
    return jax.jit(fn).lower(x), x


def test_custom_call_with_non_utf8_backend_config_loads():
    """The program loads (bytes decoded as bytes); the target itself says it is missing."""
    lowered, _ = inspect_sharding_program()
    assert "@InspectSharding" in lowered.as_text()
    with pytest.raises(si.UnsupportedOpError, match="'InspectSharding' is not implemented"):
        si.load(lowered)


def test_custom_call_sees_non_utf8_backend_config_as_bytes():
    """Bytes that are not UTF-8 reach the target's builder as bytes, unchanged (the pointer
    bytes of JAX's InspectSharding are such bytes on most runs, not on all: fixed bytes here)."""
    text = op_module("stablehlo.custom_call", ["tensor<3xf32>"], ["tensor<3xf32>"],
                     'call_target_name = "raw_config", backend_config = "\\FF\\00\\10\\C0"')
    seen = []

    def builder(info):
        seen.append(info.attr("backend_config"))
        return lambda a: a * 2

    x = np.arange(3, dtype=np.float32)
    with registry.replaced(custom_calls={"raw_config": builder}):
        (out,) = si.run(text, x)
    assert seen == [b"\xff\x00\x10\xc0"]
    np.testing.assert_array_equal(out, x * 2)


@pytest.mark.parametrize("fn", [
    lambda v: lax.approx_max_k(v, 3),
    lambda v: lax.approx_min_k(v, 2, reduction_dimension=0),
    lambda v: lax.approx_max_k(v, 7, recall_target=0.5),
], ids=["max_k", "min_k_dim0", "max_k_all"])
def test_approx_top_k_is_the_exact_top_k(fn):
    """ApproxTopK returns the exact top k (the recall target allows it; XLA's CPU does the
    same): ties keep the order of their indices."""
    x = np.random.default_rng(1).integers(0, 5, (3, 7)).astype(np.float32)
    assert "@ApproxTopK" in lowered_targets(fn, x)
    same_as_xla(fn, x)


@pytest.mark.parametrize("fn", [
    lambda v: lax.approx_min_k(v, 2, aggregate_to_topk=False, reduction_input_size_override=4096),
    lambda v: lax.approx_max_k(v, 3, recall_target=0.5, aggregate_to_topk=False),
], ids=["min_k", "max_k"])
def test_approx_top_k_without_aggregating_keeps_the_exact_top_candidates(fn):
    """Without aggregate_to_topk the result keeps more candidates than k (256 of 300 here,
    ann_test.py's test_pmap): the exact top that many, as XLA's CPU fallback gives. The
    values are distinct: XLA's sort there is not stable, so ties could come in any order."""
    x = np.random.default_rng(1).permutation(900).reshape(3, 300).astype(np.float32)
    assert jax.eval_shape(fn, x)[0].shape == (3, 256)
    same_as_xla(fn, x)


def csr_of(dense, index_dtype):
    """The CSR arrays (data, column indices, row pointers) of a dense matrix."""
    rows, columns = np.nonzero(dense)
    indptr = np.searchsorted(rows, np.arange(dense.shape[0] + 1)).astype(index_dtype)
    return dense[rows, columns], columns.astype(index_dtype), indptr


@pytest.mark.parametrize("rhs_shape", [(40,), (40, 3)], ids=["vector", "matrix"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_csr_times_dense_is_xla_cpus(dtype, rhs_shape):
    """``jax.experimental.sparse``'s BCSR @ dense lowers on the CPU to
    ``cpu_csr_sparse_dense_ffi``; an empty row, and data stored beyond the last row
    pointer (sparse_bcoo_bcsr_test.py's ``test_bcsr_matmul_with_out_of_bounds_data``),
    which the kernel does not read. Bit for bit: each row sums in stored order."""
    from jax.experimental import sparse

    rng = np.random.default_rng(0)
    dense = (rng.standard_normal((5, 40)) * 100 * (rng.random((5, 40)) < 0.6)).astype(dtype)
    dense[2] = 0
    data, indices, indptr = csr_of(dense, np.int32)
    data, indices = np.append(data, dtype(7)), np.append(indices, np.int32(1))   # past indptr[-1]
    rhs = (rng.standard_normal(rhs_shape) * 100).astype(dtype)

    def product(d, i, p, v):
        return sparse.BCSR((d, i, p), shape=dense.shape) @ v

    assert "@cpu_csr_sparse_dense_ffi" in lowered_targets(product, data, indices, indptr, rhs)
    same_as_xla(product, data, indices, indptr, rhs)
    np.testing.assert_allclose(run_interp(product, data, indices, indptr, rhs)[0], dense @ rhs, rtol=1e-5)


def csr_call_module(element_type: str, index_type: str, stored: int, rows: int, rhs_shape: tuple) -> str:
    def tensor(shape, element):
        return f"tensor<{'x'.join(map(str, shape))}x{element}>"

    result_shape = (rows, *rhs_shape[1:])
    return op_module("stablehlo.custom_call",
                     [tensor((stored,), element_type), tensor((rows + 1,), index_type),
                      tensor((stored,), index_type), tensor(rhs_shape, element_type)],
                     tensor(result_shape, element_type),
                     'call_target_name = "cpu_csr_sparse_dense_ffi", api_version = 4 : i32')


@pytest.mark.parametrize("element_type, dtype", [
    ("i64", np.int64), ("f64", np.float64), ("complex<f32>", np.complex64), ("complex<f64>", np.complex128)])
@pytest.mark.parametrize("index_type, index_dtype", [("i32", np.int32), ("i64", np.int64)])
def test_csr_sparse_dense_call_of_every_type(element_type, dtype, index_type, index_dtype):
    """The single call against XLA's CPU, with edge values (infinities, NaN, extremes:
    integers wrap), a row with repeated columns, and an empty row."""
    from oracles import edge_values

    values = edge_values(dtype, 40, seed=3)
    data = values[:12]
    indices = np.array([0, 3, 3, 1, 2, 0, 3, 1, 0, 2, 3, 1], index_dtype)
    indptr = np.array([0, 4, 4, 9, 12], index_dtype)
    rhs = values[12:20].reshape(4, 2)
    text = csr_call_module(element_type, index_type, 12, 4, (4, 2))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(run_interp_text(text, data, indptr, indices, rhs)[0],
                                      run_xla_text(text, data, indptr, indices, rhs)[0])


def test_csr_sparse_dense_column_out_of_range_is_an_error():
    """jaxlib's kernel reads out of bounds there; the interpreter names the op."""
    text = csr_call_module("f32", "i32", 2, 1, (3,))
    args = (np.ones(2, np.float32), np.array([0, 2], np.int32), np.array([0, 3], np.int32), np.ones(3, np.float32))
    with pytest.raises(si.OpError, match="cpu_csr_sparse_dense_ffi: a column index out of range"):
        run_interp_text(text, *args)
