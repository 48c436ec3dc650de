"""Collective traffic: what each device hands to each collective and gets back.

    traffic = si.tools.CollectiveTraffic()
    si.run_per_device(f, a, b, listeners=[traffic])   # or on the device: si.on_device(traffic)
    print(traffic)          # per collective op: bytes sent and received, by each process and in all
    traffic.transfers       # the data: one Transfer per collective run by one process

A process *sends* the operands it hands to a collective and *receives* the results
that come back (spec, "Collective ops": each process of a group contributes its
operand). A ``collective_permute`` moves data only from a pair's source to its
target, a ``collective_broadcast`` only from a group's first process to the others:
there a process sends only as a source and receives only as a target. These are the
bytes the program moves between devices, not what a network would carry: a ring
all-reduce, say, moves its data in pieces over several hops.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ..engine.grid import COLLECTIVES
from ..engine.run import Listener
from ..ir.locations import SourceLocation
from ..engine.process_groups import senders_and_receivers
from ..ir.locations import describe_location


@dataclass(frozen=True)
class Transfer:
    """One collective op run by one process: the bytes it sent and received."""

    op: str
    location: SourceLocation | None
    step: int
    process: int
    sent: int
    received: int

    @property
    def label(self) -> str:
        where = describe_location(self.location)
        return f"{self.op} (op {self.step}{', ' + where if where else ''})"


class CollectiveTraffic(Listener):
    """A listener that records the bytes each process sends and receives at each
    collective (see the module's docstring)."""

    def __init__(self):
        self.transfers: list[Transfer] = []
        self.process_name = "process"   # what a grid's process is (engine/grid.py Grid.member)

    def after_op(self, step, operands, results, stack):
        if step.info.name in COLLECTIVES:
            process = stack.process
            self.process_name = process.grid.member
            roles = senders_and_receivers(step.info, process.grid)
            sends = roles is None or process.id in roles[0]
            receives = roles is None or process.id in roles[1]
            self.transfers.append(Transfer(step.info.name, step.info.location, step.index, process.id,
                                           _bytes(operands) if sends else 0, _bytes(results) if receives else 0))
        return None

    @property
    def sent(self) -> int:
        """The bytes every process sent, in all."""
        return sum(transfer.sent for transfer in self.transfers)

    @property
    def received(self) -> int:
        return sum(transfer.received for transfer in self.transfers)

    def by_op(self) -> dict:
        """``{label: (bytes sent, bytes received)}`` per collective op, over the processes."""
        totals: dict = defaultdict(lambda: [0, 0])
        for transfer in self.transfers:
            totals[transfer.label][0] += transfer.sent
            totals[transfer.label][1] += transfer.received
        return {label: tuple(pair) for label, pair in totals.items()}

    def __str__(self) -> str:
        lines = []
        for label, (sent, received) in self.by_op().items():
            per_process: dict = defaultdict(lambda: [0, 0, 0])   # process -> [sent, received, runs]
            for transfer in self.transfers:
                if transfer.label == label:
                    totals = per_process[transfer.process]
                    totals[0], totals[1], totals[2] = totals[0] + transfer.sent, totals[1] + transfer.received, totals[2] + 1
            each = ", ".join(f"{process}: {p_sent}/{p_received}" + (f" in {runs} runs" if runs > 1 else "")
                             for process, (p_sent, p_received, runs) in sorted(per_process.items()))
            lines.append(f"{label}: {sent} bytes sent, {received} received ({self.process_name}: sent/received {each})")
        return "\n".join(lines) or "no collective ran"


def _bytes(values) -> int:
    return sum(np.asarray(value).nbytes for value in values if hasattr(value, "dtype"))
