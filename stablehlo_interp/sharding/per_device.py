"""A sharded program run as XLA runs it: each device's program on the process grid.

``si.run`` runs a multi-device program's *global* form once, on whole values
(docs/sharding.md). XLA runs something else: its SPMD partitioner makes one program
for a device, with local shapes and collectives (``compiled.as_text()``), and every
device runs that program on its own shards. :class:`PerDeviceProgram` does the same
with the partitioner jaxlib ships from Shardy (sharding/partition/): the per-device
program runs as a grid of processes (``Program.run_grid``), one per device, process
``i`` being the ``i``-th device of the program's device assignment (its
``partition_id``, the logical id the collectives' groups name). Listeners see every
op of every device (``stack.process``), collectives included.

Where Shardy cannot partition the program, :class:`PerDeviceProgram` raises
``PartitionError`` with its message; the global run is then the only one. It raises
it too where Shardy's program is known to compute other shards than XLA's (found by
comparing the two runs over the sharding tests; docs/sharding.md): a custom call
without a sharding rule or a value on one device (a host callback's), a
``collective_permute`` of Shardy's own (a reshard that reorders the devices), and
windows slid over a sharded dimension without the neighbours' elements. And where the
interpreter refuses an op of the per-device program (a custom partitioning op whose
operands are not the shards it expects: ops/sharding_calls.py).

The two runs agree bit for bit except where the per-device program adds floats in
another order: a sum over a sharded dimension is each device's sum of its part, then
a collective (``all_reduce``, ``reduce_scatter``) adding the devices' partial sums in
device order, where the global program folds the whole dimension at once; and a
contraction of a device's part (a batch of 32 images of 64) is BLAS's sum in an order
it chooses by shape.
:meth:`PerDeviceProgram.differences` says where the runs differ and
:attr:`PerDeviceProgram.reordered_sums` which collectives may explain it.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from ..engine.grid import steps_within
from ..engine.hostio import HostQueues
from ..errors import ArgumentError, InterpreterError, UnsupportedOpError
from . import partition
from ..ir.types import TensorType
from . import unreduced
from .propagation import value_tilings

# Collectives that combine the devices' values with their body (a sum, for JAX's psum).
COMBINING_COLLECTIVES = frozenset({"stablehlo.all_reduce", "stablehlo.reduce_scatter"})
# Ops whose float sums BLAS orders by the operands' shapes.
CONTRACTIONS = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"})
# Ops whose windows span neighbouring elements (spec: convolution, reduce_window, select_and_scatter).
WINDOWED = frozenset({"stablehlo.convolution", "stablehlo.reduce_window", "stablehlo.select_and_scatter"})


class PerDeviceProgram:
    """``program``'s (a loaded :class:`~stablehlo_interp.Program`) entry function partitioned for each of its ``num_partitions``
    devices: ``text`` is the per-device program, ``local`` it loaded; ``arg_tilings``
    and ``result_tilings`` say which part of each global argument and result a device
    holds (None: a token, or the whole value)."""

    def __init__(self, program, function: str | None = None):
        if program.num_replicas != 1 or program.num_partitions < 2 or not program.meshes:
            raise ArgumentError("a per-device run partitions a program over several devices with Shardy "
                                f"meshes; this one has {program.num_replicas} replica(s) x "
                                f"{program.num_partitions} partition(s) and {len(program.meshes)} mesh(es)")
        # Ops on one device (a host callback's maximal mesh) run there alone (sharding/partition/).
        on_one_device = {name for name, mesh in program.meshes.items() if not mesh.axes and mesh.size == 1}
        self.program = program
        self.function = program.runnable(function)
        for step in steps_within(self.function.region):
            if step.info.name == "stablehlo.custom_call" and "sdy.sharding_rule" not in step.info.attributes \
                    and not _on_mesh(step, on_one_device):
                raise partition.PartitionError(
                    f"Shardy's partitioner gives the custom call @{step.info.attributes.get('call_target_name')} "
                    f"at {step.info.location} local operands but leaves its results global (it has no "
                    "sdy.sharding_rule)")
        self.num_devices = program.num_partitions
        self.text = partition.per_device_program(program.module)
        if self.text.count('"stablehlo.collective_permute"') > sum(
                step.info.name == "stablehlo.collective_permute" for step in steps_within(self.function.region)):
            raise partition.PartitionError(
                "Shardy's per-device program moves shards between devices with a collective_permute of its own "
                "(a reshard that reorders the mesh's devices), and those programs compute other shards than the "
                "global program (XLA running the same per-device program agrees with the interpreter; "
                "docs/sharding.md)")
        try:
            self.local = program.sibling(self.text)
        except UnsupportedOpError as why:
            raise partition.PartitionError(f"the interpreter cannot run Shardy's per-device program: {why}") from None
        problem = self._windows_cut_at_shard_borders()
        if problem:
            raise partition.PartitionError(problem)
        self.arg_tilings, self.result_tilings, _ = value_tilings(program.propagation, self.function,
                                                                 self.num_devices)
        problem = self._types_other_than_shards()
        if problem:
            raise partition.PartitionError(problem)

    def _types_other_than_shards(self) -> str | None:
        """Where a per-device argument's or result's type is not the device's shard of the
        global value under the sharding the global run gives it (Shardy's per-device
        program left a gradient whole that the global propagation splits), or None."""
        local = self.local.function(self.function.name)
        for what, (global_types, tilings, local_types) in {
                "argument": (self.function.arg_types, self.arg_tilings, local.arg_types),
                "result": (self.function.result_types, self.result_tilings, local.result_types)}.items():
            for device in range(self.num_devices):
                for index, (shard, mine) in enumerate(zip(shard_types(global_types, tilings, device), local_types)):
                    if str(shard) != str(mine):
                        return (f"the per-device program's {what} {index} is {mine}, device {device}'s shard of it "
                                f"is {shard}")
        return None

    def shards(self, values: list) -> list:
        """Each device's arguments: its shard of each global argument."""
        return device_shards(values, self.arg_tilings, self.num_devices)

    def result_shards(self, values: list) -> list:
        """Each device's part of the global results ``values`` (``[d][i]``)."""
        return device_shards(values, self.result_tilings, self.num_devices)

    def assemble(self, per_device: list) -> list:
        """The global results from each device's results (``per_device[d][i]``)."""
        return assemble(self.function.result_types, self.result_tilings, per_device)

    def _counterparts(self, names: frozenset) -> list:
        """``(op, the global op it was made from or None)`` for each op of the per-device
        program named in ``names``: the k-th op of a name and location in one program is
        the k-th in the other (a model's layers share their source lines: the convolutions
        of two Flax ``Conv`` layers, and of their gradients, are all at one line). Where
        the two programs hold different numbers of them, the first global op of the same
        name, location and attributes."""
        def by_location(region) -> dict:
            found: dict = {}
            for step in steps_within(region):
                if step.info.name in names:
                    found.setdefault((step.info.name, str(step.info.location)), []).append(step)
            return found

        whole = by_location(self.function.region)
        pairs: list = []
        for key, steps in by_location(self.local.function(self.function.name).region).items():
            candidates = whole.get(key, [])
            if len(candidates) == len(steps):
                pairs.extend(zip(steps, candidates))
            else:
                pairs.extend((step, next((c for c in candidates if _attributes(c) == _attributes(step)), None))
                             for step in steps)
        return pairs

    def _windows_cut_at_shard_borders(self) -> str | None:
        """Why the per-device program's windows (a convolution's, a ``reduce_window``'s) miss
        elements, or None: Shardy's program slides them over a device's part of a dimension
        its windows span, without the neighbouring devices' elements (the halo XLA's
        partitioner exchanges), which gave devices other values than XLA's (a 3x3 "SAME"
        convolution of an image sharded by rows). The global program's op of the same
        location gives the dimension's whole size."""
        for step, original in self._counterparts(WINDOWED):
            for dimension in _windowed_dimensions(step):
                size = step.info.operand_types[0].shape[dimension]
                full = original.info.operand_types[0].shape[dimension] if original is not None else None
                if size != full:
                    return (f"Shardy's per-device program slides the windows of {step.info.name} at "
                            f"{step.info.location} over dimension {dimension} of its operand "
                            f"({size} of {full if full is not None else 'an unknown number of'} elements on each "
                            "device) without its neighbours' elements, which XLA exchanges")
        return None

    @property
    def reordered_sums(self) -> list[str]:
        """Where the per-device program's order of float sums differs from the global
        program's, as ``op at location``: its collectives that add or multiply floats
        across devices, and its contractions (``dot_general``, ``convolution``) of other
        operand shapes than the global program's op there, which BLAS sums in an order
        of its choosing by shape (a convolution of 32 of 64 images differed from the
        whole batch's in the last bit)."""
        whole = dict(self._counterparts(CONTRACTIONS))
        found = []
        for step in steps_within(self.local.function(self.function.name).region):
            floats = step.info.operand_types and step.info.operand_types[0].kind in ("float", "complex")
            if step.info.name in COMBINING_COLLECTIVES and floats \
                    and any(inner.info.name in ("stablehlo.add", "stablehlo.multiply")
                            for region in step.regions for inner in region.steps):
                found.append(f"{step.info.name} at {step.info.location}")
            elif step.info.name in CONTRACTIONS and floats and (whole[step] is None or [
                    str(t) for t in step.info.operand_types] != [str(t) for t in whole[step].info.operand_types]):
                found.append(f"{step.info.name} at {step.info.location}")
        return found

    def result_name(self, index: int) -> str:
        """Result ``index`` of the entry function by its name (``result['loss']``), else its number."""
        return self.function.result_name(index)

    def differences(self, expected: list, actual: list) -> list[str]:
        """Where the devices' results ``actual[d][i]`` differ from ``expected[d][i]`` (the
        global run's shards), bit for bit: one line per result that differs."""
        lines = []
        for index in range(len(expected[0]) if expected else 0):
            devices, first = [], None
            for device, (wanted, got) in enumerate(zip(expected, actual)):
                problem = _difference(np.asarray(wanted[index]), np.asarray(got[index]))
                if problem:
                    devices.append(device)
                    first = first or f"device {device}: {problem}"
            if devices:
                lines.append(f"{self.result_name(index)} differs on device(s) {devices}; {first}")
        return lines

    def check(self, expected: list, actual: list, beyond_noise) -> list[str]:
        """Compare the per-device run (``actual[d][i]``) with the global run's shards
        (``expected``), bit for bit. Where they differ and the per-device program has no
        :attr:`reordered_sums`, or ``beyond_noise()`` (the caller's judge: the results
        beyond the rounding noise of the global program, one line each) names any,
        raises :class:`PerDeviceMismatch`; else returns the differences, with the
        collectives whose order of sums explains them."""
        lines = self.differences(expected, actual)
        if not lines:
            return []
        sums = self.reordered_sums
        if not sums:
            raise PerDeviceMismatch("the per-device program's results differ from the global program's, and no sum "
                                    "is reordered:\n" + "\n".join(lines))
        beyond = beyond_noise()
        if beyond:
            raise PerDeviceMismatch("the per-device program's results differ from the global program's beyond the "
                                    "rounding noise a reordered sum makes:\n" + "\n".join(lines + beyond))
        return lines + [f"the per-device program adds floats in another order: {_first_few(sums)}; every result "
                        "is within the rounding noise of the global program"]

    def run_devices(self, per_device_args: list, listeners=(), io: HostQueues | None = None,
                    semantics: str | None = None) -> list:
        """Run the per-device program on each device's arguments; each device's results."""
        return self.local.run_grid(per_device_args, function=self.function.name, listeners=listeners, io=io,
                                   semantics=semantics or self.program.semantics)


