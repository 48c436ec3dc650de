"""rng_bit_generator bit for bit against XLA's CPU backend (THREE_FRY, PHILOX,
DEFAULT; 8 to 64-bit outputs; every shape class of XLA's expander), jax.random
end to end with the threefry, rbg and unsafe_rbg key implementations, and the
properties the spec asks of rng (whose values are implementation-defined)."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import stablehlo_interp as si
from oracles import assert_same, dtype_id, op_module, run_interp, run_interp_text, run_xla, run_xla_text, tensor_type

ALGORITHMS = {"DEFAULT": lax.RandomAlgorithm.RNG_DEFAULT, "THREE_FRY": lax.RandomAlgorithm.RNG_THREE_FRY,
              "PHILOX": lax.RandomAlgorithm.RNG_PHILOX}
# Scalars, odd and even sizes, no even dim (split on the largest), size-1 dims, empty.
SHAPES = [(), (1,), (5,), (16,), (2, 3), (3, 5), (7, 3, 5), (3, 1, 7), (2, 3, 4), (1, 1), (0,), (4, 0), (1000,)]


# XLA takes seconds to compile a dozen expanded generators: CI checks every shape
# for 32/64 bits (the narrow types share the 32-bit path) and samples the rest.
_FULL = [(a, d) for a in ("THREE_FRY", "PHILOX") for d in (np.uint32, np.uint64)]
_SAMPLED = [("THREE_FRY", np.uint8), ("PHILOX", np.uint16), ("DEFAULT", np.uint8), ("DEFAULT", np.uint64)]
_REST = [(a, d) for a in ALGORITHMS for d in (np.uint8, np.uint16, np.uint32, np.uint64)
         if (a, d) not in _FULL + _SAMPLED]


@pytest.mark.parametrize("algorithm, dtype",
                         _FULL + _SAMPLED + [pytest.param(*c, marks=pytest.mark.slow) for c in _REST],
                         ids=lambda v: v if isinstance(v, str) else dtype_id(v))
def test_rng_bit_generator_matches_xla(algorithm, dtype):
    shapes = SHAPES if (algorithm, dtype) in _FULL + _REST else [(), (3, 5), (3, 1, 7), (1000,)]
    rng = np.random.default_rng(0)
    keys = [rng.integers(0, 2 ** 32, 4, dtype=np.uint64).astype(np.uint32) for _ in shapes]
    keys[1] = np.full(4, 0xFFFFFFFF, np.uint32)  # the counter wraps around 2**64

    def fn(*keys):
        return [lax.rng_bit_generator(k, shape, dtype=dtype, algorithm=ALGORITHMS[algorithm])
                for k, shape in zip(keys, shapes)]

    expected, actual = run_xla(fn, *keys), run_interp(fn, *keys)
    assert len(actual) == len(expected) == 2 * len(shapes)
    for index, (got, want) in enumerate(zip(actual, expected)):
        assert_same(got, want, context=f"{shapes[index // 2]} {'state' if index % 2 == 0 else 'bits'}: ",
                    empty_ok=True)


def _rbg_module(algorithm, state_size, output_type):
    state = f"tensor<{state_size}xui64>"
    return op_module("stablehlo.rng_bit_generator", [state], [state, output_type],
                     f"rng_algorithm = #stablehlo<rng_algorithm {algorithm}>")


@pytest.mark.parametrize("shape", [(5,), (3, 2), (9,), (2, 2, 2)], ids=str)
@pytest.mark.parametrize("element", ["ui8", "ui32", "ui64"])
def test_philox_three_word_state_matches_xla(shape, element):
    """A 3-word PHILOX state is [key, counter_low, counter_high]; the counter carries."""
    text = _rbg_module("PHILOX", 3, tensor_type(shape, element))
    for state in (np.array([1, 2, 3], np.uint64), np.array([7, 2 ** 64 - 2, 5], np.uint64),
                  np.array([7, 2 ** 64 - 1, 2 ** 64 - 1], np.uint64)):
        for got, want in zip(run_interp_text(text, state), run_xla_text(text, state)):
            assert_same(got, want, context=f"{state}: ")


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("element", ["i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64",
                                     "ui4", "i4", "ui2", "i2", "f8E4M3FN", "f4E2M1FN"])
def test_signed_float_and_sub_byte_outputs_hold_the_unsigned_bits(algorithm, element):
    """XLA CPU hands back the unsigned bits (as an unsigned buffer): ours are those bits,
    the low bits of 32-bit values for types narrower than 32 bits."""
    text = _rbg_module(algorithm, 2, tensor_type((3, 5), element))
    state = np.array([12345, 678], np.uint64)
    (got_state, got), (want_state, want) = run_interp_text(text, state), run_xla_text(text, state)
    assert_same(got_state, want_state)
    ttype = si.TensorType.of((), element)
    assert got.dtype == ttype.dtype
    mask = (1 << ttype.bit_width) - 1
    bits = lambda x: x.view(f"u{x.dtype.itemsize}").astype(np.uint64) & np.uint64(mask)  # noqa: E731 - a lambda reads as the expression it names
    assert_same(bits(got), bits(want))


def test_spec_example():
    text = _rbg_module("THREE_FRY", 2, "tensor<2x2xui64>")
    state = np.array([1, 2], np.uint64)
    for got, want in zip(run_interp_text(text, state), run_xla_text(text, state)):
        assert_same(got, want)


def test_three_fry_rejects_wrong_state_size():
    text = _rbg_module("THREE_FRY", 3, "tensor<4xui32>")
    with pytest.raises(si.OpError, match="rng_bit_generator.*THREE_FRY needs a state of 2"):
        si.load(text, verify=False)


# ------------------------------------------------------------ jax.random


def _sampler(impl):
    def sample(seed):
        key = jax.random.key(seed, impl=impl)
        k1, k2, k3 = jax.random.split(key, 3)
        return (jax.random.key_data(key),
                jax.random.bits(k1, (7, 3), jnp.uint32),
                jax.random.bits(k1, (5,), jnp.uint8),
                jax.random.uniform(k2, (4, 5)),
                jax.random.randint(k3, (11,), -5, 17),
                jax.random.bernoulli(jax.random.fold_in(k3, 7), 0.3, (9,)),
                jax.random.normal(k2, (6,), jnp.float64),
                jax.random.key_data(jax.random.split(k3, 4)))

    return sample


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg", "unsafe_rbg"])
def test_jax_random_matches_xla(impl):
    """threefry lowers to integer ops; rbg/unsafe_rbg to rng_bit_generator. Bits are exact;
    normal() goes through erf_inv, compared within 4 ULP."""
    seed = np.uint32(20261130)
    expected, actual = run_xla(_sampler(impl), seed), run_interp(_sampler(impl), seed)
    assert len(actual) == len(expected)
    for index, (got, want) in enumerate(zip(actual, expected)):
        assert_same(got, want, max_ulp=4 if want.dtype == np.float64 else 0, context=f"output {index}: ")


def test_jax_random_rbg_uses_rng_bit_generator():
    text = jax.jit(_sampler("rbg")).lower(np.uint32(0)).as_text()
    assert "rng_bit_generator" in text


# ------------------------------------------------------------------- rng


def _rng_module(distribution, element, shape, count=1):
    result = tensor_type(shape, element)
    shape_text = ", ".join(map(str, shape))
    lines = [f'  %s = stablehlo.constant dense<[{shape_text}]> : tensor<{len(shape)}xi64>'] if shape else \
        ["  %s = stablehlo.constant dense<> : tensor<0xi64>"]
    for i in range(count):
        lines.append(f'  %r{i} = "stablehlo.rng"(%a, %b, %s) {{rng_distribution = #stablehlo<rng_distribution '
                     f'{distribution}>}} : (tensor<{element}>, tensor<{element}>, tensor<{len(shape)}xi64>) '
                     f'-> {result}')
    results = ", ".join(f"%r{i}" for i in range(count))
    types = ", ".join([result] * count)
    return (f"func.func @main(%a: tensor<{element}>, %b: tensor<{element}>) -> ({types}) {{\n"
            + "\n".join(lines) + f"\n  return {results} : {types}\n}}\n")


@pytest.mark.parametrize("element, dtype", [("f32", np.float32), ("f64", np.float64), ("f16", np.float16),
                                            ("bf16", jnp.bfloat16)])
def test_rng_uniform_float(element, dtype):
    program = si.load(_rng_module("UNIFORM", element, (1000,)))
    a, b = np.array(-2, dtype), np.array(3, dtype)
    (values,) = program.run(a, b)
    assert values.dtype == np.dtype(dtype) and values.shape == (1000,)
    values = values.astype(np.float64)
    assert values.min() >= -2 and values.max() < 3
    assert abs(values.mean() - 0.5) < 0.3 and abs(values.std() - 5 / np.sqrt(12)) < 0.2


@pytest.mark.parametrize("element, dtype, low", [("i32", np.int32, -3), ("ui8", np.uint8, 3), ("i64", np.int64, 3),
                                                ("ui64", np.uint64, 2 ** 64 - 7), ("i4", ml_dtypes.int4, -3)])
def test_rng_uniform_integer(element, dtype, low):
    (values,) = si.run(_rng_module("UNIFORM", element, (20, 50)), np.array(low).astype(dtype),
                       np.array(low + 6).astype(dtype))
    assert values.dtype == np.dtype(dtype) and values.shape == (20, 50)
    assert set(np.unique(values.astype(np.float64))) == set(float(v) for v in range(low, low + 6))


def test_rng_uniform_empty_range_gives_a():
    (values,) = si.run(_rng_module("UNIFORM", "i32", (5,)), np.int32(4), np.int32(4))
    assert_same(values, np.full(5, 4, np.int32))


def test_rng_normal():
    (values,) = si.run(_rng_module("NORMAL", "f64", (4000,)), np.array(1.5), np.array(0.5))
    assert abs(values.mean() - 1.5) < 0.05 and abs(values.std() - 0.5) < 0.05


def test_rng_is_deterministic_per_load_and_ops_differ():
    text = _rng_module("UNIFORM", "f32", (8,), count=2)
    a, b = np.float32(0), np.float32(1)
    first, second = si.load(text), si.load(text)
    run1, run2 = first.run(a, b), first.run(a, b)
    assert not np.array_equal(run1[0], run1[1])          # two ops, two streams
    assert not np.array_equal(run1[0], run2[0])          # hidden state advances between runs
    for got, want in zip(second.run(a, b), run1):        # a fresh load starts over
        assert_same(got, want)


def test_rng_empty_and_scalar_shapes():
    (empty,) = si.run(_rng_module("UNIFORM", "f32", (3, 0)), np.float32(0), np.float32(1))
    (scalar,) = si.run(_rng_module("NORMAL", "f32", ()), np.float32(0), np.float32(1))
    assert empty.shape == (3, 0) and scalar.shape == () and scalar.dtype == np.float32


def test_rng_from_jax_lax_rng_uniform():
    fn = lambda a, b: lax.rng_uniform(a, b, (50,))  # noqa: E731 - a lambda reads as the expression it names
    (values,) = run_interp(fn, np.float32(1), np.float32(2))
    (xla,) = run_xla(fn, np.float32(1), np.float32(2))
    assert values.dtype == xla.dtype and values.shape == xla.shape
    assert values.min() >= 1 and values.max() < 2


# Every distribution of jax.random (default threefry keys), as jitted programs on
# the interpreter and on XLA CPU: same bits through the same transcendental ops.
DISTRIBUTIONS = {
 "uniform": lambda k: jax.random.uniform(k, (64,)),
 "normal": lambda k: jax.random.normal(k, (64,)),
 "bernoulli": lambda k: jax.random.bernoulli(k, 0.3, (64,)),
 "categorical": lambda k: jax.random.categorical(k, jnp.log(jnp.array([0.1, 0.2, 0.7])), shape=(64,)),
 "randint": lambda k: jax.random.randint(k, (64,), -5, 17),
 "permutation": lambda k: jax.random.permutation(k, 20),
 "choice": lambda k: jax.random.choice(k, 10, (5,), replace=False),
 "gamma": lambda k: jax.random.gamma(k, 2.5, (64,)),
 "beta": lambda k: jax.random.beta(k, 2.0, 3.0, (64,)),
 "dirichlet": lambda k: jax.random.dirichlet(k, jnp.array([1.0, 2.0, 3.0]), (8,)),
 "poisson": lambda k: jax.random.poisson(k, 3.0, (64,)),
 "exponential": lambda k: jax.random.exponential(k, (64,)),
 "laplace": lambda k: jax.random.laplace(k, (64,)),
 "logistic": lambda k: jax.random.logistic(k, (64,)),
 "gumbel": lambda k: jax.random.gumbel(k, (64,)),
 "cauchy": lambda k: jax.random.cauchy(k, (64,)),
 "t": lambda k: jax.random.t(k, 4.0, (64,)),
 "chisquare": lambda k: jax.random.chisquare(k, 3.0, (64,)),
 "truncated_normal": lambda k: jax.random.truncated_normal(k, -1.0, 2.0, (64,)),
 "multivariate_normal": lambda k: jax.random.multivariate_normal(k, jnp.zeros(3), jnp.eye(3) + 0.5, (8,)),
 "pareto": lambda k: jax.random.pareto(k, 3.0, (64,)),
 "rayleigh": lambda k: jax.random.rayleigh(k, 1.0, (64,)),
 "weibull_min": lambda k: jax.random.weibull_min(k, 1.5, 2.0, (64,)),
 "geometric": lambda k: jax.random.geometric(k, 0.3, (64,)),
 "binomial": lambda k: jax.random.binomial(k, 10, 0.3, (64,)),
 "loggamma": lambda k: jax.random.loggamma(k, 2.0, (64,)),
 "orthogonal": lambda k: jax.random.orthogonal(k, 3),
 "ball": lambda k: jax.random.ball(k, 3, shape=(8,)),
 "rademacher": lambda k: jax.random.rademacher(k, (64,)),
 "maxwell": lambda k: jax.random.maxwell(k, (64,)),
 "double_sided_maxwell": lambda k: jax.random.double_sided_maxwell(k, 0.0, 1.0, (64,)),
 "generalized_normal": lambda k: jax.random.generalized_normal(k, 1.5, (64,)),
 "triangular": lambda k: jax.random.triangular(k, 0.0, 0.5, 1.0, (64,)),
 "wald": lambda k: jax.random.wald(k, 1.0, (64,)),
 "lognormal": lambda k: jax.random.lognormal(k, 0.5, (64,)),
 "multinomial": lambda k: jax.random.multinomial(k, 10, jnp.array([0.2, 0.3, 0.5]), shape=(4, 3)),
}


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_every_jax_random_distribution_matches_xla(name):
    sample = DISTRIBUTIONS[name]
    raw = np.asarray(jax.random.key_data(jax.random.key(0)))

    def fn(key_data):
        return sample(jax.random.wrap_key_data(key_data))

    (ours,) = run_interp(fn, raw)
    (xla,) = run_xla(fn, raw)
    assert ours.dtype == xla.dtype and ours.shape == xla.shape
    np.testing.assert_allclose(ours, xla, rtol=1e-5, atol=1e-6)
