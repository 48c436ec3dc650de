"""A run's findings as Model Explorer node data: per op of the module, the values
Model Explorer colours its node by.

Each overlay is one node-data file in Model Explorer's format
(``model_explorer/node_data_builder.py``: per graph id, ``results`` keyed by node
id, each ``{"value": ..., "bgColor": ...}``, and a ``gradient`` or colours per node):

* ``max_abs``: the largest finite ``|value|`` among the op's results, over every
  time it ran (a loop body's op: every iteration);
* ``nonfinite``: how many NaN and inf its results held, over every time it ran;
* ``nan_origin``: the ops where the non-finite values of the results were made
  (:func:`~..nonfinite.find_nonfinite`; an argument that holds them: its input node),
  valued by how many they made;
* with a backend (:func:`~..compare.compare`, which inlines the entry function's
  calls and compares its ops one by one): ``ulp``, the largest ULP distance of the
  backend's value from the interpreter's, and ``noise``, the op's verdict: 0 the
  same values, 1 rounding noise (what summation order, fused multiply-adds and
  excess precision allow, judge/bounds.py), 2 unbounded (a loop or conditional, not
  bounded op by op), 3 beyond its rounding bound. An op of a function called from
  several places is valued by its largest distance and worst verdict.

An op that did not run has no value (Model Explorer leaves its node uncoloured).

A per-device run (sharding/per_device.py) writes the per-device program once and each
device's overlays as node-data files of their own (``max_abs_device3.json``, named
``device 3: max |value|``): Model Explorer draws one graph and colours it by the node
data chosen, one device at a time. The ``ulp`` and ``noise`` overlays judge each op
of the global program (compare's ``every_op``), so a per-device run has none.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass, field

import numpy as np

from ...engine.run import Listener
from ...ir.types import Token
from ...judge.bounds import AGREE, BEYOND, NOISE, UNBOUNDED
from ..compare import compare, module_text
from ..nonfinite import run_traced
from ...judge.summary import is_float_dtype
from .graphs import GraphMismatch, model_explorer_graphs, node_ids

VERDICT_VALUES = {AGREE: 0, NOISE: 1, UNBOUNDED: 2, BEYOND: 3}
VERDICT_COLOURS = {AGREE: "#c8e6c9", NOISE: "#fff59d", UNBOUNDED: "#ffb74d", BEYOND: "#e53935"}
NONFINITE_COLOUR = "#ef9a9a"
ORIGIN_COLOUR = "#d50000"
GRADIENT = [{"stop": 0, "bgColor": "#ffffff"}, {"stop": 1, "bgColor": "#ef6c00"}]
MODULE_FILE = "module.mlir"


@dataclass
class OpValues:
    """What the runs of one op made: the largest finite magnitude of its results (None
    when they hold no finite number), and how many NaN and inf they held."""

    max_abs: float | None = None
    nan: int = 0
    inf: int = 0


class OpStatistics(Listener):
    """Per op over every time it ran: :class:`OpValues` of its results, by its step
    (the object: a step is known by identity, and kept alive here). ``process``: the
    ops of that process of a grid only (a device of a per-device run); None: every op."""

    def __init__(self, process: int | None = None):
        self.ops: dict[object, OpValues] = {}
        self.process = process

    def after_op(self, step, operands, results, stack):
        if self.process is not None and stack.process.id != self.process:
            return None
        entry = self.ops.setdefault(step, OpValues())
        for value in results:
            magnitudes = _magnitudes(value)
            if magnitudes is None:
                continue
            finite = magnitudes[np.isfinite(magnitudes)]
            if finite.size:
                largest = float(finite.max())
                entry.max_abs = largest if entry.max_abs is None else max(entry.max_abs, largest)
            entry.nan += int(np.count_nonzero(np.isnan(magnitudes)))
            entry.inf += int(np.count_nonzero(np.isinf(magnitudes)))
        return None


def _magnitudes(value) -> np.ndarray | None:
    """``|value|`` as float64 for numbers (None for booleans, tokens and tuples)."""
    if isinstance(value, (tuple, Token)):
        return None
    array = np.asarray(value)
    if array.dtype.kind == "c":
        return np.abs(array.astype(np.complex128))
    if array.dtype.kind in "iu" or is_float_dtype(array.dtype):
        return np.abs(array.astype(np.float64))
    return None


@dataclass
class Findings:
    """One run's findings: ``statistics`` (:class:`OpStatistics`), ``nonfinite``
    (:class:`~..nonfinite.NonFiniteOrigins` or None) and ``comparison``
    (:class:`~..compare.Comparison` with ``every_op``, or None)."""

    statistics: OpStatistics
    nonfinite: object = None
    comparison: object = None


def find(call, backend=None, tolerance=None) -> Findings:
    """Run a prepared call with the statistics and the NaN search, and compare every op
    with ``backend`` when one is given."""
    statistics = OpStatistics()
    nonfinite = run_traced(call, [statistics])[1]
    comparison = None
    if backend is not None:
        comparison = compare(call.program, *call.arguments, backend=backend, tolerance=tolerance,
                             function=call.function, every_op=True)
    return Findings(statistics, nonfinite, comparison)


def node_data(program, findings: Findings, nodes: dict, entry: str = "main", device: int | None = None
              ) -> dict[str, dict]:
    """The overlays (module docstring) as Model Explorer's node data, by overlay name:
    ``{graph id: {"name", "results": {node id: {"value", "bgColor"?}}, ...}}``.
    ``nodes``: the node of each step in Model Explorer's graphs (:func:`.graphs.node_ids`);
    ``device``: the device of a per-device run whose findings these are (named in each overlay)."""
    named = "" if device is None else f"device {device}: "
    overlays = {"max_abs": _Overlay(f"{named}max |value|", gradient=GRADIENT),
                "nonfinite": _Overlay(f"{named}NaN and inf count"),
                "nan_origin": _Overlay(f"{named}where the NaN or inf of a result was made")}
    for step, values in findings.statistics.ops.items():
        if id(step) not in nodes:
            continue            # a step of a refined copy (a shape-polymorphic program): not drawn
        graph, node, _ = nodes[id(step)]
        if values.max_abs is not None:
            overlays["max_abs"].set(graph, node, values.max_abs)
        count = values.nan + values.inf
        overlays["nonfinite"].set(graph, node, count, NONFINITE_COLOUR if count else None)
    for origin in (findings.nonfinite.origins if findings.nonfinite is not None else ()):
        made = sum(count for _, _, count, _ in origin.new)
        if origin.step is not None and id(origin.step) in nodes:
            graph, node, _ = nodes[id(origin.step)]
            overlays["nan_origin"].set(graph, node, made, ORIGIN_COLOUR, "#ffffff")
        elif origin.op.startswith("argument #"):
            overlays["nan_origin"].set(entry, f"arg{origin.op.removeprefix('argument #')}", made, ORIGIN_COLOUR,
                                       "#ffffff")
    if findings.comparison is not None:
        backend = findings.comparison.backend
        overlays["ulp"] = _Overlay(f"ULP distance from {backend}", gradient=GRADIENT)
        overlays["noise"] = _Overlay(f"vs {backend}: 0 same, 1 rounding noise, 2 unbounded, 3 beyond its bound")
        steps = list(inlined_entry_steps(program, entry))
        if findings.comparison.findings and len(steps) != len(findings.comparison.findings):
            raise GraphMismatch(f"compare judged {len(findings.comparison.findings)} ops of @{entry} with its calls "
                                f"inlined, the program has {len(steps)}")
        for step, finding in zip(steps, findings.comparison.findings):
            if step.info.name != finding.step.info.name:
                raise GraphMismatch(f"compare's inlined @{entry} has {finding.step.info.name} where the program "
                                    f"has {step.info.name}")
            graph, node, _ = nodes[id(step)]
            if finding.max_ulp is not None:
                overlays["ulp"].raise_to(graph, node, finding.max_ulp)
            overlays["noise"].worst(graph, node, finding.kind)
    for overlay in overlays.values():
        overlay.results(entry)          # the entry function's graph in every overlay, empty as it may be
    return {name: overlay.graphs for name, overlay in overlays.items()}


def inlined_entry_steps(program, entry: str = "main"):
    """The steps of ``@entry`` as compare sees them, its calls inlined: each step of
    its body, a ``func.call`` replaced by the steps of the function it calls."""
    for step in program.function(entry).region.steps:
        callee = next((inner for inner in step.regions if inner.description.startswith("@")), None)
        if step.info.name == "func.call" and callee is not None:
            yield from inlined_entry_steps(program, callee.description[1:])
        else:
            yield step


class _Overlay:
    """One overlay being filled: its graphs' node data."""

    def __init__(self, name: str, gradient=None):
        self.name, self.gradient = name, gradient
        self.graphs: dict[str, dict] = {}

    def results(self, graph: str) -> dict:
        """The node data of ``graph``'s nodes (made empty on first use)."""
        if graph not in self.graphs:
            self.graphs[graph] = {"name": self.name, "results": {}}
            if self.gradient:
                self.graphs[graph]["gradient"] = self.gradient
        return self.graphs[graph]["results"]

    def set(self, graph: str, node: str, value, background: str | None = None, text: str | None = None) -> None:
        result = {"value": value}
        if background:
            result["bgColor"] = background
        if text:
            result["textColor"] = text
        self.results(graph)[node] = result

    def raise_to(self, graph: str, node: str, value) -> None:
        """The node's value, or ``value`` when that is larger."""
        current = self.results(graph).get(node)
        if current is None or value > current["value"]:
            self.set(graph, node, value)

    def worst(self, graph: str, node: str, kind: str) -> None:
        """The node's verdict, or ``kind`` when that is worse."""
        current = self.results(graph).get(node)
        if current is None or VERDICT_VALUES[kind] > current["value"]:
            self.set(graph, node, VERDICT_VALUES[kind], VERDICT_COLOURS[kind])


