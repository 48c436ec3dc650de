"""Which node of Model Explorer's graph each op of a program is.

Model Explorer's MLIR adapter draws one graph per function (its id is the
function's name) and numbers the nodes of a graph by position: each op, then the
ops of its regions, the terminator of every region (an ``Outputs`` node) included;
arguments are ``arg<k>`` nodes, and a region's arguments ``pid<op>_arg<k>``. The
numbering differs between the text and the bytecode of one program, and may
change between its releases, so it is not written again here: Model Explorer's
own adapter converts the file (in a child process, :func:`model_explorer_graphs`),
and :func:`node_ids` pairs its op nodes, in the order of their numbers, with the
program's steps walked the same way (an op, then the ops of its regions; the
functions it calls are graphs of their own). Every pair must agree on the op's
name and its result types; any other graph is a clear error, never an overlay on
the wrong node.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from ...errors import InterpreterError

CONVERT_SECONDS = 300      # Model Explorer's adapter on one file, in a child process
OUTPUTS = "Outputs"        # the node Model Explorer draws for a region's terminator


class GraphMismatch(InterpreterError):
    """Model Explorer's graph of a module is not op for op the program's plan."""


def model_explorer_graphs(path) -> list[dict]:
    """The graphs Model Explorer draws for the MLIR file (text or bytecode) at
    ``path``: its own adapter's output (a list of graph collections, each with its
    ``subgraphs``), made in a child process. Needs the ``model-explorer`` extra."""
    script = pathlib.Path(__file__).with_name("convert_child.py")
    try:
        done = subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True,
                              timeout=CONVERT_SECONDS)
    except subprocess.TimeoutExpired as error:
        raise InterpreterError(f"Model Explorer's adapter did not convert {path} in {CONVERT_SECONDS} s") from error
    if done.returncode != 0:
        if "No module named 'ai_edge_model_explorer_adapter'" in done.stderr:
            raise InterpreterError("Model Explorer is not installed: pip install 'stablehlo-interp[model-explorer]'")
        raise InterpreterError(f"Model Explorer's adapter failed on {path} (exit {done.returncode}):\n"
                               + done.stderr.strip()[-2000:])
    return json.loads(done.stdout)


def graphs_by_id(collections: list[dict]) -> dict[str, dict]:
    """The graphs of Model Explorer's adapter output by id (a function's name)."""
    return {graph["id"]: graph for collection in collections for graph in collection["subgraphs"]}


def op_nodes(graph: dict) -> list[dict]:
    """The nodes of a Model Explorer graph that are ops, in the order of their numbers
    (arguments and the regions' terminators left out)."""
    numbered = [node for node in graph["nodes"] if node["id"].isdigit() and node["label"] != OUTPUTS]
    return sorted(numbered, key=lambda node: int(node["id"]))


def plan_order(region):
    """The steps of a function's region as Model Explorer numbers its ops: each step,
    then the steps of its regions (a called function's body is a graph of its own)."""
    for step in region.steps:
        yield step
        for inner in step.regions:
            if not inner.description.startswith("@"):
                yield from plan_order(inner)


def node_ids(program, collections: list[dict]) -> dict[int, tuple[str, str, object]]:
    """``id(step) -> (graph id, node id, step)`` for every step of the program's
    functions, from Model Explorer's graphs of its module (module docstring)."""
    graphs = graphs_by_id(collections)
    found = {}
    for name, function in program.functions.items():
        if function.region is None:
            continue
        if name not in graphs:
            raise GraphMismatch(f"Model Explorer's graphs have none for @{name} (it has {sorted(graphs)})")
        steps, nodes = list(plan_order(function.region)), op_nodes(graphs[name])
        for step, node in zip(steps, nodes):
            if node["label"] != step.info.name or node_types(node) != [str(t) for t in step.info.result_types]:
                raise GraphMismatch(f"in @{name}, Model Explorer's node {node['id']} is {node['label']} "
                                    f"{node_types(node)} where the program has {step.info.name} "
                                    f"{[str(t) for t in step.info.result_types]}")
            found[id(step)] = (name, node["id"], step)
        if len(steps) != len(nodes):
            raise GraphMismatch(f"in @{name}, Model Explorer draws {len(nodes)} ops, the program has {len(steps)}")
    return found


def node_types(node: dict) -> list[str | None]:
    """The result types Model Explorer shows for a node (``tensor<3x4xf32>``; None where it shows none)."""
    types = []
    for output in node.get("outputsMetadata", []):
        shape = next((attr["value"] for attr in output["attrs"] if attr["key"] == "tensor_shape"), None)
        types.append(shape)
    return types
