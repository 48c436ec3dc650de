"""Collective ops and process ids (spec: all_gather, all_reduce, reduce_scatter,
all_to_all, collective_permute, collective_broadcast, replica_id, partition_id),
and ``interpreter.run_parallel``, which runs a grid of processes.

Each op runs in a process of a :class:`~stablehlo_interp.engine.grid.Grid`
(the one process of a 1 x 1 grid outside any), which its runner finds on the
Execution it is given. It splits the grid into
process groups by one of the spec's strategies (Execution, "Collective ops"):

* ``cross_replica(replica_groups)``: each group of replica ids, in every partition;
* ``cross_partition(partition_groups)``: each group of partition ids, in every replica;
* ``cross_replica_and_partition(replica_groups)``: each group of replica ids
  across all partitions;
* ``flattened_ids(groups)``: groups of ``replica_id * num_partitions + partition_id``.

The op picks its strategy from ``channel_handle`` (channel id > 0 or not) and
``use_global_device_ids``. ``replica_groups`` padded with -1 (ragged groups)
drop the padding; an empty ``replica_groups`` is one group of every id (XLA's
convention). A process that is in no group forms a group of its own. The
processes of a group exchange their operands through the grid; each then
computes its own result from them.
"""

from __future__ import annotations

import numpy as np

from ..engine import registry
from ..engine.grid import Grid
from ..engine.hostio import HostQueues
from ..engine.registry import op
from ..engine.regions import is_elementwise

CROSS_REPLICA, CROSS_PARTITION, CROSS_REPLICA_AND_PARTITION, FLATTENED_IDS = (
    "cross_replica", "cross_partition", "cross_replica_and_partition", "flattened_ids")


def _id_groups(attribute) -> list:
    """``replica_groups`` (or ``source_target_pairs``) as lists of ids, -1 padding dropped."""
    array = np.asarray(attribute if attribute is not None else np.zeros((0, 0)), dtype=np.int64)
    return [[int(i) for i in row if i >= 0] for row in array.reshape(len(array), -1)] if array.size else []


def _id_count(strategy: str, grid: Grid) -> tuple[int, str]:
    """How many ids a group of the strategy chooses from, and what they name (spec:
    Execution; ``0 <= replica_groups < N``): partitions for cross_partition, processes
    for flattened_ids, replicas otherwise."""
    if strategy == CROSS_PARTITION:
        return grid.num_partitions, "partition"
    if strategy == FLATTENED_IDS:
        return grid.size, "process"
    return grid.num_replicas, "replica"


def process_groups(strategy: str, groups: list, grid: Grid) -> list:
    """The process groups (lists of flattened ids) of a strategy (spec: Execution)."""
    replicas, partitions = grid.num_replicas, grid.num_partitions
    if not groups:
        groups = [list(range(_id_count(strategy, grid)[0]))]
    if strategy == CROSS_REPLICA:
        return [[r * partitions + p for r in group] for group in groups for p in range(partitions)]
    if strategy == CROSS_PARTITION:
        return [[r * partitions + p for p in group] for group in groups for r in range(replicas)]
    if strategy == CROSS_REPLICA_AND_PARTITION:
        return [[r * partitions + p for p in range(partitions) for r in group] for group in groups]
    return [list(group) for group in groups]


class _Groups:
    """The group of each process for one op, per grid shape (computed once per shape)."""

    def __init__(self, info, strategy: str, attribute: str = "replica_groups"):
        self.info = info
        self.strategy = strategy
        self.ids = _id_groups(info.attributes.get(attribute))
        self._by_shape: dict = {}

    def all(self, grid: Grid) -> list:
        count, kind = _id_count(self.strategy, grid)
        for group in self.ids:
            for member in group:
                if member >= count:   # (_id_groups drops the negative ids: padding)
                    raise self.info.error(f"process group {group} names {kind} {member}, but the grid has "
                                          f"{grid.num_replicas} replica(s) x {grid.num_partitions} partition(s)")
        return process_groups(self.strategy, self.ids, grid)

    def of(self, process) -> tuple:
        grid = process.grid
        shape = (grid.num_replicas, grid.num_partitions)
        table = self._by_shape.get(shape)
        if table is None:
            table = {}
            for group in self.all(grid):
                for member in group:
                    if member in table:
                        raise self.info.error(f"process {member} is in two process groups")
                    table[member] = tuple(group)
            self._by_shape[shape] = table
        return table.get(process.id, (process.id,))


def _channel_id(info) -> int:
    channel = info.attributes.get("channel_handle")
    return channel.handle if channel is not None else 0


def _reducing_strategy(info) -> str:
    """all_gather, all_reduce, reduce_scatter: by channel id and use_global_device_ids."""
    has_channel = _channel_id(info) > 0
    if info.attributes.get("use_global_device_ids"):
        if not has_channel:
            raise info.error("use_global_device_ids needs a channel id > 0 (spec: C5)")
        return FLATTENED_IDS
    return CROSS_REPLICA_AND_PARTITION if has_channel else CROSS_REPLICA


