"""NumPyro: a short NUTS run (warmup with step-size and mass-matrix adaptation, then sampling)
on a Bayesian linear regression, the whole chain in one jitted function."""

from __future__ import annotations

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer.hmc import hmc
from numpyro.infer.util import initialize_model

from . import ZooProgram, as_numpy


def regression(x, y=None):
    weights = numpyro.sample("weights", dist.Normal(0.0, 1.0).expand([x.shape[-1]]).to_event(1))
    intercept = numpyro.sample("intercept", dist.Normal(0.0, 2.0))
    noise = numpyro.sample("noise", dist.HalfNormal(1.0))
    numpyro.sample("y", dist.Normal(x @ weights + intercept, noise), obs=y)


def nuts_regression(points=24, features=3, warmup=12, samples=12, max_tree_depth=4) -> ZooProgram:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((points, features)).astype(np.float32)
    y = (x @ np.array([1.5, -0.7, 0.2], np.float32)[:features] + 0.3
         + 0.5 * rng.standard_normal(points)).astype(np.float32)
    # the unconstrained starting point NumPyro picks, and the potential as a function of the data
    init, potential_of_data, _, _ = initialize_model(jax.random.key(0), regression, model_args=(x, y),
                                                     dynamic_args=True)

    def chain(rng_key, start, x, y):
        init_kernel, sample_kernel = hmc(potential_fn=potential_of_data(x, y), algo="NUTS")
        state = init_kernel(start, num_warmup=warmup, max_tree_depth=max_tree_depth,
                            rng_key=jax.random.wrap_key_data(rng_key))

        def transition(state, _):
            state = sample_kernel(state)
            return state, {"z": state.z, "potential_energy": state.potential_energy,
                           "num_steps": state.num_steps, "accept_prob": state.accept_prob}

        state, draws = jax.lax.scan(transition, state, length=warmup + samples)
        return {"draws": draws, "step_size": state.adapt_state.step_size,
                "inverse_mass_matrix": state.adapt_state.inverse_mass_matrix}

    key_data = np.asarray(jax.random.key_data(jax.random.key(4)))
    return ZooProgram(
        name="numpyro_nuts_regression", function=chain,
        args=(key_data, as_numpy(init.z), x, y), libraries=("numpyro",),
        description=f"NumPyro NUTS on a Bayesian linear regression ({points} points, {features} features): "
                    f"{warmup} warmup and {samples} draws with step-size and mass adaptation")
