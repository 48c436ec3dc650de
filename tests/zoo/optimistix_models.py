"""Optimistix: a quasi-Newton fit, BFGS with its backtracking (Armijo) line search, of an
L2-regularized logistic regression: a solver's ``while`` loop with a line search inside, an
exit on a tolerance, and the number of steps as a result.

The tolerance is one where the exit is decided well above rounding noise. At 1e-4 in
float32 it is not: on 9 of 10 such data sets XLA CPU and the interpreter stop after
different numbers of steps (13 against 17, 26 against 27 ...), their paths split on noise
at a line search's Armijo test (``si.compare`` steps the loop and says so:
tests/test_tools_loops.py), and such a program has no single right answer to agree on."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from . import ZooProgram


def logistic_regression_bfgs(samples=256, features=16, tolerance=1e-3) -> ZooProgram:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((samples, features)).astype(np.float32)
    truth = rng.standard_normal(features).astype(np.float32)
    y = (x @ truth + 0.5 * rng.standard_normal(samples) > 0).astype(np.float32)

    def loss(w, data):
        x, y = data
        logits = x @ w
        return jnp.mean(jax.nn.softplus(logits) - y * logits) + 0.05 * jnp.sum(w * w)

    def fit(x, y):
        solution = optx.minimise(loss, optx.BFGS(rtol=tolerance, atol=tolerance), jnp.zeros(features, x.dtype),
                                 args=(x, y), max_steps=100)
        return solution.value, solution.stats["num_steps"], loss(solution.value, (x, y))

    return ZooProgram(
        name="optimistix_bfgs_logistic", function=fit, args=(x, y), libraries=("optimistix",),
        description=f"Optimistix BFGS with a backtracking line search fitting an L2-regularized logistic "
                    f"regression ({samples} samples, {features} features) to a tolerance of {tolerance:g}")