def device_shards(values: list, tilings: list, num_devices: int) -> list:
    """Each device's part of ``values`` under ``tilings`` (``[d][i]``)."""
    return [[unreduced.shard_of(value, tiling, device) for value, tiling in zip(values, tilings)]
            for device in range(num_devices)]


def assemble(value_types, tilings: list, per_device: list) -> list:
    """The global values of ``value_types`` from each device's parts (``per_device[d][i]``)
    under ``tilings``."""
    results = []
    for index, (value_type, tiling) in enumerate(zip(value_types, tilings)):
        if tiling is None or not isinstance(value_type, TensorType):
            results.append(per_device[0][index])
        else:
            results.append(unreduced.assemble(value_type.shape, value_type.dtype, tiling,
                                              lambda device, i=index: per_device[device][i]))
    return results


def _first_few(labels: list[str], shown: int = 3) -> str:
    """``labels`` (ops at their locations) as one line: each distinct one once, with how
    many times it occurs, the first ``shown`` of them and how many more (a training step's
    per-device program has dozens of all-reduces)."""
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    named = [label if count == 1 else f"{label} ({count} times)" for label, count in counts.items()]
    more = len(labels) - sum(list(counts.values())[:shown])
    return ", ".join(named[:shown]) + (f" and {more} more" if more else "")