def _pairwise_strategy(info) -> str:
    """all_to_all, collective_permute, collective_broadcast: by channel id."""
    return CROSS_PARTITION if _channel_id(info) > 0 else CROSS_REPLICA


def _exchange(info, groups: _Groups, process, payload):
    """``(its group, the payloads of the group in order)`` for ``process``."""
    group = groups.of(process)
    return group, process.grid.exchange(process, group, payload, info.name)


# ------------------------------------------------------------------------------ reductions


def _combiner(info):
    """``combine(bound computation, values, result type)``: ``computation`` applied along a
    binary tree whose in-order leaves are ``values`` (spec: all_reduce), after converting
    them to the computation's element type. The tree leans left, ``((v0 + v1) + v2) ...``,
    the order in which XLA's CPU backend combines."""
    region = info.regions[0]
    body_dtype = region.arg_types[0].dtype
    vectorized = is_elementwise(region)

    def combine(bound, values, result_type):
        values = [np.asarray(v).astype(body_dtype, copy=False) for v in values]
        if vectorized:
            body = bound.as_vectorized()
            combined = values[0]
            for value in values[1:]:
                (combined,) = body(combined, value)
        else:
            combined = np.empty(values[0].shape, body_dtype)
            for index in np.ndindex(*values[0].shape):
                accumulator = values[0][index]
                for value in values[1:]:
                    (accumulator,) = bound(np.asarray(accumulator), np.asarray(value[index]))
                combined[index] = accumulator
        return np.asarray(combined).astype(result_type.dtype, copy=False)

    return combine


@op("stablehlo.all_reduce", variadic=True, execution=True)
def all_reduce(info):
    """Each result: the group's operands combined by ``computation``."""
    groups = _Groups(info, _reducing_strategy(info))
    combine = _combiner(info)

    def run(execution, regions, *operands):
        _, values = _exchange(info, groups, execution.process, operands)
        return [combine(regions[0], [v[i] for v in values], t) for i, t in enumerate(info.result_types)]

    return run


@op("stablehlo.cross-replica-sum", execution=True)
def cross_replica_sum(info):
    """all_reduce with an add computation across ``replica_groups`` of replicas
    (an op kept for HLO compatibility, not in the spec)."""
    groups = _Groups(info, CROSS_REPLICA)
    add = registry.op_builder("stablehlo.add")(info)

    def run(execution, operand):
        _, values = _exchange(info, groups, execution.process, (operand,))
        total = values[0][0]
        for (value,) in values[1:]:  # left-leaning, like all_reduce
            total = add(total, value)
        return np.asarray(total)

    return run


@op("stablehlo.reduce_scatter", execution=True)
def reduce_scatter(info):
    """all_reduce, then the process's part of the result along ``scatter_dimension``."""
    groups = _Groups(info, _reducing_strategy(info))
    combine = _combiner(info)
    dimension = info.attr("scatter_dimension")

    def run(execution, regions, operand):
        group, values = _exchange(info, groups, execution.process, operand)
        reduced = combine(regions[0], values, info.result_type)
        return np.split(reduced, len(group), axis=dimension)[group.index(execution.process.id)]

    return run


# ----------------------------------------------------------------------------- data movement


@op("stablehlo.all_gather", variadic=True, execution=True)
def all_gather(info):
    """Each result: the group's operands concatenated along ``all_gather_dim``."""
    groups = _Groups(info, _reducing_strategy(info))
    dimension = info.attr("all_gather_dim")

    def run(execution, *operands):
        _, values = _exchange(info, groups, execution.process, operands)
        return [np.concatenate([v[i] for v in values], axis=dimension) for i in range(len(operands))]

    return run


@op("stablehlo.all_to_all", variadic=True, execution=True)
def all_to_all(info):
    """Each operand split in ``split_count`` parts along ``split_dimension``; part i goes
    to the i-th process of the group; each result concatenates the parts received
    along ``concat_dimension``."""
    groups = _Groups(info, _pairwise_strategy(info))
    split_dimension, concat_dimension = info.attr("split_dimension"), info.attr("concat_dimension")
    split_count = info.attr("split_count")

    def run(execution, *operands):
        parts = [np.split(np.asarray(x), split_count, axis=split_dimension) for x in operands]
        process = execution.process
        group, values = _exchange(info, groups, process, parts)
        if len(group) != split_count:
            raise ValueError(f"{process} is in a group of {len(group)} processes {list(group)}, "
                             f"but split_count is {split_count}")
        receiver = group.index(process.id)
        return [np.concatenate([sender[i][receiver] for sender in values], axis=concat_dimension)
                for i in range(len(operands))]

    return run


def _domain(process, strategy: str) -> tuple:
    """The processes a pairwise op can reach: the partitions of its replica (cross_partition)
    or the replicas of its partition (cross_replica)."""
    grid = process.grid
    if strategy == CROSS_PARTITION:
        return tuple(process.replica_id * grid.num_partitions + p for p in range(grid.num_partitions))
    return tuple(r * grid.num_partitions + process.partition_id for r in range(grid.num_replicas))


