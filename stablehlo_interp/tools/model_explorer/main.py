"""The Model Explorer extension: a node-data provider that runs the module opened in
Model Explorer on the interpreter and returns the run's overlays for the graph shown.

    model-explorer model.mlir --extensions=stablehlo_interp.tools.model_explorer

(Model Explorer loads an extension package's ``main`` module.) In its UI, the
provider "stablehlo-interp: run" asks for the inputs (one ``.npz`` file, its arrays
in order, or ``.npy`` files separated by commas), optionally a JAX backend to
compare with (``cpu``) and the function (default: the module's entry), and returns
one node data per overlay (:mod:`.overlays`) for the graph on screen.
"""

from __future__ import annotations

import pathlib

import numpy as np
from model_explorer import (GetConfigEditorsResult, NodeDataProvider, NodeDataProviderFilter,
                            NodeDataProviderMetadata, NodeDataProviderResult)
from model_explorer.config_editor import TextInputConfigEditor
from model_explorer.node_data_builder import GradientItem, GraphNodeData, NodeDataResult

from ...errors import InterpreterError
from ...program import load, prepare
from .graphs import model_explorer_graphs, node_ids
from .overlays import find, node_data

PROVIDER_ID = "stablehlo_interp_run"


class InterpreterRun(NodeDataProvider):
    """Runs the opened module on the interpreter: its overlays as node data."""

    metadata = NodeDataProviderMetadata(
        id=PROVIDER_ID,
        name="stablehlo-interp: run",
        description="Run the module on the StableHLO interpreter: per op max |value|, NaN and inf counts, "
                    "where a NaN was made, and the ULP distance to a backend",
        icon="calculate",
        filter=NodeDataProviderFilter(modelFileExts=["mlir", "mlirbc"]),
    )

    def get_config_editors(self, provider_id: str) -> GetConfigEditorsResult:
        return GetConfigEditorsResult(configEditors=[
            TextInputConfigEditor(id="inputs", label="Inputs", required=True,
                                  description="a .npz file (its arrays in order) or .npy files, comma-separated"),
            TextInputConfigEditor(id="backend", label="Compare with backend",
                                  description="a JAX platform such as cpu (empty: no comparison)"),
            TextInputConfigEditor(id="function", label="Function",
                                  description="the function to run (empty: the module's entry)"),
        ])

    def run(self, provider_id: str, model_path: str, graph_id: str, config_values: dict,
            graph=None) -> NodeDataProviderResult:
        try:
            return NodeDataProviderResult(result=overlays_of(model_path, graph_id, config_values))
        except (InterpreterError, OSError, ValueError) as error:
            return NodeDataProviderResult(error=f"{type(error).__name__}: {error}")


def overlays_of(model_path: str, graph_id: str, config_values: dict) -> list[GraphNodeData]:
    """The overlays of one run of the module at ``model_path`` for graph ``graph_id``."""
    program = load(pathlib.Path(model_path))
    inputs = read_inputs(str(config_values.get("inputs") or ""))
    call = prepare(program, inputs, {}, str(config_values.get("function") or "").strip() or None)
    findings = find(call, backend=str(config_values.get("backend") or "").strip() or None)
    nodes = node_ids(program, model_explorer_graphs(model_path))
    overlays = node_data(program, findings, nodes, call.function)
    shown = [graphs[graph_id] for graphs in overlays.values() if graph_id in graphs]
    return [GraphNodeData(results={node: NodeDataResult(**result) for node, result in data["results"].items()},
                          name=data["name"], gradient=[GradientItem(**stop) for stop in data.get("gradient", [])])
            for data in shown]


def read_inputs(text: str) -> list[np.ndarray]:
    """The arrays a config value names: one ``.npz`` file (in its order) or ``.npy`` files."""
    paths = [pathlib.Path(part.strip()).expanduser() for part in text.split(",") if part.strip()]
    if len(paths) == 1 and paths[0].suffix == ".npz":
        with np.load(paths[0]) as archive:
            return [archive[name] for name in archive.files]
    return [np.load(path) for path in paths]
