"""``jax.experimental.custom_partitioning``: ``stablehlo.custom_call @CustomSPMDPartitioning``.

The op has no body. What it computes exists only as the per-device program that the
user's ``partition`` callback returns when XLA's SPMD partitioner asks it, with the
shardings it chose for the op's operands and result: the callback answers with that
program (JAX lowers its ``lower_fn`` on per-device shapes, collectives and all) and
the shardings it wants its operands and results in; the partitioner reshards the
operands to them, runs the program on every device, and reshards its results to the
op's.

The interpreter does the same with global values. At load time the builder asks
the module's ``partition_callback`` (``ModuleInfo``; the ``interp`` device hands
JAX's, device/custom_partitioning.py) with the shardings Shardy's propagation gives
the operands and results (ir/custom_partitioning.py writes them onto the op) and
gets the per-device program, loaded once, and the callback's shardings. A run cuts
each operand into the shards the callback asked for, runs the program on a grid of
one process per device (its collectives meet there) and puts each result together
from the devices' shards. The value is the one XLA's partitioned program computes;
only the reshards around it, which change no value, are not run as collectives.

Refused, with the reason, where the callback is not known (a module saved to a file
and run apart from the JAX process that registered it), in modules without Shardy
meshes, and for shards of uneven size (XLA pads them).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.grid import Grid
from ..engine.plan import Function
from ..engine.registry import custom_call
from ..ir.custom_partitioning import OPERAND_SHARDINGS, RESULT_SHARDINGS, TARGET
from ..ir.types import TensorType
from ..sharding import tiling as sharding


@dataclass(frozen=True)
class Partitioned:
    """A partition callback's answer for one op: the per-device program's entry
    ``function`` (a plan, with its ``program`` to keep it alive) and the tiling it
    wants each operand and result in."""

    function: Function
    program: object
    operand_tilings: tuple
    result_tilings: tuple


@custom_call(TARGET, variadic=True, execution=True)
def custom_partitioning(info):
    """Each device's program on its shards (module docstring)."""
    module = info.module
    key = info.attr("backend_config")
    if module is None or OPERAND_SHARDINGS not in info.attributes:
        raise info.unsupported("custom partitioning needs the shardings of its operands and results, which "
                               "Shardy's propagation gives in a module with Shardy meshes; this module has none")
    num_devices = module.num_partitions
    operand_tilings = [s.tiling() for s in sharding.parse_sharding_per_value(info.attr(OPERAND_SHARDINGS),
                                                                              module.meshes)]
    result_tilings = [s.tiling() for s in sharding.parse_sharding_per_value(info.attr(RESULT_SHARDINGS),
                                                                             module.meshes)]
    partition = module.partition_callback
    try:
        partitioned = partition and partition(key, info.operand_types, operand_tilings, info.result_types,
                                              result_tilings, num_devices)
    except Exception as error:
        raise info.error(f"the partition callback #{key} raised {type(error).__name__}: {error}") from error
    if not partitioned:
        raise info.unsupported(
            f"@{TARGET} #{key} (jax.experimental.custom_partitioning): what it computes is the per-device program its partition callback "
            "returns, a Python function that jax.experimental.custom_partitioning registers in the JAX process "
            "that lowered the module. It is not known here: the module was saved and loaded apart from that "
            "process, or loaded other than by the interp device (jax.jit(f) on interp devices asks it), or "
            "its jitted function is gone")
    operand_tilings, result_tilings = partitioned.operand_tilings, partitioned.result_tilings
    _check(info, partitioned, num_devices)

    def run(execution, *operands):   # (partitioned keeps the per-device program alive)
        if execution.in_grid:
            raise info.unsupported("custom partitioning inside manual code (a shard_map over some of the "
                                   "mesh's axes) is not supported")
        shards = [sharding.split(operand, tiling) for operand, tiling in zip(operands, operand_tilings)]
        region = partitioned.function.region
        per_device = Grid(1, num_devices).run(lambda process: execution.for_process(process).run_region(
            region, [shard[process.id] for shard in shards]))
        return [sharding.assemble(t.shape, t.dtype, tiling, lambda d, j=j: per_device[d][j])
                for j, (t, tiling) in enumerate(zip(info.result_types, result_tilings))]

    return run


def _check(info, partitioned: Partitioned, num_devices: int) -> None:
    """The callback's program takes and gives each device's shards: refuse what it
    cannot (uneven shards, devices without one) at load time."""
    function = partitioned.function
    for what, types, tilings, local_types in (
            ("operand", info.operand_types, partitioned.operand_tilings, function.arg_types),
            ("result", info.result_types, partitioned.result_tilings, function.result_types)):
        if len(local_types) != len(types):
            raise info.error(f"the partition callback's program has {len(local_types)} {what}(s), the op "
                             f"{len(types)}")
        for index, (value_type, tiling, local) in enumerate(zip(types, tilings, local_types)):
            if not isinstance(value_type, TensorType):
                raise info.unsupported(f"{what} {index} is a {value_type}, not a tensor")
            if sorted(set(tiling.devices)) != list(range(num_devices)):
                raise info.unsupported(f"the partition callback's sharding of {what} {index} leaves devices "
                                       f"without a shard (devices {sorted(set(tiling.devices))} of {num_devices})")
            uneven = [size for size, tiles in zip(value_type.shape, tiling.tiles) if size % tiles]
            if uneven:
                raise info.unsupported(f"{what} {index} ({value_type}) is cut into {list(tiling.tiles)} tiles: "
                                       "shards of uneven size, which XLA pads, are not supported")
            shard = tuple(size // tiles for size, tiles in zip(value_type.shape, tiling.tiles))
            if tuple(local.shape) != shard or local.dtype != value_type.dtype:
                raise info.error(f"the partition callback's program takes or gives {local} as {what} {index}, "
                                 f"but its shard of {value_type} is {value_type.dtype}{list(shard)}")
