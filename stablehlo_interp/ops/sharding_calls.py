"""Custom calls about shardings and placement: the ones that only annotate values
(shardings, memory placement, DCE sinks, scheduling), and JAX's custom partitioning.

The interpreter computes on global arrays in one process, so each of these
returns its operands unchanged, as XLA does when it does not partition
(XLA's ShardingRemover forwards the operand of ``Sharding``,
``SPMDFullToShardShape``, ``SPMDShardToFullShape``, ``xla.sdy.ShardingGroup``
and ``xla.sdy.FuncResultSharding``):

* ``Sharding`` (``mhlo.sharding`` attribute): ``with_sharding_constraint`` and
  sharded arguments/results when JAX lowers without Shardy;
* ``xla.sdy.GlobalToLocalShape`` / ``xla.sdy.LocalToGlobalShape``, the Shardy
  round-trip forms of the borders of a ``shard_map`` body: identities when every
  shard is the whole array (a mesh of one device). (``SPMDFullToShardShape`` and
  ``SPMDShardToFullShape`` run per process: ops/sdy.py.)
* ``xla.sdy.FuncResultSharding``, ``xla.sdy.ShardingGroup``: Shardy's
  annotations in modules exported through HLO;
* ``annotate_device_placement`` (``_xla_buffer_placement`` frontend attribute),
  ``MoveToHost`` / ``MoveToDevice``: memory kinds (``pinned_host``, ``device``);
* ``LayoutConstraint`` (``with_sharding_constraint(x, Format(layout, sharding))``):
  the result takes the layout the ``result_layouts`` attribute names, a physical
  matter; its value is the operand (the interpreter computes on logical arrays;
  the device reports the layout, device/layouts.py);
* ``dce_sink`` (``lax.dce_sink(x, prevent_mlir_dce=True)``): keeps a value alive,
  has no results;
* ``control_dep`` (``jax.experimental.control_deps.control_dep(src, dst)``): asks
  XLA's scheduler to run the op making ``src`` before the one making ``dst``; no
  results, and no value depends on it. The interpreter runs ops one at a time in
  program order, where both operands exist before the call;
* ``stablehlo_interp.inspect_sharding``: ``jax.debug.inspect_array_sharding``
  on the interp device, answered when the device compiles the program
  (device/inspect_sharding.py).

**JAX's custom partitioning** (``stablehlo.custom_call @CustomSPMDPartitioning``).
The op has no body. What it computes exists only as the per-device program that the
user's ``partition`` callback returns when XLA's SPMD partitioner asks it, with the
shardings it chose for the op's operands and result: the callback answers with that
program (JAX lowers its ``lower_fn`` on per-device shapes, collectives and all) and
the shardings it wants its operands and results in; the partitioner reshards the
operands to them, runs the program on every device, and reshards its results to the
op's.

The interpreter does the same with global values. At load time the builder asks
the module's ``partition_callback`` (``ModuleInfo``; JAX's for a program lowered in
this process, sharding/custom_partitioning.py) with the shardings Shardy's propagation gives
the operands and results (sharding/custom_partitioning.py writes them onto the op) and
gets the per-device program, loaded once, and the callback's shardings. In the
global program, a run cuts each operand into the shards the callback asked for, runs
the program on a grid of one process per device (its collectives meet there) and
puts each result together from the devices' shards. In the per-device program Shardy's
partitioner makes of the module (sharding/per_device.py), the op keeps its global types
in attributes and each process runs it on its own shards: each operand is resharded
to the callback's sharding, the program runs in that process (its collectives meet
the other processes'), and each result is resharded to the op's. The value is the one
XLA's partitioned program computes; the reshards around it, which change no value,
are exchanges of whole values between the processes, not collectives of the program.

Refused, with the reason, where the callback is not known (a module saved to a file
and run apart from the JAX process that registered it), in modules without Shardy
meshes, for shards of uneven size (XLA pads them), and inside manual code
(``shard_map`` over some of the mesh's axes).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.grid import Grid
from ..engine.plan import Function
from ..engine.registry import custom_call
from ..sharding.custom_partitioning import OPERAND_SHARDINGS, OPERAND_TYPES, RESULT_SHARDINGS, RESULT_TYPES, TARGET
from ..ir.types import TensorType
from ..sharding import tiling as sharding



@custom_call("Sharding", "xla.sdy.GlobalToLocalShape", "xla.sdy.LocalToGlobalShape", "xla.sdy.FuncResultSharding",
             "xla.sdy.ShardingGroup", "annotate_device_placement", "MoveToHost", "MoveToDevice", "LayoutConstraint", "dce_sink",
             "control_dep", "stablehlo_interp.inspect_sharding", variadic=True)
def forward(info):
    """Result i is operand i (no results: nothing to do)."""
    target = info.attr("call_target_name")
    operands, results = info.operand_types, info.result_types
    if len(results) != len(operands) and results:
        raise info.error(f"{target}: {len(operands)} operands but {len(results)} results")
    for index, (operand, result) in enumerate(zip(operands, results)):
        if operand != result:
            raise info.unsupported(
                f"{target}: operand {index} is {operand} but result {index} is {result}; a shard shape "
                "other than the global shape needs one program per device (lower for a single device)")
    return lambda *values: values[:len(results)]


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
    """Each device's program on its shards (module docstring). In the global program the
    op's operands and results are global values; in the per-device program Shardy's
    partitioner makes of it they are each device's shards (in the shardings Shardy's
    propagation gave them), and the op is run by each process of the grid."""
    module = info.module
    key = info.attr("backend_config")
    if module is None or OPERAND_SHARDINGS not in info.attributes:
        raise info.unsupported("custom partitioning needs the shardings of its operands and results, which "
                               "Shardy's propagation gives in a module with Shardy meshes; this module has none")
    num_devices = module.num_partitions
    operand_types, result_types = info.attr(OPERAND_TYPES), info.attr(RESULT_TYPES)
    given_operands = _tilings(info, OPERAND_SHARDINGS)
    given_results = _tilings(info, RESULT_SHARDINGS)
    partition = module.partition_callback
    try:
        partitioned = partition and partition(key, operand_types, given_operands, result_types, given_results,
                                              num_devices)
    except Exception as error:
        raise info.error(f"the partition callback #{key} raised {type(error).__name__}: {error}") from error
    if not partitioned:
        raise info.unsupported(
            f"@{TARGET} #{key} (jax.experimental.custom_partitioning): what it computes is the per-device program "
            "its partition callback returns, a Python function that jax.experimental.custom_partitioning "
            "registers in the JAX process that lowered the module. It is not known here: the module was saved and "
            "loaded apart from that process, or loaded other than by the interp device (jax.jit(f) on interp "
            "devices asks it; si.run, si.load and the tools do not), or its jitted function is gone")
    _check(info, "operand", operand_types, partitioned.operand_tilings, partitioned.function.arg_types, num_devices)
    _check(info, "result", result_types, partitioned.result_tilings, partitioned.function.result_types,
           num_devices)
    global_run = _global_runner(info, partitioned, num_devices) \
        if tuple(info.operand_types) == tuple(operand_types) and tuple(info.result_types) == tuple(result_types) \
        else None
    local_problem = _local_problem(info, operand_types, given_operands, result_types, given_results)
    per_device_run = None if local_problem else _per_device_runner(
        info, partitioned, num_devices, operand_types, given_operands, result_types, given_results)
    if global_run is None and per_device_run is None:
        raise info.unsupported(local_problem)

    def run(execution, *operands):
        if execution.in_grid:
            if per_device_run is None:
                raise info.unsupported(f"in a grid of processes, the op's operands are not each device's shards "
                                       f"(custom partitioning inside manual code is not supported): {local_problem}")
            return per_device_run(execution, *operands)
        if global_run is None:
            raise info.error("the op of a per-device program runs in a grid of its devices")
        return global_run(execution, *operands)

    return run


def _local_problem(info, operand_types, given_operands, result_types, given_results) -> str | None:
    """Why the op's own types are not each device's shards of its global operands and
    results in the shardings Shardy's propagation gave them (None: they are)."""
    for what, types, tilings, local_types in (("operand", operand_types, given_operands, info.operand_types),
                                              ("result", result_types, given_results, info.result_types)):
        for index, (value_type, tiling, local) in enumerate(zip(types, tilings, local_types)):
            shard = _shard_shape(value_type, tiling)
            if shard is None:
                return _uneven(what, index, value_type, tiling)
            if tuple(local.shape) != shard:
                return (f"{what} {index} is {local}, not its shard of {value_type} in the sharding Shardy's "
                        "propagation gave it")
    return None


