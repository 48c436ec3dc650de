"""The training step the zoo's Optax programs share."""

from __future__ import annotations

import jax
import optax


def optimizer_step(optimizer: optax.GradientTransformation, loss_fn, params, opt_state):
    """One step of ``optimizer`` on ``loss_fn(params) -> (loss, aux)``. Returns the step's
    results, and ``aux``: the loss, the gradients (results too, so a comparison sees them and
    not only what the optimizer made of them), the updated parameters and optimizer state."""
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return {"loss": loss, "grads": grads, "params": optax.apply_updates(params, updates),
            "opt_state": opt_state}, aux
