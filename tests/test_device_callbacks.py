"""Host callbacks inside programs on the interp device: same calls, same order, same values as on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import io_callback
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DEV = jax.devices("interp")[0]
CPU = jax.devices("cpu")[0]
X = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)


def run_on(device, make, *args):
    """Build a fresh function with its own log (via ``make(log)``), run it jitted on ``device``."""
    log = []
    out = jax.jit(make(log))(*jax.device_put(args, device))
    return jax.tree.map(np.asarray, out), log


def assert_same_on_both(make, *args):
    expected, expected_log = run_on(CPU, make, *args)
    actual, actual_log = run_on(DEV, make, *args)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), actual, expected)
    assert len(actual_log) == len(expected_log) and actual_log, actual_log
    for got, want in zip(actual_log, expected_log):
        assert got[0] == want[0]
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    return actual_log


def test_debug_callback_in_order():
    def make(log):
        def f(v):
            jax.debug.callback(lambda a: log.append(("first", np.asarray(a))), v)
            w = jnp.sin(v)
            jax.debug.callback(lambda a: log.append(("second", np.asarray(a))), w)
            return w * 2
        return f

    log = assert_same_on_both(make, X)
    assert [name for name, _ in log] == ["first", "second"]


def test_debug_print(capfd):
    def f(v):
        jax.debug.print("value {v} sum {s}", v=v, s=v.sum())
        return v + 1

    out = jax.jit(f)(jax.device_put(np.arange(3.0, dtype=np.float32), DEV))
    out.block_until_ready()
    assert out.devices() == {DEV}
    assert "value [0. 1. 2.] sum 3.0" in capfd.readouterr().out


def test_callbacks_of_a_function_without_results():
    """Only side effects: the program returns the empty tuple. (Unordered callbacks:
    XLA's CPU may run them in either order.) The sum is XLA CPU's, bit for bit: -2**-23,
    where the spec's left fold gives 0 (docs/semantics.md, "Accumulation")."""
    def make(log):
        def f(v):
            jax.debug.callback(lambda a: log.append(("sum", float(a))), v.sum())
            jax.debug.callback(lambda a: log.append(("max", float(a))), v.max())
        return f

    (expected, expected_log), (actual, actual_log) = run_on(CPU, make, X), run_on(DEV, make, X)
    assert actual is expected is None
    assert sorted(actual_log) == sorted(expected_log) == [("max", X.max()), ("sum", -2.0 ** -23)]


def test_pure_callback_values():
    def make(log):
        def f(v):
            shape = jax.ShapeDtypeStruct(v.shape, v.dtype)
            y = jax.pure_callback(lambda a: (log.append(("cb", np.asarray(a))), np.exp(a))[1], shape, v)
            return y + 1
        return f

    assert_same_on_both(make, X)


def test_pure_callback_under_vmap():
    def make(log):
        def host(a):
            log.append(("row", np.asarray(a)))
            return np.cos(a)

        shape = jax.ShapeDtypeStruct((3,), jnp.float32)
        return jax.vmap(lambda row: jax.pure_callback(host, shape, row, vmap_method="sequential"))

    assert_same_on_both(make, X)


def test_ordered_io_callbacks_in_a_loop():
    def make(log):
        def host(i, c):
            log.append(("step", np.asarray([i, c.sum()])))
            return c * 2

        def body(i, c):
            return io_callback(host, jax.ShapeDtypeStruct(c.shape, c.dtype), i, c, ordered=True)

        return lambda v: lax.fori_loop(0, 4, body, v)

    log = assert_same_on_both(make, X)
    assert [int(entry[1][0]) for entry in log] == [0, 1, 2, 3]


def test_callback_with_several_results():
    def make(log):
        def host(a):
            log.append(("pair", np.asarray(a)))
            return a.astype(np.int32), a * 3

        shapes = (jax.ShapeDtypeStruct((2, 3), jnp.int32), jax.ShapeDtypeStruct((2, 3), jnp.float32))
        return lambda v: jax.pure_callback(host, shapes, v * 4)

    assert_same_on_both(make, X)


def test_callback_returning_the_wrong_shape_is_an_error():
    def f(v):
        return jax.pure_callback(lambda a: np.zeros(7, np.float32), jax.ShapeDtypeStruct(v.shape, v.dtype), v)

    with pytest.raises(jax.errors.JaxRuntimeError, match="shape"):
        jax.jit(f)(jax.device_put(X, DEV)).block_until_ready()


@pytest.mark.parametrize("returned, dtype", [(42.0, jnp.float32), (42, jnp.int32),
                                             (np.array([1.5], np.float64), jnp.float32)],
                         ids=["float_literal", "int_literal", "float64_array"])
def test_callback_values_take_jax_canonical_types(returned, dtype):
    """As JAX's wrapper on the CPU does, a Python literal or a 64-bit array (x64 off) a
    callback returns becomes the 32-bit type the callback declared (python_callback_test.py's
    test_callback_returning_python_literal, test_callback_with_wrong_dtype_outputs)."""
    shape = np.shape(returned)

    def make(log):
        def host(a):
            log.append(("cb", np.asarray(a)))
            return returned
        return lambda v: io_callback(host, jax.ShapeDtypeStruct(shape, dtype), v) + 1

    with jax.enable_x64(False):      # with x64 on, both refuse a 64-bit value for a 32-bit result
        log = assert_same_on_both(make, X)
    assert len(log) == 1


def test_eager_pure_callback():
    x = jax.device_put(X, DEV)
    y = jax.pure_callback(np.tanh, jax.ShapeDtypeStruct(X.shape, X.dtype), x)
    assert y.devices() == {DEV}
    np.testing.assert_allclose(np.asarray(y), np.tanh(X), rtol=1e-6)


@pytest.mark.parametrize("ordered", [False, True])
def test_callback_placed_on_a_device_of_a_mesh(ordered):
    """io_callback(..., sharding=one device) in a program over 8 devices: the callback runs with
    the global value, and the op carries that device as a maximal sharding, as JAX's lowering for
    the CPU writes it (python_callback_test.py's test_can_use_io_callback_in_pjit)."""
    devices = jax.devices("interp")
    mesh = jax.sharding.Mesh(np.array(devices), ("dev",))
    collected = []

    def f(v):
        io_callback(lambda a: collected.append(int(a.sum())), None, v,
                    sharding=jax.sharding.SingleDeviceSharding(devices[-1]), ordered=ordered)
        return v

    jitted = jax.jit(f, in_shardings=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("dev")))
    x = np.arange(len(devices), dtype=np.int32)
    jitted(x)
    jax.effects_barrier()
    assert collected == [int(np.arange(len(devices)).sum())]
    text = jitted.lower(x).as_text()
    assert f"<@maximal_mesh_{len(devices) - 1}, []>" in text, text


