"""The tools on a program with host callbacks, under the platform order JAX_PLATFORMS sets
(docs/device.md, "Platform orders"): `JAX_PLATFORMS=interp,cpu python examples/platform_orders.py`."""

import jax
import jax.numpy as jnp
import numpy as np

import stablehlo_interp as si

seen = []


def f(x):
    jax.debug.callback(lambda v: seen.append(np.asarray(v)), x)
    doubled = jax.pure_callback(lambda v: np.asarray(v) * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    return jnp.log(doubled - 1.0)


x = jnp.array([1.0, 2.0, 3.0], jnp.float32)
print("default platform:", jax.default_backend())
print(si.compare(f, x, backend="cpu"))
print("the debug callback ran:", len(seen) > 0)
report = si.find_nonfinite(f, jnp.array([1.0, 0.0, 3.0], jnp.float32))
print(report.op, "at line", report.location.frame.line)
