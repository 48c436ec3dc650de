"""The per-device check: a per-device run's results against the global run's.

Shardy's per-device programs are not always right: its global-to-local pass has no
rule for some ops on a split dimension and writes the global op on the device's part
(docs/sharding.md). So every per-device run (``si.run_per_device``, the tools'
``per_device=True``, the ``interp`` device's per-device modes) runs the global program
too, and :func:`judge` compares each device's results with its shards of the global
ones (:meth:`~.per_device.PerDeviceProgram.check`): a difference that the per-device
program's reordered float sums do not explain, or that lies beyond the global
program's rounding noise (judge/bounds.py), raises ``PerDeviceMismatch``; one within
it is a ``PerDeviceWarning``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from ..engine.run import Listener
from ..judge import bounds
from .per_device import PerDeviceWarning


def beyond_rounding_noise(run_global: Callable[[Listener], list], semantics: str, expected: list,
                          actual: list, result_name: Callable[[int], str] = lambda index: f"result #{index}") -> list[str]:
    """The devices' results (``actual[d][i]``) beyond the rounding noise of the global
    program: ``run_global(listener)`` (each device's shards of its results) with every
    op's float results moved within the op's rounding bound (judge/bounds.py, as
    ``si.compare`` judges a backend) gives each value's allowance around ``expected``;
    ``result_name(i)`` names result ``i``."""
    runs = bounds.noise_runs(run_global, semantics, expected)
    beyond: dict = {}
    for device, (wanted, got) in enumerate(zip(expected, actual)):
        for index, (value, other) in enumerate(zip(wanted, got)):
            if not isinstance(value, np.ndarray):
                continue
            bound, alternatives = bounds.spread_allowance(value, [run[device][index] for run in runs])
            if not bounds.within(value, np.asarray(other), bound, alternatives).all():
                beyond.setdefault(index, []).append(device)
    runs_used = f"{len(runs)} runs with every op moved within its rounding bound"
    if len(runs) < bounds.NOISE_RUNS:   # noise_runs left out runs that failed or diverged
        runs_used = (f"{len(runs)} of {bounds.NOISE_RUNS} runs with every op moved within its rounding bound: the "
                     "others failed or left the program's path, infinities or NaN where it gives finite values")
    return [f"{result_name(index)} is beyond the rounding noise of the global program on device(s) {devices} "
            f"({runs_used})" for index, devices in beyond.items()]


def judge(partitioned, expected: list, actual: list, run_global: Callable[[Listener], list], semantics: str,
          stacklevel: int) -> None:
    """:meth:`PerDeviceProgram.check` of the devices' results ``actual`` against the global
    run's shards ``expected`` (``run_global(listener)`` runs it again for the noise), with a
    ``PerDeviceWarning`` for what differs within the rounding noise (``stacklevel`` as the
    caller's own): the device's modes and the tools' checked runs alike."""
    notes = partitioned.check(expected, actual, lambda: beyond_rounding_noise(run_global, semantics, expected, actual,
                                                                                        partitioned.result_name))
    if notes:
        warnings.warn("the per-device run differs from the global run:\n" + "\n".join(notes), PerDeviceWarning,
                      stacklevel=stacklevel + 1)
