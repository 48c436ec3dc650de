"""Run a function once per StableHLO process, with real collectives between them.

Spec, "Parallel execution": a program runs as a grid of ``num_replicas`` by
``num_partitions`` processes; process ``(replica_id, partition_id)`` has the
*flattened id* ``replica_id * num_partitions + partition_id``. Processes are
independent except at collective ops, where each process group exchanges
values.

Each process gets its own thread (from a pool of daemon threads, with a copy of
the caller's ``contextvars`` context, so NumPy's floating-point error settings
of the run apply), but only one runs at a time: a process runs until it finishes or waits at a
collective, then hands over to the next process that can go on, in a fixed
order. Runs are therefore deterministic, do not depend on the number of CPU cores, and a collective that
can never complete is known exactly: when no process can go on while some
wait, every waiting process fails with an error naming its op, its group and
what the missing processes are doing, instead of hanging.

The body a grid runs gets its :class:`Process`; the run loop hands it to the
runners that ask for it through the Execution (engine/run.py). Outside any grid
code runs as :data:`OUTSIDE_GRID`, the one process of a 1 x 1 grid.
"""

from __future__ import annotations

import contextvars
import threading
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Callable

from ..errors import InterpreterError, OpError

# Ops whose results depend on the process that runs them, and the custom calls that
# begin and end manual code in modules lowered without Shardy.
PROCESS_OPS = frozenset({
    "stablehlo.all_gather", "stablehlo.all_reduce", "stablehlo.all_to_all", "stablehlo.collective_broadcast",
    "stablehlo.collective_permute", "stablehlo.reduce_scatter", "stablehlo.replica_id", "stablehlo.partition_id",
})
# The process ops that exchange data between processes.
COLLECTIVES = PROCESS_OPS - {"stablehlo.replica_id", "stablehlo.partition_id"}
MANUAL_BORDERS = frozenset({"SPMDFullToShardShape", "SPMDShardToFullShape"})


class CollectiveError(InterpreterError):
    """A collective that cannot complete: its processes wait for ones that never come,
    or the processes of a group reached different collectives."""


class GridAborted(InterpreterError):
    """Raised in the processes of a grid stopped because another process failed."""


@dataclass(frozen=True)
class Process:
    """One process of a grid: its ``(replica_id, partition_id)`` and its grid."""

    grid: "Grid" = field(repr=False, compare=False)
    replica_id: int
    partition_id: int

    @property
    def id(self) -> int:
        """The flattened id: ``replica_id * num_partitions + partition_id``."""
        return self.replica_id * self.grid.num_partitions + self.partition_id

    @property
    def coordinates(self) -> str:
        """Where the process sits in its grid: its partition (and replica, if there are several)."""
        if self.grid.num_replicas == 1:
            return f"partition {self.partition_id}"
        return f"replica {self.replica_id}, partition {self.partition_id}"

    def __str__(self) -> str:
        if self.grid.size == 1:
            return "process 0"
        return f"{self.grid.member} {self.id} ({self.coordinates})"


@dataclass
class _Meeting:
    """The processes of one group at one collective: what each brought."""

    group: tuple
    arrived: dict = field(default_factory=dict)   # process id -> (op name, payload)
    error: Exception | None = None

    @property
    def missing(self) -> list:
        return [member for member in self.group if member not in self.arrived]

    def payloads(self) -> list:
        return [self.arrived[member][1] for member in self.group]


