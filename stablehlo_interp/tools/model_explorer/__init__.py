"""A run's findings where users of Google's Model Explorer look: its graph of the
module, with node data (max |value|, NaN and inf counts, the NaN's origin, and the
ULP distance to another backend with its verdict) on the nodes of the ops.

    si.explore(f, x, model_explorer="me")   # writes me/module.mlir and me/*.json
    # then: model-explorer me/module.mlir --node_data_paths=me/max_abs.json,...

:mod:`.graphs` finds each op's node by Model Explorer's own adapter;
:mod:`.overlays` computes and writes the node data; :mod:`.main` is a Model
Explorer extension (``model-explorer --extensions=stablehlo_interp.tools.model_explorer``)
that runs a module opened there on inputs the user picks. Model Explorer itself
is the optional extra ``model-explorer``.
"""

from .graphs import GraphMismatch, model_explorer_graphs, node_ids
from .overlays import Findings, ModelExplorerFiles, OpStatistics, find, node_data, write

__all__ = ["Findings", "GraphMismatch", "ModelExplorerFiles", "OpStatistics", "find", "model_explorer_graphs",
           "node_data", "node_ids", "write"]