# ------------------------------------------------------------------ partitioned callbacks
#
# jax.debug.callback / jax.debug.print with partitioned=True: XLA's partitioner runs the
# callback on every device of the program with that device's shard of each operand (as
# the operand is sharded where it is made). Each case below builds the same program and
# sharded arguments for a platform; the oracle is what XLA's CPU calls, with 8 host
# devices: the same calls (XLA's devices run in parallel, so in any order between
# devices), each with the same shards.


def partitioned_mesh(platform: str, shape: tuple, names: tuple) -> Mesh:
    return Mesh(np.array(jax.devices(platform)[:int(np.prod(shape))]).reshape(shape), names)


def recorder(log: list, label: str = ""):
    return lambda *values: log.append((label, *(np.asarray(v).copy() for v in values)))


def sharded_3d_array(platform, log):
    """A sharded argument as it is, over a mesh with axes of size 1 (each device: half the last dimension)."""
    mesh = partitioned_mesh(platform, (1, 1, 2), ("x", "y", "z"))
    x = jax.device_put(np.arange(24).reshape(2, 3, 4), NamedSharding(mesh, P("x", "y", "z")))
    return lambda v: jax.debug.callback(recorder(log), v, partitioned=True), x


def vmapped_over_a_sharded_array(platform, log):
    """vmap unrolls the callback: one per row of the batch, each on its slice, still sharded."""
    mesh = partitioned_mesh(platform, (1, 1, 2), ("x", "y", "z"))
    x = jax.device_put(np.arange(24).reshape(2, 3, 4), NamedSharding(mesh, P("x", "y", "z")))
    return jax.vmap(lambda v: jax.debug.callback(recorder(log), v, partitioned=True)), x


