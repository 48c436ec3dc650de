"""``jax.experimental.custom_partitioning`` on the interp devices, against XLA's CPU with 8
host devices: the op computes what its partition callback's per-device program computes
(ops/sharding_calls.py), so each test runs the same function on both platforms and
compares the values, the result's sharding, and what the callback was asked."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import stablehlo_interp as si
from stablehlo_interp.cli import main
from stablehlo_interp.device import placement, runtime

PLATFORMS = ("cpu", "interp")


def mesh(platform: str, shape=(4, 2), names=("x", "y")) -> Mesh:
    return Mesh(np.array(jax.devices(platform)[:int(np.prod(shape))]).reshape(shape), names)


def asked_and_run(build, *arrays, specs, compiler_options=None):
    """On each platform: ``build(asked)`` makes the custom-partitioned function (its
    partition callback appends the specs it is asked to ``asked``), which runs jitted on
    ``arrays`` placed by ``specs`` on a 4 x 2 mesh. Returns {platform: (asked, result)}."""
    found = {}
    for platform in PLATFORMS:
        asked: list = []
        where = mesh(platform)
        placed = [jax.device_put(a, NamedSharding(where, s)) for a, s in zip(arrays, specs)]
        options = compiler_options if platform == "interp" else None
        result = jax.jit(build(asked), compiler_options=options)(*placed)
        found[platform] = (asked, result)
    return found


def assert_same(found: dict, loads: int = 1) -> None:
    """The same values and result shardings on both platforms, and the callback asked the
    same on both: once on the CPU, once per program loaded on interp (``loads``: two in
    the per-device modes, the global program and its per-device program)."""
    (cpu_asked, expected), (interp_asked, actual) = found["cpu"], found["interp"]
    assert cpu_asked and interp_asked == cpu_asked * loads
    for want, got in zip(jax.tree.leaves(expected), jax.tree.leaves(actual)):
        assert {d.platform for d in got.devices()} == {"interp"}
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert got.sharding.spec == want.sharding.spec


def summed_rows(asked: list):
    """A row sum whose per-device program sums its block and adds the blocks of a row
    with a ``psum`` over ``y``: the operand stays sharded over both axes."""
    @custom_partitioning
    def f(x):
        return jnp.sum(x, axis=1)

    def partition(mesh, arg_shapes, result_shape):
        asked.append(([a.sharding.spec for a in arg_shapes], result_shape.sharding.spec))

        def lower_fn(block):
            return jax.lax.psum(jnp.sum(block, axis=1), "y")
        return mesh, lower_fn, result_shape.sharding, (arg_shapes[0].sharding,)

    f.def_partition(partition, sharding_rule="i j -> i", reduction_factors=("j",))
    return lambda x: f(x) * 2


def test_per_device_program_with_a_collective():
    x = (np.arange(64, dtype=np.float32).reshape(8, 8) - 20) / 4
    found = asked_and_run(summed_rows, x, specs=[P("x", "y")])
    assert_same(found)
    assert found["interp"][0] == [([P("x", "y")], P("x"))]
    np.testing.assert_array_equal(np.asarray(found["interp"][1]), x.sum(axis=1) * 2)   # exact: small integers / 4


def sliced_matmul(asked: list):
    """Two results, and operands the callback takes as they come: each device multiplies
    its rows of ``x`` by its own block of ``y``'s rows, then a ``psum`` over ``y`` adds the
    blocks (a device's column offset is its ``axis_index``)."""
    @custom_partitioning
    def f(x, y):
        z = x @ y
        return z, z * z

    def partition(mesh, arg_shapes, result_shape):
        arg_shardings = tuple(a.sharding for a in arg_shapes)
        result_sharding = result_shape[0].sharding
        asked.append(([s.spec for s in arg_shardings], [r.sharding.spec for r in result_shape]))

        def lower_fn(x, y):
            i = jax.lax.axis_index("y")
            z = jax.lax.psum(jax.lax.dynamic_slice(x, (i * 0, i * 8), (8, 8)) @ y, "y")
            return z, z * z
        return mesh, lower_fn, (result_sharding, result_sharding), arg_shardings

    f.def_partition(partition, sharding_rule="i j, j k -> i k, i k")
    return f


def test_several_results_and_the_callbacks_own_program():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 20, (32, 16)).astype(np.float32)
    y = rng.integers(0, 20, (16, 32)).astype(np.float32)
    found = asked_and_run(sliced_matmul, x, y, specs=[P("x"), P("y")])
    assert_same(found)
    z, squared = found["interp"][1]
    np.testing.assert_array_equal(np.asarray(z), x @ y)   # integers: exact in float32
    np.testing.assert_array_equal(np.asarray(squared), (x @ y) ** 2)


