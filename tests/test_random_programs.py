"""Random small programs (chains of 5-20 element-wise and shape ops on a few
inputs), written as JAX functions, run by stablehlo_interp and by XLA CPU.

Float chains are equal, or differ by rounding noise only: ``si.compare`` re-runs each
op on XLA's operands and finds it within its rounding bound (a few ULP of XLA's exp
grow along a chain without bound: sin(y * exp(z)) differed by 2.7e-4 relatively, which
no fixed tolerance holds); integer chains bit-exactly. Only f32/f64/i32/ui32 are used: XLA may keep bf16/f16
chains in f32 between ops.
"""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st

import stablehlo_interp as si
from oracles import run_interp

FLOAT_UNARY = [jnp.tanh, jnp.sin, jnp.abs, jnp.negative, jnp.floor, lambda a: jnp.exp(jnp.clip(a, -20, 20)),
               lambda a: jnp.sqrt(jnp.abs(a)), jnp.sign, lambda a: jax.nn.sigmoid(a)]
FLOAT_BINARY = [jnp.add, jnp.subtract, jnp.multiply, jnp.maximum, jnp.minimum,
                lambda a, b: jnp.where(a > b, a, b * 0.5), lambda a, b: a / (1.0 + jnp.abs(b))]
INT_UNARY = [jnp.negative, jnp.abs, jnp.invert, lambda a: a >> 3, lambda a: jnp.sign(a)]
INT_BINARY = [jnp.add, jnp.subtract, jnp.multiply, jnp.maximum, jnp.minimum, jnp.bitwise_xor,
              jnp.bitwise_and, lambda a, b: jax.lax.div(a, b), lambda a, b: jax.lax.rem(a, b),
              lambda a, b: jax.lax.shift_left(a, b & 31), lambda a, b: jnp.where(a < b, a, b)]
SHAPE_OPS = [lambda a: a.T.T, lambda a: jnp.flip(a, 0), lambda a: jnp.roll(a, 1, axis=-1),
             lambda a: a.reshape(-1).reshape(a.shape)]

steps = st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99), st.integers(0, 99)), min_size=5, max_size=20)


def build(unary, binary, plan):
    def program(x, y, z):
        values = [x, y, z]
        for kind, i, j in plan:
            a, b = values[i % len(values)], values[j % len(values)]
            ops = unary + binary + SHAPE_OPS
            op = ops[kind % len(ops)]
            if op in binary:
                values.append(op(a, b))
            else:
                values.append(op(a))
        return values[-1], values[len(values) // 2], x + y * 0, z  # every input stays a parameter

    return program


def inputs(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return [(rng.standard_normal(shape) * 3).astype(dtype) for _ in range(3)]
    info = np.iinfo(dtype)
    return [rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True) for _ in range(3)]


@settings(max_examples=20)
@given(steps, st.sampled_from([np.float32, np.float64]), st.sampled_from([(1,), (3,), (2, 3)]), st.integers(0, 2**31))
def test_random_float_programs(plan, dtype, shape, seed):
    program = build(FLOAT_UNARY, FLOAT_BINARY, plan)
    args = inputs(dtype, shape, seed)
    ours = run_interp(program, *args)
    xla = [np.asarray(v) for v in jax.jit(program)(*args)]
    for a, b in zip(ours, xla):
        assert a.dtype == b.dtype and a.shape == b.shape
    if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(ours, xla)):
        comparison = si.compare(jax.jit(program), *args, backend="cpu", tolerance=(0, 0))
        assert not comparison.ok and comparison.noise_only, str(comparison)


@settings(max_examples=20)
@given(steps, st.sampled_from([np.int32, np.uint32, np.int64]), st.sampled_from([(1,), (4,), (2, 3)]),
       st.integers(0, 2**31))
def test_random_integer_programs(plan, dtype, shape, seed):
    program = build(INT_UNARY, INT_BINARY, plan)
    args = inputs(dtype, shape, seed)
    ours = run_interp(program, *args)
    xla = [np.asarray(v) for v in jax.jit(program)(*args)]
    for a, b in zip(ours, xla):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
