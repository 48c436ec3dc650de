"""A zoo of real programs written with JAX's ecosystem (Flax, Optax, Equinox, Diffrax, NumPyro,
Haiku, Keras, Optimistix): the models people train and the solvers they fit with, at a size
that lowers to thousands of ops yet runs a step in seconds on the interpreter.

    from zoo import PROGRAMS
    program = PROGRAMS["flax_nnx_transformer_lm"]()    # builds the model (imports flax, optax)
    jax.jit(program.function)(*program.args)           # a plain JAX function, concrete NumPy inputs
    program.lowered()                                  # jax.jit(function).lower(*args)

``PROGRAMS[name](**REAL_SIZES[name])`` builds a program at the size people train it at (the
tests' sizes are small, so that a step's time is mostly the interpreter's per-op cost; at
the real size it is mostly the ops' own work); benchmarks/real_bench.py's ``--size real``.

Importing this package imports none of the libraries: each builder imports its family's
module when called. Every builder is deterministic (fixed seeds), so two builds give the
same function and the same arguments.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class ZooProgram:
    name: str
    function: Callable          # a plain JAX function: callers jit it
    args: tuple                 # concrete inputs: NumPy arrays or pytrees of them
    libraries: tuple[str, ...]  # the PyPI distributions it is written with
    description: str            # one line
    slow: bool = False          # too heavy for the default run (marked slow in the tests);
                                # PROGRAMS decides it, and tells it before building (builder.slow)
    mesh: tuple[tuple[str, int], ...] = ()   # a sharded program's device mesh: (axis, size) ...
    in_specs: Any = None        # and its arguments' and results' PartitionSpec trees (like args,
    out_specs: Any = None       # and like the results)

    def lowered(self):
        """The program as ``jax.jit`` lowers it (a ``jax.stages.Lowered``)."""
        import jax

        return jax.jit(self.function).lower(*self.args)

    def sharded(self, platform: str = "cpu", **jit_options):
        """A sharded program on the first devices of ``platform``: the function jitted with
        its shardings on ``mesh`` (and ``jit_options``), and its arguments placed on the devices."""
        import jax
        from jax.sharding import AxisType, NamedSharding, PartitionSpec

        names, sizes = zip(*self.mesh)
        mesh = jax.make_mesh(sizes, names, axis_types=(AxisType.Auto,) * len(names),   # shardings propagate
                             devices=jax.devices(platform)[:math.prod(sizes)])

        def on_mesh(specs):
            return jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs,
                                is_leaf=lambda leaf: isinstance(leaf, PartitionSpec))

        step = jax.jit(self.function, in_shardings=on_mesh(self.in_specs), out_shardings=on_mesh(self.out_specs),
                       **jit_options)
        return step, jax.device_put(self.args, on_mesh(self.in_specs))


def _builder(module: str, name: str, *, slow: bool) -> Callable[..., ZooProgram]:
    """The builder of ``name`` in the family module ``module``; ``build.slow`` tells without
    building whether the program is too heavy for the default run."""

    def build(**sizes) -> ZooProgram:
        made = getattr(importlib.import_module(f"{__name__}.{module}"), name)(**sizes)
        return dataclasses.replace(made, slow=slow)

    build.__name__ = name
    build.__qualname__ = f"{module}.{name}"
    build.slow = slow
    return build


# name -> builder; the builder's module is the library family the program is written with.
PROGRAMS: dict[str, Callable[..., ZooProgram]] = {
    "flax_nnx_transformer_lm": _builder("flax_nnx", "transformer_lm", slow=False),
    "flax_nnx_cnn_batchnorm": _builder("flax_nnx", "cnn_batchnorm", slow=False),
    "flax_linen_mlp": _builder("flax_linen", "mlp_classifier", slow=False),
    "equinox_diffrax_neural_ode": _builder("equinox_diffrax", "neural_ode", slow=True),
    "equinox_diffrax_saved_steps": _builder("equinox_diffrax", "saved_steps", slow=True),
    "numpyro_nuts_regression": _builder("numpyro_models", "nuts_regression", slow=True),
    "haiku_mlp": _builder("haiku_models", "mlp_regression", slow=False),
    "keras_mlp": _builder("keras_models", "mlp_classifier", slow=False),
    "optimistix_bfgs_logistic": _builder("optimistix_models", "logistic_regression_bfgs", slow=False),
}

# Programs over 8 devices (sharded.py): ``ZooProgram.sharded(platform)`` places them on a 2-D mesh.
SHARDED: dict[str, Callable[..., ZooProgram]] = {
    "sharded_flax_nnx_lm": _builder("sharded", "flax_nnx_lm", slow=False),
    "sharded_shard_map_mlp": _builder("sharded", "shard_map_mlp", slow=False),
}

# name -> the builder's size arguments for the program at the size of a real training step.
REAL_SIZES: dict[str, dict[str, int]] = {
    "flax_nnx_transformer_lm": {"vocab": 512, "width": 256, "heads": 8, "depth": 2, "context": 128, "batch": 16},
    "flax_nnx_cnn_batchnorm": {"size": 32, "channels": 3, "width": 32, "classes": 10, "batch": 32},
    "sharded_flax_nnx_lm": {"vocab": 512, "width": 256, "heads": 8, "depth": 2, "context": 128, "batch": 16},
    "sharded_shard_map_mlp": {"features": 256, "hidden": 1024, "classes": 16, "batch": 256},
}


def as_numpy(tree: Any) -> Any:
    """Every array leaf of ``tree`` as a NumPy array (the form ``ZooProgram.args`` holds)."""
    import jax
    import numpy as np

    return jax.tree.map(np.asarray, tree)
