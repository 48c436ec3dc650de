"""Host callbacks inside programs on the interp device: same calls, same order, same values as on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import io_callback

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
