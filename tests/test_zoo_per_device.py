"""The zoo's sharded programs (tests/zoo/sharded.py: a Flax NNX LM's Adam step laid out
Megatron's way on a 2x4 data x model mesh, a shard_map SGD step with psum, psum_scatter,
all_gather and ppermute) run device by device, against XLA's CPU with 8 host devices and
against the global run, with every per-device tool.

Results are judged as tests/test_zoo.py judges them: within ``NOISE_MARGIN`` times the
spread XLA's own results show when its float inputs move by a few ulp, plus ``ULP_FLOOR``
ulp. The shard_map program's collectives are written in the program, so the per-device
program is the global program's per-device body: the two runs agree bit for bit.
"""

from __future__ import annotations

import functools
import json
import warnings

import numpy as np
import pytest

import jax

import stablehlo_interp as si
from stablehlo_interp.device import placement
from test_zoo import (EPS32, NOISE_MARGIN, PERTURBED_RUNS, ULP_FLOOR, _perturbed, as_users_run_them,  # noqa: F401 (autouse)
                      assert_agrees_with_oracle)
from zoo import PROGRAMS, SHARDED, ZooProgram

NAMES = list(SHARDED)


@functools.cache
def program(name: str) -> ZooProgram:
    return SHARDED[name]()


@functools.cache
def oracle(name: str):
    """XLA CPU's results on its 8 devices (each device's shards), and each result leaf's
    spread under input perturbation."""
    step, args = program(name).sharded("cpu")
    results = step(*args)
    shards = [{shard.device.id: np.asarray(shard.data) for shard in leaf.addressable_shards}
              for leaf in jax.tree.leaves(results)]
    expected = [np.asarray(leaf) for leaf in jax.tree.leaves(results)]
    spreads = [0.0] * len(expected)
    for seed in range(PERTURBED_RUNS):
        moved = jax.tree.leaves(step(*jax.device_put(_perturbed(program(name).args, seed), jax.tree.map(
            lambda leaf: leaf.sharding, args))))
        spreads = [max(spread, float(np.abs(np.asarray(got, np.float64) - want).max()) if want.size else 0.0)
                   for spread, want, got in zip(spreads, expected, moved)]
    return expected, shards, spreads


def within_noise(got, want, spread: float) -> bool:
    want64 = np.asarray(want, np.float64)
    bound = NOISE_MARGIN * spread + ULP_FLOOR * EPS32 * np.abs(want64)
    return got.shape == want.shape and bool((np.abs(np.asarray(got, np.float64) - want64) <= bound).all())


@pytest.mark.parametrize("name", NAMES)
def test_each_device_holds_xlas_shards_and_agrees_with_the_global_run(name):
    """``si.run_per_device``: each device's results are XLA's shards of that device within
    the oracle's noise; put together, they are the global run's (bit for bit for the
    shard_map program, whose sums are its own; within the noise for the LM, whose
    partitioned program adds the devices' partial sums with all-reduces). Every
    collective of the program runs on all 8 devices."""
    step, args = program(name).sharded("cpu")
    expected, shards, spreads = oracle(name)
    traffic = si.tools.CollectiveTraffic()
    run = si.run_per_device(step, *args, listeners=[traffic])
    global_run = jax.tree.leaves(si.run(step, *args))
    assert len(run.per_device) == 8
    for device, results in enumerate(run.per_device):
        assert len(results) == len(expected)
        for index, (got, spread) in enumerate(zip(results, spreads)):
            assert within_noise(got, shards[index][device], spread), (name, device, index)
    for got, want, spread in zip(jax.tree.leaves(run.outputs), global_run, spreads):
        if name == "sharded_shard_map_mlp":
            np.testing.assert_array_equal(got, want, strict=True)
        else:
            assert within_noise(got, want, spread)
    collectives = {transfer.op for transfer in traffic.transfers}
    wanted = {"stablehlo.all_reduce", "stablehlo.all_gather"}
    if name == "sharded_shard_map_mlp":
        wanted |= {"stablehlo.reduce_scatter", "stablehlo.collective_permute"}
    assert wanted <= collectives
    assert {transfer.process for transfer in traffic.transfers} == set(range(8))


@pytest.mark.parametrize("name", NAMES)
def test_compare_per_device_gives_each_device_its_shard(name):
    """``si.compare(..., per_device=True)`` on XLA's CPU: its results on device d are the
    addressable shards ``jax.jit`` gives device d (bit for bit), and each device's run
    agrees with them."""
    step, args = program(name).sharded("cpu")
    _, shards, spreads = oracle(name)
    comparison = si.compare(step, *args, per_device=True)
    assert comparison.against == "per device" and comparison.ok, str(comparison)
    for device in range(8):
        for index, spread in enumerate(spreads):
            np.testing.assert_array_equal(comparison.theirs[device][index], shards[index][device], strict=True)
            assert within_noise(comparison.ours[device][index], shards[index][device], spread)
    assert "device 7: agrees" in str(comparison)


@pytest.mark.parametrize("name", NAMES)
def test_trace_and_find_nonfinite_per_device(name):
    """The trace has every device's ops and the global results; no NaN to chase (XLA's are finite)."""
    step, args = program(name).sharded("cpu")
    expected, _, spreads = oracle(name)
    trace = si.trace(step, *args, per_device=True)
    assert {record.process for record in trace} == set(range(8))
    assert str(trace).count("\ndevice ") == 7 and str(trace).startswith("device 0:")
    for got, want, spread in zip(trace.outputs, expected, spreads):
        assert within_noise(got, want, spread)
    assert all(np.isfinite(leaf).all() for leaf in expected if leaf.dtype.kind == "f")
    assert si.find_nonfinite(step, *args, per_device=True) is None


