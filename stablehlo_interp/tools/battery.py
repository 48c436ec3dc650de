"""A battery of JAX programs to test a backend against the interpreter.

Each entry of :data:`PROGRAMS` is a small program that exercises a family of
ops the way ``jax.jit`` emits them (element-wise math, dot products,
reductions, control flow, indexing, sorting, convolutions, gradients, several
element types), with fixed, seeded inputs.

Run it against a backend with the pytest plugin (see docs/tools.md)::

    pytest -p stablehlo_interp.pytest_plugin --pyargs stablehlo_interp.tools.battery --interp-backend=cpu

This module is also the test module that command collects: ``test_program``
runs one program through the ``interp_check`` fixture.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class BatteryProgram:
    name: str
    function: Callable
    make_args: Callable     # () -> tuple of NumPy arrays (fresh, seeded)

    @property
    def args(self) -> tuple:
        return self.make_args()


def _normal(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _programs() -> list[BatteryProgram]:
    import jax
    import jax.numpy as jnp
    from jax import lax

    def mlp(params, x):
        (w1, b1), (w2, b2) = params
        return jnp.tanh(x @ w1 + b1) @ w2 + b2

    def mlp_loss(params, x, y):
        return jnp.mean((mlp(params, x) - y) ** 2)

    def mlp_params():
        return ((_normal(4, 8, seed=1), _normal(8, seed=2)), (_normal(8, 2, seed=3), _normal(2, seed=4)))

    def conv(x, k):
        return lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    return [
        BatteryProgram("elementwise_f32", lambda x: (jnp.sin(x) * jnp.exp(-x * x) + jnp.sqrt(jnp.abs(x))
                                                     - jnp.log1p(x * x) / (1 + jnp.cosh(x))),
                       lambda: (_normal(64),)),
        BatteryProgram("elementwise_f64", lambda x: jnp.tanh(x) + jnp.arctan2(x, 1.5) - x ** 3,
                       lambda: (_normal(16, dtype=np.float64),)),
        BatteryProgram("integer_arithmetic", lambda a, b: (a * b + (a >> 2), a // jnp.where(b == 0, 1, b),
                                                           a % jnp.where(b == 0, 1, b), a & b, a ^ ~b),
                       lambda: (np.arange(-12, 12, dtype=np.int32), np.arange(24, dtype=np.int32) % 7 - 3)),
        BatteryProgram("compare_select", lambda x, y: jnp.where(x > y, x - y, jnp.minimum(x, y) * 2),
                       lambda: (_normal(5, 7, seed=1), _normal(5, 7, seed=2))),
        BatteryProgram("matmul", lambda x, y: x @ y, lambda: (_normal(6, 5, seed=1), _normal(5, 4, seed=2))),
        BatteryProgram("batched_einsum", lambda x, y: jnp.einsum("bij,bjk->bik", x, y),
                       lambda: (_normal(3, 4, 5, seed=1), _normal(3, 5, 2, seed=2))),
        BatteryProgram("reductions", lambda x: (x.sum(0), x.max(1), x.min(), jnp.prod(x[:2], 1), x.argmax(1)),
                       lambda: (_normal(5, 6),)),
        BatteryProgram("softmax_logsumexp", lambda x: (jax.nn.softmax(x, axis=-1),
                                                      jax.nn.logsumexp(x, axis=0)),
                       lambda: (_normal(4, 10) * 3,)),
        BatteryProgram("cumsum_cumprod", lambda x: (jnp.cumsum(x, 0), jnp.cumprod(x * 0.5 + 1, 1)),
                       lambda: (_normal(6, 3),)),
        BatteryProgram("shapes", lambda x: (x.T.reshape(4, 6)[::2], jnp.concatenate([x, x[:1]], 0),
                                            jnp.pad(x, ((1, 0), (0, 2))), jnp.flip(x, 1), jnp.tile(x[0], 2)),
                       lambda: (_normal(6, 4),)),
        BatteryProgram("gather_scatter", lambda x, i: (x[i], x.at[i].add(1.0), jnp.take(x, i, axis=1)),
                       lambda: (_normal(5, 5), np.array([4, 0, 2, 2], np.int32))),
        BatteryProgram("dynamic_slice", lambda x, i: (lax.dynamic_slice(x, (i, np.int32(1)), (2, 2)),
                                                      lax.dynamic_update_slice(x, x[:2, :2] * 0, (i, i))),
                       lambda: (_normal(4, 4), np.int32(1))),
        BatteryProgram("sort", lambda x: (jnp.sort(x, axis=1), jnp.argsort(x[0]), lax.top_k(x[1], 3)),
                       lambda: (_normal(3, 8),)),
        BatteryProgram("scan", lambda x: lax.scan(lambda c, xi: (c * 0.9 + xi, jnp.sin(c)), 0.0, x),
                       lambda: (_normal(12),)),
        BatteryProgram("fori_loop", lambda x, n: lax.fori_loop(0, n, lambda i, a: a * 1.5 - i, x),
                       lambda: (_normal(3), np.int32(5))),
        BatteryProgram("cond_switch", lambda p, i, x: (lax.cond(p, jnp.sin, jnp.cos, x),
                                                      lax.switch(i, [jnp.exp, jnp.tanh, jnp.negative], x)),
                       lambda: (np.bool_(True), np.int32(1), _normal(4))),
        BatteryProgram("convolution", conv, lambda: (_normal(1, 6, 6, 2, seed=1), _normal(3, 3, 2, 3, seed=2))),
        BatteryProgram("mlp_grad", jax.grad(mlp_loss),
                       lambda: (mlp_params(), _normal(5, 4, seed=5), _normal(5, 2, seed=6))),
        BatteryProgram("bfloat16", lambda x, y: (x * y + x, x @ y.T),
                       lambda: tuple(a.astype(jnp.bfloat16) for a in (_normal(4, 3, seed=1),
                                                                       _normal(4, 3, seed=2)))),
        BatteryProgram("float16", lambda x: jnp.exp(x) - x * x, lambda: (_normal(8, dtype=np.float16),)),
        BatteryProgram("convert_types", lambda x: (x.astype(jnp.int32), x.astype(jnp.uint8),
                                                   (x > 0).astype(jnp.float32), x.astype(jnp.float16)),
                       lambda: (_normal(10) * 100,)),
    ]


PROGRAMS: list[BatteryProgram] = []


def programs() -> list[BatteryProgram]:
    """The battery (built on first use: building it imports jax)."""
    if not PROGRAMS:
        PROGRAMS.extend(_programs())
    return PROGRAMS


def test_program(battery_program, interp_check):
    """One program of the battery: the backend under test must match the interpreter."""
    interp_check(battery_program.function, *battery_program.args)
