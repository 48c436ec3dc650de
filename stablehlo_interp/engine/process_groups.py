"""Process groups (spec: Execution, "Collective ops"): which processes of a grid meet at
a collective.

A collective splits the grid into process groups by one of the spec's strategies:

* ``cross_replica(replica_groups)``: each group of replica ids, in every partition;
* ``cross_partition(partition_groups)``: each group of partition ids, in every replica;
* ``cross_replica_and_partition(replica_groups)``: each group of replica ids
  across all partitions;
* ``flattened_ids(groups)``: groups of ``replica_id * num_partitions + partition_id``.

The op picks its strategy from ``channel_handle`` (channel id > 0 or not) and
``use_global_device_ids``. ``replica_groups`` padded with -1 (ragged groups)
drop the padding; an empty ``replica_groups`` is one group of every id (XLA's
convention). A process that is in no group forms a group of its own. The op
runners are in ops/collectives.py; the tools that follow data between devices
(sharding/traffic.py, the NaN search) ask here who sends to whom.
"""

from __future__ import annotations

import numpy as np

from .grid import Grid

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


class ProcessGroups:
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


def reducing_strategy(info) -> str:
    """all_gather, all_reduce, reduce_scatter: by channel id and use_global_device_ids."""
    has_channel = _channel_id(info) > 0
    if info.attributes.get("use_global_device_ids"):
        if not has_channel:
            raise info.error("use_global_device_ids needs a channel id > 0 (spec: C5)")
        return FLATTENED_IDS
    return CROSS_REPLICA_AND_PARTITION if has_channel else CROSS_REPLICA


def pairwise_strategy(info) -> str:
    """all_to_all, collective_permute, collective_broadcast: by channel id."""
    return CROSS_PARTITION if _channel_id(info) > 0 else CROSS_REPLICA


def senders_and_receivers(info, grid: Grid) -> tuple[set, set] | None:
    """For ``collective_permute`` and ``collective_broadcast``, the processes (flattened ids)
    whose operand goes to another process, and those that get one: a pair's source and
    target; a group's first process, and the others. None for the other collectives,
    where every process of a group sends its operand and gets a result made of them."""
    strategy = pairwise_strategy(info)
    if info.name == "stablehlo.collective_permute":
        pairs = ProcessGroups(info, strategy, "source_target_pairs").all(grid)
        return {source for source, _ in pairs}, {target for _, target in pairs}
    if info.name == "stablehlo.collective_broadcast":
        groups = [group for group in ProcessGroups(info, strategy).all(grid) if len(group) > 1]
        return {group[0] for group in groups}, {member for group in groups for member in group[1:]}
    return None


def contributors(info, process) -> tuple:
    """The processes (flattened ids) whose operands reach ``process``'s results of a
    collective: its group; for ``collective_permute`` the sources paired with it as
    target (none: it gets zeros); for ``collective_broadcast`` its group's first."""
    if info.name == "stablehlo.collective_permute":
        pairs = ProcessGroups(info, pairwise_strategy(info), "source_target_pairs").all(process.grid)
        return tuple(source for source, target in pairs if target == process.id)
    pairwise = info.name in ("stablehlo.all_to_all", "stablehlo.collective_broadcast")
    group = ProcessGroups(info, pairwise_strategy(info) if pairwise else reducing_strategy(info)).of(process)
    return group[:1] if info.name == "stablehlo.collective_broadcast" else group
