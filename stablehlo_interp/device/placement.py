"""Where a program's arguments come from and its results go, on the devices it runs on.

* One device: the program runs on that device's buffers.
* A global program over several partitions (``num_partitions > 1`` with SPMD
  partitioning: every multi-device ``jit``, ``shard_map`` and ``pmap`` of
  JAX): Execute hands over one shard per device. The global arguments are
  assembled from the shards by the arguments' shardings (``sdy.sharding`` or
  ``mhlo.sharding``), the program runs once on global values (manual code in
  it runs per device, ops/sdy.py), and each device gets its shard of each
  result by the results' shardings. Values without a sharding get the one
  Shardy's propagation gives them, as on XLA (sharding/propagation.py).
* A global program in a per-device mode (:class:`PerDevice`, the mode chosen by
  :func:`spmd_mode`): each device runs its own program, Shardy's partition of the
  global one, on its own shards, as XLA runs it (sharding/per_device.py); or the
  global run, checked against that.
* A program per process (``num_replicas > 1`` with one partition, or partitions
  without SPMD partitioning): each device is a process of the grid with its own
  arguments (``Program.run_grid``).

The shardings are reported to JAX as serialized ``xla.OpSharding`` protos.
"""

from __future__ import annotations

import os
import warnings


from ..engine.grid import MANUAL_BORDERS, process_ops
from ..engine.run import RunContext
from ..errors import ArgumentError
from ..sharding import unreduced
from ..sharding.check import judge
from ..sharding.partition import PartitionError
from ..sharding.per_device import PerDeviceProgram, PerDeviceWarning, shard_types
from ..sharding.propagation import value_tilings
from ..ir.types import TOKEN, TensorType
from . import inspect_sharding

# A serialized xla.OpSharding {type: REPLICATED}.
REPLICATED = b"\x08\x00"

# How the device runs a global program over several devices (docs/sharding.md, "Running what
# each device runs"): the global program once (the default), each device's partitioned program,
# or the global program checked against the partitioned one. The compiler option
# ``jax.jit(f, compiler_options={"interp_spmd": ...})`` chooses for one program, the
# environment variable for every program compiled without it.
GLOBAL, PER_DEVICE, CHECK = "global", "per_device", "check"
SPMD_MODES = (GLOBAL, PER_DEVICE, CHECK)
SPMD_VARIABLE = "STABLEHLO_INTERP_SPMD"
SPMD_OPTION = "interp_spmd"


def spmd_mode(option=None) -> str:
    """The mode the compiler option's value ``option`` names, else the environment's."""
    mode = os.environ.get(SPMD_VARIABLE, GLOBAL) if option is None else option
    mode = str(mode).strip().lower().replace("-", "_") or GLOBAL
    if mode not in SPMD_MODES:
        source = f"the compiler option {SPMD_OPTION}" if option is not None else SPMD_VARIABLE
        raise ArgumentError(f"{source} is {option if option is not None else os.environ[SPMD_VARIABLE]!r}; "
                            f"the modes are {', '.join(SPMD_MODES)}")
    return mode


class Placement:
    """Runs a program's entry function on per-device arguments (one device)."""

    def __init__(self, program, function, num_devices: int):
        self.program = program
        self.function = function
        self.num_devices = num_devices

    @property
    def parameter_shardings(self) -> list:
        return [REPLICATED] * len(self.function.arg_types)

    @property
    def output_shardings(self) -> list:
        return [REPLICATED] * len(self.function.result_types)

    def run(self, arguments: list, listeners) -> list:
        """``arguments[d]``: the argument arrays of device d; returns each device's results."""
        return [self.program.execute(self.function, arguments[0],
                                     RunContext(listeners, semantics=self.program.semantics))]

    def result_types(self) -> list:
        """Each device's type of each result (its shard's, for a global program): the
        shapes a run hands out."""
        return [list(self.function.result_types)] * self.num_devices

    def parameter_types(self) -> list:
        """Each device's type of each parameter (its shard's, for a global program)."""
        return [list(self.function.arg_types)] * self.num_devices


