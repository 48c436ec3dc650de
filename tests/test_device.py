"""The interp JAX device: JAX programs on ``interp`` against the same programs on XLA's CPU.

Every comparison also checks that the results live on the interp device and
that the interpreter really ran the program (a listener counts its ops), so a
silent fallback to the CPU cannot pass.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

from stablehlo_interp import device as interp_device

DEV = jax.devices("interp")[0]
DEV1 = jax.devices("interp")[1]
CPU = jax.devices("cpu")[0]
DEV_OBJECT = interp_device.runtime.Client().devices[0]   # a device of the runtime, without JAX
KEY = np.array([0, 42], dtype=np.uint32)   # a raw threefry key
X = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
SPD = np.array([[4.0, 1, 0], [1, 3, 1], [0, 1, 2]], np.float32)


def on_both(f, *args, **jit_options):
    """jit(f) on the CPU and on the interp device, from the same host arguments."""
    expected = jax.jit(f, **jit_options)(*jax.device_put(args, CPU))
    actual = jax.jit(f, **jit_options)(*jax.device_put(args, DEV))
    return expected, actual


def assert_matches(expected, actual, rtol=1e-6, atol=1e-6):
    """Same tree, dtypes and shapes; exact for integers, close for floats; results on DEV."""
    expected_leaves, expected_tree = jax.tree.flatten(expected)
    actual_leaves, actual_tree = jax.tree.flatten(actual)
    assert expected_tree == actual_tree
    for want, got in zip(expected_leaves, actual_leaves):
        assert got.devices() == {DEV}
        assert got.dtype == want.dtype and got.shape == want.shape
        want, got = np.asarray(want), np.asarray(got)
        if np.issubdtype(want.dtype, np.inexact) or want.dtype in (ml_dtypes.bfloat16,):
            wide = np.complex128 if np.iscomplexobj(want) else np.float64
            np.testing.assert_allclose(got.astype(wide), want.astype(wide), rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(got, want)


def check(ran, f, *args, rtol=1e-6, atol=1e-6, **jit_options):
    expected, actual = on_both(f, *args, **jit_options)
    assert_matches(expected, actual, rtol, atol)
    assert ran.ops, "the interpreter did not run anything"


PROGRAMS = {
    "sin_times_two": (lambda v: jnp.sin(v) * 2, X),
    "softmax": (jax.nn.softmax, X),
    "arithmetic": (lambda v: (v * 3 - 1) / (v ** 2 + 1), X),
    "integer_ops": (lambda v: (v // 3, v % 5, v & 6, v >> 1, -v), np.arange(-6, 6, dtype=np.int32)),
    "comparisons": (lambda v: jnp.where(v > 0, v, -v) + (v == 0), X),
    "reductions": (lambda v: (v.sum(), v.mean(0), v.max(1), jnp.argmax(v), jnp.prod(v, 0)), X),
    "cumsum": (jnp.cumsum, X),
    "matmul": (lambda v: v @ v.T, X),
    "einsum": (lambda v: jnp.einsum("ij,kj->ik", v, v), X),
    "reshape_transpose": (lambda v: v.reshape(4, 3).T[::-1], X),
    "concatenate_pad": (lambda v: jnp.pad(jnp.concatenate([v, v], 1), ((1, 0), (0, 2))), X),
    "gather": (lambda v: v[jnp.array([2, 0])], X),
    "scatter": (lambda v: v.at[1, 2].set(7.0).at[0].add(1.0), X),
    "dynamic_slice": (lambda v: lax.dynamic_slice(v, (1, 1), (2, 2)), X),
    "grad": (jax.grad(lambda v: jnp.sum(jnp.tanh(v) ** 2)), X),
    "value_and_grad": (jax.value_and_grad(lambda v: jnp.sum(jnp.sin(v) * v)), X),
    "vmap": (jax.vmap(lambda row: row @ row), X),
    "scan": (lambda v: lax.scan(lambda c, row: (c + row, c * row), jnp.zeros(4), v), X),
    "while": (lambda v: lax.fori_loop(0, 5, lambda i, c: c * 1.5 + i, v), X),
    "cond": (lambda v: lax.cond(v.sum() > 0, jnp.sin, jnp.cos, v), X),
    "switch": (lambda v: lax.switch(1, [jnp.sin, jnp.cos, jnp.tanh], v), X),
    "random_normal": (lambda k: jax.random.normal(k, (5,)), KEY),
    "random_uniform": (lambda k: jax.random.uniform(k, (2, 3)), KEY),
    "random_permutation": (lambda k: jax.random.permutation(k, 10), KEY),
    "random_bits": (lambda k: jax.random.bits(jax.random.wrap_key_data(k), (4,)), KEY),
    "sort": (jnp.sort, X[::-1]),
    "argsort": (jnp.argsort, X.ravel()[::-1]),
    "top_k": (lambda v: lax.top_k(v, 3), X),
    "bfloat16": (lambda v: (v.astype(jnp.bfloat16) * 3).astype(jnp.bfloat16), X),
    "float16": (lambda v: jnp.exp(v.astype(jnp.float16)), X),
    "int4": (lambda v: v + v, np.arange(-4, 4, dtype=ml_dtypes.int4)),
    "uint8": (lambda v: v * 7 + 3, np.arange(40, dtype=np.uint8)),
    "bool": (lambda v: (v & ~v[::-1]) | v, np.array([True, False, True])),
    "complex64": (lambda v: jnp.exp(1j * v) * (1 + 2j), X),
    "scalar": (lambda v: v * 2 + 1, np.float32(3)),
    "empty": (lambda v: (v.sum(0), v * 2), np.zeros((0, 3), np.float32)),
    "empty_middle": (lambda v: v.reshape(2, 3, 0).sum(2), np.zeros((2, 0, 3), np.float32)),
    "many_outputs": (lambda v: {f"leaf{i}": v * i for i in range(24)}, X),
    "nested_pytree": (lambda v: ((v, [v.sum(), (v.min(),)]), {"a": v.T}), X),
    "det": (jnp.linalg.det, SPD),
    "fft": (jnp.fft.fft, X),
    "rfft_irfft": (lambda v: jnp.fft.irfft(jnp.fft.rfft(v), 4), X),
    "erf": (jax.scipy.special.erf, X),
    "logsumexp": (jax.scipy.special.logsumexp, X),
}

LINALG = {
    "inv": (jnp.linalg.inv, SPD),
    "solve": (lambda a: jnp.linalg.solve(a, jnp.ones(3)), SPD),
    "cholesky": (jnp.linalg.cholesky, SPD),
    "eigh": (jnp.linalg.eigh, SPD),
    "eigvalsh_complex": (lambda a: jnp.linalg.eigvalsh(a.astype(jnp.complex64)), SPD),
    "eigvals": (lambda a: jnp.sort(jnp.abs(jnp.linalg.eigvals(a))), SPD),
    "svd": (lambda a: jnp.linalg.svd(a, compute_uv=False), SPD),
    "qr": (lambda a: jnp.abs(jnp.linalg.qr(a)[1]), SPD),
    "lstsq": (lambda a: jnp.linalg.lstsq(a, a[0])[0], SPD),
    "slogdet": (jnp.linalg.slogdet, SPD),
    "pinv": (jnp.linalg.pinv, SPD),
    "lu": (jax.scipy.linalg.lu, SPD),
    "schur": (lambda a: jnp.abs(jnp.diag(jax.scipy.linalg.schur(a)[0])), SPD),
    "cho_solve": (lambda a: jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a), a[0]), SPD),
    "solve_triangular": (lambda a: jax.scipy.linalg.solve_triangular(a, a[0], lower=True), SPD),
    "tridiagonal_solve": (lambda a: lax.linalg.tridiagonal_solve(a[0] * 0, a[1] + 3, a[2] * 0, a), SPD),
    "expm": (jax.scipy.linalg.expm, SPD),
}


# Relative tolerances other than 1e-5: the bf16 and f16 programs are rounded once
# to the narrow type on both sides and agree exactly on these inputs (measured).
PROGRAM_RTOL = {"bfloat16": 0, "float16": 0}


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_matches_cpu(ran, name):
    f, arg = PROGRAMS[name]
    check(ran, f, arg, rtol=PROGRAM_RTOL.get(name, 1e-5), atol=1e-5)


@pytest.mark.parametrize("case", LINALG.values(), ids=LINALG.keys())
def test_linalg_matches_cpu(ran, case):
    f, arg = case
    check(ran, f, arg, rtol=1e-4, atol=1e-5)


def test_readme_example(ran):
    x = jax.device_put(jnp.arange(4.0), DEV)
    y = jax.jit(lambda v: jnp.sin(v) * 2)(x)
    z = x + x
    assert y.devices() == {DEV} and z.devices() == {DEV}
    np.testing.assert_allclose(np.asarray(y), np.sin(np.arange(4.0)) * 2, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(z), np.arange(4.0) * 2)
    assert "stablehlo.sine" in ran.ops and "stablehlo.add" in ran.ops


def test_eager_ops_run_on_the_device(ran):
    x = jax.device_put(X, DEV)
    results = [x + x, jnp.sum(x), x[1:, ::2], jnp.where(x > 0, x, 0.0), x.T @ x, -x]
    for result in results:
        assert result.devices() == {DEV}
    np.testing.assert_allclose(np.asarray(results[4]), X.T @ X, rtol=1e-6)
    assert {"stablehlo.add", "stablehlo.reduce", "stablehlo.dot_general", "stablehlo.negate"} <= set(ran.ops)


def test_results_stay_on_the_device_of_their_inputs(ran):
    x1 = jax.device_put(X, DEV1)
    y = jax.jit(jnp.tanh)(x1)
    assert y.devices() == {DEV1}
    assert (y * 2).devices() == {DEV1}
    np.testing.assert_allclose(np.asarray(y * 2), np.tanh(X) * 2, rtol=1e-6)


def test_mixing_committed_devices_raises_jax_error():
    a = jax.device_put(X, DEV)
    b = jax.device_put(X, DEV1)
    with pytest.raises(ValueError, match="incompatible devices"):
        jax.jit(lambda u, v: u + v)(a, b)


def test_device_to_device_copy():
    a = jax.device_put(X, DEV)
    b = jax.device_put(a, DEV1)
    c = jax.device_put(b, CPU)
    assert b.devices() == {DEV1} and c.devices() == {CPU}
    np.testing.assert_array_equal(np.asarray(c), X)
    d = jax.device_put(c, DEV)
    np.testing.assert_array_equal(np.asarray(d), X)


def test_device_get_block_until_ready_delete():
    a = jax.device_put(X, DEV)
    assert a.block_until_ready() is a
    np.testing.assert_array_equal(jax.device_get(a), X)
    assert a.on_device_size_in_bytes() == X.nbytes
    assert not a.is_deleted()
    a.delete()
    assert a.is_deleted()
    with pytest.raises(RuntimeError, match="deleted"):
        np.asarray(a)


def test_read_back_is_a_read_only_view_like_the_cpu_s():
    """np.asarray of an array on the device reads its memory in place, as on XLA's CPU:
    a read-only view (no copy), which stays valid after the array is deleted; an array
    read in place is not given up by donation (XLA's CPU keeps it too); a program's
    transposed result (not dense in NumPy) reads back in row-major order."""
    for device in (CPU, DEV):
        a = jax.device_put(X, device)
        view = np.asarray(a)
        assert not view.flags.writeable and not view.flags.owndata
        with pytest.raises(ValueError, match="read-only"):
            view[0, 0] = 1
        transposed = jax.jit(lambda v: v.T * 2)(a)
        doubled = np.asarray(transposed)
        np.testing.assert_array_equal(doubled, X.T * 2)
        donated = jax.jit(lambda v: v + 1, donate_argnums=0)(transposed)
        a.delete()
        assert a.is_deleted() and not transposed.is_deleted()
        del doubled
        again = jax.jit(lambda v: v + 1, donate_argnums=0)(transposed)   # no view left: donated
        assert transposed.is_deleted()
        np.testing.assert_array_equal(np.asarray(again), X.T * 2 + 1)
        np.testing.assert_array_equal(view, X)
        np.testing.assert_array_equal(np.asarray(donated), X.T * 2 + 1)


def test_external_references_hold_the_array_until_the_last_is_released():
    """Buffer.hold / release_hold (PJRT_Buffer_Increase/DecreaseExternalReferenceCount):
    the held arrays outlive deletion until the last reference ends; a release without a
    reference is an error."""
    buffer = interp_device.runtime.Buffer(DEV_OBJECT, np.arange(6, dtype=np.int32).reshape(2, 3)[:, ::2])
    first = buffer.hold()
    assert first.flags.c_contiguous and first.tolist() == [[0, 2], [3, 5]] and buffer.value is first
    assert buffer.hold() is first
    buffer.delete()
    buffer.release_hold()
    assert buffer.held == [first]
    buffer.release_hold()
    assert buffer.held is None
    with pytest.raises(interp_device.runtime.PluginError, match="no external reference"):
        buffer.release_hold()
    with pytest.raises(interp_device.runtime.PluginError, match="deleted"):
        buffer.hold()


def test_devices_of_the_platform():
    devices = jax.devices("interp")
    assert len(devices) == interp_device.runtime.device_count()
    assert [d.id for d in devices] == list(range(len(devices)))
    assert {d.platform for d in devices} == {"interp"} and {d.device_kind for d in devices} == {"interp"}
    assert jax.default_backend() == "cpu"   # interp is chosen, never the default


def test_default_device_config(ran):
    with jax.default_device(DEV):
        y = jnp.arange(5.0) * 2
    assert y.devices() == {DEV}
    np.testing.assert_array_equal(np.asarray(y), np.arange(5.0) * 2)


@pytest.mark.parametrize("layout", ["transposed", "reversed", "strided"])
def test_host_arrays_with_any_strides(layout):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    host = {"transposed": base.T, "reversed": base[::-1, ::-1], "strided": base[::2, 1::3]}[layout]
    np.testing.assert_array_equal(np.asarray(jax.device_put(host, DEV)), host)


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint16, np.int32, np.int64, np.float16, np.float32,
                                   np.float64, np.complex64, ml_dtypes.bfloat16, ml_dtypes.int4,
                                   ml_dtypes.uint4, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_transfers_round_trip_every_dtype(dtype):
    values = np.arange(-3, 5).astype(dtype).reshape(2, 4)
    expected = np.asarray(jax.device_put(values, CPU))
    actual = np.asarray(jax.device_put(values, DEV))
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    np.testing.assert_array_equal(actual.view(np.uint8), expected.view(np.uint8))   # bit for bit


def test_donation_deletes_the_input_like_the_cpu(ran):
    def step(v):
        return v * 2 + 1

    outcome = {}
    for device in (CPU, DEV):
        x = jax.device_put(X, device)
        y = jax.jit(step, donate_argnums=0)(x)
        outcome[device.platform] = (x.is_deleted(), np.asarray(y))
    assert outcome["interp"][0] == outcome["cpu"][0] is True
    np.testing.assert_array_equal(outcome["interp"][1], outcome["cpu"][1])


def test_exported_for_interp_and_cpu_calls_on_either(ran):
    """jax.export with platforms=("cpu", "interp"): one module, a branch per platform."""
    exported = jax.export.export(jax.jit(lambda v: jnp.sin(v) * 2), platforms=("cpu", "interp"))(
        jax.ShapeDtypeStruct(X.shape, X.dtype))
    on_interp = jax.jit(exported.call)(jax.device_put(X, DEV))
    on_cpu = jax.jit(exported.call)(jax.device_put(X, CPU))
    assert on_interp.devices() == {DEV} and on_cpu.devices() == {CPU}
    np.testing.assert_allclose(np.asarray(on_interp), np.asarray(on_cpu), rtol=1e-6)
    assert "stablehlo.sine" in ran.ops


def test_runtime_error_names_the_op_and_leaves_the_device_usable():
    def fails(v):
        return jax.pure_callback(_raise_value_error, jax.ShapeDtypeStruct(v.shape, v.dtype), v)

    x = jax.device_put(X, DEV)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"stablehlo.custom_call.*ValueError: bad value"):
        jax.jit(fails)(x).block_until_ready()
    np.testing.assert_allclose(np.asarray(jax.jit(jnp.cos)(x)), np.cos(X), rtol=1e-6)


def _raise_value_error(v):
    raise ValueError("bad value")


def test_missing_custom_call_target_is_a_clear_error():
    from jax._src.interpreters import mlir
    from jax.extend.core import Primitive

    unknown = Primitive("unknown_for_interp")
    unknown.def_abstract_eval(lambda aval: aval)
    mlir.register_lowering(unknown, lambda ctx, v: mlir.custom_call(
        "no_such_target_for_interp", result_types=[v.type], operands=[v]).results)
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match=r"UNIMPLEMENTED: stablehlo.custom_call .*no_such_target_for_interp.* not implemented"):
        jax.jit(unknown.bind)(jax.device_put(X, DEV))


def test_multi_device_programs_run():
    """A sharded jit keeps its input's sharding (more in tests/test_sharding*.py)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices("interp")[:2]), ("x",))
    x = jax.device_put(np.arange(8.0, dtype=np.float32), NamedSharding(mesh, PartitionSpec("x")))
    y = jax.jit(lambda v: v * 2)(x)
    np.testing.assert_array_equal(np.asarray(y), np.arange(8.0) * 2)
    assert y.sharding == x.sharding


def test_functions_without_results():
    """jaxlib expects the sharding of the empty tuple such a program returns."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    sharded = jax.device_put(np.arange(8.0, dtype=np.float32),
                             NamedSharding(Mesh(np.array(jax.devices("interp")[:4]), ("x",)), PartitionSpec("x")))
    for x in (jax.device_put(X, DEV), sharded):
        assert jax.jit(lambda v: None)(x) is None
        assert jax.jit(lambda v: ((), {}))(x) == ((), {})


def test_unsafe_buffer_pointer_reads_and_writes_this_buffer_only():
    import ctypes

    x = jax.device_put(np.arange(4, dtype=np.float32), DEV)
    copied = jax.device_put(x, DEV1)
    address = x.unsafe_buffer_pointer()
    assert address == x.unsafe_buffer_pointer() != jnp.array(x, copy=True).unsafe_buffer_pointer()
    data = (ctypes.c_float * 4).from_address(address)
    assert list(data) == [0, 1, 2, 3]
    earlier = jax.jit(lambda v: v)(x)
    data[0] = 42
    later = jax.jit(lambda v: v * 1)(x)
    assert np.asarray(later).tolist() == [42, 1, 2, 3]
    assert np.asarray(earlier).tolist() == np.asarray(copied).tolist() == [0, 1, 2, 3]


def test_compiled_executable_metadata():
    compiled = jax.jit(lambda a, b: (a + b, a * b)).lower(jax.device_put(X, DEV), X).compile()
    assert compiled.input_shardings[0][0].device_set == {DEV}
    out = compiled(jax.device_put(X, DEV), jax.device_put(X, DEV))
    assert [o.devices() for o in out] == [{DEV}, {DEV}]


def test_float64_and_int64(ran):
    values = np.linspace(0, 1, 5)
    check(ran, lambda v: (jnp.exp(v) * 3, jnp.cumsum(v.astype(jnp.int64) + 2**40)), values, rtol=1e-12)


def test_compiled_as_text_shows_the_program():
    text = jax.jit(lambda v: jnp.sin(v) * 2).lower(jax.device_put(X, DEV)).compile().as_text()
    assert "sine" in text and "multiply" in text


def test_sharding_constraint_on_one_device():
    single = jax.sharding.SingleDeviceSharding(DEV)
    y = jax.jit(lambda v: lax.with_sharding_constraint(v * 2, single))(jax.device_put(X, DEV))
    assert y.devices() == {DEV}
    np.testing.assert_array_equal(np.asarray(y), X * 2)


def test_memory_stats_count_live_buffers():
    before = DEV1.memory_stats()
    a = jax.device_put(np.zeros(1000, np.float32), DEV1)
    during = DEV1.memory_stats()
    assert during["bytes_in_use"] == before["bytes_in_use"] + 4000
    assert during["num_allocs"] == before["num_allocs"] + 1
    a.delete()
    assert DEV1.memory_stats()["bytes_in_use"] == before["bytes_in_use"]
