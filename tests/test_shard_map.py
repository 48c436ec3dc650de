"""shard_map and pmap on the interp devices, against XLA's CPU with 8 host devices.

Inside ``shard_map`` (``sdy.manual_computation``) each device runs the body on
its own shard, as a process of a grid, with real collectives between them; JAX's
``psum``, ``pmean``, ``pmax``, ``all_gather``, ``ppermute``, ``psum_scatter``,
``all_to_all`` and ``axis_index`` lower to the spec's collectives and
``partition_id``. Results are compared in value, sharding and shard by shard.
"""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import stablehlo_interp as si
from test_sharding_device import PLATFORMS, assert_same_placement, mesh, on_both

X = (np.arange(96, dtype=np.float32).reshape(8, 12) % 13) - 6


def shard_mapped(platform, body, in_specs, out_specs, shape=(4, 2), names=("x", "y"), order=None, **options):
    m = mesh(platform, shape, names, order)
    return jax.jit(jax.shard_map(body, mesh=m, in_specs=in_specs, out_specs=out_specs, **options))


def run_on_both(body, in_specs, out_specs, *args, **options):
    def build(platform):
        f = shard_mapped(platform, body, in_specs, out_specs, **options)
        return f(*args)

    return on_both(build)


# ------------------------------------------------------------------------ reductions

REDUCTIONS = {
    "psum_x": lambda a: lax.psum(a, "x"),
    "psum_y": lambda a: lax.psum(a, "y"),
    "psum_xy": lambda a: lax.psum(a, ("x", "y")),
    "pmean_x": lambda a: lax.pmean(a, "x"),
    "pmax_y": lambda a: lax.pmax(a, "y"),
    "pmin_xy": lambda a: lax.pmin(a, ("y", "x")),
}


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_on_a_2d_mesh(name):
    run_on_both(REDUCTIONS[name], P("x", "y"), P("x", "y"), X, check_vma=False)


@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.int64, np.bool_])
def test_reductions_of_other_dtypes_on_a_1d_mesh(dtype):
    values = (X > 0) if dtype == np.bool_ else X.astype(dtype)
    body = (lambda a: lax.pmax(a, "x")) if dtype == np.bool_ else (lambda a: lax.psum(a, "x"))
    run_on_both(body, P("x"), P(), values, shape=(8,), names=("x",))


def test_reduction_over_a_mesh_of_six_devices():
    """Axes of 3 and 2 devices: groups of three processes."""
    run_on_both(lambda a: (lax.psum(a, "x"), lax.pmax(a, "y")), P("x", "y"), (P(None, "y"), P("x")),
                X[:6], shape=(3, 2), check_vma=False)


# ------------------------------------------------------------------------ data movement


@pytest.mark.parametrize("axis, tiled, dim", [("x", True, 0), ("y", True, 1), ("x", False, 0), ("y", False, 1),
                                              (("x", "y"), True, 0)])
def test_all_gather(axis, tiled, dim):
    def body(a):
        return lax.all_gather(a, axis, axis=dim, tiled=tiled)

    out = P(None, None) if not tiled else P()
    run_on_both(body, P("x", "y"), out, X, check_vma=False)


@pytest.mark.parametrize("axis, perm", [("x", [(0, 1), (1, 2), (2, 3), (3, 0)]), ("y", [(0, 1), (1, 0)]),
                                        ("x", [(0, 2), (3, 1)])])
def test_ppermute(axis, perm):
    """A partial permutation leaves zeros on the devices nobody sends to."""
    run_on_both(lambda a: lax.ppermute(a, axis, perm), P("x", "y"), P("x", "y"), X)


@pytest.mark.parametrize("axis, dim", [("x", 0), ("y", 1), (("x", "y"), 0)])
def test_psum_scatter(axis, dim):
    run_on_both(lambda a: lax.psum_scatter(a, axis, scatter_dimension=dim, tiled=True),
                P(), P(*([None] * dim + [axis])) if dim else P(axis), X)


@pytest.mark.parametrize("axis, split, concat, spec", [("x", 1, 0, P("x", "y")), ("y", 0, 1, P("x", "y")),
                                                       ("x", 1, 1, P("x")), (("x", "y"), 1, 0, P(("x", "y")))])
def test_all_to_all(axis, split, concat, spec):
    run_on_both(lambda a: lax.all_to_all(a, axis, split, concat, tiled=True), spec, spec, np.tile(X, (1, 2)),
                check_vma=False)


def test_axis_index_on_each_device():
    def body(a):
        return a + lax.axis_index("x") * 100 + lax.axis_index("y") * 10

    run_on_both(body, P("x", "y"), P("x", "y"), X)