def _tilings(info, attribute: str) -> list:
    return [s.tiling() for s in sharding.parse_sharding_per_value(info.attr(attribute), {})]


def _global_runner(info, partitioned: Partitioned, num_devices: int):
    """Global operands in, global results out: a grid of the devices runs the program."""
    operand_tilings, result_tilings = partitioned.operand_tilings, partitioned.result_tilings

    def run(execution, *operands):   # (partitioned keeps the per-device program alive)
        shards = [sharding.split(operand, tiling) for operand, tiling in zip(operands, operand_tilings)]
        region = partitioned.function.region
        per_device = Grid(1, num_devices).run(lambda process: execution.for_process(process).run_region(
            region, [shard[process.id] for shard in shards]))
        return [sharding.assemble(t.shape, t.dtype, tiling, lambda d, j=j: per_device[d][j])
                for j, (t, tiling) in enumerate(zip(info.result_types, result_tilings))]

    return run


def _per_device_runner(info, partitioned: Partitioned, num_devices: int, operand_types, given_operands,
                       result_types, given_results):
    """A process's shards in, its shards out: each operand resharded from the sharding it
    has to the one the callback wants, the program run by the process, each result
    resharded from the callback's sharding to the op's."""
    def run(execution, *operands):
        process = execution.process
        if process.grid.size != num_devices:
            raise info.error(f"the per-device op runs in a grid of {process.grid.size} process(es), its program "
                             f"partitions over {num_devices} devices")
        local = [_resharded(info, process, value, value_type, have, want) for value, value_type, have, want
                 in zip(operands, operand_types, given_operands, partitioned.operand_tilings)]
        results = execution.run_region(partitioned.function.region, local)
        return [_resharded(info, process, value, value_type, have, want) for value, value_type, have, want
                in zip(results, result_types, partitioned.result_tilings, given_results)]

    return run


