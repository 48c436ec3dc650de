"""The host side of a program's transfers (spec: infeed, outfeed, send, recv).

::

    io = si.HostQueues(infeed=[[x], [y, z]])     # what two infeed ops will produce
    io.put(7, w)                                 # what a recv on channel 7 will produce
    program.run(a, b, io=io)
    io.outfeed                                   # [[...], ...]: what each outfeed op wrote
    io.get(8)                                    # the oldest values sent on channel 8

Each entry is the list of arrays one op transfers (tokens excluded). Queues are
first in, first out, and tokens order the ops that use them. A channel is one
queue shared by the ``send`` and ``recv`` ops with its channel id, so a
device-to-device pair in one program talks through it too. Quantized tensors
cross as their stored integers. The queues outlive a run: run the program again
to go on consuming them. A run without queues of the caller's gets empty ones
(its RunContext makes them on first use, engine/run.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from collections import defaultdict, deque

from ..errors import InterpreterError


class HostQueues:
    """Infeed, outfeed and channel queues (see the module docstring)."""

    def __init__(self, infeed: Iterable[Iterable[Any]] = (), channels: Mapping[int, Iterable[Iterable[Any]]] | None = None) -> None:
        self.infeed: deque = deque(list(values) for values in infeed)
        self.outfeed: list = []
        self.channels: defaultdict = defaultdict(deque)
        for channel, entries in (channels or {}).items():
            self.channels[channel].extend(list(values) for values in entries)

    def put_infeed(self, *values: Any) -> None:
        """Queue the results of one infeed op."""
        self.infeed.append(list(values))

    def put(self, channel: int, *values: Any) -> None:
        """Queue the results of one recv op on ``channel``."""
        self.channels[channel].append(list(values))

    def get(self, channel: int) -> list:
        """Take the oldest values sent on ``channel``."""
        if not self.channels.get(channel):
            raise InterpreterError(f"nothing was sent on channel {channel}")
        return self.channels[channel].popleft()

    def __repr__(self) -> str:
        channels = {c: len(q) for c, q in self.channels.items() if q}
        return f"<HostQueues infeed={len(self.infeed)} outfeed={len(self.outfeed)} channels={channels}>"


class Instruments:
    """Where the instrumentation ops of StableHLO's interpreter dialect write, as
    ``stablehlo-translate --interpret`` (stablehlo/reference/InterpreterOps.cpp):

    * ``interpreter.print`` writes its operand to ``stream`` (standard output by default);
    * ``interpreter.probe`` saves its operand to ``probe_directory`` as
      ``probe<N>.npy`` (N = 1, 2, ... in the order the probes run) and appends the line
      ``probe_id,type,path`` to ``index.csv`` there, which ``check.expect_serialized_eq``
      reads back (ops/interpreter.py).

    One Instruments serves one run of a module (every process of its grid); its first
    probe starts a new index file. Without a ``probe_directory`` a probe is an error.
    """

    INDEX_FILE = "index.csv"

    def __init__(self, stream=None, probe_directory=None):
        import threading

        self.stream = stream
        self.probe_directory = probe_directory
        self.probes_written = 0
        self.lock = threading.Lock()   # processes of a grid run in threads: one print, one probe at a time

    def write(self, text: str) -> None:
        import sys

        with self.lock:
            (self.stream or sys.stdout).write(text)
