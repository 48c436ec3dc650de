"""A data-parallel training step on 8 simulated devices, next to the same step on one.

The step is a two-layer MLP's SGD update: each device takes its slice of the
batch (``shard_map`` over a mesh axis ``batch``), computes the loss gradient on
it, and the gradients are summed across devices with ``psum`` (one
``all_reduce`` per parameter) before the update. On one device the same step
runs on the whole batch, without collectives. Both run on ``interp`` (and, for
reference, on XLA's CPU with 8 host devices).

The third column is the same step with sharding in types (an Explicit mesh axis,
no ``shard_map``): the parameters are *reduced* along ``batch``, so their
gradients come out *unreduced* (each device's partial sum, no communication)
and one ``reshard`` per parameter all-reduces them before the update.

The interpreter runs the 8 devices one at a time, so the 8-device step costs
about the single-device step (the same arithmetic, cut in 8) plus the cost of
the grid: 8 threads taking turns at every collective, and the per-device
interpretation overhead of the body's ops.

    python benchmarks/sharding_bench.py [--batch N] [--hidden H] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # before jax is imported, below

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P, reshard


def loss(params, x, y):
    (w1, b1), (w2, b2) = params
    hidden = jnp.tanh(x @ w1 + b1)
    return jnp.mean((hidden @ w2 + b2 - y) ** 2)


def sgd(params, grads, rate: float = 0.05):
    return jax.tree.map(lambda p, g: p - rate * g, params, grads)


def one_device_step(params, x, y):
    return sgd(params, jax.grad(loss)(params, x, y))


def data_parallel_step(mesh: Mesh):
    devices = mesh.size

    def step(params, x, y):
        grads = jax.grad(loss)(params, x, y)
        return sgd(params, jax.tree.map(lambda g: lax.psum(g, "batch") / devices, grads))

    # check_vma=False: the gradients stay per device (JAX would otherwise sum the gradients
    # of the replicated parameters itself) and the psum is the program's own.
    return jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(P(), P("batch"), P("batch")), out_specs=P(),
                                 check_vma=False))


def unreduced_step(params, x, y):
    """The data-parallel step on an Explicit mesh: the reduced parameters are used as
    replicated ones, so their gradients come back unreduced; a reshard sums them."""
    def typed_loss(params, x, y):
        return loss(jax.tree.map(lambda p: reshard(p, P()), params), x, y)

    grads = jax.grad(typed_loss)(params, x, y)
    return sgd(reshard(params, P()), jax.tree.map(lambda g: reshard(g, P()), grads))


def problem(batch: int, features: int, hidden: int, outputs: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    params = (((rng.standard_normal((features, hidden)) / np.sqrt(features)).astype(np.float32),
               np.zeros(hidden, np.float32)),
              ((rng.standard_normal((hidden, outputs)) / np.sqrt(hidden)).astype(np.float32),
               np.zeros(outputs, np.float32)))
    x = rng.standard_normal((batch, features)).astype(np.float32)
    y = rng.standard_normal((batch, outputs)).astype(np.float32)
    return params, x, y


def seconds(run, repeat: int) -> float:
    jax.block_until_ready(run())   # compile, warm up
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        jax.block_until_ready(run())
        best = min(best, time.perf_counter() - start)
    return best


def measure(platform: str, params, x, y, repeat: int) -> tuple:
    devices = jax.devices(platform)
    mesh = Mesh(np.array(devices[:8]), ("batch",))
    single = jax.jit(one_device_step)
    on_one = jax.device_put((params, x, y), devices[0])
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    on_eight = (jax.device_put(params, replicated), jax.device_put(x, batch), jax.device_put(y, batch))
    parallel = data_parallel_step(mesh)
    one = seconds(lambda: single(*on_one), repeat)
    eight = seconds(lambda: parallel(*on_eight), repeat)
    explicit = Mesh(np.array(devices[:8]), ("batch",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(explicit):
        typed = (jax.device_put(params, P(reduced={"batch"})), jax.device_put(x, P("batch")),
                 jax.device_put(y, P("batch")))
        unreduced = jax.jit(unreduced_step)
        typed_seconds = seconds(lambda: unreduced(*typed), repeat)
        typed_result = unreduced(*typed)
    return one, eight, typed_seconds, single(*on_one), parallel(*on_eight), typed_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--outputs", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()

    params, x, y = problem(options.batch, options.features, options.hidden, options.outputs)
    results = {platform: measure(platform, params, x, y, options.repeat) for platform in ("cpu", "interp")}
    for platform, (_, _, _, one, eight, typed) in results.items():   # the three steps agree on each platform
        for a, b, c in zip(jax.tree.leaves(one), jax.tree.leaves(eight), jax.tree.leaves(typed)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5, err_msg=platform)
            np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=1e-4, atol=1e-5, err_msg=platform)
    for index in (4, 5):
        for a, b in zip(jax.tree.leaves(results["cpu"][index]), jax.tree.leaves(results["interp"][index])):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5)

    print(f"MLP {options.features}-{options.hidden}-{options.outputs}, batch {options.batch}: one SGD step "
          "(best of {})".format(options.repeat))
    print(f"{'':<10}{'1 device':>12}{'8 devices':>12}{'8 / 1':>8}{'unreduced':>12}")
    for platform, (one, eight, typed, _, _, _) in results.items():
        print(f"{platform:<10}{one * 1e3:>10.2f}ms{eight * 1e3:>10.2f}ms{eight / one:>7.1f}x{typed * 1e3:>10.2f}ms")


if __name__ == "__main__":
    main()