class PerProcess(Placement):
    """Each device runs the program as one process of the grid (a program per process)."""

    def run(self, arguments: list, listeners) -> list:
        return self.program.run_grid(arguments, function=self.function.name, listeners=listeners)


class Global(Placement):
    """A global program: arguments assembled from shards, results split into shards."""

    def __init__(self, program, function, num_devices: int):
        super().__init__(program, function, num_devices)
        inspected = inspect_sharding.inspections(function.region)
        propagation = program.propagation
        self.arg_tilings, self.result_tilings, tilings = value_tilings(
            propagation, function, num_devices, [(key, value_type) for _, key, value_type, _ in inspected])
        for (report, _, _, manual), tiling in zip(inspected, tilings):   # XLA's partitioner does it here
            report(inspect_sharding.MANUAL if manual else tiling.op_sharding(num_devices) if tiling else REPLICATED)
        # Manual code between SPMDFullToShardShape and SPMDShardToFullShape: every device
        # runs the whole program as a process (ops/sdy.py).
        self.per_process = bool(MANUAL_BORDERS & process_ops(function.region))
        self._per_device: tuple | None = None   # per_device_program(), once made
        # Per-device partial values (sharding/unreduced.py); a result made unreduced by its
        # out-sharding alone keeps, on each device, the part of it the device held.
        self.result_dims = [None] * len(function.result_types)
        self.axis_sizes = {name: size for mesh in program.meshes.values() for name, size in mesh.axes}
        if unreduced.has_unreduced(function):
            axes_of = propagation.dimension_axes
            unreduced.carry_partials(function, program.meshes, axes_of)
            self.result_dims = [axes_of((id(function.region), slot)) for slot in function.region.outputs]

    @property
    def parameter_shardings(self) -> list:
        return [t.op_sharding(self.num_devices) if t else REPLICATED for t in self.arg_tilings]

    @property
    def output_shardings(self) -> list:
        return [t.op_sharding(self.num_devices) if t else REPLICATED for t in self.result_tilings]

    def run(self, arguments: list, listeners) -> list:
        """The global run (:meth:`run_global`); each device's own program where devices hold
        different bits of an argument they share (:meth:`run_each_device`)."""
        varying = self.differing_replicas(arguments)
        if varying is not None:
            return self.run_each_device(arguments, listeners, varying)
        return self.run_global(arguments, listeners)

    def differing_replicas(self, arguments: list) -> str | None:
        """Which argument two devices hold different bits of, where its sharding says they
        hold the same part of it (JAX's eager ``shard_map`` passes a result declared
        replicated, each device's own, to the next op's program); None when none does."""
        for index, (value_type, tiling) in enumerate(zip(self.function.arg_types, self.arg_tilings)):
            if not isinstance(value_type, TensorType):
                continue
            pair = unreduced.differing_replica(tiling, self.num_devices, lambda device, i=index: arguments[device][i])
            if pair is not None:
                return (f"devices {pair[0]} and {pair[1]} hold different values of "
                        f"{self.function.argument_name(index)} ({value_type}) "
                        "where its sharding says they hold the same part")
        return None

    def per_device_program(self) -> tuple:
        """``(Shardy's per-device program, None)``, or ``(None, why there is none)``;
        partitioned on first use (a child process), once."""
        if self._per_device is None:
            try:
                partitioned = PerDeviceProgram(self.program, self.function.name)
            except (PartitionError, ArgumentError) as error:
                self._per_device = (None, str(error))
            else:
                self._per_device = (partitioned, None)
        return self._per_device

    def run_each_device(self, arguments: list, listeners, varying: str) -> list:
        """Each device runs Shardy's per-device program on its own buffers, as on XLA: a
        global program has no one value for an argument whose replicas differ
        (``varying`` says which). An error where Shardy cannot partition the program."""
        partitioned, why = self.per_device_program()
        if partitioned is None:
            raise ArgumentError(f"{self.program.name or 'the program'}: {varying}; XLA runs each device's program "
                                f"on its own buffers, the interp device cannot here: {why}")
        return partitioned.run_devices(arguments, listeners)

    def run_global(self, arguments: list, listeners) -> list:
        """Each device gets its shard of each result. Where the device's own view differs
        from the global value (manual code whose replicated results differ per device),
        it gets its own: the process that ran as that device computed it."""
        values = [self._assemble(i, t, tiling, arguments)
                  for i, (t, tiling) in enumerate(zip(self.function.arg_types, self.arg_tilings))]
        name = self.function.name
        if self.per_process:
            views = self.program.run_grid([values] * self.num_devices, function=name, listeners=listeners)
            return [[unreduced.shard_of(view[j], tiling, device) for j, tiling in enumerate(self.result_tilings)]
                    for device, view in enumerate(views)]
        context = RunContext(listeners, local_results={}, semantics=self.program.semantics, partials=True)
        results = self.program.execute(self.function, values, context)
        per_device = [[] for _ in range(self.num_devices)]
        for value, tiling, dims in zip(results, self.result_tilings, self.result_dims):
            if tiling is not None:
                value = unreduced.retarget(value, tiling.unreduced, dims, self.axis_sizes)
            own = context.local_results.get(id(value))
            for device, outputs in enumerate(per_device):
                if own is not None and own[0] is value and own[1].same_placement(tiling):
                    outputs.append(own[2][device])
                else:
                    outputs.append(unreduced.shard_of(value, tiling, device))
        return per_device

    def result_types(self) -> list:
        return [shard_types(self.function.result_types, self.result_tilings, device)
                for device in range(self.num_devices)]

    def parameter_types(self) -> list:
        return [shard_types(self.function.arg_types, self.arg_tilings, device)
                for device in range(self.num_devices)]

    @staticmethod
    def _assemble(index: int, value_type, tiling, arguments):
        if tiling is None:
            return TOKEN if not isinstance(value_type, TensorType) else arguments[0][index]
        return unreduced.assemble(value_type.shape, value_type.dtype, tiling, lambda d: arguments[d][index])


