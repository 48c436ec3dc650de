"""Placement and sharding on the interp devices, against XLA's CPU with 8 host devices.

Each test builds the same arrays and programs on ``cpu`` and on ``interp``
devices (same mesh shape, same device order) and checks that the results agree
in value, in ``.sharding`` and in every addressable shard: its device, the part
of the array it holds and its data.
"""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding


PLATFORMS = ("cpu", "interp")
X = np.arange(64, dtype=np.float32).reshape(8, 8) / 8 - 3


def mesh(platform: str, shape=(4, 2), names=("x", "y"), order=None, axis_types=None) -> Mesh:
    devices = np.array(jax.devices(platform))
    if order is not None:
        devices = devices[list(order)]
    devices = devices[:int(np.prod(shape))].reshape(shape)
    return Mesh(devices, names, axis_types=axis_types) if axis_types else Mesh(devices, names)


def placement(array) -> tuple:
    """What the test compares: the sharding and each shard (device id, index, data)."""
    sharding = array.sharding
    if isinstance(sharding, NamedSharding):
        described = ("named", sharding.spec, tuple(sharding.mesh.shape.items()),
                     tuple(d.id for d in sharding.mesh.devices.flat), sharding.mesh.axis_types)
    elif isinstance(sharding, SingleDeviceSharding):
        described = ("single", sharding._device.id)
    else:
        described = (type(sharding).__name__, sharding._to_xla_hlo_sharding(array.ndim),
                     tuple(d.id for d in sharding._device_assignment))
    shards = sorted((shard.device.id, str(shard.index), np.asarray(shard.data).tobytes(),
                     str(shard.data.dtype), shard.data.shape) for shard in array.addressable_shards)
    return described, shards


def assert_same_placement(expected, actual) -> None:
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for want, got in zip(jax.tree.leaves(expected), jax.tree.leaves(actual)):
        assert {d.platform for d in got.devices()} == {"interp"}
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)
        # the shards are usable as they are (shapes included) by the next computation
        np.testing.assert_array_equal(np.asarray(got * 2), np.asarray(got) * 2)
        want_sharding, want_shards = placement(want)
        got_sharding, got_shards = placement(got)
        assert got_sharding == want_sharding
        assert [s[:2] + s[3:] for s in got_shards] == [s[:2] + s[3:] for s in want_shards]
        for (device, _, want_data, dtype, shape), (_, _, got_data, _, _) in zip(want_shards, got_shards):
            np.testing.assert_allclose(np.frombuffer(got_data, dtype).reshape(shape),
                                       np.frombuffer(want_data, dtype).reshape(shape), rtol=1e-6, atol=1e-6,
                                       err_msg=f"shard on device {device}")


def on_both(build):
    """``build(platform)`` on the CPU and on interp; checks they agree; returns interp's."""
    expected, actual = (build(platform) for platform in PLATFORMS)
    assert_same_placement(expected, actual)
    return actual


# --------------------------------------------------------------------------------- device_put

PUT_CASES = {
    "1d": ((8,), ("x",), [P(), P("x"), P(None, "x")]),
    "2d": ((4, 2), ("x", "y"), [P("x", "y"), P("y", "x"), P(("x", "y")), P(None, "y"), P("y")]),
    "2d_2x2": ((2, 2), ("x", "y"), [P("x"), P(("y", "x"), None)]),
}


@pytest.mark.parametrize("case, spec", [(c, s) for c in PUT_CASES for s in PUT_CASES[c][2]],
                         ids=[f"{c}-{s}" for c in PUT_CASES for s in PUT_CASES[c][2]])
def test_device_put_named_sharding(case, spec):
    shape, names, _ = PUT_CASES[case]
    on_both(lambda p: jax.device_put(X, NamedSharding(mesh(p, shape, names), spec)))


def test_device_put_over_a_reordered_mesh():
    on_both(lambda p: jax.device_put(X, NamedSharding(mesh(p, order=[3, 1, 2, 0, 7, 5, 6, 4]), P("x", "y"))))


@pytest.mark.parametrize("index", [0, 5])
def test_device_put_single_device(index):
    on_both(lambda p: jax.device_put(X, SingleDeviceSharding(jax.devices(p)[index])))


def test_device_put_from_one_sharding_to_another():
    on_both(lambda p: jax.device_put(jax.device_put(X, NamedSharding(mesh(p), P("x", "y"))),
                                     NamedSharding(mesh(p), P(None, "x"))))


# ---------------------------------------------------------------- with_sharding_constraint


