"""Shardings as tilings (sharding.py): which part of an array each device holds.

The oracle is JAX's own sharding objects: ``devices_indices_map`` of a
``NamedSharding`` (Shardy shardings are NamedSharding's specs on a mesh) or of a
``GSPMDSharding`` (HLO sharding strings), and XLA's ``HloSharding`` for the
serialized ``OpSharding`` the device reports.
"""

from __future__ import annotations

import numpy as np
import pytest

import jax
from jax._src.sharding_impls import GSPMDSharding
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P
from jaxlib import xla_client

from stablehlo_interp.sharding import tiling as sharding
from stablehlo_interp.errors import ModuleError

CPUS = jax.devices("cpu")


def sdy_text(spec: P, rank: int, replicated=()) -> str:
    """``#sdy.sharding<@mesh, ...>`` of a PartitionSpec, as JAX lowers it (closed dimensions)."""
    dims = []
    for d in range(rank):
        entry = spec[d] if d < len(spec) else None
        axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        dims.append("{" + ", ".join(f'"{a}"' for a in axes) + "}")
    extra = ", replicated={" + ", ".join(f'"{a}"' for a in replicated) + "}" if replicated else ""
    return f"#sdy.sharding<@mesh, [{', '.join(dims)}]{extra}>"


def mesh_text(mesh: Mesh) -> str:
    axes = ", ".join(f'"{name}"={size}' for name, size in mesh.shape.items())
    return f"#sdy.mesh<[{axes}]>"


def logical_ids(mesh: Mesh) -> dict:
    """Device -> its logical id: its position in the mesh (the program's device assignment)."""
    return {device: position for position, device in enumerate(mesh.devices.flat)}


def assert_tiling_matches(tiling: sharding.Tiling, jax_sharding, shape, ids: dict) -> None:
    expected = {ids[device]: index for device, index in jax_sharding.devices_indices_map(shape).items()}
    x = np.arange(int(np.prod(shape))).reshape(shape)
    shards = sharding.split(x, tiling)
    assert sorted(shards) == sorted(expected)
    for device, index in expected.items():
        np.testing.assert_array_equal(shards[device], x[index])
    np.testing.assert_array_equal(sharding.assemble(shape, x.dtype, tiling, shards.__getitem__), x)


MESHES = {"1d": (8,), "2d": (4, 2), "3d": (2, 2, 2)}
SPECS = {
    "1d": [P(), P("a"), P(None, "a"), P("a", None)],
    "2d": [P("a", "b"), P("b", "a"), P(("a", "b")), P(("b", "a")), P(None, "b"), P("b"), P(None, ("b", "a"))],
    "3d": [P("a", ("c", "b")), P(("c", "a")), P(None, "b"), P("c", "a")],
}


@pytest.mark.parametrize("mesh_kind, spec", [(m, s) for m in MESHES for s in SPECS[m]],
                         ids=[f"{m}-{s}" for m in MESHES for s in SPECS[m]])
def test_shardy_tilings_match_named_shardings(mesh_kind, spec):
    names = "abc"[:len(MESHES[mesh_kind])]
    mesh = Mesh(np.array(CPUS).reshape(MESHES[mesh_kind]), tuple(names))
    meshes = {"mesh": sharding.parse_mesh(mesh_text(mesh))}
    shape = (8, 16)
    tiling = sharding.parse_sharding(sdy_text(spec, 2), meshes).tiling()
    named = NamedSharding(mesh, spec)
    assert_tiling_matches(tiling, named, shape, logical_ids(mesh))
    reported = xla_client.OpSharding()
    reported.ParseFromString(tiling.op_sharding(8))
    assert xla_client.HloSharding.from_proto(reported) == named._to_xla_hlo_sharding(2)


def test_mesh_device_ids_reorder_the_devices():
    """``device_ids=[...]``: the logical device at each mesh position."""
    meshes = {"mesh": sharding.parse_mesh('#sdy.mesh<["x"=2, "y"=2], device_ids=[3, 1, 2, 0]>')}
    tiling = sharding.parse_sharding('#sdy.sharding<@mesh, [{"x"}, {"y"}]>', meshes).tiling()
    assert {d: tiling.locate(d)[0] for d in range(4)} == {3: (0, 0), 1: (0, 1), 2: (1, 0), 0: (1, 1)}


@pytest.mark.parametrize("sub_axes, split_spec", [
    ('{"x":(1)2}, {"x":(2)2}', P("x0", "x1")),
    ('{"x":(2)2, "y"}, {"x":(1)2}', P(("x1", "y"), "x0")),
    ('{"y", "x":(1)2}, {}', P(("y", "x0"))),
])
def test_sub_axes_match_a_mesh_with_the_axis_split(sub_axes, split_spec):
    """``"x":(m)k`` on axis x=4 is axis x0 (m=1) or x1 (m=2) of a mesh where x is split in two."""
    meshes = {"mesh": sharding.parse_mesh('#sdy.mesh<["x"=4, "y"=2]>')}
    tiling = sharding.parse_sharding(f"#sdy.sharding<@mesh, [{sub_axes}]>", meshes).tiling()
    split_mesh = Mesh(np.array(CPUS).reshape(2, 2, 2), ("x0", "x1", "y"))
    assert_tiling_matches(tiling, NamedSharding(split_mesh, split_spec), (8, 4), logical_ids(split_mesh))


