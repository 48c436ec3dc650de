"""Everything JAX lowers for the CPU lowers identically for ``interp`` (except host
callbacks, and dot algorithms the CPU refuses).

Platform-specific lowering rules (LAPACK custom calls, RNG, special functions
...) reach ``interp`` through the CPU's rules; the modules must be the same
text, so whatever runs from a CPU module runs on the device.
"""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
import jax.scipy as jsp
from jax import lax
from jax._src import core, effects
from jax._src.interpreters import mlir

SQUARE = np.array([[4.0, 1, 0], [1, 3, 1], [0, 1, 2]], np.float32)
VECTOR = np.linspace(0.1, 0.9, 6, dtype=np.float32)
KEY = np.array([0, 7], np.uint32)

FUNCTIONS = {
    "linalg.inv": (jnp.linalg.inv, SQUARE),
    "linalg.solve": (lambda a: jnp.linalg.solve(a, a[0]), SQUARE),
    "linalg.cholesky": (jnp.linalg.cholesky, SQUARE),
    "linalg.eigh": (jnp.linalg.eigh, SQUARE),
    "linalg.eig": (jnp.linalg.eig, SQUARE),
    "linalg.svd": (jnp.linalg.svd, SQUARE),
    "linalg.qr": (jnp.linalg.qr, SQUARE),
    "linalg.lstsq": (lambda a: jnp.linalg.lstsq(a, a[0])[0], SQUARE),
    "linalg.slogdet": (jnp.linalg.slogdet, SQUARE),
    "linalg.pinv": (jnp.linalg.pinv, SQUARE),
    "scipy.linalg.lu": (jsp.linalg.lu, SQUARE),
    "scipy.linalg.schur": (jsp.linalg.schur, SQUARE),
    "scipy.linalg.expm": (jsp.linalg.expm, SQUARE),
    "scipy.linalg.hessenberg": (jsp.linalg.hessenberg, SQUARE),
    "scipy.linalg.solve_triangular": (lambda a: jsp.linalg.solve_triangular(a, a[0], lower=True), SQUARE),
    "lax.linalg.tridiagonal_solve": (
        lambda v: lax.linalg.tridiagonal_solve(v * 0, v + 2, v * 0, v[:, None]), VECTOR),
    "fft.fftn": (jnp.fft.fftn, SQUARE),
    "fft.irfft": (jnp.fft.irfft, VECTOR),
    "special": (lambda v: (jsp.special.erf(v), jsp.special.gammaln(v), jsp.special.digamma(v),
                           jsp.special.i0e(v), jsp.special.ndtri(v), jsp.special.betainc(v, v, v)), VECTOR),
    "random": (lambda k: (jax.random.gamma(k, 2.0, (3,)), jax.random.poisson(k, 3.0, (3,)),
                          jax.random.categorical(k, jnp.zeros(4)), jax.random.dirichlet(k, jnp.ones(3))), KEY),
    "sorting": (lambda v: (jnp.argsort(v), lax.top_k(v, 2), jnp.median(v)), VECTOR),
    "convolution": (lambda v: jnp.convolve(v, v[:3]), VECTOR),
    "platform_dependent": (lambda v: lax.platform_dependent(v, cpu=jnp.sin, default=jnp.cos), VECTOR),
    "platform_dependent batched": (jax.vmap(lambda v: lax.platform_dependent(v, cpu=jnp.sin, tpu=jnp.tan)), VECTOR),
}


def lowered_text(f, arg, platform: str) -> str:
    return jax.jit(f).trace(arg).lower(lowering_platforms=(platform,)).as_text()


@pytest.mark.parametrize("name", FUNCTIONS)
def test_lowers_like_the_cpu(name):
    f, arg = FUNCTIONS[name]
    assert lowered_text(f, arg, "interp") == lowered_text(f, arg, "cpu")


def test_host_callbacks_lower_to_the_interpreter_target():
    def f(v):
        jax.debug.print("{v}", v=v)
        return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(v.shape, v.dtype), v)

    text = lowered_text(f, VECTOR, "interp")
    assert text.count("stablehlo.custom_call @stablehlo_interp.host_callback") == 2
    assert "xla_ffi_python_cpu_callback" in lowered_text(f, VECTOR, "cpu")


def dot_with(algorithm):
    return lambda a: lax.dot(a, a.T, precision=algorithm)


@pytest.mark.parametrize("algorithm", ["BF16_BF16_F32", "BF16_BF16_F32_X6", "F32_F32_F32"])
def test_dot_algorithms_the_cpu_implements_lower_like_the_cpu(algorithm):
    assert lowered_text(dot_with(algorithm), SQUARE, "interp") == lowered_text(dot_with(algorithm), SQUARE, "cpu")