def scanned_sum(asked: list):
    """A scalar sum whose per-device program runs a ``psum`` inside a loop (a scan)."""
    @custom_partitioning
    def f(x):
        return jnp.sum(x)

    def partition(mesh, arg_shapes, result_shape):
        asked.append(([a.sharding.spec for a in arg_shapes], result_shape.sharding.spec))

        def lower_fn(xs):
            def step(carry, row):
                return carry + jax.lax.psum(jnp.sum(row), "x"), None
            return jax.lax.scan(step, jnp.float32(0), xs)[0]
        return mesh, lower_fn, result_shape.sharding, (arg_shapes[0].sharding,)

    f.def_partition(partition, sharding_rule="i j -> ")
    return f


def test_collective_inside_a_loop_of_the_per_device_program():
    x = np.arange(32 * 16, dtype=np.float32).reshape(32, 16) % 7
    found = asked_and_run(scanned_sum, x, specs=[P(None, "x")])
    assert_same(found)
    assert float(found["interp"][1]) == float(x.sum())


def replicating(asked: list):
    """A callback that wants its operand whole on every device (other than it is asked)."""
    @custom_partitioning
    def f(x):
        return x + 1

    def partition(mesh, arg_shapes, result_shape):
        asked.append(([a.sharding.spec for a in arg_shapes], result_shape.sharding.spec))
        whole = NamedSharding(mesh, P())
        return mesh, lambda x: x + 1 + jax.lax.axis_index("x").astype(x.dtype) * 0, whole, (whole,)

    f.def_partition(partition, sharding_rule="i j -> i j")
    return lambda x: f(x) * 3


def test_operands_resharded_to_the_callbacks_shardings():
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    found = asked_and_run(replicating, x, specs=[P("x", "y")])
    assert_same(found)
    np.testing.assert_array_equal(np.asarray(found["interp"][1]), (x + 1) * 3)