def test_replicated_open_and_prioritized_dimensions():
    meshes = {"mesh": sharding.parse_mesh('#sdy.mesh<["x"=4, "y"=2]>')}
    parsed = sharding.parse_sharding('#sdy.sharding<@mesh, [{"x", ?}p1, {?}], replicated={"y"}>', meshes)
    assert parsed.open_dims == (True, True)
    assert parsed.replicated == (sharding.AxisRef("y"),)
    mesh = Mesh(np.array(CPUS).reshape(4, 2), ("x", "y"))
    assert_tiling_matches(parsed.tiling(), NamedSharding(mesh, P("x")), (8, 2), logical_ids(mesh))


def test_maximal_sharding():
    meshes = {"maximal": sharding.parse_mesh("#sdy.mesh<[], device_ids=[5]>")}
    tiling = sharding.parse_sharding("#sdy.sharding<@maximal, [{}, {}]>", meshes).tiling()
    assert tiling.devices == [5]
    reported = xla_client.OpSharding()
    reported.ParseFromString(tiling.op_sharding(8))
    assert str(xla_client.HloSharding.from_proto(reported)) == "{maximal device=5}"


@pytest.mark.parametrize("text, spec", [
    ('#sdy.sharding<@mesh, [{"x"}, {}], unreduced={"y"}>', P("x", None, unreduced={"y"})),
    ('#sdy.sharding<@mesh, [{}, {}], unreduced={"z", "x"}>', P(None, None, unreduced={"x", "z"})),
    ('#sdy.sharding<@mesh, [{"y"}, {}], unreduced={"z"}>', P("y", None, unreduced={"z"})),
])
def test_unreduced_tiling_is_the_one_xla_reports(text, spec):
    """The replicas of a tile are ordered by their coordinate along the unreduced axes
    first: ``last_tile_dims={unreduced, replicated}``, as JAX's NamedSharding says."""
    meshes = {"mesh": sharding.parse_mesh('#sdy.mesh<["x"=2, "y"=2, "z"=2]>')}
    tiling = sharding.parse_sharding(text, meshes).tiling()
    reported = xla_client.OpSharding()
    reported.ParseFromString(tiling.op_sharding(8))
    mesh = Mesh(np.array(CPUS).reshape(2, 2, 2), ("x", "y", "z"), axis_types=(AxisType.Explicit,) * 3)
    named = NamedSharding(mesh, spec)
    assert xla_client.HloSharding.from_proto(reported) == named._to_xla_hlo_sharding(2)


def test_unreduced_sub_axes_are_refused():
    meshes = {"mesh": sharding.parse_mesh('#sdy.mesh<["x"=4]>')}
    with pytest.raises(ModuleError, match="unreduced sub-axis"):
        sharding.parse_sharding('#sdy.sharding<@mesh, [{}], unreduced={"x":(1)2}>', meshes).tiling()


def test_unknown_mesh_and_axis_are_errors():
    meshes = {"mesh": sharding.parse_mesh('#sdy.mesh<["x"=2]>')}
    with pytest.raises(ModuleError, match="names mesh @other"):
        sharding.parse_sharding('#sdy.sharding<@other, [{}]>', meshes)
    with pytest.raises(ModuleError, match="not in the mesh"):
        sharding.parse_sharding('#sdy.sharding<@mesh, [{"z"}]>', meshes).tiling()


HLO_SHARDINGS = [
    "{replicated}",
    "{devices=[4,2]<=[8]}",
    "{devices=[2,4]<=[4,2]T(1,0)}",
    "{devices=[2,1,4]<=[8] last_tile_dim_replicate}",
    "{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}",
    "{devices=[2,2,2]3,1,2,0,7,5,6,4 last_tile_dim_replicate}",
]


@pytest.mark.parametrize("text", HLO_SHARDINGS)
def test_hlo_tilings_match_gspmd_shardings(text):
    shape = (8, 4)
    tiling = sharding.hlo_tiling(text, 2, 8)
    gspmd = GSPMDSharding(CPUS, xla_client.HloSharding.from_string(text))
    assert_tiling_matches(tiling, gspmd, shape, {device: device.id for device in CPUS})


def test_hlo_maximal_sharding():
    tiling = sharding.hlo_tiling("{maximal device=3}", 2, 8)
    assert tiling.devices == [3] and tiling.tiles == (1, 1)


