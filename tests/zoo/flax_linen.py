"""Flax Linen: an MLP classifier with dropout and weight decay, trained one step with Optax AdamW."""

from __future__ import annotations

import flax.linen as nn
import jax
import numpy as np
import optax

from . import ZooProgram, as_numpy
from .optax_training import optimizer_step


class Classifier(nn.Module):
    widths: tuple[int, ...]
    classes: int

    @nn.compact
    def __call__(self, x, *, train: bool):
        for width in self.widths:
            x = nn.Dense(width)(x)
            x = nn.LayerNorm()(x)
            x = nn.silu(x)
            x = nn.Dropout(rate=0.1, deterministic=not train)(x)
        return nn.Dense(self.classes)(x)


def mlp_classifier(features=20, widths=(64, 64), classes=10, batch=16) -> ZooProgram:
    model = Classifier(widths, classes)
    rng = np.random.default_rng(5)
    inputs = rng.standard_normal((batch, features)).astype(np.float32)
    labels = rng.integers(0, classes, batch, dtype=np.int32)
    params = as_numpy(model.init(jax.random.key(5), inputs, train=False)["params"])
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3, weight_decay=1e-2))

    def step(params, opt_state, dropout_key, inputs, labels):
        def loss_fn(params):
            logits = model.apply({"params": params}, inputs, train=True,
                                 rngs={"dropout": jax.random.wrap_key_data(dropout_key)})
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), None

        return optimizer_step(optimizer, loss_fn, params, opt_state)[0]

    dropout_key = np.asarray(jax.random.key_data(jax.random.key(6)))
    return ZooProgram(
        name="flax_linen_mlp", function=step,
        args=(params, as_numpy(optimizer.init(params)), dropout_key, inputs, labels),
        libraries=("flax", "optax"),
        description=f"Flax Linen MLP classifier ({len(widths)} hidden Dense+LayerNorm+SiLU+dropout layers): "
                    "one AdamW step with gradient clipping")
