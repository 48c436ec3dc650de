"""Haiku: a residual MLP regressor with a learned embedding of a categorical input, one Optax
step of SGD with momentum on a Huber loss."""

from __future__ import annotations

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax

from . import ZooProgram, as_numpy
from .optax_training import optimizer_step


def _regressor(categories: int, width: int, depth: int):
    def forward(numeric, category):
        h = jnp.concatenate([numeric, hk.Embed(categories, 8)(category)], axis=-1)
        h = hk.Linear(width)(h)
        for _ in range(depth):
            residual = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True)(h)
            h = h + hk.nets.MLP([width, width], activation=jax.nn.gelu)(residual)
        return hk.Linear(1)(h)[..., 0]

    return hk.without_apply_rng(hk.transform(forward))


def mlp_regression(features=6, categories=7, width=32, depth=2, batch=32) -> ZooProgram:
    network = _regressor(categories, width, depth)
    rng = np.random.default_rng(7)
    numeric = rng.standard_normal((batch, features)).astype(np.float32)
    category = rng.integers(0, categories, batch, dtype=np.int32)
    targets = (numeric.sum(1) + category / categories).astype(np.float32)
    params = as_numpy(network.init(jax.random.key(7), numeric, category))
    optimizer = optax.sgd(1e-2, momentum=0.9)

    def step(params, opt_state, numeric, category, targets):
        def loss_fn(params):
            return optax.huber_loss(network.apply(params, numeric, category), targets).mean(), None

        return optimizer_step(optimizer, loss_fn, params, opt_state)[0]

    return ZooProgram(
        name="haiku_mlp", function=step,
        args=(params, as_numpy(optimizer.init(params)), numeric, category, targets),
        libraries=("dm-haiku", "optax"),
        description=f"Haiku residual MLP ({depth} LayerNorm+MLP blocks, width {width}) with an embedded "
                    "categorical input: one SGD-momentum step on a Huber loss")