@pytest.mark.parametrize("shape", [(7, 5), (3, 1), (1, 2)])
def test_uneven_dimensions(shape):
    """A dimension of size d over n tiles: ceil(d / n) per tile, the last ones fewer or none."""
    meshes = {"mesh": sharding.parse_mesh('#sdy.mesh<["x"=4, "y"=2]>')}
    tiling = sharding.parse_sharding('#sdy.sharding<@mesh, [{"x"}, {"y"}]>', meshes).tiling()
    x = np.arange(int(np.prod(shape))).reshape(shape)
    shards = sharding.split(x, tiling)
    for device, shard in shards.items():
        (i, j), _ = tiling.locate(device)
        rows, columns = -(-shape[0] // 4), -(-shape[1] // 2)
        np.testing.assert_array_equal(shard, x[i * rows:(i + 1) * rows, j * columns:(j + 1) * columns])
    np.testing.assert_array_equal(sharding.assemble(shape, x.dtype, tiling, shards.__getitem__), x)


def test_assemble_checks_shard_shapes():
    tiling = sharding.hlo_tiling("{devices=[2,1]<=[2]}", 2, 2)
    with pytest.raises(ValueError, match=r"the shard of tile \(1, 0\) on device 1 has shape \(3, 2\), "
                                         r"expected \(2, 2\)"):
        sharding.assemble((4, 2), np.float32, tiling, lambda d: np.zeros((2 if d == 0 else 3, 2)))


def test_coarsened_tiles_keep_their_devices():
    """Merging tiles (the manual part of a tiling) makes the merged devices replicas."""
    tiling = sharding.hlo_tiling("{devices=[4,2]<=[8]}", 2, 8).coarsened((2, 1))
    assert tiling.tiles == (2, 1)
    assert sorted(int(d) for d in tiling.assignment[0, 0]) == [0, 1, 2, 3]
    assert sorted(int(d) for d in tiling.assignment[1, 0]) == [4, 5, 6, 7]


SDY_OPS = """
module @m attributes {mhlo.num_partitions = 2 : i32} {
  sdy.mesh @mesh = <["x"=2]>
  func.func @main(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
    %0 = sdy.all_gather [{"x"}] %a out_sharding=<@mesh, [{}]> : tensor<8xf32>
    %1 = sdy.all_slice [{"x"}] %0 out_sharding=<@mesh, [{"x"}]> : tensor<8xf32>
    %2 = sdy.reshard %1 <@mesh, [{}]> : tensor<8xf32>
    %3 = sdy.propagation_barrier %2 allowed_direction=FORWARD : tensor<8xf32>
    %4 = sdy.named_computation<"double">(%3) (%arg1: tensor<8xf32>) {
      %d = stablehlo.add %arg1, %arg1 : tensor<8xf32>
      sdy.return %d : tensor<8xf32>
    } : (tensor<8xf32>) -> tensor<8xf32>
    %5 = sdy.sharding_constraint %4 <@mesh, [{"x"}]> : tensor<8xf32>
    %6 = sdy.all_reduce {} %5 out_sharding=<@mesh, [{"x"}]> : tensor<8xf32>
    %c = sdy.constant dense<1.0> : tensor<8xf32>
    %7 = stablehlo.add %6, %c : tensor<8xf32>
    sdy.sharding_group %7 group_id=0 : tensor<8xf32>
    return %7 : tensor<8xf32>
  }
}"""


def test_sdy_ops_on_global_values():
    """Shardy's annotations and its resharding collectives keep a global value as it is;
    a named computation runs its body (openxla/shardy, sdy dialect)."""
    import stablehlo_interp as si

    x = np.arange(8, dtype=np.float32)
    (out,) = si.run(SDY_OPS, x)
    np.testing.assert_array_equal(out, x * 2 + 1)


# ------------------------------------------------------------- Shardy's propagation, isolated

UNREDUCED_ON_A_SHARDED_OPERAND = """
module @m attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=2]>
  func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>},
                         %arg1: tensor<16x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x", "y"}, {}]>})
      -> tensor<8x4xf32> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %1 = sdy.sharding_constraint %0 <@mesh, [{}, {}], unreduced={"x"}> : tensor<8x4xf32>
    return %1 : tensor<8x4xf32>
  }
}
"""

OPEN_RESULT = """
module @m attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4, "y"=2]>
  func.func public @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}) -> tensor<4x8xf32> {
    %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<8x4xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}
"""


def test_a_module_that_kills_shardys_propagation_is_an_error_not_a_crash():
    """Shardy's export stops the process on a check failure for this verified module (an
    unreduced result whose operands shard the contraction on other axes): its child
    process dies, this one raises, and the next module gets a fresh child."""
    import stablehlo_interp as si
    from stablehlo_interp.sharding import shardy

    with pytest.raises(ModuleError, match=r"killed the child process that runs it \(signal 6"):
        shardy.propagate(si.load(UNREDUCED_ON_A_SHARDED_OPERAND).module)
    found = shardy.propagate(si.load(OPEN_RESULT).module)["main"]
    assert found.results == ('#sdy.sharding<@mesh, [{"y"}, {"x"}]>',)
    assert found.ops[0].attributes == {"sdy.sharding": '#sdy.sharding_per_value<[<@mesh, [{"y"}, {"x"}]>]>'}
