"""``jax.experimental.buffer_callback`` on the interp device and in si.run (a function lowered
for the CPU): the callback gets buffers that behave as jaxlib's do on XLA's CPU, writes its
results in place, and the program returns what XLA CPU returns (the oracle: the same function
jitted on the CPU device). Device layer: device/buffer_callbacks.py; op: ops/buffer_callback.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import buffer_callback

import stablehlo_interp as si
from stablehlo_interp.errors import OpExecutionError

DEV = jax.devices("interp")[0]
CPU = jax.devices("cpu")[0]
X = np.linspace(-2, 3, 12, dtype=np.float32).reshape(3, 4)
Y = np.arange(12, dtype=np.int32).reshape(3, 4) - 5


def on(device, fun, *args):
    return jax.tree.map(np.asarray, jax.jit(fun)(*jax.device_put(args, device)))


def assert_as_on_the_cpu(fun, *args):
    expected = on(CPU, fun, *args)
    actual = on(DEV, fun, *args)
    jax.tree.map(np.testing.assert_array_equal, actual, expected)
    return actual


def scale_and_count(ctx, out, x, y):
    """Two results written in place from two operands (a pytree of outputs)."""
    np.asarray(out["scaled"])[...] = np.asarray(x) * 3 - 1
    np.asarray(out["counts"])[...] = (np.asarray(y) > 0).sum(axis=0)


SCALE_AND_COUNT = buffer_callback.buffer_callback(
    scale_and_count, {"scaled": jax.ShapeDtypeStruct((3, 4), jnp.float32),
                      "counts": jax.ShapeDtypeStruct((4,), jnp.int32)})


def test_results_are_what_the_callback_writes_in_place():
    actual = assert_as_on_the_cpu(lambda x, y: SCALE_AND_COUNT(jnp.sin(x), y + 1), X, Y)
    np.testing.assert_allclose(actual["scaled"], np.sin(X) * 3 - 1, rtol=1e-6)
    np.testing.assert_array_equal(actual["counts"], [1, 2, 2, 2])   # y + 1 > 0 per column


def test_si_run_calls_a_buffer_callback_lowered_for_the_cpu():
    def f(x, y):
        return SCALE_AND_COUNT(x * 2, y)

    expected = on(CPU, f, X, Y)
    jax.tree.map(np.testing.assert_array_equal, si.run(f, X, Y), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_, np.complex64, jnp.bfloat16])
def test_buffers_are_as_jaxlib_gives_them_on_the_cpu(dtype):
    """What the callback sees, recorded on the CPU and on interp: the same attributes, operands
    read-only, results writable, NumPy views by __array__ and by DLPack (not bfloat16, which
    NumPy's DLPack refuses), the context's stage and the missing GPU stream."""
    data = np.asarray(X * 2, dtype=dtype)

    def make(seen):
        def callback(ctx, out, arg):
            try:
                seen.append(("stream", ctx.stream))
            except jax.errors.JaxRuntimeError as error:
                seen.append(("stream", "XLA FFI GPU context is not available" in str(error)))
            seen.append(("stage", ctx.stage))
            for name, buffer in (("arg", arg), ("out", out)):
                seen.append((name, buffer.shape, buffer.dtype, buffer.ndim, buffer.writeable,
                             buffer.__dlpack_device__()))
                if dtype is not jnp.bfloat16:   # (a result's contents are XLA's uninitialized memory)
                    view = np.from_dlpack(buffer)
                    seen.append((name, "dlpack", view.flags.writeable, view.shape, view.dtype))
            np.testing.assert_array_equal(np.asarray(arg), data)
            if dtype is not jnp.bfloat16:
                np.testing.assert_array_equal(np.from_dlpack(arg), data)
            np.asarray(out)[...] = np.asarray(arg)[::-1]
        return buffer_callback.buffer_callback(callback, jax.ShapeDtypeStruct(data.shape, data.dtype))

    seen_on = {}
    for device in (CPU, DEV):
        seen = seen_on[device.platform] = []
        np.testing.assert_array_equal(on(device, make(seen), data), data[::-1])
    assert seen_on["interp"] == seen_on["cpu"]
    assert ("arg", (3, 4), np.dtype(dtype), 2, False, (1, 0)) in seen_on["interp"]
    assert ("out", (3, 4), np.dtype(dtype), 2, True, (1, 0)) in seen_on["interp"]


def test_an_operands_numpy_view_is_read_only():
    """jaxlib's CPU hands out a writable view of an operand it calls read-only; here a write
    into it is NumPy's error, raised by the op, not a changed operand."""
    def overwrites(ctx, out, arg):
        np.asarray(arg)[...] = 0

    fun = buffer_callback.buffer_callback(overwrites, jax.ShapeDtypeStruct(X.shape, X.dtype))
    with pytest.raises(jax.errors.JaxRuntimeError, match="buffer callback #\\d+ raised ValueError: .*read-only"):
        on(DEV, fun, X)


def test_an_aliased_result_starts_as_its_operand_in_the_same_memory():
    def make(seen):
        def add_in_place(ctx, out, x, y):
            seen.append(np.asarray(x).ctypes.data == np.asarray(out).ctypes.data)
            np.asarray(out)[...] += np.asarray(y)
        return buffer_callback.buffer_callback(add_in_place, jax.ShapeDtypeStruct(X.shape, X.dtype),
                                               input_output_aliases={0: 0})

    seen = []
    actual = assert_as_on_the_cpu(lambda x, y: make(seen)(x * 1, y), X, X + 1)
    np.testing.assert_array_equal(actual, X + (X + 1))
    assert seen == [True, True]


def test_si_run_of_an_aliased_result():
    def double_in_place(ctx, out, x):
        assert np.asarray(x).ctypes.data == np.asarray(out).ctypes.data
        np.asarray(out)[...] *= 2

    fun = buffer_callback.buffer_callback(double_in_place, jax.ShapeDtypeStruct(X.shape, X.dtype),
                                          input_output_aliases={0: 0})
    f = lambda x: fun(x + 1) - x   # noqa: E731
    expected = on(CPU, f, X)
    np.testing.assert_array_equal(si.run(f, X), expected)
    np.testing.assert_array_equal(expected, (X + 1) * 2 - X)


def test_a_donated_aliased_operand():
    def add_one(ctx, out, x):
        np.asarray(out)[...] += 1

    fun = jax.jit(buffer_callback.buffer_callback(add_one, jax.ShapeDtypeStruct(X.shape, X.dtype),
                                                  input_output_aliases={0: 0}), donate_argnums=0)
    np.testing.assert_array_equal(np.asarray(fun(jax.device_put(X, DEV))), X + 1)


@pytest.mark.parametrize("vmap_method", ["sequential", "sequential_unrolled", "expand_dims", "broadcast_all"])
def test_vmap(vmap_method):
    calls = []

    def add(ctx, out, x, y):
        calls.append(np.asarray(x).shape)
        np.asarray(out)[...] = np.asarray(x) + np.asarray(y) * 2

    fun = buffer_callback.buffer_callback(add, jax.ShapeDtypeStruct((4,), jnp.float32), vmap_method=vmap_method)
    actual = assert_as_on_the_cpu(jax.vmap(fun), X, X[::-1])
    np.testing.assert_allclose(actual, X + X[::-1] * 2, rtol=1e-6)
    assert calls[:len(calls) // 2] == calls[len(calls) // 2:]   # the same calls on the CPU and on interp


def test_a_side_effect_runs_without_results_used():
    calls = []
    fun = buffer_callback.buffer_callback(lambda *_: calls.append(1), jax.ShapeDtypeStruct((), jnp.float32),
                                          has_side_effect=True)

    def f(x):
        fun()
        return x + 1

    np.testing.assert_array_equal(on(DEV, f, X), X + 1)
    assert calls == [1]


def test_a_callback_that_raises_is_an_error_naming_the_op():
    def refuses(ctx, out, x):
        raise ValueError("no negative values, please")

    fun = buffer_callback.buffer_callback(refuses, jax.ShapeDtypeStruct(X.shape, X.dtype))
    with pytest.raises(OpExecutionError, match=r"stablehlo.custom_call at .*test_buffer_callbacks\.py:\d+.*"
                                              r"the buffer callback #0 raised ValueError: "
                                              r"no negative values, please") as raised:
        si.run(fun, X)
    assert isinstance(raised.value.__cause__, ValueError)
    with pytest.raises(jax.errors.JaxRuntimeError, match="buffer callback #\\d+ raised ValueError: no negative"):
        on(DEV, fun, X)


def test_a_callback_returning_a_value_is_an_error():
    fun = buffer_callback.buffer_callback(lambda ctx, out, x: 1, jax.ShapeDtypeStruct(X.shape, X.dtype))
    with pytest.raises(jax.errors.JaxRuntimeError, match="must not return any values"):
        on(DEV, fun, X)
