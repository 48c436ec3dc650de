"""Collective ops and process ids (spec: all_gather, all_reduce, reduce_scatter,
all_to_all, collective_permute, collective_broadcast, replica_id, partition_id),
and ``interpreter.run_parallel``, which runs a grid of processes.

Each op runs in a process of a :class:`~stablehlo_interp.engine.grid.Grid`
(the one process of a 1 x 1 grid outside any), which its runner finds on the
Execution it is given. It splits the grid into process groups by one of the
spec's strategies (engine/process_groups.py). The processes of a group exchange
their operands through the grid; each then computes its own result from them.
"""

from __future__ import annotations

import numpy as np

from ..engine import registry
from ..engine.grid import Grid
from ..engine.hostio import HostQueues
from ..engine.registry import op
from ..engine.process_groups import CROSS_PARTITION, CROSS_REPLICA, ProcessGroups, pairwise_strategy, reducing_strategy
from ..engine.regions import is_elementwise


def _exchange(info, groups: ProcessGroups, process, payload):
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
    groups = ProcessGroups(info, reducing_strategy(info))
    combine = _combiner(info)

    def run(execution, regions, *operands):
        _, values = _exchange(info, groups, execution.process, operands)
        return [combine(regions[0], [v[i] for v in values], t) for i, t in enumerate(info.result_types)]

    return run


@op("stablehlo.cross-replica-sum", execution=True)
def cross_replica_sum(info):
    """all_reduce with an add computation across ``replica_groups`` of replicas
    (an op kept for HLO compatibility, not in the spec)."""
    groups = ProcessGroups(info, CROSS_REPLICA)
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
    groups = ProcessGroups(info, reducing_strategy(info))
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
    groups = ProcessGroups(info, reducing_strategy(info))
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
    groups = ProcessGroups(info, pairwise_strategy(info))
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
    strategy = pairwise_strategy(info)
    pairs = ProcessGroups(info, strategy, "source_target_pairs")

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
    strategy = pairwise_strategy(info)
    groups = ProcessGroups(info, strategy)

    def run(execution, operand):
        process = execution.process
        domain = _domain(process, strategy)
        values = dict(zip(domain, process.grid.exchange(process, domain, operand, info.name)))
        for group in groups.all(process.grid):
            if process.id in group:
                return values[group[0]]
        return _zeros_like(info.result_type)

    return run


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
