"""Quick start: run a jitted JAX function on stablehlo_interp and compare with XLA."""

import jax
import jax.numpy as jnp
import numpy as np

import stablehlo_interp as si


def predict(w, b, x):
    return jnp.tanh(x @ w + b).sum(axis=0)


rng = np.random.default_rng(0)
w = rng.standard_normal((4, 3), np.float32)
b = rng.standard_normal(3, np.float32)
x = rng.standard_normal((5, 4), np.float32)

lowered = jax.jit(predict).lower(w, b, x)      # the StableHLO program jax.jit would run
print(lowered.as_text(debug_info=False))

ours = si.run(lowered, w, b, x)                # evaluated op by op with NumPy, returned as jit returns it
xla = np.asarray(jax.jit(predict)(w, b, x))    # the same program compiled by XLA for CPU
print("interpreter:", ours)
print("XLA CPU:    ", xla)
print("max abs difference:", float(np.max(np.abs(ours - xla))))
