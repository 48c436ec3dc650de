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


# ---------------------------------------------------------------- layouts other than row-major
# What XLA's CPU chooses for Layout.AUTO, and concrete layouts a program or device_put asks
# for: the layouts reported on interp must be the CPU's, the values the same, and the bytes
# in memory (read through unsafe_buffer_pointer, in the buffer's layout) the same.

def single(device, layout=None):
    from jax.experimental.layout import Format, Layout
    sharding = jax.sharding.SingleDeviceSharding(device)
    if layout is None:
        return sharding
    return Format(Layout.AUTO if layout == "auto" else Layout(major_to_minor=layout), sharding)


def memory_bytes(array) -> bytes:
    """The bytes of each shard as the device holds them (in the shard's layout)."""
    import ctypes
    return b"".join(ctypes.string_at(shard.data.unsafe_buffer_pointer(), shard.data.nbytes)
                    for shard in array.addressable_shards)


def outcome(compiled, arguments) -> dict:
    """Run ``compiled`` on ``arguments`` put in its input formats."""
    arguments = [jax.device_put(a, f) for a, f in zip(arguments, compiled.input_formats[0])]
    outputs = compiled(*arguments)
    outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    formats = compiled.output_formats
    return {"in": [f.layout.major_to_minor for f in compiled.input_formats[0]],
            "out": [f.layout.major_to_minor for f in (formats if isinstance(formats, (tuple, list)) else [formats])],
            "arrays": [o.format.layout.major_to_minor for o in outputs],
            "values": [np.asarray(o).tolist() for o in outputs],
            "bytes": [memory_bytes(o) for o in outputs]}


# name: (function, argument shapes, in_shardings layouts, out_shardings layouts)
PROGRAMS = {
    "transpose_auto_auto": (lambda x: x.T, [(4, 3)], "auto", "auto"),
    "transpose_default_auto": (lambda x: x.T, [(4, 3)], None, "auto"),
    "transpose_auto_default": (lambda x: x.T, [(4, 3)], "auto", None),
    "transpose_of_column_major": (lambda x: x.T, [(4, 3)], (1, 0), "auto"),
    "add_one_to_column_major": (lambda x: x + 1, [(4, 3)], (1, 0), "auto"),
    "identity_of_column_major": (lambda x: x, [(4, 3)], (1, 0), "auto"),
    "times_two_to_column_major": (lambda x: x * 2, [(4, 3)], "auto", (1, 0)),
    "scaled_transpose": (lambda x: x.T * 2, [(4, 3)], None, "auto"),
    "transpose_of_scaled": (lambda x: -((x * 2).T + 1), [(4, 3)], None, "auto"),
    "permute_3d": (lambda x: jnp.transpose(x, (1, 2, 0)), [(4, 3, 2)], None, "auto"),
    "transpose_plus_parameter": (lambda x, y: x.T + y, [(4, 3), (3, 4)], None, "auto"),
    "transposes_added": (lambda x, y: x.T + y.T, [(4, 3), (4, 3)], None, "auto"),
    "where_of_transposes": (lambda x: jnp.where(x.T > 0, x.T, 0.0), [(4, 3)], None, "auto"),
    "sum_of_transpose": (lambda x: x.T.sum(0), [(4, 3, 2)], None, "auto"),
    "dot_of_transpose": (lambda x, y: x.T @ y, [(4, 3), (4, 5)], None, "auto"),
    "transpose_of_broadcast": (lambda x: jnp.broadcast_to(x[:, None], (4, 5)).T, [(4,)], None, "auto"),
    "transpose_then_slice": (lambda x: x.T[1:], [(4, 3)], None, "auto"),
    "reshape_of_transpose": (lambda x: x.T.reshape(3, 2, 2), [(4, 3)], None, "auto"),
    "size_one_dimension_inserted": (lambda x: x.reshape(2, 1, 3, 1, 4), [(2, 3, 4)], None, "auto"),
    "size_one_dimension_after_transpose": (lambda x: x.T.reshape(3, 1, 4), [(4, 3)], None, "auto"),
    "transpose_moving_a_size_one_dimension": (lambda x: x.T, [(4, 1)], None, "auto"),
    "parameter_and_transpose": (lambda x: (x, x.T, x.sum()), [(4, 3)], None, "auto"),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_layouts_are_the_cpus(name):
    function, shapes, in_layout, out_layout = PROGRAMS[name]

    def run(platform):
        device = jax.devices(platform)[0]
        arguments = [np.arange(np.prod(s), dtype=np.float32).reshape(s) - 5 for s in shapes]
        jitted = jax.jit(function, in_shardings=single(device, in_layout), out_shardings=single(device, out_layout))
        types = [jax.ShapeDtypeStruct(s, np.float32, sharding=single(device)) for s in shapes]
        return outcome(jitted.lower(*types).compile(), arguments)

    expected, actual = run("cpu"), run("interp")
    assert actual == expected
    assert any(layout != tuple(range(len(layout))) for layout in expected["out"] + expected["in"]) or \
        name in ("transpose_auto_default", "add_one_to_column_major", "transpose_plus_parameter",
                 "dot_of_transpose", "transpose_of_broadcast", "transpose_then_slice", "reshape_of_transpose",
                 "transpose_moving_a_size_one_dimension")


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int8, np.complex64])
def test_sharding_constraint_with_a_layout_is_the_cpus(dtype):
    from jax.experimental.layout import Format, Layout

    def run(platform):
        mesh = jax.make_mesh((2,), ("x",), devices=jax.devices(platform)[:2], axis_types=(jax.sharding.AxisType.Auto,))
        sharding = NamedSharding(mesh, P("x"))
        x = jax.device_put(np.arange(8 * 6).astype(dtype).reshape(8, 6), sharding)
        f = jax.jit(lambda a: jax.lax.with_sharding_constraint(a.T, Format(Layout(major_to_minor=(0, 1)), sharding)))
        out = f(x)
        return (out.format.layout.major_to_minor, [s.data.format.layout.major_to_minor for s in out.addressable_shards],
                np.asarray(out).tolist(), memory_bytes(out))

    expected = run("cpu")
    assert run("interp") == expected
    assert expected[0] == (0, 1)   # not the transpose's own layout


