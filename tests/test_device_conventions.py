"""Conventions of a JAX device that the interp device keeps as XLA's CPU does.

Each test mirrors what a test of JAX's own ``tests/api_test.py`` (jax-v0.10.2)
asserts, and runs it on ``cpu`` and on ``interp``: the same outcome, the same error.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax._src import config

PLATFORMS = ("cpu", "interp")


# ---------------------------------------------------------------- donation (test_double_donation)

@pytest.mark.parametrize("donate_argnums, expected", [
    ((0,), "Attempt to use a buffer that was previously donated in the same call to Execute() (flattened "
           "argument 1, replica 0, partition 0, first use: 0). Toy example for this bug: `f(donate(a), a)`."),
    ((1,), "Attempt to donate a buffer which is also used by the same call to Execute() (flattened argument 1, "
           "replica 0, partition 0, first use: 0). Toy example for this bug: `f(a, donate(a))`."),
    ((0, 2), "Attempt to use a buffer that was previously donated in the same call to Execute() (flattened "
             "argument 1, replica 0, partition 0, first use: 0). Toy example for this bug: `f(donate(a), a)`."),
])
@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_buffer_donated_and_passed_twice_in_one_call_raises(platform, donate_argnums, expected):
    f = jax.jit(lambda a, b, c: a + b + c, donate_argnums=donate_argnums)
    x = jax.device_put(jnp.arange(4.0), jax.devices(platform)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "Some donated buffers were not usable" (the third argument)
        for _ in range(2):   # JAX's Python dispatch path, then its C++ one
            with pytest.raises(RuntimeError) as raised:
                f(x, x, x).block_until_ready()
            assert str(raised.value) == f"INVALID_ARGUMENT: {expected}"
        assert not x.is_deleted()   # nothing ran, nothing was donated
        assert np.asarray(f(x, jnp.ones(4, device=x.device), 1.0)).tolist() == [2.0, 3.0, 4.0, 5.0]
    assert x.is_deleted() == (0 in donate_argnums)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_buffer_passed_twice_without_donation_is_fine(platform):
    g = jax.jit(lambda a, b, c: a * b + c, donate_argnums=(2,))
    x = jax.device_put(jnp.arange(3.0), jax.devices(platform)[0])
    assert np.asarray(g(x, x, jnp.ones(3, device=x.device))).tolist() == [1.0, 2.0, 5.0]
    assert not x.is_deleted()


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_sharded_donation_is_given_up_only_where_a_result_can_take_it(platform):
    """Over several devices JAX leaves the pairing to the compiler (``jax.buffer_donor``);
    a donor no result matches (per-device size in bytes) stays alive, as on XLA's CPU
    (testBufferDonationNotDonated); one a result matches is deleted, of another shape too
    (testBufferDonationDifferentIOShapes)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    rows = NamedSharding(Mesh(np.array(jax.devices(platform)[:2]), ("x",)), P("x"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "Some donated buffers were not usable"
        kept = jax.device_put(np.arange(16.0).reshape(8, 2), rows)
        product = jax.jit(lambda x: x @ x.T, donate_argnums=0)(kept)
        taken = jax.device_put(np.arange(16.0).reshape(8, 2), rows)
        doubled = jax.jit(lambda x: x * 2, donate_argnums=0)(taken)
        column = jax.device_put(np.arange(16.0).reshape(16, 1), rows)
        flat = jax.jit(lambda c: c.reshape(16), out_shardings=rows, donate_argnums=0)(column)
    assert not kept.is_deleted() and taken.is_deleted() and column.is_deleted()
    x = np.arange(16.0).reshape(8, 2)
    np.testing.assert_array_equal(np.asarray(product), x @ x.T)
    np.testing.assert_array_equal(np.asarray(doubled), x * 2)
    np.testing.assert_array_equal(np.asarray(flat), np.arange(16.0))


@pytest.mark.parametrize("donor_dtype", [np.float16, np.int32])
def test_which_sharded_donors_are_given_up_is_xla_cpus_decision(donor_dtype):
    """One argument JAX aliases at lowering (``tf.aliasing_output``), a second it leaves to the
    compiler (``jax.buffer_donor``) with a free result of the same element count: XLA's CPU
    takes the donor over only where the per-device size in bytes matches (an i32 donor for
    an f32 result), and keeps an f16 one alive. The interp device gives up the same
    arguments (its pairing by element count deleted the f16 donor, and no test saw it)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    def step(a, b):
        return a * 2, b.astype(np.float32) * 3

    given_up, results = {}, {}
    for platform in PLATFORMS:
        rows = NamedSharding(Mesh(np.array(jax.devices(platform)[:2]), ("x",)), P("x"))
        a = jax.device_put(np.arange(16, dtype=np.float32).reshape(8, 2), rows)
        b = jax.device_put(np.arange(16).reshape(8, 2).astype(donor_dtype), rows)
        jitted = jax.jit(step, donate_argnums=(0, 1), out_shardings=(rows, rows))   # known: JAX aliases a
        lowered = jitted.lower(a, b).as_text()
        assert "tf.aliasing_output = 0" in lowered and "jax.buffer_donor = true" in lowered
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # "Some donated buffers were not usable"
            out = jitted(a, b)
        given_up[platform] = (a.is_deleted(), b.is_deleted())
        results[platform] = [np.asarray(value) for value in out]
    assert given_up["interp"] == given_up["cpu"] == (True, donor_dtype == np.int32)
    for ours, theirs in zip(results["interp"], results["cpu"]):
        np.testing.assert_array_equal(ours, theirs)


# ---------------------------------------------------------------- compiler options

VALID = {"xla_embed_ir_in_executable": True, "xla_dump_max_hlo_modules": 200,
         "xla_gpu_auto_spmd_partitioning_memory_budget_ratio": 0.5}


def sqrt_plus_one(x):
    return jnp.sqrt(x ** 2) + 1.0


@pytest.mark.parametrize("options", [
    VALID,
    {"exec_time_optimization_effort": 0.0},                           # on JAX's build options
    {"optimization_level": config.EffortLevel.O1.value},
    {"memory_fitting_level": config.EffortLevel.O0.value},
])
def test_known_compiler_options_are_accepted(options):
    for platform in PLATFORMS:
        device = jax.devices(platform)[0]
        assert float(jax.jit(sqrt_plus_one, compiler_options=options)(jax.device_put(-2.0, device))) == 3.0
        lowered = jax.jit(sqrt_plus_one).lower(jax.device_put(-2.0, device))
        assert float(lowered.compile(compiler_options=options)(jax.device_put(-2.0, device))) == 3.0


def test_checking_the_options_dumps_nothing(tmp_path):
    """XLA dumps what it compiles to ``xla_dump_to``: on interp, nothing is compiled."""
    options = {"xla_dump_to": str(tmp_path), "xla_dump_hlo_as_text": True}
    argument = jax.device_put(-2.0, jax.devices("interp")[0])
    assert float(jax.jit(sqrt_plus_one, compiler_options=options)(argument)) == 3.0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("options, message", [
    ({"invalid_key": "invalid_value"}, "No such compile option: 'invalid_key'"),
    ({"exec_time_compilation_effort": 0.0}, "No such compile option: 'exec_time_compilation_effort'"),
    ({"xla_embed_ir_in_executable": "invalid_value"},
     "While setting option xla_embed_ir_in_executable, 'invalid_value' is not a valid bool value."),
    ({"xla_dump_max_hlo_modules": 1.5}, "While setting option xla_dump_max_hlo_modules, '1.5' is not a valid "
                                        "int32 value."),
    ({"xla_dump_to": 3}, "While setting option xla_dump_to, '3' is not a valid string value."),
])
def test_unknown_or_invalid_compiler_options_raise_as_on_the_cpu(options, message):
    for platform in PLATFORMS:
        argument = jax.device_put(1.0, jax.devices(platform)[0])
        lowered = jax.jit(sqrt_plus_one).lower(argument)
        for compile_with_options in (lambda: lowered.compile(compiler_options=options),
                                     lambda: jax.jit(sqrt_plus_one, compiler_options=options)(argument)):
            with pytest.raises(jax.errors.JaxRuntimeError) as raised:
                compile_with_options()
            assert str(raised.value) == f"INVALID_ARGUMENT: {message}", platform


def test_invalid_options_still_raise_after_valid_compiles():
    """api_test's test_lower_compile_with_compiler_options_multiple, on interp."""
    argument = jax.device_put(1.0, jax.devices("interp")[0])
    lowered = jax.jit(sqrt_plus_one).lower(argument)
    compiled = [lowered.compile(), lowered.compile(compiler_options={"xla_embed_ir_in_executable": True}),
                lowered.compile(compiler_options={"xla_embed_ir_in_executable": False})]
    assert len({id(c) for c in compiled}) == 3
    assert [float(c(argument)) for c in compiled] == [2.0, 2.0, 2.0]
    with pytest.raises(jax.errors.JaxRuntimeError, match="No such compile option: 'invalid_key'"):
        lowered.compile(compiler_options={"invalid_key": "invalid_value"})
