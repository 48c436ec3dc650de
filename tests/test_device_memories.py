"""Memory kinds on the interp device: the same as XLA's CPU, with the same results.

Each scenario (JAX's memories_test and export_test use them) runs on ``cpu`` and on
``interp`` from the same host data; the values, ``.sharding.memory_kind`` of the
result and of its shards, and the devices must agree.
"""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import export
from jax.experimental.compute_on import compute_on
from jax._src.compute_on import compute_on2
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

HOST_KINDS = ("pinned_host", "unpinned_host")
DATA = np.arange(8, dtype=np.float32)


def described(array) -> tuple:
    """What the scenario produced: values, memory kind, and each shard's (values, kind)."""
    return (np.asarray(array).tolist(), array.sharding.memory_kind,
            [(np.asarray(shard.data).tolist(), shard.data.sharding.memory_kind) for shard in array.addressable_shards])


def on_both(scenario) -> tuple:
    """``scenario(devices)`` on cpu and on interp; the interp result lives on interp."""
    expected = scenario(jax.devices("cpu"))
    actual = scenario(jax.devices("interp"))
    assert {device.platform for device in actual.devices()} == {"interp"}
    return described(expected), described(actual)


def single(devices, kind="device"):
    return SingleDeviceSharding(devices[0], memory_kind=kind)


def halves(devices, kind="device"):
    return NamedSharding(jax.make_mesh((2,), ("x",), devices=devices[:2]), PartitionSpec("x"), memory_kind=kind)


def test_a_device_has_the_cpus_memory_kinds():
    cpu, interp = jax.devices("cpu")[0], jax.devices("interp")[0]
    assert [m.kind for m in interp.addressable_memories()] == [m.kind for m in cpu.addressable_memories()]
    assert interp.default_memory().kind == cpu.default_memory().kind == "device"
    assert {m.kind: m.addressable_by_devices() for m in interp.addressable_memories()} == {
        kind: [interp] for kind in ("device", *HOST_KINDS)}


@pytest.mark.parametrize("kind", HOST_KINDS)
@pytest.mark.parametrize("sharding", [single, halves])
def test_device_put_to_host_memory_and_back(kind, sharding):
    expected, actual = on_both(lambda devices: jax.device_put(DATA, sharding(devices, kind)))
    assert expected == actual and actual[1] == kind
    expected, actual = on_both(lambda devices: jax.device_put(
        jax.device_put(jnp.asarray(DATA, device=devices[0]), sharding(devices, kind)), sharding(devices)))
    assert expected == actual and actual[1] == "device"


@pytest.mark.parametrize("sharding", [single, halves])
def test_out_shardings_with_a_host_memory_kind(sharding):
    expected, actual = on_both(lambda devices: jax.jit(lambda v: v * 2, out_shardings=sharding(devices, "pinned_host"))(
        jax.device_put(DATA, sharding(devices))))
    assert expected == actual and actual[1] == "pinned_host"


def test_a_program_on_host_memory_arguments():
    expected, actual = on_both(lambda devices: jax.jit(lambda v: v + 1)(jax.device_put(DATA, single(devices,
                                                                                                     "pinned_host"))))
    assert expected == actual


def test_device_put_to_host_memory_inside_jit():
    expected, actual = on_both(lambda devices: jax.jit(
        lambda v: jax.device_put(v * 2, single(devices, "pinned_host")))(jax.device_put(DATA, devices[0])))
    assert expected == actual and actual[1] == "pinned_host"


def test_compute_on_device_host():
    def scenario(devices):
        @jax.jit
        def f(v):
            with compute_on("device_host"):
                w = v * 3
            return w + 1
        return f(jax.device_put(DATA, devices[0]))

    expected, actual = on_both(scenario)
    assert expected == actual


@pytest.mark.parametrize("space", [jax.memory.Space.Host, jax.memory.Space.Device])
def test_compute_on2_out_memory_spaces(space):
    def scenario(devices):
        f = jax.jit(compute_on2(lambda a: a * 5, compute_type="device_host", out_memory_spaces=space))
        return f(jax.device_put(DATA, devices[0]))

    expected, actual = on_both(scenario)
    assert expected == actual and actual[1] == ("pinned_host" if space == jax.memory.Space.Host else "device")


def test_export_with_a_memory_space_from_an_argument():
    def scenario(devices):
        argument = jax.device_put(DATA, single(devices, "pinned_host"))
        exported = export.export(jax.jit(lambda v: v * 2), platforms=(devices[0].platform,))(argument)
        assert 'mhlo.memory_kind = "pinned_host"' in exported.mlir_module()
        assert described(exported.call(argument)) == described(jax.jit(exported.call)(argument))
        return exported.call(argument)

    expected, actual = on_both(scenario)
    assert expected == actual and actual[1] == "pinned_host"


def test_export_with_a_memory_space_from_out_shardings():
    def scenario(devices):
        f = jax.jit(lambda v: v * 2, out_shardings=single(devices, "pinned_host"))
        argument = jax.device_put(DATA, devices[0])
        exported = export.export(f, platforms=(devices[0].platform,))(argument)
        assert 'mhlo.memory_kind = "pinned_host"' in exported.mlir_module()
        return exported.call(argument)

    expected, actual = on_both(scenario)
    assert expected == actual