@pytest.mark.parametrize("algorithm, rtol", [("BF16_BF16_F32_X9", 1e-6), ("TF32_TF32_F32_X3", 1e-6),
                                             ("TF32_TF32_F32", 1e-3), ("F16_F16_F32", 1e-3)])
def test_dot_algorithms_the_cpu_refuses_run_on_interp(algorithm, rtol):
    """JAX's CPU rule refuses them; the interpreter runs what the spec defines."""
    with pytest.raises(ValueError, match="not supported by dot_general on CPU"):
        lowered_text(dot_with(algorithm), SQUARE, "cpu")
    assert "algorithm = <" in lowered_text(dot_with(algorithm), SQUARE, "interp")
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    result = jax.jit(dot_with(algorithm))(jax.device_put(x, jax.devices("interp")[0]))
    exact = x.astype(np.float64) @ x.T.astype(np.float64)
    np.testing.assert_allclose(np.asarray(result), exact, rtol=rtol, atol=rtol * np.abs(exact).max())


def platform_marked(v):
    """``sin(v)`` plus a term that shows which platform's lowering ran."""
    return jnp.sin(v) + lax.platform_dependent(v, cpu=lambda u: u * 10, tpu=lambda u: u * 100, default=lambda u: u)


def test_platform_dependent_runs_the_cpu_branch_on_interp():
    """Eager, jitted, batched and differentiated, as JAX's own tests expect of the CPU."""
    interp = jax.devices("interp")[0]
    argument = jax.device_put(VECTOR, interp)
    results = {"eager": platform_marked(argument), "jit": jax.jit(platform_marked)(argument),
               "vmap": jax.vmap(platform_marked)(argument),
               "grad": jax.vmap(jax.grad(platform_marked))(argument)}
    expected = {"eager": np.sin(VECTOR) + VECTOR * 10, "jit": np.sin(VECTOR) + VECTOR * 10,
                "vmap": np.sin(VECTOR) + VECTOR * 10, "grad": np.cos(VECTOR) + 10}
    for how, result in results.items():
        assert result.devices() == {interp}, how
        np.testing.assert_allclose(np.asarray(result), expected[how], rtol=1e-6, err_msg=how)


def test_platform_dependent_takes_a_branch_named_interp_first():
    def f(v):
        return lax.platform_dependent(v, cpu=jnp.sin, interp=jnp.cos, default=jnp.tan)

    with jax.default_device(jax.devices("interp")[0]):
        np.testing.assert_allclose(np.asarray(jax.jit(f)(VECTOR)), np.cos(VECTOR), rtol=1e-6)
    assert "stablehlo.cosine" in lowered_text(f, VECTOR, "interp")
    assert "stablehlo.sine" in lowered_text(f, VECTOR, "cpu")


def test_platform_dependent_without_a_cpu_branch_takes_the_default_or_is_refused():
    def with_default(v):
        return lax.platform_dependent(v, tpu=jnp.sin, default=jnp.cos)

    assert lowered_text(with_default, VECTOR, "interp") == lowered_text(with_default, VECTOR, "cpu")
    with pytest.raises(NotImplementedError, match="not found for platform interp"):
        lowered_text(lambda v: lax.platform_dependent(v, tpu=jnp.sin), VECTOR, "interp")


@pytest.mark.parametrize("platforms", [("cpu", "tpu"), ("tpu", "cpu"), ("cpu",)])
def test_an_export_that_includes_the_cpu_runs_its_cpu_lowering_on_interp(platforms):
    exported = jax.export.export(jax.jit(platform_marked), platforms=platforms)(
        jax.ShapeDtypeStruct(VECTOR.shape, VECTOR.dtype))
    expected = np.asarray(jax.jit(platform_marked)(jax.device_put(VECTOR, jax.devices("cpu")[0])))
    argument = jax.device_put(VECTOR, jax.devices("interp")[0])
    for result in (exported.call(argument), jax.jit(exported.call)(argument)):
        assert result.devices() == {jax.devices("interp")[0]}
        np.testing.assert_allclose(np.asarray(result), expected, rtol=1e-6)


def test_an_export_for_interp_keeps_its_own_branch():
    def marked(v):
        return jnp.sin(v) + lax.platform_dependent(v, cpu=lambda u: u * 10, interp=lambda u: u * 1000)

    exported = jax.export.export(jax.jit(marked), platforms=("cpu", "interp"))(
        jax.ShapeDtypeStruct(VECTOR.shape, VECTOR.dtype))
    for device, factor in (("interp", 1000), ("cpu", 10)):
        result = exported.call(jax.device_put(VECTOR, jax.devices(device)[0]))
        np.testing.assert_allclose(np.asarray(result), np.sin(VECTOR) + VECTOR * factor, rtol=1e-6, err_msg=device)