class Grid:
    """``num_replicas`` x ``num_partitions`` processes (see the module docstring).

    Scheduling: one process runs at a time; the others sleep, each on its own gate
    (a semaphore), until handed the turn, so a hand-over wakes exactly one thread.
    """

    def __init__(self, num_replicas: int = 1, num_partitions: int = 1):
        if num_replicas < 1 or num_partitions < 1:
            raise InterpreterError(f"a process grid needs at least one replica and one partition, "
                                   f"got {num_replicas} x {num_partitions}")
        self.num_replicas = num_replicas
        self.num_partitions = num_partitions
        self.processes = tuple(Process(self, r, p) for r in range(num_replicas) for p in range(num_partitions))
        self._lock = threading.Lock()
        self._reset()

    @property
    def size(self) -> int:
        return len(self.processes)

    def _reset(self) -> None:
        self._gates = [threading.Semaphore(0) for _ in self.processes]
        self._done = threading.Event()
        self._ready: deque = deque()
        self._waiting: dict = {}                 # process id -> (op name, meeting)
        self._finished: set = set()
        self._failures: list = []                # (process id, exception), first one first
        self._aborted = False
        self._meetings: dict = {}
        self._arrivals: defaultdict = defaultdict(int)

    @property
    def member(self) -> str:
        """What the reports call a process of this grid: ``"device"`` where the grid is one
        replica's partitions (each process is the device whose ``partition_id`` it has: a
        per-device run, a ``shard_map`` body), ``"process"`` where there are replicas."""
        return "device" if self.num_replicas == 1 else "process"

    def __repr__(self) -> str:
        return f"<Grid {self.num_replicas} replica(s) x {self.num_partitions} partition(s)>"

    # ------------------------------------------------------------------ running

    def run(self, body: Callable[[Process], object]) -> list:
        """``[body(process) for each process]``, each in its own thread, with
        collectives between them; raises the first failure of any process."""
        if self.size == 1:
            return [_with_process_context(body, self.processes[0])]
        self._reset()
        results = [None] * self.size
        self._ready.extend(range(1, self.size))
        self._gates[0].release()
        for process in self.processes:
            _WORKERS.start(self._process_main, process, body, results, contextvars.copy_context())
        try:
            self._done.wait()
        except BaseException:   # KeyboardInterrupt: stop every process at its next turn
            with self._lock:
                self._abort()
            raise
        if self._failures:
            raise self._failures[0][1]
        return results

    def _process_main(self, process: Process, body, results: list, context: contextvars.Context) -> None:
        self._wait_for_turn(process.id)
        try:
            if not self._aborted:
                results[process.id] = context.run(_with_process_context, body, process)
        except GridAborted:
            pass
        except BaseException as error:  # noqa: BLE001 - reported by run()
            with self._lock:
                self._failures.append((process.id, error))
                self._abort()
        finally:
            with self._lock:
                self._finished.add(process.id)
                if len(self._finished) == self.size:
                    self._done.set()
                else:
                    self._pass_turn()

    def _wait_for_turn(self, process_id: int) -> None:
        """Sleep until this process has the turn (or the grid is stopped)."""
        self._gates[process_id].acquire()

    def _abort(self) -> None:
        """Stop the grid: every process still to run or waiting wakes up and stops."""
        self._aborted = True
        for process_id, gate in enumerate(self._gates):
            if process_id not in self._finished:
                gate.release()

    def _pass_turn(self) -> None:
        """Let the next ready process run; if none is ready but some wait, they never will."""
        if self._aborted:
            return
        if not self._ready and self._waiting:
            self._fail_waiting()
        if self._ready:
            self._gates[self._ready.popleft()].release()

    def _fail_waiting(self) -> None:
        message = self._deadlock_report()
        for _, meeting in self._waiting.values():
            meeting.error = CollectiveError(message)
        self._ready.extend(sorted(self._waiting))
        self._waiting.clear()

    def _deadlock_report(self) -> str:
        lines = ["the collective can never complete:"]
        for process_id in sorted(self._waiting):
            op_name, meeting = self._waiting[process_id]
            lines.append(f"{self.processes[process_id]} waits in {op_name} for "
                         f"{'devices' if self.member == 'device' else 'processes'} "
                         f"{meeting.missing} of its group {list(meeting.group)}")
        for process_id in range(self.size):
            if process_id in self._finished:
                lines.append(f"{self.processes[process_id]} has finished")
        return "\n".join(lines)

    # -------------------------------------------------------------- collectives

    def exchange(self, process: Process, group: tuple, payload, op_name: str) -> list:
        """Hand ``payload`` to the processes of ``group`` (flattened ids, in order) and
        return what each of them handed, in the group's order, once all arrived.

        The k-th exchange of a process in a group meets the k-th exchange of every
        other member of that group; all of them must be the same kind of op.
        """
        group = tuple(group)
        if group == (process.id,):
            return [payload]
        if process.id not in group:
            raise CollectiveError(f"{process} exchanges in group {list(group)}, which does not contain it")
        with self._lock:
            key = (group, self._arrivals[(process.id, group)])
            self._arrivals[(process.id, group)] += 1
            meeting = self._meetings.setdefault(key, _Meeting(group))
            meeting.arrived[process.id] = (op_name, payload)
            complete = not meeting.missing
            if complete:
                del self._meetings[key]
                meeting.error = _mismatch(meeting, self)
                for member in group:
                    if self._waiting.pop(member, None) is not None:
                        self._ready.append(member)
            else:
                self._waiting[process.id] = (op_name, meeting)
                self._pass_turn()
        if not complete:
            self._wait_for_turn(process.id)
            if self._aborted:
                raise GridAborted(f"{process} stopped: another process failed")
        if meeting.error is not None:
            raise meeting.error
        return meeting.payloads()


