"""Per-device runs checked against the global run: ``si.run_per_device``, and the tools'
``per_device=True``.

Every such run runs the global program too, and sharding/check.py judges each device's
results against its shards of the global ones. A result unreduced on the devices is compared as the sum of their
partials: ``si.run``'s global view holds that sum. A run that calls the host with side
effects (``io_callback``, debug callbacks, or infeed, outfeed, send and recv on the
caller's ``io`` queues) is not run twice: it is not checked, and a ``PerDeviceWarning``
says so (without ``io`` the global run gets queues of its own). A ``pure_callback`` may
be called again: JAX allows it any number of calls.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable
from typing import Any

from ..engine.hostio import HostQueues
from ..engine.run import Listener
from ..ops.host_callback import callbacks_with_effects
from ..program import Call, DeviceRun, prepare, prepare_per_device
from ..sharding.per_device import PerDeviceWarning
from ..sharding.unreduced import retarget, shard_of
from ..sharding.check import judge


def check_against_global(call: Call, actual: list, io: HostQueues | None, semantics: str | None) -> None:
    """Check a per-device run's results ``actual[d][i]`` against the global run of ``call``
    (the module docstring); warn what differs within the rounding noise."""
    partitioned = call.per_device_program()
    if io is not None or callbacks_with_effects(call.program.function(call.function).region):
        warnings.warn(f"the per-device run of {call.program.name or 'a module'} is not checked against the global "
                      "run: the program calls the host with side effects (io_callback, debug callbacks, or the "
                      "caller's host queues), and a second run would do them again", PerDeviceWarning, stacklevel=4)
        return
    semantics = semantics or call.program.semantics
    unreduced = {index: dataclasses.replace(tiling, unreduced=())
                 for index, tiling in enumerate(partitioned.result_tilings) if tiling is not None and tiling.unreduced}

    def shards(results: list) -> list:
        """Each device's part of the global ``results``; of a result unreduced on the
        devices, its part of the whole value (si.run's global view holds the sum)."""
        return [[shard_of(value, unreduced.get(index, tiling), device)
                 for index, (value, tiling) in enumerate(zip(results, partitioned.result_tilings))]
                for device in range(partitioned.num_devices)]

    def run_global(listeners: Iterable[Listener] = ()) -> list:
        return shards(call.program.run(*call.arguments, function=call.function, listeners=listeners,
                                       semantics=semantics))

    expected = run_global()
    if unreduced:   # the devices' partials added, to compare with the global view's sums
        totals = partitioned.assemble(actual)
        actual = shards([retarget(value, ()) if index in unreduced else value for index, value in enumerate(totals)])
    judge(partitioned, expected, actual, lambda listener: run_global([listener]), semantics, stacklevel=4)


def prepare_checked(target: Any, args: tuple = (), kwargs: dict | None = None, function: str | None = None,
                    platform: str | None = None, fallback: bool = True) -> Call:
    """A call prepared per device whose per-device runs are checked against the global
    run; with ``fallback``, where Shardy cannot partition the program a
    ``PerDeviceWarning`` says why and the call runs the global program (the tools),
    else ``PartitionError`` (``si.run_per_device``)."""
    call = (prepare_per_device(target, args, kwargs, function, platform) if fallback
            else prepare(target, args, kwargs, function, platform, per_device=True))
    call.check = check_against_global
    return call


def run_per_device(target: Any, *args: Any, listeners: Iterable[Listener] = (), io: HostQueues | None = None,
                   semantics: str | None = None, **kwargs: Any) -> DeviceRun:
    """Run a sharded ``target`` as XLA runs it: each device's partitioned program on its
    shards, with collectives between the devices (sharding/per_device.py), checked
    against the global run (the module docstring).

    ``target`` and its arguments are ``si.run``'s (a jitted function with sharded
    arguments or ``in_shardings``, a ``Lowered``, a module with Shardy meshes);
    arguments are global values, cut into each device's shards by the program's
    argument shardings. Raises ``PartitionError`` where Shardy cannot partition it,
    ``PerDeviceMismatch`` where its program computes other values than the global one."""
    call = prepare_checked(target, args, kwargs, fallback=False)
    per_device = call.run_devices(listeners, io, semantics)
    partitioned = call.per_device_program()
    return DeviceRun(call.results(partitioned.assemble(per_device)), per_device, partitioned)