@pytest.mark.parametrize("mode", ["per_device", "check"])
@pytest.mark.parametrize("build, arrays, specs", [
    (summed_rows, [(np.arange(64, dtype=np.float32).reshape(8, 8) - 20) / 4], [P("x", "y")]),
    (sliced_matmul, [np.arange(512, dtype=np.float32).reshape(32, 16) % 5,
                     np.arange(512, dtype=np.float32).reshape(16, 32) % 3], [P("x"), P("y")]),
    (scanned_sum, [np.arange(32 * 16, dtype=np.float32).reshape(32, 16) % 7], [P(None, "x")]),
    (replicating, [np.arange(64, dtype=np.float32).reshape(8, 8)], [P("x", "y")]),
], ids=["psum", "two_results", "psum_in_a_loop", "resharded"])
def test_per_device_modes(build, arrays, specs, mode):
    """Each device runs Shardy's per-device program, where the op gets the device's shards:
    they are resharded to the callback's shardings, its program runs on the device, and
    its results are resharded to the op's. No warning: the per-device run is the one
    returned (per_device) or checked (check), and it agrees with the global run."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", placement.PerDeviceWarning)
        found = asked_and_run(build, *arrays, specs=specs, compiler_options={"interp_spmd": mode})
    assert_same(found, loads=2)


def test_per_device_modes_fall_back_where_the_op_is_refused(monkeypatch):
    """When the per-device program cannot run (here its op finds no callback: JAX's is
    asked for the global program only), the device warns, naming the op, and runs the
    global program."""
    asked_by_the_device: list = []
    partition = runtime.program_module.jax_partition_callback

    def first_only(*args):
        asked_by_the_device.append(args[0])
        return partition(*args) if len(asked_by_the_device) == 1 else None

    monkeypatch.setattr(runtime.program_module, "jax_partition_callback", first_only)
    x = (np.arange(64, dtype=np.float32).reshape(8, 8) - 20) / 4
    with pytest.warns(placement.PerDeviceWarning, match=r"(?s)cannot run Shardy's per-device program.*"
                                                        r"@CustomSPMDPartitioning .*not known here"):
        found = asked_and_run(summed_rows, x, specs=[P("x", "y")], compiler_options={"interp_spmd": "per_device"})
    assert_same(found)
    assert len(asked_by_the_device) == 2


def test_refused_where_the_callback_is_not_known(tmp_path, capsys):
    """A module saved to a file and loaded apart from the JAX function (as the CLI runs
    it): the op's meaning is not in the module, so it is refused, naming the op. (Its
    Lowered, in the process that registered the callbacks, runs: the next test.)"""
    where = mesh("cpu")
    x = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(where, P("x", "y")))
    lowered = jax.jit(summed_rows([])).lower(x)
    path = tmp_path / "custom.mlir"
    path.write_text(lowered.as_text())
    with pytest.raises(si.UnsupportedOpError, match=r"(?s)stablehlo.custom_call.*@CustomSPMDPartitioning .*"
                                                    r"partition callback.*not known here"):
        si.load(str(path))
    np.save(tmp_path / "x.npy", np.ones((8, 8), np.float32))
    assert main(["run", str(path), "-i", str(tmp_path / "x.npy")]) == 3   # cannot do (docs/cli.md)
    assert "@CustomSPMDPartitioning" in capsys.readouterr().err


def test_the_callbacks_error_names_the_op():
    @custom_partitioning
    def f(x):
        return x

    def partition(mesh, arg_shapes, result_shape):
        return mesh, lambda x: x[:1], arg_shapes[0].sharding, (arg_shapes[0].sharding,)   # wrong result shape

    f.def_partition(partition, sharding_rule="i j -> i j")
    x = jax.device_put(np.ones((8, 8), np.float32), NamedSharding(mesh("interp"), P("x")))
    with pytest.raises(Exception, match="(?s)partition callback.*Mismatch in result "
                                                                      "shapes"):
        jax.jit(f)(x).block_until_ready()


def test_uneven_shards_are_refused():
    """A callback that cuts 6 rows over 4 devices: XLA pads the shards; the interpreter
    refuses the op, naming it and why, rather than compute other shards."""
    @custom_partitioning
    def f(x):
        return x * 2

    def partition(mesh, arg_shapes, result_shape):
        rows = NamedSharding(mesh, P("x"))
        return mesh, lambda x: x * 2, rows, (rows,)

    f.def_partition(partition, sharding_rule="i j -> i j")
    x = np.arange(48, dtype=np.float32).reshape(6, 8)
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(jax.device_put(x, NamedSharding(mesh("cpu"), P())))), x * 2)
    with pytest.raises(Exception, match=r"(?s)stablehlo.custom_call.*operand 0 \(tensor<6x8xf32>\) is cut into "
                                        r"\[4, 1\] tiles: shards of uneven size"):
        jax.jit(f)(jax.device_put(x, NamedSharding(mesh("interp"), P())))


def test_the_programs_tools_ask_jax_too():
    """``si.run``, ``si.load`` of a Lowered and the tools (here ``si.trace``) run a custom
    partitioning op as the device does, with the callbacks JAX registered in this process:
    the same values as XLA's CPU, and the per-device program's collective in the trace."""
    x = (np.arange(64, dtype=np.float32).reshape(8, 8) - 20) / 4
    placed = jax.device_put(x, NamedSharding(mesh("cpu"), P("x", "y")))
    asked: list = []
    function = jax.jit(summed_rows(asked))
    expected = np.asarray(function(placed))
    np.testing.assert_array_equal(np.asarray(si.run(function, placed)), expected)
    np.testing.assert_array_equal(si.load(function.lower(placed)).run(x)[0], expected)
    trace = si.trace(function, placed)
    assert trace.find("stablehlo.all_reduce"), "the callback's per-device program runs inside the op"
    assert asked[0] == ([P("x", "y")], P("x")) and all(question == asked[0] for question in asked)