def test_with_sharding_constraint_eagerly_is_like_device_put():
    """Eagerly, with_sharding_constraint reshards a committed array like device_put (a
    transfer between devices: no program runs)."""
    def build(platform):
        m = mesh(platform)
        x = jax.device_put(X, NamedSharding(m, P("x")))
        return lax.with_sharding_constraint(x, NamedSharding(m, P("y", "x"))), \
            jax.device_put(x, NamedSharding(m, P("y", "x")))

    constrained, put = on_both(build)
    assert placement(constrained) == placement(put)


@pytest.mark.parametrize("spec", [P("x", "y"), P(None, "x"), P(), P(("x", "y"))])
def test_with_sharding_constraint_inside_jit(ran, spec):
    def build(platform):
        m = mesh(platform)
        f = jax.jit(lambda v: lax.with_sharding_constraint(jnp.sin(v) * 2, NamedSharding(m, spec)) + 1)
        return f(jax.device_put(X, NamedSharding(m, P("y"))))

    on_both(build)
    assert ran.ops


def test_constraint_decides_the_sharding_of_an_uncommitted_argument():
    """XLA propagates a constraint backwards to an argument JAX left unspecified."""
    def build(platform):
        m = mesh(platform)
        f = jax.jit(lambda v: lax.with_sharding_constraint(v.reshape(2, 4, 8),
                                                           NamedSharding(m, P(None, P.UNCONSTRAINED, "y"))))
        compiled = f.lower(X).compile()
        return compiled(X), compiled.input_shardings[0][0]

    expected, actual = (build(p) for p in PLATFORMS)
    assert_same_placement(expected[0], actual[0])
    assert actual[1]._to_xla_hlo_sharding(2) == expected[1]._to_xla_hlo_sharding(2)


# ------------------------------------------------------------------ jit in_/out_shardings


@pytest.mark.parametrize("in_spec, out_spec", [(P("x"), P("y")), (P("x", "y"), P()), (P(), P("x", "y")),
                                               (P(None, "y"), P(("x", "y")))])
def test_jit_in_and_out_shardings(ran, in_spec, out_spec):
    def build(platform):
        m = mesh(platform)
        f = jax.jit(lambda a, b: (a @ b, a + 1), in_shardings=(NamedSharding(m, in_spec), NamedSharding(m, P())),
                    out_shardings=(NamedSharding(m, out_spec), None))
        return f(X, X.T)

    on_both(build)
    assert ran.ops


def test_jit_with_out_shardings_on_uncommitted_inputs():
    on_both(lambda p: jax.jit(lambda v: jnp.cumsum(v, axis=0),
                              out_shardings=NamedSharding(mesh(p), P("x", "y")))(X))


def test_jit_over_a_subset_of_the_devices():
    on_both(lambda p: jax.jit(lambda v: v * v)(jax.device_put(X, NamedSharding(mesh(p, (2,), ("x",)), P("x")))))


@pytest.mark.filterwarnings("ignore:backend and device argument on jit is deprecated")
def test_computation_follows_data():
    """jit without shardings runs where its (committed) inputs are."""
    def build(platform):
        d = jax.devices(platform)[3]
        return jax.jit(lambda v: v * 2)(jax.device_put(X, d)), jax.jit(lambda v: v * 2, device=d)(X)

    followed, pinned = on_both(build)
    assert placement(followed) == placement(pinned)


def test_donated_sharded_arguments_are_deleted():
    def build(platform):
        x = jax.device_put(X, NamedSharding(mesh(platform), P("x")))
        y = jax.jit(lambda v: v + 1, donate_argnums=0)(x)
        assert x.is_deleted()
        return y

    on_both(build)


# ------------------------------------------------------------ what XLA decides (propagation)

PROPAGATION = {
    "elementwise": lambda v: jnp.exp(v) * 2 - v,
    "transpose": lambda v: v.T,
    "reduce": lambda v: v.sum(axis=0),
    "reduce_all": lambda v: jnp.tanh(v).mean(),
    "matmul": lambda v: v @ v.T,
    "reshape_merge": lambda v: v.reshape(64),
    "reshape_split": lambda v: v.reshape(2, 4, 8),
    "concatenate": lambda v: jnp.concatenate([v, v]),
    "broadcast": lambda v: v[None, :, :] * jnp.ones((3, 1, 1)),
    "slice": lambda v: v[1:5],
    "slice_uneven": lambda v: v[:6, :3],
    "pad_uneven": lambda v: jnp.pad(v, ((0, 1), (2, 0))),
    "reshape_sub_axes": lambda v: v.reshape(16, 2, 2),
    "sort": lambda v: jnp.sort(v, axis=0),
    "cond": lambda v: lax.cond(v[0, 0] > 0, jnp.sin, jnp.cos, v),
    "while": lambda v: lax.fori_loop(0, 3, lambda i, c: c * 2 + i, v),
    "nested_jit": lambda v: jax.jit(lambda w: w + 1)(v) * 3,
    "scan": lambda v: lax.scan(lambda c, row: (c + row, c * row), jnp.zeros(8), v),
    "gather_rows": lambda v: v[jnp.array([3, 1, 2])],
    "gather_columns": lambda v: jnp.take(v, jnp.array([5, 0]), axis=1),
    "gather_points": lambda v: v[jnp.array([0, 7, 2]), jnp.array([1, 1, 6])],
    "gather_batched": lambda v: jax.vmap(lambda row, i: row[i])(v, jnp.arange(8) % 3),
    "scatter_rows": lambda v: v.at[jnp.array([0, 3])].add(1.0),
    "scatter_columns": lambda v: v.at[:, jnp.array([6, 2])].set(jnp.ones((8, 2), v.dtype)),
    "scatter_batched": lambda v: jax.vmap(lambda row, i: row.at[i].set(0.0))(v, jnp.arange(8) % 3),
    # ops the hand-written propagation had no rule for (it left their results replicated)
    "convolution": lambda v: lax.conv_general_dilated(v[None, None], jnp.ones((1, 1, 3, 3), v.dtype), (1, 1), "SAME")[0, 0],
    "fft": lambda v: jnp.fft.fft(v).real,
    "pad_then_concatenate": lambda v: jnp.concatenate([jnp.pad(v, ((1, 0), (0, 0))), v[:1]]),
}


