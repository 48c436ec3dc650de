"""Unreduced values on the interp devices, against XLA's CPU with 8 host devices.

With sharding in types (Explicit mesh axes) a sum over a dimension sharded on
an axis can leave its result *unreduced* there: each device holds its own
partial sum until a reshard reduces it. Each test runs the same program on
``cpu`` and on ``interp`` meshes and checks, bit for bit (the data are small
integers, so every partial sum is exact, except where a test says otherwise),
the sharding and what every device holds. JAX cannot index the shards of an
unreduced array (``shard.index`` raises), so a shard is its device and data.
"""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh, PartitionSpec as P, reshard

PLATFORMS = ("cpu", "interp")


def explicit_mesh(platform: str, shape, names) -> Mesh:
    devices = np.array(jax.devices(platform)[:int(np.prod(shape))]).reshape(shape)
    return Mesh(devices, names, axis_types=(AxisType.Explicit,) * len(names))


def held(array) -> tuple:
    """The sharding's spec and, per device in id order, the dtype, shape and bytes it holds."""
    shards = sorted(array.addressable_shards, key=lambda s: s.device.id)
    return array.sharding.spec, [(s.device.id, str(s.data.dtype), s.data.shape, np.asarray(s.data).tobytes())
                                 for s in shards]


def on_both(shape, names, build):
    """``build(platform)`` under each platform's explicit mesh; the results of cpu and interp."""
    results = {}
    for platform in PLATFORMS:
        with jax.set_mesh(explicit_mesh(platform, shape, names)):
            results[platform] = build(platform)
    return results["cpu"], results["interp"]


def assert_same(cpu, interp) -> None:
    for want, got in zip(jax.tree.leaves(cpu), jax.tree.leaves(interp)):
        assert {d.platform for d in got.devices()} == {"interp"}
        assert held(got) == held(want)


def put(value, spec):
    return jax.device_put(value, spec)


ROWS = np.arange(16.0, dtype=np.float32).reshape(8, 2)


@pytest.mark.parametrize("x_spec, y_spec, out_spec", [
    (P(None, "x"), P("x", None), P(None, None, unreduced={"x"})),
    (P("x", "y"), P("y", None), P("x", None, unreduced={"y"})),
    (P(None, "y"), P("y", None), P(None, None, unreduced={"y"})),
])
def test_matmul_unreduced_in_jit_then_reshard(x_spec, y_spec, out_spec):
    """Each device holds the product of its slices of the contracting dimension; a reshard
    (eager) or a constraint (in jit) sums them."""
    def build(platform):
        x, y = put(ROWS, x_spec), put(ROWS.T, y_spec)
        out = jax.jit(lambda a, b: jnp.einsum("ij,jk->ik", a, b, out_sharding=out_spec))(x, y)
        reduced = P(*out_spec.partitions)
        return out, reshard(out, reduced), jax.jit(lambda a: reshard(a + a, reduced))(out)

    cpu, interp = on_both((2, 2, 2), ("x", "y", "z"), build)
    assert_same(cpu, interp)
    assert interp[0].sharding.spec.unreduced
    np.testing.assert_array_equal(np.asarray(interp[1]), ROWS @ ROWS.T)


def test_unreduced_argument_stays_unreduced():
    """An unreduced argument arrives as per-device partials; ``a + a`` adds each device's."""
    def build(platform):
        x, y = put(ROWS, P("x", "y")), put(ROWS.T, P("y", None))
        out = jax.jit(lambda a, b: jnp.einsum("ij,jk->ik", a, b, out_sharding=P("x", unreduced={"y"})))(x, y)
        return jax.jit(lambda a: a + a.T.T)(out)

    assert_same(*on_both((2, 2), ("x", "y"), build))