def test_axis_index_over_a_reordered_mesh():
    """The mesh's device order decides which shard and which axis index each device gets."""
    def body(a):
        return lax.psum(a * (lax.axis_index("x") + 1), "x") + lax.axis_index("y")

    run_on_both(body, P("x", "y"), P(None, "y"), X, order=[3, 1, 2, 0, 7, 5, 6, 4])


def test_replicated_outputs_that_differ_per_device():
    """With check_vma=False, a value declared replicated may differ per device: each
    device keeps its own, as on XLA (np.asarray shows the first device's)."""
    run_on_both(lambda a: a * lax.axis_index("x"), P("x"), P(), X, check_vma=False)


def differing_replicas(platform):
    """A value declared replicated over the mesh whose devices hold different data."""
    return shard_mapped(platform, lambda a: a * (lax.axis_index("x") + 1), P("x"), P(), shape=(8,),
                        names=("x",), check_vma=False)(X)


@pytest.mark.parametrize("mode", [None, "check", "per_device"])
def test_a_program_reads_each_devices_own_replica(mode):
    """The next program gets each device's own buffer, as on XLA: a global program has no
    one value for it, so each device runs its own program (the first replica alone was
    read and every device got device 0's numbers)."""
    def build(platform):
        options = {"compiler_options": {"interp_spmd": mode}} if mode and platform == "interp" else {}
        return jax.jit(lambda v: jnp.sin(v) + 1, **options)(differing_replicas(platform))

    out = on_both(build)
    shards = [np.asarray(s.data) for s in out.addressable_shards]
    assert not np.array_equal(shards[0], shards[1])   # device 1's own, not device 0's


def test_eager_shard_map_of_a_callback_gives_each_device_its_rows():
    """Eager shard_map runs the callback in one program whose results JAX declares
    replicated and reads per device in the next: each row block is the device's own."""
    def body(block):
        spec = jax.ShapeDtypeStruct.like(block)
        return jax.pure_callback(lambda b: (b + 1, b * 2), (spec, spec), block)

    def build(platform):
        return jax.shard_map(body, mesh=mesh(platform, (8,), ("x",)), in_specs=P("x"), out_specs=(P("x"), P("x")))(X)

    first, second = on_both(build)
    np.testing.assert_array_equal(np.asarray(first), X + 1)
    np.testing.assert_array_equal(np.asarray(second), X * 2)


def test_differing_replicas_that_no_per_device_program_can_take_are_an_error():
    """Shardy cannot partition a split of 5 rows over 8 devices (XLA pads): the device says
    which argument differs instead of reading one replica."""
    varying = differing_replicas("interp")
    uneven = NamedSharding(varying.sharding.mesh, P("x"))
    with pytest.raises(Exception, match="devices 0 and 1 hold different values of argument v "):
        jax.jit(lambda v: jax.lax.with_sharding_constraint(v[:5], uneven) * 2)(varying).block_until_ready()


# ---------------------------------------------------------------------- mixed programs


def test_collectives_in_a_scan():
    def body(a):
        def step(carry, row):
            total = lax.psum(row, "x")
            return carry + total, lax.ppermute(row, "x", [(i, (i + 1) % 4) for i in range(4)])
        return lax.scan(step, jnp.zeros(a.shape[1]), a)

    run_on_both(body, P("x"), (P(), P("x")), X, shape=(4,), names=("x",), check_vma=False)


def test_partially_manual_shard_map():
    """Manual over x, automatic over y: the body sees shards along x only."""
    def body(a):
        return lax.psum(a, "x") * 2

    run_on_both(body, P("x"), P(), X, axis_names={"x"})


def test_nested_shard_maps():
    def build(platform):
        m = mesh(platform)

        def inner(b):
            return lax.psum(b, "y") + lax.axis_index("y")

        def outer(a):
            return jax.shard_map(inner, in_specs=P(None, "y"), out_specs=P(None, "y"),
                                 axis_names={"y"})(a * (lax.axis_index("x") + 1))

        f = jax.jit(jax.shard_map(outer, mesh=m, in_specs=P("x"), out_specs=P("x"), axis_names={"x"}))
        return f(X)

    on_both(build)


def test_shard_map_between_global_code():
    def build(platform):
        m = mesh(platform)
        body = jax.shard_map(lambda a: lax.psum(a.sum(axis=0, keepdims=True), "x"), mesh=m, in_specs=P("x", "y"),
                             out_specs=P(None, "y"))
        # (@ |v|: a dot of positive terms, so the order of its sum cannot show; with v's
        # mixed signs the sums cancel to ~1e-5, where XLA's fused multiply-adds and the
        # spec's rounded products differ beyond the tolerance: docs/semantics.md.)
        f = jax.jit(lambda v: jnp.tanh(body(jnp.exp(v / 10))) @ jnp.abs(v).T)
        return f(jax.device_put(X, NamedSharding(m, P("x", "y"))))

    on_both(build)