@pytest.mark.parametrize("name", PROPAGATION)
@pytest.mark.parametrize("spec", [P("x", "y"), P("y")])
def test_result_shardings_xla_chooses(name, spec):
    on_both(lambda p: jax.jit(PROPAGATION[name])(jax.device_put(X, NamedSharding(mesh(p), spec))))


def inspected_specs(platform: str, function, spec) -> list:
    """The shardings jax.debug.inspect_array_sharding reports inside ``function``,
    jitted on ``platform``, as (spec, mesh shape)."""
    seen = []
    m = mesh(platform)
    x = jax.device_put(X, NamedSharding(m, spec))
    jax.jit(lambda v: function(v, seen.append, m))(x).block_until_ready()
    return [(s.spec, tuple(s.mesh.shape.items())) for s in seen]


INSPECTED = {
    "argument": lambda v, report, m: jax.debug.inspect_array_sharding(v, callback=report) or v * 2,
    "propagated": lambda v, report, m: [jax.debug.inspect_array_sharding(w, callback=report)
                                        for w in (v @ v.T, v.sum(0), jnp.tanh(v).T)] and v,
    "constrained": lambda v, report, m: jax.debug.inspect_array_sharding(
        lax.with_sharding_constraint(v * 2, NamedSharding(m, P("y", "x"))), callback=report) or v,
    "in_a_loop": lambda v, report, m: lax.fori_loop(
        0, 2, lambda i, c: jax.debug.inspect_array_sharding(c, callback=report) or c + 1, v),
}


@pytest.mark.parametrize("name", INSPECTED)
@pytest.mark.parametrize("spec", [P("x", "y"), P("y")])
def test_inspect_array_sharding_reports_what_xla_chooses(name, spec):
    """Answered when the program is compiled, as XLA's partitioner does."""
    on_interp = inspected_specs("interp", INSPECTED[name], spec)
    assert on_interp == inspected_specs("cpu", INSPECTED[name], spec) and on_interp


def test_inspect_array_sharding_in_shard_map_and_on_one_device():
    seen = []
    m = mesh("interp")
    body = jax.shard_map(lambda b: jax.debug.inspect_array_sharding(b, callback=seen.append) or b * 2,
                         mesh=m, in_specs=P("x", "y"), out_specs=P("x", "y"))
    jax.jit(body)(jax.device_put(X, NamedSharding(m, P("x", "y")))).block_until_ready()
    jax.jit(lambda v: jax.debug.inspect_array_sharding(v, callback=seen.append) or v)(
        jax.device_put(X, jax.devices("interp")[2]))
    (manual, single) = seen
    assert manual.spec == P() and manual.mesh == m
    assert single.device_set == {jax.devices("interp")[2]}