@dataclass
class ModelExplorerFiles:
    """What :func:`write` wrote for Model Explorer: the module (``module``), one
    node-data file per overlay (``overlays``, by name), and the node each step is
    (``nodes``: ``id(step) -> (graph id, node id, step)``). ``command`` opens them."""

    module: pathlib.Path
    overlays: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)

    @property
    def command(self) -> str:
        paths = ",".join(str(path) for path in self.overlays.values())
        return f"model-explorer {self.module} --node_data_paths={paths}"


def write(program, findings: Findings | dict[int, Findings], directory, entry: str = "main") -> ModelExplorerFiles:
    """Write the module as Model Explorer reads it (MLIR text with its locations,
    which Model Explorer shows as layers) and the node data of ``findings`` into
    ``directory``. ``findings`` by device (a per-device run, ``program`` its per-device
    program): each device's overlays, ``{overlay}_device{d}`` (the module's docstring)."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    module = directory / MODULE_FILE
    module.write_text(module_text(program), encoding="utf-8")
    files = ModelExplorerFiles(module, nodes=node_ids(program, model_explorer_graphs(module)))
    by_device = findings.items() if isinstance(findings, dict) else [(None, findings)]
    for device, device_findings in by_device:
        for name, graphs in node_data(program, device_findings, files.nodes, entry, device).items():
            name = name if device is None else f"{name}_device{device}"
            path = directory / f"{name}.json"
            path.write_text(json.dumps(graphs, indent=1, allow_nan=False), encoding="utf-8")
            files.overlays[name] = path
    return files
