"""Shardy ops (openxla/shardy, sdy dialect) and the borders of manual code.

The interpreter holds global values, so the ops that only say how a value is
(or should be) sharded are identities on it: ``sdy.sharding_constraint``,
``sdy.reshard``, ``sdy.propagation_barrier``, ``sdy.data_flow_edge`` and the
collectives Shardy inserts after propagation (``sdy.all_gather``,
``sdy.all_slice``, ``sdy.all_reduce``, ``sdy.all_to_all``,
``sdy.collective_permute``, ``sdy.reduce_scatter``: they change a value's
sharding, not the value). ``sdy.sharding_group`` has no result.
``sdy.named_computation`` runs its body.

Manual code runs once per device, on that device's local data, as a process
grid with real collectives (process_grid.py):

* ``sdy.manual_computation`` (``jax.shard_map``): each operand is cut along the
  manual axes of its in-sharding (the free axes stay global), the body runs
  once per device of the mesh as process ``d`` (the logical device id, which is
  what ``partition_id`` and the collectives' device ids mean), and each result
  is put together from the per-device results along the manual axes of its
  out-sharding. Outside a grid it starts one; inside one (nested manual code)
  the process cuts its own part and gathers from the processes that differ
  from it only along the new manual axes.
* ``SPMDFullToShardShape`` / ``SPMDShardToFullShape`` (the same borders in
  modules lowered without Shardy, with HLO shardings): every process runs the
  whole program on global values; the first cuts the process's tile (the
  operand's sharding comes from the ``Sharding`` custom call before it), the
  second gathers the tiles of all processes.
"""

from __future__ import annotations

from ..engine.grid import Grid
from ..engine.registry import custom_call, op
from ..sharding.manual_borders import OPERAND_SHARDING
from ..ir.types import TOKEN, TensorType
from ..sharding import tiling as sharding
from ..sharding import unreduced


@op("sdy.sharding_constraint", "sdy.reshard", "sdy.propagation_barrier", "sdy.data_flow_edge",
    "sdy.all_gather", "sdy.all_slice", "sdy.all_reduce", "sdy.all_to_all", "sdy.collective_permute",
    "sdy.reduce_scatter")
def identity(info):
    return lambda value: value


@op("sdy.sharding_group", variadic=True)
def sharding_group(info):
    return lambda value: ()


@op("sdy.named_computation", variadic=True)
def named_computation(info):
    return lambda regions, *operands: regions[0](*operands)


@op("sdy.constant")
def constant(info):
    value = info.attr("value")
    return lambda: value


# ------------------------------------------------------------------------ manual computations


def _process_grid(module, mesh: sharding.Mesh) -> tuple:
    """(num_replicas, num_partitions) of the processes running a mesh's devices: the
    module's grid when it has as many processes as the mesh devices."""
    if module is not None and module.num_replicas * module.num_partitions == mesh.size:
        return module.num_replicas, module.num_partitions
    return 1, mesh.size


def _local(value, tiling: sharding.Tiling, device: int):
    """The device's part of an operand (of its own partial, when unreduced along manual axes);
    a token passes as it is."""
    if value is TOKEN:
        return value
    local = unreduced.held_by(value, tiling, device)
    if local is None:
        raise ValueError(f"device {device} holds no part of the operand (devices {tiling.devices})")
    return local