class PerDevice(Global):
    """A global program in a per-device mode: with ``mode`` PER_DEVICE each device runs
    Shardy's per-device program on its own shards (sharding/per_device.py), with CHECK the
    global program gives the results; either way both run and are compared. Where Shardy cannot
    partition the program, or its per-device types are not the shards the device reports,
    ``why_global`` says so (a :class:`PerDeviceWarning` too) and the global program runs."""

    def __init__(self, program, function, num_devices: int, mode: str):
        super().__init__(program, function, num_devices)
        self.mode = mode
        self.partitioned, self.why_global = self.per_device_program()
        if self.why_global is not None:
            warnings.warn(f"the interp device runs the global program of {program.name or 'a module'} in mode "
                          f"{mode}: {self.why_global}", PerDeviceWarning, stacklevel=2)

    def run(self, arguments: list, listeners) -> list:
        """Both runs, each device's results checked against its shards of the global
        ones (:meth:`PerDeviceProgram.check`): Shardy's per-device programs are not
        always right (docs/sharding.md). The listeners observe the run whose results
        are returned: the per-device one in mode PER_DEVICE, the global one in CHECK.
        Where replicas of an argument differ only the per-device program runs."""
        if self.partitioned is None:
            return super().run(arguments, listeners)
        varying = self.differing_replicas(arguments)
        if varying is not None:
            return self.run_each_device(arguments, listeners, varying)
        per_device_observed = self.mode == PER_DEVICE
        expected = self.run_global(arguments, () if per_device_observed else listeners)
        actual = self.partitioned.run_devices(arguments, listeners if per_device_observed else ())
        judge(self.partitioned, expected, actual, lambda listener: self.run_global(arguments, [listener]),
              self.program.semantics, stacklevel=2)
        return actual if per_device_observed else expected


def placement(program, function, num_replicas: int, num_partitions: int, spmd: bool,
              mode: str = GLOBAL) -> Placement:
    count = num_replicas * num_partitions
    if count == 1:
        return Placement(program, function, 1)
    if num_partitions == 1 or not spmd:
        return PerProcess(program, function, count)
    if num_replicas == 1:
        return Global(program, function, count) if mode == GLOBAL else PerDevice(program, function, count, mode)
    raise NotImplementedError(f"the interp device runs a global program over partitions, or a program per "
                              f"process, not a global program over {num_replicas} replicas x {num_partitions} "
                              "partitions")