def shard_types(value_types, tilings, device: int) -> list:
    """The types of ``device``'s shards of values of ``value_types`` under ``tilings`` (a
    tensor's whole type where its tiling is None or gives the device no tile)."""
    types = []
    for value_type, tiling in zip(value_types, tilings):
        if isinstance(value_type, TensorType) and tiling is not None:   # the shape of a view: nothing is allocated
            shard = unreduced.held_by(np.broadcast_to(np.empty((), value_type.dtype), value_type.shape), tiling, device)
            if shard is not None:
                value_type = dataclasses.replace(value_type, shape=shard.shape)
        types.append(value_type)
    return types


def _on_mesh(step, names: set) -> bool:
    """Whether every result of ``step`` is sharded on one of the meshes ``names``."""
    sharding = step.info.attributes.get("sdy.sharding")
    return sharding is not None and bool(names) and set(re.findall(r"<@([\w.$-]+)", str(sharding))) <= names


def _attributes(step) -> dict:
    """An op's attributes but its shardings (which a per-device program's op no longer has)."""
    return {key: str(value) for key, value in step.info.attributes.items() if not key.startswith(("sdy.", "mhlo."))}


def _windowed_dimensions(step) -> tuple:
    """The dimensions of a windowed op's operand that its windows span with more than one
    element (spec: convolution, reduce_window, select_and_scatter); () for other ops."""
    name = step.info.name
    if name == "stablehlo.convolution":
        numbers = step.info.attr("dimension_numbers")
        kernel = step.info.operand_types[1].shape
        return tuple(dimension for dimension, kernel_dimension in zip(numbers.input_spatial_dimensions,
                                                                       numbers.kernel_spatial_dimensions)
                     if kernel[kernel_dimension] > 1)
    if name in ("stablehlo.reduce_window", "stablehlo.select_and_scatter"):
        return tuple(dimension for dimension, size in enumerate(step.info.attr("window_dimensions")) if size > 1)
    return ()


def _difference(wanted: np.ndarray, got: np.ndarray) -> str:
    """How ``got`` differs from ``wanted`` bit for bit ('' where it does not)."""
    if wanted.shape != got.shape or wanted.dtype != got.dtype:
        return f"{got.dtype}{list(got.shape)}, the global run's shard is {wanted.dtype}{list(wanted.shape)}"
    if not wanted.size:
        return ""
    differ = (np.frombuffer(np.ascontiguousarray(wanted).tobytes(), np.uint8).reshape(wanted.size, -1)
              != np.frombuffer(np.ascontiguousarray(got).tobytes(), np.uint8).reshape(got.size, -1)).any(axis=1)
    if not differ.any():
        return ""
    where = np.unravel_index(int(np.argmax(differ)), wanted.shape)
    return (f"{int(differ.sum())} of {wanted.size} element(s) differ, the first at {list(map(int, where))}: "
            f"{got[where]!r}, {wanted[where]!r} in the global run")


class PerDeviceWarning(UserWarning):
    """A per-device run could not do all it was asked: the global program ran instead, or
    the two runs differ where a reordered float sum may explain it."""


class PerDeviceMismatch(InterpreterError):
    """The per-device run's results differ from the global run's where no reordered sum
    explains it."""