@op("sdy.manual_computation", variadic=True, execution=True)
def manual_computation(info):
    """The per-device results of a run whose caller asks for them
    (``RunContext.local_results``: {id(global result): (global result, tiling, [the
    result of each device])}, device/placement.py) are recorded: a result declared
    replicated along an axis may differ per device (``shard_map(...,
    check_vma=False)``), and each device keeps its own, as on XLA."""
    meshes = info.module.meshes if info.module is not None else {}
    manual_axes = sharding.parse_manual_axes(info.attr("manual_axes"))
    ins = sharding.parse_sharding_per_value(info.attr("in_shardings"), meshes)
    outs = sharding.parse_sharding_per_value(info.attr("out_shardings"), meshes)
    if not ins and not outs:
        raise info.unsupported("a manual computation without operands or results has no mesh")
    mesh = (ins or outs)[0].mesh
    in_tilings = [s.restricted_to(manual_axes).tiling() for s in ins]
    out_tilings = [s.restricted_to(manual_axes).tiling() for s in outs]
    result_types = info.result_types
    replicas, partitions = _process_grid(info.module, mesh)

    def on_grid(execution, regions, *operands):
        """Outside a grid: one process per device of the mesh."""
        def per_device(process):
            local = [_local(x, t, process.id) for x, t in zip(operands, in_tilings)]
            return regions[0].for_process(process)(*local)

        per_process = Grid(replicas, partitions).run(per_device)
        outputs = [unreduced.assemble(t.shape, t.dtype, tiling, lambda d, j=j: per_process[d][j])
                   if isinstance(t, TensorType) else TOKEN
                   for j, (t, tiling) in enumerate(zip(result_types, out_tilings))]
        if not execution.context.partials:   # a global view: the sums
            outputs = [unreduced.retarget(output, ()) for output in outputs]
        recorded = execution.context.local_results
        if recorded is not None:
            for j, (output, tiling) in enumerate(zip(outputs, out_tilings)):
                if output is not TOKEN and not tiling.unreduced:
                    recorded[id(output)] = (output, tiling, [results[j] for results in per_process])
        return outputs

    def in_process(execution, regions, *operands):
        """Inside a grid: this process's part, then a gather from its peers."""
        process = execution.process
        local = [_local(x, t, process.id) for x, t in zip(operands, in_tilings)]
        results = regions[0](*local)
        everyone = process.grid.exchange(process, tuple(range(process.grid.size)), results, info.name)
        outputs = []
        for j, (t, tiling) in enumerate(zip(result_types, out_tilings)):
            if not isinstance(t, TensorType):
                outputs.append(TOKEN)
                continue
            if tiling.unreduced:
                raise NotImplementedError("an unreduced result of nested manual code is not supported")
            _, replica = tiling.locate(process.id)
            outputs.append(sharding.assemble(t.shape, t.dtype, tiling, lambda d, j=j: everyone[d][j], replica))
        return outputs

    return lambda execution, regions, *operands: (in_process if execution.in_grid else on_grid)(
        execution, regions, *operands)


def _split_ratio(info, local_type, global_type) -> tuple:
    ratio = []
    for local, full in zip(local_type.shape, global_type.shape):
        if local == 0 or full % local:
            raise info.unsupported(f"{local_type} is not an even part of {global_type}")
        ratio.append(full // local)
    return tuple(ratio)


class _TilingPerGridSize:
    """An HLO sharding's tiling cut down to the tiles of a manual border, per grid size."""

    def __init__(self, text: str, tiles: tuple):
        self.text, self.tiles = text, tiles
        self.cache: dict[int, sharding.Tiling] = {}

    def __call__(self, size: int) -> sharding.Tiling:
        if size not in self.cache:
            tiling = sharding.hlo_tiling(self.text, len(self.tiles), size)
            if tiling.tiles != self.tiles:
                tiling = tiling.coarsened(self.tiles)
            self.cache[size] = tiling
        return self.cache[size]


def _needs_grid(info):
    return ValueError(f"{info.attr('call_target_name')} changes the shape from {info.operand_types[0]} to "
                      f"{info.result_type}: it runs in a process grid (run the program with "
                      "Program.run_grid, or Program.run with num_partitions > 1)")


@custom_call("SPMDFullToShardShape", execution=True)
def full_to_shard(info):
    """The process's tile of the global operand."""
    operand_type, result_type = info.operand_types[0], info.result_type
    if operand_type.shape == result_type.shape:
        return lambda execution, value: value
    text = info.attributes.get(OPERAND_SHARDING)
    if text is None:
        raise info.unsupported("the sharding of the operand is unknown (it must come from a Sharding custom call)")
    tiling = _TilingPerGridSize(text, _split_ratio(info, result_type, operand_type))

    def run(execution, value):
        if not execution.in_grid:
            raise _needs_grid(info)
        process = execution.process
        return _local(value, tiling(process.grid.size), process.id)

    return run


@custom_call("SPMDShardToFullShape", execution=True)
def shard_to_full(info):
    """The global value from the tiles of every process (``mhlo.sharding``: the result's)."""
    operand_type, result_type = info.operand_types[0], info.result_type
    if operand_type.shape == result_type.shape:
        return lambda execution, value: value
    tiling = _TilingPerGridSize(info.attr("mhlo.sharding"), _split_ratio(info, operand_type, result_type))

    def run(execution, value):
        if not execution.in_grid:
            raise _needs_grid(info)
        process = execution.process
        everyone = process.grid.exchange(process, tuple(range(process.grid.size)), value, info.name)
        tiles = tiling(process.grid.size)
        _, replica = tiles.locate(process.id)
        return sharding.assemble(result_type.shape, result_type.dtype, tiles, everyone.__getitem__, replica)

    return run