def _resharded(info, process, value, value_type, have, want):
    """The process's shard of a value in the tiling ``want``, from its shard in ``have``:
    the value put together from every process's shard, then cut."""
    if have.same_placement(want):
        return value
    everyone = process.grid.exchange(process, tuple(range(process.grid.size)), value, info.name)
    whole = sharding.assemble(value_type.shape, value_type.dtype, have, everyone.__getitem__)
    tile, _ = want.locate(process.id)
    return whole[want.slices(value_type.shape, tile)]


def _shard_shape(value_type, tiling) -> tuple | None:
    """Each device's shape of a value in ``tiling`` (None: shards of uneven size)."""
    if any(size % tiles for size, tiles in zip(value_type.shape, tiling.tiles)):
        return None
    return tuple(size // tiles for size, tiles in zip(value_type.shape, tiling.tiles))


def _uneven(what: str, index: int, value_type, tiling) -> str:
    return (f"{what} {index} ({value_type}) is cut into {list(tiling.tiles)} tiles: shards of uneven size, "
            "which XLA pads, are not supported")


def _check(info, what: str, types, tilings, local_types, num_devices: int) -> None:
    """The callback's program takes (or gives) each device's shard of each operand (or
    result) in the callback's sharding: refuse what it cannot (uneven shards, devices
    without one) at load time."""
    if len(local_types) != len(types):
        raise info.error(f"the partition callback's program has {len(local_types)} {what}(s), the op {len(types)}")
    for index, (value_type, tiling, local) in enumerate(zip(types, tilings, local_types)):
        if not isinstance(value_type, TensorType):
            raise info.unsupported(f"{what} {index} is a {value_type}, not a tensor")
        if sorted(set(tiling.devices)) != list(range(num_devices)):
            raise info.unsupported(f"the partition callback's sharding of {what} {index} leaves devices without a "
                                   f"shard (devices {sorted(set(tiling.devices))} of {num_devices})")
        shard = _shard_shape(value_type, tiling)
        if shard is None:
            raise info.unsupported(_uneven(what, index, value_type, tiling))
        if tuple(local.shape) != shard or local.dtype != value_type.dtype:
            raise info.error(f"the partition callback's program takes or gives {local} as {what} {index}, but its "
                             f"shard of {value_type} is {value_type.dtype}{list(shard)}")