def vmapped_twice(platform, log):
    mesh = partitioned_mesh(platform, (1, 1, 2), ("x", "y", "z"))
    x = jax.device_put(np.arange(24).reshape(2, 3, 4), NamedSharding(mesh, P("x", "y", "z")))
    return jax.vmap(jax.vmap(lambda v: jax.debug.callback(recorder(log), v, partitioned=True))), x


def vmapped_over_rows_and_columns(platform, log):
    """A row of an array sharded by rows (which each device gets whole: XLA moves it) and a
    column of another (each device: its half)."""
    mesh = partitioned_mesh(platform, (2,), ("x",))
    sharded = NamedSharding(mesh, P("x"))
    x = jax.device_put(np.arange(4).reshape(2, 2), sharded)
    y = jax.device_put(np.arange(4).reshape(2, 2) + 6, sharded)
    f = jax.vmap(lambda a, b: jax.debug.callback(recorder(log), a, b, partitioned=True), in_axes=(0, 1))
    return f, x, y


def replicated_over_an_axis(platform, log):
    """8 devices, the operand split along the mesh's axis "a" and replicated along "b": 8 calls,
    each half of it 4 times."""
    mesh = partitioned_mesh(platform, (2, 4), ("a", "b"))
    x = jax.device_put(np.arange(16.0, dtype=np.float32).reshape(4, 4), NamedSharding(mesh, P("a", None)))

    def f(v):
        jax.debug.callback(recorder(log), v * 2, partitioned=True)
        return v + 1

    return f, x


def computed_and_constrained(platform, log):
    """Operands the program makes: a transpose constrained to another sharding, and a sum
    whose sharding Shardy's propagation decides."""
    mesh = partitioned_mesh(platform, (2, 4), ("a", "b"))
    x = jax.device_put(np.arange(32.0, dtype=np.float32).reshape(4, 8), NamedSharding(mesh, P("a", "b")))

    def f(v):
        t = lax.with_sharding_constraint(v.T, NamedSharding(mesh, P("b", None)))
        jax.debug.callback(recorder(log), t, v.sum(0), partitioned=True)
        return t

    return f, x


def in_a_loop_and_a_branch(platform, log):
    mesh = partitioned_mesh(platform, (4,), ("a",))
    x = jax.device_put(np.arange(8.0, dtype=np.float32), NamedSharding(mesh, P("a")))

    def body(i, carry):
        jax.debug.callback(recorder(log, "loop"), i, carry, partitioned=True)
        return carry * 2

    def shown(v):
        jax.debug.callback(recorder(log, "branch"), v, partitioned=True)
        return v

    return lambda v: lax.cond(v[0] < 1, shown, lambda w: -w, lax.fori_loop(0, 3, body, v)), x


def in_shard_map(platform, log):
    """In a shard_map body the values are the device's own: one call per device with them."""
    mesh = partitioned_mesh(platform, (8,), ("a",))
    x = jax.device_put(np.arange(16.0, dtype=np.float32), NamedSharding(mesh, P("a")))

    def body(v):
        jax.debug.callback(recorder(log), v + 1, partitioned=True)
        return v

    return jax.shard_map(body, mesh=mesh, in_specs=P("a"), out_specs=P("a")), x


def in_a_shard_map_over_one_axis(platform, log):
    """Manual over "a", automatic over "b": JAX calls back only where b's index is 0."""
    mesh = partitioned_mesh(platform, (2, 4), ("a", "b"))
    x = jax.device_put(np.arange(16.0, dtype=np.float32).reshape(2, 8), NamedSharding(mesh, P("a", "b")))

    def body(v):
        jax.debug.callback(recorder(log), v, partitioned=True)
        return v

    return jax.shard_map(body, mesh=mesh, in_specs=P("a"), out_specs=P("a"), axis_names={"a"}), x