def _mismatch(meeting: _Meeting, grid: Grid) -> CollectiveError | None:
    names = {name for name, _ in meeting.arrived.values()}
    if len(names) == 1:
        return None
    reached = "; ".join(f"{grid.processes[member]} reached {meeting.arrived[member][0]}" for member in meeting.group)
    return CollectiveError(f"the processes of group {list(meeting.group)} reached different collectives: {reached}")


def _with_process_context(body, process: Process):
    """``body(process)``; an op error says which process it happened in."""
    try:
        return body(process)
    except OpError as error:
        if process.grid.size > 1:
            error.add_enclosing(f"{process.grid.member} {process.id}", None, process.coordinates)
        raise


class _Workers:
    """Daemon threads that run the processes of grids, kept for the next grid once idle
    (a grid of n processes needs n threads at once; the pool grows to what is used)."""

    def __init__(self):
        self._idle: deque = deque()

    def start(self, function, *args) -> None:
        try:
            worker = self._idle.pop()
        except IndexError:
            worker = _Worker(self._idle)
        worker.task = (function, args)
        worker.wake.release()


class _Worker:
    def __init__(self, idle: deque):
        self.idle = idle
        self.task = None
        self.wake = threading.Semaphore(0)
        threading.Thread(target=self._loop, name="stablehlo_interp process", daemon=True).start()

    def _loop(self) -> None:
        while True:
            self.wake.acquire()
            function, args = self.task
            self.task = None
            function(*args)
            self.idle.append(self)


_WORKERS = _Workers()
# The process of code that runs outside any grid.
OUTSIDE_GRID = Grid(1, 1).processes[0]


def process_ops(region) -> set:
    """The process ops and manual borders (by op name or custom-call target) in
    ``region``, the regions of its ops and the functions it calls, except inside
    ``sdy.manual_computation``, which starts its own grid."""
    found = set()
    for step in steps_within(region, enter=lambda step: step.info.name != "sdy.manual_computation"):
        name = step.info.name
        target = step.info.attributes.get("call_target_name") if name == "stablehlo.custom_call" else None
        if name in PROCESS_OPS or target in MANUAL_BORDERS:
            found.add(target or name)
    return found


def steps_within(region, enter=lambda step: True):
    """Every step of ``region``, of the regions of its ops and of the functions it calls
    (each region once), except in the regions of the steps ``enter`` refuses."""
    for inner in regions_within(region, enter):
        yield from inner.steps


def regions_within(region, enter=lambda step: True):
    """``region``, the regions of its ops and the bodies of the functions it calls, each
    once, except the regions of the steps ``enter`` refuses (and what they hold)."""
    seen, pending = set(), [region]
    while pending:
        region = pending.pop()
        if id(region) in seen:
            continue
        seen.add(id(region))
        yield region
        pending.extend(inner for step in region.steps if enter(step) for inner in step.regions)