def test_an_export_without_the_cpu_is_refused_and_si_run_runs_it():
    import stablehlo_interp as si

    exported = jax.export.export(jax.jit(platform_marked), platforms=("tpu",))(
        jax.ShapeDtypeStruct(VECTOR.shape, VECTOR.dtype))
    with pytest.raises(ValueError) as raised:
        exported.call(jax.device_put(VECTOR, jax.devices("interp")[0]))
    assert str(raised.value).startswith(
        "Function 'platform_marked' was exported for platforms '('tpu',)' but it is used on '('interp',)'. The "
        "interp device runs the 'cpu' lowering of an export made for it (platforms=(..., 'cpu', ...)); "
        "stablehlo_interp.run(exported, *args) runs this one.")
    np.testing.assert_allclose(si.run(exported, VECTOR), np.sin(VECTOR) + VECTOR * 100, rtol=1e-6)


class _OrderedForTesting(effects.Effect):
    """An ordered effect of the test's own primitive (as JAX's export tests make one)."""


effects.lowerable_effects.add_type(_OrderedForTesting)
effects.ordered_effects.add_type(_OrderedForTesting)
effects.control_flow_allowed_effects.add_type(_OrderedForTesting)
ORDERED = _OrderedForTesting()
doubled_in_order_p = core.Primitive("stablehlo_interp_test_doubled_in_order")
doubled_in_order_p.def_effectful_abstract_eval(lambda aval: (aval, {ORDERED}))


def _doubled_in_order(ctx, x):
    ctx.set_tokens_out(mlir.TokenSet({ORDERED: ctx.tokens_in.get(ORDERED)}))
    return [mlir.hlo.add(x, x)]


mlir.register_lowering(doubled_in_order_p, _doubled_in_order)


def test_an_export_with_ordered_effects_runs_its_cpu_lowering_on_interp():
    """The export's token goes through the call (the rule hands JAX's rule a context
    lowering for the CPU, whose tokens_out it must take back)."""
    def f(v):
        return 10.0 + doubled_in_order_p.bind(v) + lax.platform_dependent(v, cpu=lambda u: u * 3, default=jnp.sin)

    exported = jax.export.export(jax.jit(f), platforms=("cpu", "tpu"))(
        jax.ShapeDtypeStruct(VECTOR.shape, VECTOR.dtype))
    assert [str(effect) for effect in exported.ordered_effects] == [str(ORDERED)]
    for device in ("cpu", "interp"):
        result = jax.jit(exported.call)(jax.device_put(VECTOR, jax.devices(device)[0]))
        np.testing.assert_allclose(np.asarray(result), 10 + VECTOR * 5, rtol=1e-6, err_msg=device)


def test_pallas_core_map_lowers_as_on_the_cpu():
    """``pl.core_map`` over a TPU kernel's cores, in interpret mode, binds ``mpmd_map``,
    whose rule refuses platforms it does not name; ``interp`` takes the CPU's lowering.
    Each core copies its half in, doubles it, adds its index + 1 and copies it out."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def cores_add_their_index(x):
        mesh = pltpu.create_tensorcore_mesh("x", num_cores=2)

        def kernel(refs):
            x_ref, y_ref = refs

            @pl.core_map(mesh, interpret=pltpu.InterpretParams())
            def _():
                core = lax.axis_index("x")
                rows = pl.ds(core * 4, 4)

                def scoped(buffer, semaphore):
                    pltpu.async_copy(x_ref.at[rows], buffer, semaphore).wait()
                    buffer[...] = buffer[...] * 2 + core + 1
                    pltpu.async_copy(buffer, y_ref.at[rows], semaphore).wait()

                pl.run_scoped(scoped, pltpu.VMEM((4, 128), x_ref.dtype), pltpu.SemaphoreType.DMA)

        return pl.run_state(kernel)((x, jnp.zeros_like(x)))[1]

    x = np.arange(8 * 128, dtype=np.int32).reshape(8, 128)
    results = {platform: jax.jit(cores_add_their_index)(jax.device_put(x, jax.devices(platform)[0]))
               for platform in ("cpu", "interp")}
    assert results["interp"].devices() == {jax.devices("interp")[0]}
    expected = x * 2 + np.repeat([1, 2], 4)[:, None]
    for result in results.values():
        np.testing.assert_array_equal(np.asarray(result), expected)
