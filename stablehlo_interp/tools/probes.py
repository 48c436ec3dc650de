"""Probes: save intermediate values to an ``.npz`` file, with an index.

    saved = si.probe(f, x, path="values.npz", select=["log", "model.py:12"], every_iteration=True)
    probes = si.load_probes("values.npz")
    probes.find("stablehlo.log")[0].value

The file holds one array per saved value (keys ``v0000``, ``v0001`` ...) and
``__index__``, a JSON list with one entry per key: the op, which of its
results, the region calls around it (``inside``, with iteration numbers), its
source location, shape and element type. Inside loops, each op's value is
saved once (the last iteration's) unless ``every_iteration=True``.
"""

from __future__ import annotations

import os
from typing import Any

import json
from dataclasses import dataclass

import numpy as np

from ..engine.run import Listener
from ..ir.types import Token
from ..ir.locations import describe_location
from .region_calls import op_label, region_calls
from .selection import matcher
from ..program import prepare
from ..judge.summary import summarize, type_text

INDEX_KEY = "__index__"


@dataclass
class Probe:
    """One saved value and where it came from (an entry of the index)."""

    key: str
    op: str
    result: int
    inside: list[str]          # the region calls around the op, outermost first
    location: str
    source: str | None         # "file.py:LINE" of the innermost Python frame
    vectorized: bool
    type: str                  # "f32[4]": the saved array's element type and shape
    value: np.ndarray | None = None

    def entry(self) -> dict:
        return {name: getattr(self, name) for name in
                ("key", "op", "result", "inside", "location", "source", "vectorized", "type")}

    def __str__(self) -> str:
        inside = "".join(f" inside {call}" for call in reversed(self.inside))
        value = f": {summarize(self.value)}" if self.value is not None else ""
        return f"{self.key} {self.op} result #{self.result}{inside}{value}"


class ProbeRecorder(Listener):
    """A listener that keeps the results of the ops a selector chooses (all by default).

    ``every_iteration=False`` keeps one value per op and result (the last call of
    its region); ``True`` keeps every call's.
    """

    def __init__(self, select=None, every_iteration: bool = False):
        self.chosen = matcher(select)
        self.every_iteration = every_iteration
        self.probes: list[Probe] = []
        self._slots: dict = {}   # (op identity, result) -> position in probes

    def after_op(self, step, operands, results, stack):
        if not self.chosen(step):
            return None
        calls = region_calls(stack)
        identity = tuple((frame.step, frame.region_index) for frame in stack) + (step,)
        frame = step.info.location.frame
        for index, value in enumerate(results):
            if isinstance(value, (tuple, Token)):
                continue
            probe = Probe("", op_label(step), index, [str(c) for c in calls],
                          describe_location(step.info.location),
                          f"{frame.file}:{frame.line}" if frame else None,
                          any(c.vectorized for c in calls), type_text(value), np.asarray(value))
            position = None if self.every_iteration else self._slots.get((identity, index))
            if position is None:
                self._slots[(identity, index)] = len(self.probes)
                probe.key = f"v{len(self.probes):04d}"
                self.probes.append(probe)
            else:
                probe.key = self.probes[position].key
                self.probes[position] = probe
        return None

    def save(self, path) -> None:
        """Write the values and the index to ``path`` (.npz)."""
        index = json.dumps([probe.entry() for probe in self.probes])
        np.savez(path, **{probe.key: probe.value for probe in self.probes}, **{INDEX_KEY: np.array(index)})


class ProbeFile:
    """Probes loaded from an .npz file written by :func:`probe`."""

    def __init__(self, path):
        with np.load(path, allow_pickle=False) as archive:
            entries = json.loads(str(archive[INDEX_KEY]))
            self.probes = [Probe(**entry, value=archive[entry["key"]]) for entry in entries]

    def __len__(self) -> int:
        return len(self.probes)

    def __iter__(self):
        return iter(self.probes)

    def __getitem__(self, key: str) -> Probe:
        return next(p for p in self.probes if p.key == key)

    def find(self, op: str | None = None, source: str | None = None) -> list[Probe]:
        """Probes of an op (``"stablehlo.log"`` or ``"log"``) and/or a source line suffix (``"f.py:8"``)."""
        if op and "." not in op:
            op = f"stablehlo.{op}"
        return [p for p in self.probes
                if (op is None or p.op.split(" ")[0] == op)
                and (source is None or (p.source or "").endswith(source))]

    def __str__(self) -> str:
        return "\n".join(map(str, self.probes))


def probe(target: Any, *args: Any, path: str | os.PathLike, select: Any = None, every_iteration: bool = False,
          function: str | None = None, **kwargs: Any) -> ProbeRecorder:
    """Run ``target`` on ``args`` and save the values of the selected ops to ``path``."""
    call = prepare(target, args, kwargs, function)
    recorder = ProbeRecorder(select, every_iteration)
    call.run([recorder])
    recorder.save(path)
    return recorder


def load_probes(path: str | os.PathLike) -> ProbeFile:
    return ProbeFile(path)