def test_four_partials_summed_in_device_order():
    """Unreduced over two axes: four partials per value, summed as XLA's all-reduce sums
    them. Each device's slice of ``rhs`` has one non-zero, so each partial is one rounded
    product (the same on both); the sum of the four random floats shows the order of
    the additions in its last bits."""
    rng = np.random.default_rng(0)
    lhs, rhs = rng.standard_normal((16, 3)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    rhs[np.arange(16) % 4 != 0] = 0

    def build(platform):
        a, b = put(lhs, P(("x", "y"), None)), put(rhs, P(("x", "y")))
        out = jax.jit(lambda a, b: jnp.einsum("ij,i->j", a, b, out_sharding=P(None, unreduced={"x", "y"})))(a, b)
        return out, reshard(out, P(None))

    cpu, interp = on_both((2, 2), ("x", "y"), build)
    assert_same(cpu, interp)


def test_reduce_sum_unreduced_over_one_of_two_summed_axes():
    """reduce over dimensions sharded on x and on y, unreduced on x only: the sum over y is
    all-reduced, the one over x stays per device."""
    cube = np.arange(16.0, dtype=np.float32).reshape(4, 2, 2)

    def build(platform):
        arr = put(cube, P("x", "y", None))
        out = jax.jit(lambda v: jax.lax.reduce_sum(v, axes=(0, 1), out_sharding=P(None, unreduced={"x"})))(arr)
        return out, reshard(out, P(None))

    assert_same(*on_both((2, 2), ("x", "y"), build))


def test_reshard_to_unreduced_keeps_the_value_at_coordinate_zero():
    """A replicated value made unreduced: the devices at coordinate 0 of the unreduced axes
    keep it, the others hold zeros; resharding back sums to the value."""
    def build(platform):
        out = reshard(jnp.arange(4.0), P(None, unreduced={"x", "z"}))
        return out, reshard(out, P(None)), reshard(jnp.arange(16.0).reshape(8, 2), P("x", unreduced={"y"}))

    assert_same(*on_both((2, 2, 2), ("x", "y", "z"), build))


def test_grad_of_reshard_from_reduced_is_unreduced():
    """The transpose of a reshard from reduced to sharded: each device keeps the cotangent of
    its own slice and zeros elsewhere (unreduced), until a reshard sums them."""
    def build(platform):
        reduced = put(np.arange(8.0, dtype=np.float32).reshape(4, 2), P("x", None, reduced={"y"}))
        loss = jax.jit(lambda v: (jax.reshard(v * v, P("x", "y"))).sum())
        grad = jax.jit(jax.grad(loss))(reduced)
        return grad, reshard(grad, P("x", None))

    cpu, interp = on_both((2, 2), ("x", "y"), build)
    assert interp[0].sharding.spec == P("x", None, unreduced={"y"})
    assert_same(cpu, interp)


def test_out_sharding_alone_makes_a_result_unreduced():
    """An identity whose out_shardings is unreduced: a device keeps the part of the value
    it held (its slice of a sharded input; the whole of a replicated one at coordinate 0)
    and zeros elsewhere."""
    def build(platform):
        identity = jax.jit(lambda v: v, out_shardings=P(unreduced={"x"}))
        return identity(jnp.arange(4)), identity(put(np.arange(4), P("x")))

    cpu, interp = on_both((2,), ("x",), build)
    assert_same(cpu, interp)
    shards = sorted(interp[1].addressable_shards, key=lambda s: s.device.id)
    assert [np.asarray(s.data).tolist() for s in shards] == [[0, 1, 0, 0], [0, 0, 2, 3]]


def shard_map_matmul():
    """A shard_map whose body's product stays unreduced along y (the contracting axis)."""
    return jax.jit(jax.shard_map(lambda a, b: jnp.einsum("ab,bc->ac", a, b), in_specs=(P("x", "y"), P("y", None)),
                                 out_specs=P("x", None, unreduced={"y"})))


def test_shard_map_unreduced_out_and_in_and_grad():
    """Each device's product leaves shard_map as its partial; an unreduced in_spec hands
    each device its own partial back; grad through the reshard that sums them."""
    lhs, rhs = np.arange(8.0, dtype=np.float32).reshape(2, 4), np.arange(8.0, dtype=np.float32).reshape(4, 2)

    def build(platform):
        matmul = shard_map_matmul()
        a, b = put(lhs, P("x", "y")), put(rhs, P("y", None))
        out = matmul(a, b)
        doubled = jax.jit(jax.shard_map(lambda v: v + v, in_specs=P("x", None, unreduced={"y"}),
                                        out_specs=P("x", None, unreduced={"y"})))(out)
        loss = lambda a, b: reshard(matmul(a, b), P("x", None)).sum()   # noqa: E731 - a lambda reads as the expression it names
        return out, doubled, reshard(out, P("x", None)), jax.jit(jax.grad(loss, argnums=(0, 1)))(a, b)

    cpu, interp = on_both((2, 2), ("x", "y"), build)
    assert_same(cpu, interp)
    np.testing.assert_array_equal(np.asarray(interp[2]), lhs @ rhs)


def test_shard_map_unreduced_out_is_summed_by_si_run():
    """Outside the device (si.run, one global view) an unreduced result is its sum."""
    import stablehlo_interp as si

    with jax.set_mesh(explicit_mesh("cpu", (2, 2), ("x", "y"))):
        lhs, rhs = put(ROWS.T[:, :4].copy(), P("x", "y")), put(ROWS[:4, :].copy(), P("y", None))
        lowered = shard_map_matmul().lower(lhs, rhs)
    np.testing.assert_array_equal(np.asarray(si.run(lowered, np.asarray(lhs), np.asarray(rhs))),
                                  np.asarray(lhs) @ np.asarray(rhs))


def test_scatter_add_unreduced():
    """segment_sum / bincount / .at[].add with an unreduced out_sharding: each device scatters
    its slice of the updates; only the devices at coordinate 0 start from the operand."""
    def build(platform):
        values = put(jnp.arange(8, dtype=jnp.int32), P("x"))
        segments = put(jnp.array([0, 0, 1, 1, 1, 2, 2, 3]), P("x"))
        unreduced = P(unreduced={"x"})
        summed = jax.jit(lambda v, s: jax.ops.segment_sum(v, s, num_segments=4, out_sharding=unreduced))(
            values, segments)
        counts = jax.jit(lambda s: jnp.bincount(s, length=4, out_sharding=unreduced))(segments)
        added = jax.jit(lambda base, v, s: base.at[s].add(v, out_sharding=unreduced))(
            put(jnp.arange(4.0), P()), put(jnp.arange(8.0), P("x")), segments)
        return summed, counts, added, reshard(added, P())

    cpu, interp = on_both((4,), ("x",), build)
    assert_same(cpu, interp)
    np.testing.assert_array_equal(np.asarray(interp[3]), [1.0, 10.0, 13.0, 10.0])


def test_gradient_of_a_multi_axis_all_gather_in_a_called_shard_map():
    """The cotangent of ``top_level_all_gather`` is a constant made unreduced on x and y,
    handed to a function that calls a ``shard_map`` (a manual computation in a function
    of its own, after @main's ops): each value's propagated sharding must be its own,
    not another function's op at the same position."""
    from jax._src.shard_map import top_level_all_gather

    def build(platform):
        arr = put(ROWS, P("x", "y"))
        gathered = jax.jit(lambda v: top_level_all_gather(v, P(None, None, reduced={"x", "y"}), multi_dim=True))
        return jax.jit(jax.grad(lambda v: gathered(v).sum()))(arr)

    cpu, interp = on_both((2, 2, 2), ("x", "y", "z"), build)
    assert_same(cpu, interp)
    np.testing.assert_array_equal(np.asarray(interp), np.ones_like(ROWS))


def test_a_called_function_made_unreduced_keeps_each_devices_slice():
    """The cotangent of ``reshard(x, P('x'))`` on a reduced argument: a value sharded on x
    handed to a function (a nested jit) that makes it unreduced on x. Each device keeps
    its own slice, zeros elsewhere: the function's argument holds the caller's sharding."""
    def build(platform):
        arr = put(np.arange(4.0, dtype=np.float32), P(None, reduced={"x"}))
        resharded = jax.jit(lambda v: reshard(v, P("x")))
        return jax.jit(jax.grad(jax.jit(lambda v: resharded(v).sum())))(arr)

    cpu, interp = on_both((2,), ("x",), build)
    assert_same(cpu, interp)
    assert [np.asarray(s.data).tolist() for s in interp.addressable_shards] == [[1, 1, 0, 0], [0, 0, 1, 1]]


@pytest.mark.parametrize("unreduced_argument", [False, True])
def test_a_sum_to_a_scalar_of_or_into_partials(unreduced_argument):
    """A 0-d sum (reduce's runner for 0-d results, ops/reduction.py) whose result is left
    unreduced, or whose operand is: it runs once per partial, as every op on Partials."""
    def build(platform):
        if unreduced_argument:
            x = reshard(jnp.arange(4.0, dtype=jnp.float32), P(unreduced={"x"}))
            return jax.jit(lambda v: jax.lax.reduce_sum(v, axes=[0]))(x)
        x = put(np.arange(8, dtype=np.float32), P("x"))
        return jax.jit(lambda v: jax.lax.reduce_sum(v, axes=(0,), out_sharding=P(unreduced={"x"})))(x)

    cpu, interp = on_both((2,), ("x",), build)
    assert interp.sharding.spec.unreduced == {"x"}
    assert_same(cpu, interp)