def test_find_nonfinite_per_device_names_the_device_of_a_nan_input_row():
    """A NaN in one row of the shard_map program's batch: data device 1 holds rows 8-15,
    so the NaN enters on devices 4-7 (data index 1, each model index); every device's loss is
    NaN through the ppermute ring, and each answer names an argument on a device of data index 1."""
    zoo_program = program("sharded_shard_map_mlp")
    params, x, labels = zoo_program.args
    x = x.copy()
    x[11, 3] = np.nan
    step, _ = zoo_program.sharded("cpu")
    placed = jax.device_put((params, x, labels), jax.tree.map(lambda leaf: leaf.sharding,
                                                               zoo_program.sharded("cpu")[1]))
    found = si.find_nonfinite(step, *placed, per_device=True)
    assert sorted(found.devices) == list(range(8))
    for origins in found.devices.values():
        assert {origin.process for origin in origins.origins} <= {4, 5, 6, 7}, str(origins)
        assert any(origin.op == "argument #2" for origin in origins.origins), str(origins)
    assert "on device " in str(found) and "on process" not in str(found)


def test_explore_per_device_writes_each_devices_model_explorer_data(tmp_path):
    """The page has the 8 devices; Model Explorer gets the per-device program and each
    device's node data, whose largest |value| on the entry's outputs is that device's
    largest result (XLA's shards)."""
    name = "sharded_shard_map_mlp"
    step, args = program(name).sharded("cpu")
    _, shards, _ = oracle(name)
    exploration = si.explore(step, *args, per_device=True, model_explorer=tmp_path / "me",
                             path=tmp_path / "page.html")
    assert exploration.data["devices"]["count"] == 8
    files = exploration.model_explorer
    assert files.module.read_text().count("tensor<32x32xf32>") > 0    # w1's local shape: 32 x 128/4
    for device in range(8):
        graphs = json.loads((tmp_path / "me" / f"max_abs_device{device}.json").read_text())
        (graph,) = graphs.values()
        assert graph["name"] == f"device {device}: max |value|"
        largest = max(entry["value"] for entry in graph["results"].values())
        assert largest >= max(float(np.abs(shard[device]).max()) for shard in shards)
    assert "nonfinite_device7.json" in files.command


def test_on_the_interp_device_per_device_mode():
    """The device's mode per_device on the LM: each device runs its program, the results
    are laid out as XLA lays them out, each device's shards within the noise of XLA's. The
    runs differ within the noise of the reordered sums, and the warning says so in a few
    lines (it listed each of the step's 70 all-reduces)."""
    name = "sharded_flax_nnx_lm"
    per_device, args = program(name).sharded("interp", compiler_options={"interp_spmd": "per_device"})
    _, shards, spreads = oracle(name)
    with warnings.catch_warnings(record=True) as caught, si.on_device(si.tools.CollectiveTraffic()) as traffic:
        warnings.simplefilter("always", placement.PerDeviceWarning)
        results = jax.tree.leaves(per_device(*args))
    (warning,) = [w for w in caught if issubclass(w.category, placement.PerDeviceWarning)]
    last = str(warning.message).splitlines()[-1]
    assert last.startswith("the per-device program adds floats in another order: stablehlo.all_reduce at ")
    assert last.endswith("more; every result is within the rounding noise of the global program")
    assert len(last) < 1000
    assert {transfer.process for transfer in traffic.transfers} == set(range(8))
    for index, (leaf, spread) in enumerate(zip(results, spreads)):
        for shard in leaf.addressable_shards:
            device = shard.device.id - min(d.id for d in leaf.sharding.device_set)
            assert within_noise(np.asarray(shard.data), shards[index][device], spread), (index, device)


def split_by_rows(arguments, devices: int):
    """Each argument leaf split along its first dimension over ``devices`` CPU devices where
    they divide it, else replicated (random keys too): a user's first data-parallel try."""
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    mesh = jax.make_mesh((devices,), ("x",), axis_types=(AxisType.Auto,), devices=jax.devices("cpu")[:devices])

    def sharding(leaf):
        shape = np.shape(leaf)
        split = (not jax.dtypes.issubdtype(getattr(leaf, "dtype", np.float32), jax.dtypes.extended)
                 and len(shape) > 0 and shape[0] % devices == 0)
        return NamedSharding(mesh, PartitionSpec("x") if split else PartitionSpec())

    return jax.tree.map(sharding, arguments)


@pytest.mark.parametrize("name", [
    name if name in ("flax_nnx_transformer_lm", "flax_nnx_cnn_batchnorm") else pytest.param(name, marks=pytest.mark.slow)
    for name, build in PROGRAMS.items() if not build.slow])
def test_each_zoo_program_split_by_rows_runs_per_device(name):
    """Every zoo program with its arguments split by rows over 2 devices runs per device,
    checked against the global run, and agrees with XLA within the oracle's noise. Found
    so: a CNN step refused for windows it did not cut (two Conv layers share a source line),
    an LM step that aborted Shardy (a label gather from logits split by vocabulary)."""
    zoo_program = PROGRAMS[name]()
    shardings = split_by_rows(zoo_program.args, 2)
    step = jax.jit(zoo_program.function, in_shardings=shardings)
    run = si.run_per_device(step, *jax.device_put(zoo_program.args, shardings))
    assert len(run.per_device) == 2
    assert_agrees_with_oracle(name, run.outputs)