def on_one_device(platform, log):
    return (lambda v: jax.debug.callback(recorder(log), v, partitioned=True),
            jax.device_put(np.arange(4.0, dtype=np.float32), jax.devices(platform)[0]))


PARTITIONED_CASES = [sharded_3d_array, vmapped_over_a_sharded_array, vmapped_twice, vmapped_over_rows_and_columns,
                     replicated_over_an_axis, computed_and_constrained, in_a_loop_and_a_branch, in_shard_map,
                     in_a_shard_map_over_one_axis, on_one_device]


def partitioned_calls(case, platform: str) -> list:
    """What the callbacks of ``case`` got on ``platform``, in the order they came."""
    log = []
    f, *args = case(platform, log)
    jax.block_until_ready(jax.jit(f)(*args))
    jax.effects_barrier()
    return [(label, *((v.dtype.str, v.shape, v.tolist()) for v in values)) for label, *values in log]


@pytest.mark.parametrize("case", PARTITIONED_CASES, ids=lambda case: case.__name__)
def test_partitioned_callbacks_get_each_devices_shards_as_on_the_cpu(case):
    expected = partitioned_calls(case, "cpu")
    actual = partitioned_calls(case, "interp")
    assert expected, "the oracle made no call"
    assert sorted(map(repr, actual)) == sorted(map(repr, expected))


def test_partitioned_calls_come_device_by_device_in_program_order():
    """On interp each op calls once per device, device 0 first, before the next op runs: a
    loop of 3 steps over 4 devices calls step 0 on devices 0-3, then step 1 ... (each device
    holds 2 elements of the carry, doubled at each step)."""
    calls = partitioned_calls(in_a_loop_and_a_branch, "interp")
    loop = [(values[0][2], values[1][2]) for label, *values in calls if label == "loop"]
    assert loop == [(step, [float(2 * device * 2 ** step), float((2 * device + 1) * 2 ** step)])
                    for step in range(3) for device in range(4)]
    assert [label for label, *_ in calls][12:] == ["branch"] * 4


def test_partitioned_print_prints_each_devices_shard(capfd):
    """jax.debug.print(..., partitioned=True): one line per device, with its shard."""
    def run(platform):
        mesh = partitioned_mesh(platform, (4,), ("a",))
        x = jax.device_put(np.arange(8), NamedSharding(mesh, P("a")))
        jax.jit(lambda v: jax.debug.print("shard {}", v, partitioned=True))(x)
        jax.effects_barrier()
        return sorted(capfd.readouterr().out.splitlines())

    expected = run("cpu")
    assert expected == ["shard [0 1]", "shard [2 3]", "shard [4 5]", "shard [6 7]"]
    assert run("interp") == expected


def test_sparse_solve_lowered_through_the_public_mlir_module():
    """``jax.experimental.sparse.linalg.spsolve`` lowers on the CPU with a host callback to
    SciPy, called as ``jax.interpreters.mlir.emit_python_callback`` (the public module's
    own binding): the same solution on both devices, and it solves the system."""
    from jax.experimental.sparse.linalg import spsolve

    dense = np.array([[4, 1, 0], [1, 3, 0], [0, 2, 5]], dtype=np.float32)
    indptr = np.array([0, 2, 4, 6], dtype=np.int32)
    indices = np.array([0, 1, 0, 1, 1, 2], dtype=np.int32)
    data = dense[dense != 0]
    b = np.array([1, 2, 3], dtype=np.float32)

    def solve(device):
        return np.asarray(jax.jit(spsolve)(*jax.device_put((data, indices, indptr, b), device)))

    actual = solve(DEV)
    np.testing.assert_allclose(actual, solve(CPU), rtol=1e-6)
    np.testing.assert_allclose(dense @ actual, b, rtol=1e-5)