def test_data_parallel_gradient_step():
    """Per-device gradients, averaged with pmean, as a data-parallel training step does."""
    def build(platform):
        m = mesh(platform, (8,), ("batch",))

        def loss(w, x, y):
            return jnp.mean((jnp.tanh(x @ w) - y) ** 2)

        def step(w, x, y):
            grads = jax.grad(loss)(w, x, y)
            return w - 0.1 * lax.pmean(grads, "batch")

        f = jax.jit(jax.shard_map(step, mesh=m, in_specs=(P(), P("batch"), P("batch")), out_specs=P()))
        rng = np.random.default_rng(0)
        w = rng.standard_normal((12, 3)).astype(np.float32)
        y = rng.standard_normal((8, 3)).astype(np.float32)
        return f(w, X, y)

    on_both(build)


@pytest.mark.parametrize("name", ["psum_xy", "pmax_y"])
def test_without_shardy(without_shardy, name):
    """SPMDFullToShardShape / SPMDShardToFullShape borders: every process runs the program."""
    run_on_both(REDUCTIONS[name], P("x", "y"), P("x", "y"), X, check_vma=False)


def test_loading_leaves_the_callers_module_unchanged(without_shardy):
    """si.load annotates the SPMDFullToShardShape borders on its own copy of an
    ir.Module it is handed, never on the caller's."""
    m = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    f = jax.jit(jax.shard_map(lambda a: lax.psum(a, "x"), mesh=m, in_specs=P("x"), out_specs=P()))
    module = f.lower(np.arange(8.0, dtype=np.float32)).compiler_ir("stablehlo")
    before = str(module)
    assert "SPMDFullToShardShape" in before
    (out,) = si.run(module, np.arange(8.0, dtype=np.float32))
    assert str(module) == before
    np.testing.assert_array_equal(out, [28.0])


def test_partially_manual_without_shardy(without_shardy):
    run_on_both(lambda a: lax.psum(a, "x") + lax.axis_index("x"), P("x"), P("x"), X, axis_names={"x"})


# ------------------------------------------------- hand-written Shardy modules, compiled by XLA

SHARDY_MODULES = {
    # Logical devices in the order device_ids gives: partition_id is the logical id.
    "device_ids": """
module @m attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=2], device_ids=[3, 1, 2, 0]>
  func.func public @main(%arg0: tensor<4x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>})
      -> (tensor<4x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}, {"y"}]>] out_shardings=[<@mesh, [{"x"}, {"y"}]>]
        manual_axes={"x", "y"} (%a: tensor<2x2xf32>) {
      %p = stablehlo.partition_id : tensor<ui32>
      %f = stablehlo.convert %p : (tensor<ui32>) -> tensor<f32>
      %b = stablehlo.broadcast_in_dim %f, dims = [] : (tensor<f32>) -> tensor<2x2xf32>
      %g = "stablehlo.all_gather"(%a) {all_gather_dim = 1 : i64,
          replica_groups = dense<[[3, 1], [2, 0]]> : tensor<2x2xi64>,
          channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, use_global_device_ids}
          : (tensor<2x2xf32>) -> tensor<2x4xf32>
      %h = stablehlo.slice %g [0:2, 1:3] : (tensor<2x4xf32>) -> tensor<2x2xf32>
      %s = stablehlo.add %h, %b : tensor<2x2xf32>
      sdy.return %s : tensor<2x2xf32>
    } : (tensor<4x4xf32>) -> tensor<4x4xf32>
    return %0 : tensor<4x4xf32>
  }
}""",
    # Manual over "x" only; the body is global along the free axis "y".
    "free_axis": """
module @m attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=2]>
  func.func public @main(%arg0: tensor<4x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>})
      -> (tensor<4x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y"}]>}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}, {"y"}]>] out_shardings=[<@mesh, [{}, {"y"}]>]
        manual_axes={"x"} (%a: tensor<2x4xf32>) {
      %r = "stablehlo.all_reduce"(%a) ({
        ^bb0(%u: tensor<f32>, %v: tensor<f32>):
          %w = stablehlo.add %u, %v : tensor<f32>
          stablehlo.return %w : tensor<f32>
      }) {replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>,
          channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, use_global_device_ids}
          : (tensor<2x4xf32>) -> tensor<2x4xf32>
      %c = stablehlo.concatenate %r, %r, dim = 0 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
      sdy.return %c : tensor<4x4xf32>
    } : (tensor<4x4xf32>) -> tensor<4x4xf32>
    return %0 : tensor<4x4xf32>
  }
}""",
}


