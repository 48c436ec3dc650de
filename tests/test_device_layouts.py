"""The Layouts extension: the layouts JAX reads on interp are XLA's CPU's, and compiling
does not fetch the program text (``PJRT_Executable_OptimizedProgram``).

Without the extension jaxlib fetched and parsed the program text at every compile to
learn the layouts of parameters and outputs; the text is the per-device program, which
Shardy's partitioner makes in a child process (tests/test_device_partitioned_text.py
checks the partitioner stays idle when compiling a sharded program).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from stablehlo_interp.device import runtime

ARRAYS = {
    "matrix_f32": np.arange(6, dtype=np.float32).reshape(2, 3),
    "scalar_f32": np.float32(2.5),
    "zero_size_i32": np.zeros((0, 4), np.int32),
    "cube_bool": np.arange(24).reshape(2, 3, 4) % 3 == 0,
    "vector_bf16": np.arange(5).astype(ml_dtypes.bfloat16),
    "rank4_i8": np.arange(24, dtype=np.int8).reshape(1, 2, 3, 4),
}


def compiled_on(platform: str, array):
    """A program whose outputs have other ranks than its parameter: the parameter, its
    transpose, a sum to a scalar."""
    x = jax.device_put(array, jax.devices(platform)[0])
    return jax.jit(lambda a: (a, a.T, jnp.sum(a, dtype=jnp.float32))).lower(x).compile(), x


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_layouts_are_the_cpus(name):
    expected, on_cpu = compiled_on("cpu", ARRAYS[name])
    actual, on_interp = compiled_on("interp", ARRAYS[name])
    input_layouts = [[f.layout for f in c.input_formats[0]] for c in (expected, actual)]
    output_layouts = [[f.layout for f in c.output_formats] for c in (expected, actual)]
    assert input_layouts[1] == input_layouts[0]
    assert output_layouts[1] == output_layouts[0]
    assert on_interp.format.layout == on_cpu.format.layout
    np.testing.assert_array_equal(np.asarray(actual(on_interp)[1]), np.asarray(expected(on_cpu)[1]))


def test_sharded_layouts_are_the_cpus():
    def layouts(platform):
        mesh = jax.make_mesh((4,), ("x",), devices=jax.devices(platform)[:4])
        x = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4), NamedSharding(mesh, P("x")))
        compiled = jax.jit(lambda a: (a.T * 2, a.sum())).lower(x).compile()
        return ([f.layout for f in compiled.input_formats[0]], [f.layout for f in compiled.output_formats],
                x.format.layout)

    assert layouts("interp") == layouts("cpu")


def test_compiling_and_calling_do_not_fetch_the_program_text(monkeypatch):
    fetched = []
    fetch = runtime.Executable.optimized_program
    monkeypatch.setattr(runtime.Executable, "optimized_program", lambda self: fetched.append(self) or fetch(self))
    compiled, x = compiled_on("interp", ARRAYS["matrix_f32"])
    compiled(x)
    jax.jit(lambda a: a * 2)(x).block_until_ready()
    assert not fetched
    assert "transpose" in compiled.as_text()
    assert len(fetched) >= 1