def _zeros_like(ttype):
    return np.zeros(ttype.shape, ttype.dtype)


@op("stablehlo.collective_permute", execution=True)
def collective_permute(info):
    """The operand of the process whose pair targets this one; zeros if none does."""
    strategy = _pairwise_strategy(info)
    pairs = _Groups(info, strategy, "source_target_pairs")

    def run(execution, operand):
        process = execution.process
        domain = _domain(process, strategy)
        values = dict(zip(domain, process.grid.exchange(process, domain, operand, info.name)))
        for source, target in pairs.all(process.grid):
            if target == process.id:
                return values[source]
        return _zeros_like(info.result_type)

    return run


@op("stablehlo.collective_broadcast", execution=True)
def collective_broadcast(info):
    """The operand of the first process of this process's group; zeros outside any group."""
    strategy = _pairwise_strategy(info)
    groups = _Groups(info, strategy)

    def run(execution, operand):
        process = execution.process
        domain = _domain(process, strategy)
        values = dict(zip(domain, process.grid.exchange(process, domain, operand, info.name)))
        for group in groups.all(process.grid):
            if process.id in group:
                return values[group[0]]
        return _zeros_like(info.result_type)

    return run


def senders_and_receivers(info, grid: Grid) -> tuple[set, set] | None:
    """For ``collective_permute`` and ``collective_broadcast``, the processes (flattened ids)
    whose operand goes to another process, and those that get one: a pair's source and
    target; a group's first process, and the others. None for the other collectives,
    where every process of a group sends its operand and gets a result made of them."""
    strategy = _pairwise_strategy(info)
    if info.name == "stablehlo.collective_permute":
        pairs = _Groups(info, strategy, "source_target_pairs").all(grid)
        return {source for source, _ in pairs}, {target for _, target in pairs}
    if info.name == "stablehlo.collective_broadcast":
        groups = [group for group in _Groups(info, strategy).all(grid) if len(group) > 1]
        return {group[0] for group in groups}, {member for group in groups for member in group[1:]}
    return None


def contributors(info, process) -> tuple:
    """The processes (flattened ids) whose operands reach ``process``'s results of a
    collective: its group; for ``collective_permute`` the sources paired with it as
    target (none: it gets zeros); for ``collective_broadcast`` its group's first."""
    if info.name == "stablehlo.collective_permute":
        pairs = _Groups(info, _pairwise_strategy(info), "source_target_pairs").all(process.grid)
        return tuple(source for source, target in pairs if target == process.id)
    pairwise = info.name in ("stablehlo.all_to_all", "stablehlo.collective_broadcast")
    group = _Groups(info, _pairwise_strategy(info) if pairwise else _reducing_strategy(info)).of(process)
    return group[:1] if info.name == "stablehlo.collective_broadcast" else group


# ------------------------------------------------------------------------------ process ids


@op("stablehlo.replica_id", execution=True)
def replica_id(info):
    return lambda execution: np.asarray(execution.process.replica_id, np.uint32)


@op("stablehlo.partition_id", execution=True)
def partition_id(info):
    return lambda execution: np.asarray(execution.process.partition_id, np.uint32)


# ------------------------------------------------------------------------- the grid itself


@op("interpreter.run_parallel", variadic=True, execution=True)
def run_parallel(info):
    """Runs ``programs[replica][partition]`` as a grid of processes (StableHLO's
    reference interpreter, InterpreterOps.td). ``inputs`` and ``results`` are the
    processes' arguments and results one process after another, replica-major.

    ``infeed = [@f, @g, ...]``: functions without arguments returning one tensor
    each; their values, in order, make the one infeed queue the grid's processes
    share (the C++ interpreter's ProcessGrid does the same).
    """
    infeed = [info.module.function(name.lstrip("@")) for name in info.attributes.get("infeed", ())]
    names = info.attr("programs")
    replicas, partitions = len(names), len(names[0]) if names else 0
    if not replicas or any(len(row) != partitions for row in names):
        raise info.error(f"programs must be a non-empty rectangular grid of functions, got {names}")
    functions = [info.module.function(name.lstrip("@")) for row in names for name in row]
    for function in functions + infeed:
        if not function.has_body:
            raise info.error(f"@{function.name} is declared without a body")
    counts = [len(f.arg_types) for f in functions]
    if sum(counts) != len(info.operand_types):
        raise info.error(f"the programs take {sum(counts)} inputs in all, the op has {len(info.operand_types)}")
    starts = np.cumsum([0] + counts)

    def run(execution, *inputs):
        context = None
        if infeed:
            entries = [execution.run_region(function.region, ()) for function in infeed]
            context = execution.context.with_io(HostQueues(infeed=entries))

        def process_body(process):
            function = functions[process.id]
            arguments = inputs[starts[process.id]:starts[process.id + 1]]
            return execution.for_process(process, context).run_region(function.region, arguments)

        results = Grid(replicas, partitions).run(process_body)
        return [value for outputs in results for value in outputs]

    return run
