"""Equinox and Diffrax: a neural ODE (an Equinox MLP as the vector field of a Diffrax solve) and
the gradient of its fit through the solver. Equinox's runtime checks (``eqx.error_if``, used by
Diffrax for its step-count limit) lower to host callbacks: they are kept."""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import ZooProgram, as_numpy


class VectorField(eqx.Module):
    mlp: eqx.nn.MLP

    def __init__(self, dimension: int, width: int, key):
        self.mlp = eqx.nn.MLP(dimension, dimension, width, depth=2, activation=jax.nn.softplus,
                              final_activation=jnp.tanh, key=key)

    def __call__(self, t, y, args):
        return self.mlp(y)


def neural_ode(dimension=2, width=16, times=8, batch=3) -> ZooProgram:
    field = VectorField(dimension, width, jax.random.key(0))
    params, static = eqx.partition(field, eqx.is_array)
    save_times = np.linspace(0.0, 1.0, times, dtype=np.float32)

    def trajectory(field, y0):
        solution = diffrax.diffeqsolve(
            diffrax.ODETerm(field), diffrax.Tsit5(), t0=0.0, t1=1.0, dt0=0.1, y0=y0,
            stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-6),
            saveat=diffrax.SaveAt(ts=save_times), max_steps=64)
        return solution.ys

    def fit(params, y0s, targets):
        def loss_fn(params):
            field = eqx.combine(params, static)
            ys = jax.vmap(trajectory, in_axes=(None, 0))(field, y0s)
            return jnp.mean((ys - targets) ** 2), ys

        (loss, ys), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        return {"loss": loss, "trajectories": ys, "grads": grads}

    rng = np.random.default_rng(2)
    y0s = rng.standard_normal((batch, dimension)).astype(np.float32)
    angle = save_times[None, :, None]
    targets = (y0s[:, None, :] * np.cos(angle) + 0.1 * np.sin(3 * angle)).astype(np.float32)
    return ZooProgram(
        name="equinox_diffrax_neural_ode", function=fit,
        args=(as_numpy(params), y0s, targets), libraries=("equinox", "diffrax"),
        description=f"Equinox MLP vector field in a Diffrax Tsit5 solve (adaptive steps, {times} saved times, "
                    f"batch {batch}): loss and its gradient through the solver")


def saved_steps(dimension=2, width=16, max_steps=32) -> ZooProgram:
    """A solve that saves every step it takes: Diffrax fills the ``max_steps`` slots it does not
    use with inf, and the loss masks them (as a user must: ``where`` before any arithmetic, so
    that neither the loss nor its gradient sees them). The field is a rotation plus the MLP:
    its steps are set by truncation error well above rounding (a field this small alone would
    be solved in steps whose size rounding decides)."""
    field = VectorField(dimension, width, jax.random.key(1))
    params, static = eqx.partition(field, eqx.is_array)

    def fit(params, y0, frequency):
        mlp = eqx.combine(params, static)

        def rotation_and_mlp(t, y, args):
            return frequency * jnp.stack([-y[1], y[0]]) + mlp(t, y, args)

        def loss_fn(params):
            solution = diffrax.diffeqsolve(
                diffrax.ODETerm(rotation_and_mlp), diffrax.Dopri5(), t0=0.0, t1=3.0, dt0=0.1, y0=y0,
                stepsize_controller=diffrax.PIDController(rtol=1e-3, atol=1e-6),
                saveat=diffrax.SaveAt(steps=True), max_steps=max_steps)
            taken = jnp.isfinite(solution.ts)
            ts = jnp.where(taken, solution.ts, 0.0)
            ys = jnp.where(taken[:, None], solution.ys, 0.0)
            target = jnp.stack([jnp.cos(frequency * ts), jnp.sin(frequency * ts)], axis=-1)
            squared = jnp.where(taken[:, None], (ys - target) ** 2, 0.0)
            return squared.sum() / taken.sum(), solution.stats["num_accepted_steps"]

        (loss, steps), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        return {"loss": loss, "accepted_steps": steps, "grads": grads}

    return ZooProgram(
        name="equinox_diffrax_saved_steps", function=fit,
        args=(as_numpy(params), np.array([1.0, 0.0], np.float32), np.array(3.0, np.float32)),
        libraries=("equinox", "diffrax"),
        description=f"a rotation plus an Equinox MLP as the field of a Diffrax Dopri5 solve saving every step "
                    f"(up to {max_steps}, the unused ones inf and masked): loss and gradient")