def run_compiled(text: str, x, platform: str) -> list:
    """The module compiled with Shardy for 4 devices of ``platform``; each device's result."""
    from jax._src.sharding_impls import GSPMDSharding
    from jaxlib import xla_client

    options = xla_client.CompileOptions()
    options.num_replicas, options.num_partitions = 1, 4
    options.executable_build_options.use_spmd_partitioning = True
    options.executable_build_options.use_shardy_partitioner = True
    options.device_assignment = xla_client.DeviceAssignment.create(np.arange(4).reshape(1, 4))
    devices = jax.devices(platform)[:4]
    executable = devices[0].client.compile_and_load(text.encode(), xla_client.DeviceList(tuple(devices)), options)
    (parameter,) = executable.get_parameter_shardings()
    argument = jax.device_put(x, GSPMDSharding(devices, xla_client.HloSharding.from_proto(parameter)))
    (outputs,) = executable.execute_sharded([argument]).disassemble_into_single_device_arrays()
    return [np.asarray(output) for output in outputs]


@pytest.mark.parametrize("name", SHARDY_MODULES)
def test_shardy_modules_compiled_by_xla(name):
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    expected, actual = (run_compiled(SHARDY_MODULES[name], x, platform) for platform in PLATFORMS)
    for device, (want, got) in enumerate(zip(expected, actual)):
        np.testing.assert_array_equal(got, want, err_msg=f"device {device}")


# ------------------------------------------------------------------ without the device


@pytest.mark.parametrize("shardy", [True, False], ids=["shardy", "gspmd"])
def test_si_run_runs_the_global_program(shardy):
    """``si.run`` on a lowered shard_map: global arguments in, global results out (the
    manual code runs per device inside)."""
    previous = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", shardy)
    try:
        f = shard_mapped("cpu", lambda a: (lax.psum(a, "x") * lax.axis_index("y"), lax.all_gather(a, "y", tiled=True)),
                         P("x", "y"), (P(None, "y"), P("x")), check_vma=False)
        expected = f(X)
        actual = si.run(f.lower(X), X)
    finally:
        jax.config.update("jax_use_shardy_partitioner", previous)
    for want, got in zip(expected, actual):
        np.testing.assert_allclose(got, np.asarray(want))


# -------------------------------------------------------------------------------- pmap


def test_pmap_with_psum():
    def build(platform):
        f = jax.pmap(lambda a: lax.psum(a, "i") * (lax.axis_index("i") + 1), axis_name="i",
                     devices=jax.devices(platform)[:8])
        return f(X)

    expected, actual = (build(p) for p in PLATFORMS)
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected))
    assert [s.device.id for s in actual.addressable_shards] == [s.device.id for s in expected.addressable_shards]
    for want, got in zip(expected.addressable_shards, actual.addressable_shards):
        np.testing.assert_allclose(np.asarray(got.data), np.asarray(want.data))


def test_pmap_result_placement_matches():
    """pmap's result on interp is laid out as on the CPU (one row per device)."""
    def build(platform):
        return jax.pmap(lambda a: jnp.sin(a), devices=jax.devices(platform)[:4])(X[:4])

    expected, actual = (build(p) for p in PLATFORMS)
    assert_same_placement(jax.device_put(expected, NamedSharding(Mesh(np.array(jax.devices("cpu")[:4]), ("i",)),
                                                                  P("i"))),
                          jax.device_put(actual, NamedSharding(Mesh(np.array(jax.devices("interp")[:4]), ("i",)),
                                                               P("i"))))


def test_ordered_io_callback_in_shard_map():
    """An ordered io_callback in the body threads a token through the manual computation:
    each device calls it once with its block, as on XLA."""
    calls = {platform: [] for platform in PLATFORMS}

    def build(platform):
        def body(block, offset):
            jax.experimental.io_callback(lambda v: calls[platform].append(float(np.asarray(v).sum())), (), block,
                                         ordered=True)
            return block + offset[..., None]

        f = shard_mapped(platform, body, (P(None, "x"), P(None)), P(None, "x"), shape=(4,), names=("x",))
        return f(np.arange(32.0, dtype=np.float32).reshape(2, 16), np.ones(2, np.float32))

    on_both(build)
    assert sorted(calls["interp"]) == sorted(calls["cpu"]) == [76.0, 108.0, 140.0, 172.0]
