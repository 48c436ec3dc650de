"""Model Explorer's own MLIR adapter (``ai_edge_model_explorer_adapter``, a C++ library
that may abort on what it cannot read) on one file: run as a child process by
:func:`~.graphs.model_explorer_graphs`, it prints the graphs JSON that Model Explorer
draws. It imports nothing of stablehlo_interp, so the child starts quickly."""

import sys

import ai_edge_model_explorer_adapter as adapter

if __name__ == "__main__":
    sys.stdout.write(adapter.ConvertMlirToJson(adapter.VisualizeConfig(), sys.argv[1]))