@pytest.mark.parametrize("layout", [(1, 0), (0, 1)])
def test_device_put_with_a_layout_is_the_cpus(layout):
    from jax.experimental.layout import Format, Layout
    data = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)

    def run(platform):
        mesh = jax.make_mesh((2, 2), ("x", "y"), devices=jax.devices(platform)[:4], axis_types=(jax.sharding.AxisType.Auto,) * 2)
        out = jax.device_put(data, Format(Layout(major_to_minor=layout), NamedSharding(mesh, P("x", "y"))))
        back = jax.jit(lambda a: a + 1)(out)   # a program reading the column-major buffers
        copied = jax.device_put(out, jax.devices(platform)[5])
        return (out.format.layout.major_to_minor, [s.data.format.layout.major_to_minor for s in out.addressable_shards],
                np.asarray(out).tolist(), memory_bytes(out), np.asarray(back).tolist(),
                copied.format.layout.major_to_minor, memory_bytes(copied), out.on_device_size_in_bytes())

    assert run("interp") == run("cpu")


def test_a_concrete_input_layout_is_the_cpus():
    """jit with a column-major in_shardings, called with a row-major array (JAX lays it
    out again first) and with a NumPy array."""
    from jax.experimental.layout import Format, Layout

    def run(platform):
        device = jax.devices(platform)[0]
        f = jax.jit(lambda a: a + 1, in_shardings=Format(Layout(major_to_minor=(1, 0)), single(device)))
        with jax.default_device(device):
            x = jnp.arange(8 * 4).reshape(8, 4)   # uncommitted, row-major
        compiled = f.lower(jax.ShapeDtypeStruct((8, 4), x.dtype, sharding=single(device))).compile()
        return ([f.layout.major_to_minor for f in compiled.input_formats[0]], compiled.output_formats.layout,
                np.asarray(f(x)).tolist(), np.asarray(f(np.arange(32).reshape(8, 4))).tolist())

    assert run("interp") == run("cpu")


def test_a_tiled_layout_is_refused_with_its_reason():
    from jax.experimental.layout import Format, Layout
    device = jax.devices("interp")[0]
    tiled = Format(Layout(major_to_minor=(1, 0), tiling=((8, 128),)), single(device))
    with pytest.raises(Exception, match="tiles or a packed element size"):
        jax.jit(lambda a: a * 2, out_shardings=tiled).lower(np.ones((16, 256), np.float32)).compile()