def test_constraint_under_a_second_abstract_mesh():
    """A constraint under another abstract mesh (axes a=4, b=1 over the same devices): the
    module has two meshes, and the result takes the constraint's sharding on the second."""
    def build(platform):
        m = mesh(platform, (2, 2), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
        second = m.abstract_mesh.update(axis_sizes=(4, 1), axis_names=("a", "b"))

        @jax.jit
        def f(v):
            v = jnp.sin(v)
            with jax.sharding.use_abstract_mesh(second):
                return lax.with_sharding_constraint(v, P(("a", "b"), None)) * 2

        with jax.sharding.set_mesh(m):
            return f(jax.device_put(X, P("x", "y")))

    assert on_both(build).sharding.spec == P("a")


def test_uneven_constraint_inside_jit():
    """A constraint that does not divide the dimension (XLA pads the shards inside)."""
    def build(platform):
        m = mesh(platform)
        f = jax.jit(lambda v: lax.with_sharding_constraint(v[:6] * 2, NamedSharding(m, P("x", "y"))) + 1)
        return f(jax.device_put(X, NamedSharding(m, P("x", "y"))))

    on_both(build)


def test_two_inputs_with_compatible_shardings():
    def build(platform):
        m = mesh(platform)
        return jax.jit(lambda a, b: a * b)(jax.device_put(X, NamedSharding(m, P("x"))),
                                           jax.device_put(X, NamedSharding(m, P(None, "y"))))

    on_both(build)


def test_shard_alike():
    """``shard_alike`` puts both values in one sdy.sharding_group: they get one sharding."""
    from jax.experimental.shard_alike import shard_alike

    def build(platform):
        x = jax.device_put(X, NamedSharding(mesh(platform), P("x", "y")))
        return jax.jit(lambda a, b: shard_alike(a * 2, b + 1))(x, X)

    on_both(build)


# -------------------------------------------------------------------- explicit sharding mode


def test_explicit_axes_mesh(ran):
    """With Explicit axes, shardings are part of the types; Auto axes are left to XLA."""
    def build(platform):
        m = mesh(platform, axis_types=(AxisType.Explicit, AxisType.Auto))
        x = jax.device_put(X, NamedSharding(m, P("x")))
        rows = NamedSharding(m, P("x"))
        f = jax.jit(lambda v: (jnp.matmul(jnp.sin(v), v.T, out_sharding=rows), v.sum(axis=1), v * 2))
        return f(x)

    on_both(build)
    assert ran.ops


@pytest.mark.parametrize("spec", [P(None, "x"), P("y", "x"), P()])
def test_reshard(ran, spec):
    def build(platform):
        m = mesh(platform, axis_types=(AxisType.Explicit, AxisType.Explicit))
        x = jax.device_put(X, NamedSharding(m, P("x")))
        inside = jax.jit(lambda v: jax.reshard(v * 2, NamedSharding(m, spec)))(x)
        return inside, jax.reshard(x, NamedSharding(m, spec))

    on_both(build)
    assert ran.ops


def test_make_mesh_default_axis_types():
    def build(platform):
        m = jax.make_mesh((4, 2), ("x", "y"), devices=jax.devices(platform))
        x = jax.device_put(X, NamedSharding(m, P("x", "y")))
        return jax.jit(lambda v: (jnp.matmul(v.T, v, out_sharding=NamedSharding(m, P("y"))), jnp.cos(v).sum(0)))(x)

    on_both(build)


# --------------------------------------------------------------- modules lowered without Shardy


def test_hlo_shardings_without_shardy(without_shardy):
    """mhlo.sharding on arguments and results, Sharding custom calls for constraints."""
    def build(platform):
        m = mesh(platform)
        f = jax.jit(lambda v: lax.with_sharding_constraint(v * 2, NamedSharding(m, P(None, "x"))),
                    out_shardings=NamedSharding(m, P("y")))
        return f(jax.device_put(X, NamedSharding(m, P("x", "y"))))

    on_both(build)


def test_open_result_of_an_uneven_constraint_is_replicated():
    """A constraint may shard a dimension unevenly; a result left open takes the value's
    sharding only where it divides evenly (113 over 2: replicated, as on XLA)."""
    def build(platform):
        m = mesh(platform, (2,), ("data",))
        uneven = NamedSharding(m, P("data"))
        f = jax.jit(lambda: (lax.with_sharding_constraint(jnp.arange(113), uneven),
                             lax.with_sharding_constraint(jnp.arange(64), uneven)))
        return f()

    actual = on_both(build)
    assert [a.sharding.spec for a in actual] == [P(), P("data")]


def test_a_gradient_through_calls_keeps_its_split_as_on_cpu():
    """JAX writes a vmapped fori_loop's gradient with calls (``closed_call`` ...): the
    sharding propagation goes through them as XLA's does, and the gradient keeps its
    argument's split (the device reported it replicated)."""
    weights = (np.arange(32, dtype=np.float32).reshape(16, 2) % 5 - 2) / 4

    def build(platform):
        bias = jax.device_put(np.array([0.5, -0.25], np.float32), NamedSharding(mesh(platform, (2,), ("x",)), P("x")))

        def loss(b):
            def solve(y0):
                return lax.fori_loop(0, 3, lambda i, y: y + (weights @ y) @ weights / 16 + b, y0)
            return (jax.vmap(solve)(np.ones((3, 2), np.float32)) ** 2).sum()

        return jax.jit(jax.grad(loss))(bias)

    assert on_both(build).sharding.spec == P("x")
