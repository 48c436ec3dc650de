"""The lowering explorer: one self-contained HTML page that follows a jitted function
from its Python source to its jaxpr, its StableHLO module, its dataflow graph and
the values each op computed.

    exploration = si.explore(f, x, w, path="f.html")   # open f.html in a browser
    exploration                                         # in Jupyter: the page, inline

The panels are linked: select a Python line and its jaxpr equations, its ops and
their graph nodes light up; select an op (in the module text or the graph) and
its line, equations and values show. Regions (loop bodies, branches, reduction
bodies) are drawn inside their op, with their calls (loop iterations) browsable;
called functions have graphs of their own. The op where the NaN or inf of a
result came from (:mod:`..nonfinite`) is marked, and with ``backend=`` the first op that
diverges on that backend (:mod:`..compare`). ``model_explorer=DIR`` also writes
the run's findings for Google's Model Explorer (:mod:`..model_explorer`).

``xla_stages=True`` also shows what XLA CPU's pipeline made of the program: its optimized
HLO (fusions and all) as a text panel linked to the source lines and as a graph drawn
by the same code as StableHLO's, each fusion a group that opens to its instructions
(:mod:`.xla_graph`), each with the value it computes when the interpreter runs XLA's
program (:mod:`.xla_values`) and that of the StableHLO op it computes in the original
program where exactly one matches; and the passes that changed it, stepped through one
by one in the text panel, with the one that changed the values marked
(:mod:`.xla_stages`, on :func:`~..passes.passes`'s capture). A sharded program's is XLA's per-device program,
its collectives listed with the bytes each device sends and receives
(:mod:`.xla_collectives`).

``per_device=True`` shows a sharded program as XLA runs it: the per-device program
(sharding/per_device.py), run by each device on its shards. A device chooser picks
whose values the page shows, and the collectives panel gives how many times each
collective ran and the bytes each device sent and received there (in all, then device
by device). With ``backend=``, each op that made a result that differs on some device
is marked with those devices.

The graphs are laid out in the browser by dagre (the npm package
``@dagrejs/dagre``, vendored in ``static/`` with its license; see
``static/VENDORED.md``), inlined into the page so that it works offline from disk.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import html
import json
import pathlib
import re
from dataclasses import dataclass, field
from importlib import resources

from ...program import Program, load, prepare
from ...program.calls import Call
from ...program.signature import is_jax_function
from ..per_device import prepare_checked
from ..model_explorer.overlays import Findings, OpStatistics, write as write_model_explorer
from .page_data import collect

__all__ = ["Exploration", "explore", "page", "values_path"]


@dataclass
class Exploration:
    """The page of one explored run, and what the run found.

    ``data`` is what the page shows; ``html`` the page, whole (the whole arrays of
    small values inside); ``path`` where it was written (or None); ``trace``
    the run's :class:`~..trace.Trace`; ``nonfinite`` where the non-finite
    values of the results came from (:class:`~..nonfinite.NonFiniteOrigins`,
    None when every result is finite); ``comparison`` the
    :class:`~..compare.Comparison` with ``backend`` (else None); ``model_explorer``
    the :class:`~..model_explorer.ModelExplorerFiles` written with
    ``model_explorer=DIR`` (else None); ``traffic`` a per-device run's
    :class:`~..traffic.CollectiveTraffic` (else None); ``passes`` the
    :class:`~..passes.PassesReport` with ``xla_stages=True`` and arguments (else None).
    """

    data: dict = field(repr=False)
    path: pathlib.Path | None
    trace: object
    nonfinite: object = None
    comparison: object = None
    model_explorer: object = None
    traffic: object = None
    passes: object = None

    @functools.cached_property
    def html(self) -> str:
        return page(self.data)

    def write(self, path) -> pathlib.Path:
        """Writes the page to ``path``, and the whole arrays beside it, in
        ``values_path(path)``: the page loads them when asked to show one."""
        self.path = pathlib.Path(path)
        side = values_path(self.path)
        self.path.write_text(page(self.data, values_file=side.name), encoding="utf-8")
        side.write_text(f"explorerValues({_json(self.data['full_values'])});\n", encoding="utf-8")
        return self.path

    def _repr_html_(self) -> str:
        """The page in an iframe, for Jupyter (its script and styles stay inside), whole:
        the notebook keeps it, with no file beside it."""
        return (f"<iframe srcdoc='{_single_quoted(self.html)}' "
                'style="width: 100%; height: 720px; border: 1px solid #ccc"></iframe>')

    def __repr__(self) -> str:
        where = f", written to {self.path}" if self.path else ""
        return f"<Exploration: {len(self.trace)} ops run{where}>"


def explore(target: Any, *args: Any, path: str | os.PathLike | None = None, function: str | None = None,
            backend: Any = None, tolerance: Any = None, model_explorer: str | os.PathLike | None = None,
            per_device: bool = False, xla_stages: bool = False, **kwargs: Any) -> Exploration:
    """Run ``target`` on its arguments (as ``si.run`` does) and build the explorer page;
    write it to ``path`` when given. A module given without the arguments its
    function takes is drawn without running it (no values).

    ``backend`` (a JAX platform name such as ``"cpu"``, or any backend
    :func:`~..compare.compare` takes) also marks the first op whose value
    differs there, within ``tolerance``.

    ``model_explorer`` (a directory) also writes the module as Google's Model
    Explorer reads it and the run's findings as its node data, per op: max
    ``|value|``, the NaN and inf count, the NaN's origin, and with ``backend`` each
    op's ULP distance and whether it is beyond rounding noise
    (:mod:`..model_explorer.overlays`; needs the ``model-explorer`` extra).

    ``per_device`` (a sharded program): each device runs its partitioned program, and
    the page shows that program with each device's values and the bytes each device
    sent and received at each collective; where Shardy cannot partition the program, a
    ``PerDeviceWarning`` says why and the page shows the global run. With
    ``model_explorer``, the per-device program and each device's node data
    (``max_abs_device3.json`` ...; the ULP and noise overlays are the global program's
    only: :mod:`..model_explorer.overlays`).

    ``xla_stages``: also compile the program with XLA CPU's pipeline, pass by pass (in a
    child process, as :func:`~..passes.passes` does, whose report it keeps), and show the
    optimized program linked to the source lines, as text and as a graph with the values
    its instructions compute on the interpreter, and the passes that changed it, each
    stage shown on demand; the pass that changed the values, where one did, is marked.
    Where XLA's stages cannot be had, the page says why.
    """
    if per_device:
        call = prepare_checked(target, args, kwargs, function)
    else:
        structure = _structure_only(target, function) if not args and not kwargs else None
        call = structure or prepare(target, args, kwargs, function)
    partitioned = call.partitioned
    devices = range(partitioned.num_devices) if partitioned is not None else [None]
    statistics = {device: OpStatistics(device) for device in devices}
    wanted = model_explorer is not None
    data, trace, reports = collect(call, target, backend=backend, tolerance=tolerance,
                                   listeners=list(statistics.values()) if wanted else (), every_op=wanted,
                                   xla_stages=xla_stages)
    exploration = Exploration(data, None, trace, reports["nonfinite"], reports["comparison"],
                              traffic=reports["traffic"], passes=reports["passes"])
    if wanted and partitioned is not None:
        nonfinite = reports["nonfinite"].devices if reports["nonfinite"] is not None else {}
        by_device = {device: Findings(statistics[device], nonfinite.get(device)) for device in devices}
        exploration.model_explorer = write_model_explorer(partitioned.local, by_device, model_explorer,
                                                          call.function)
    elif wanted:
        findings = Findings(statistics[None], reports["nonfinite"], reports["comparison"])
        exploration.model_explorer = write_model_explorer(call.program, findings, model_explorer, call.function)
    if path is not None:
        exploration.write(path)
    return exploration


def _structure_only(target, function: str | None) -> Call | None:
    """A module whose function takes arguments, given none: a call that does not run
    (the page shows the program without values). None for anything else."""
    if is_jax_function(target):
        return None
    program = target if isinstance(target, Program) else load(target)
    runnable = program.runnable(function)
    return Call(program, None, runnable.name) if runnable.arg_types else None


def values_path(path) -> pathlib.Path:
    """Where the page written at ``path`` finds its whole arrays: ``f.html`` -> ``f.values.js``."""
    path = pathlib.Path(path)
    return path.with_name(path.stem + ".values.js")


def page(data: dict, values_file: str | None = None) -> str:
    """The page for collected data: the template with the styles, the layout library,
    the page's script and the data inlined. The whole arrays are inlined too (read by
    the page only when asked for), or with ``values_file``, left to that file beside
    the page. XLA's stages (``xla_stages=True``) are inlined apart too, read when the
    passes list asks for one."""
    static = resources.files(__package__) / "static"
    text = {name: (static / name).read_text(encoding="utf-8")
            for name in ("page.html", "explorer.css", "dagre.min.js", "explorer.js")}
    shown = {key: value for key, value in data.items() if key != "full_values"}
    back = None       # XLA's stages, read by the page only when asked for one
    if "back" in data.get("xla", {}):
        shown["xla"] = {key: value for key, value in data["xla"].items() if key != "back"}
        back = data["xla"]["back"]
    values = (_json(data["full_values"]) if values_file is None else _json({"file": values_file}))
    replacements = {"title": html.escape(data["title"]), "style": text["explorer.css"],
                    "dagre": text["dagre.min.js"], "script": text["explorer.js"], "data": _json(shown),
                    "values": values, "stages": _json(back)}
    return re.sub(r"\{\{(\w+)\}\}", lambda match: replacements[match[1]], text["page.html"])


def _single_quoted(text: str) -> str:
    """``text`` as the value of a single-quoted HTML attribute: only ``&`` and ``'``
    escaped (HTML's "attribute value (single-quoted) state": nothing else ends or
    changes the value), so the page's many double quotes (its JSON) grow nothing."""
    return text.replace("&", "&amp;").replace("'", "&#39;")


def _json(value) -> str:
    """JSON to inline in a script element (a ``</`` in it would end the element)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
