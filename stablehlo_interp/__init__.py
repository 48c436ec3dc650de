"""stablehlo_interp: a pure-Python reference interpreter for StableHLO.

    import stablehlo_interp as si
    out = si.run(jax.jit(f), x, y)          # or a Lowered, an Exported: called as the function
    program = si.load("model.mlir"); program.run(x, function="main")   # a module: @main's arguments
    print(si.trace(f, x)); si.find_nonfinite(f, x); si.compare(f, x, backend="cpu"); si.explain(f, x)
    print(si.conform("tests/", backend="cpu").table())   # judge a backend with StableHLO-style test files
    print(si.fuzz(backend="cpu", seed=0, count=50).markdown())   # random programs; differences reduced
    si.explore(f, x, path="f.html")         # one page: source, jaxpr, StableHLO, graph and values, linked
"""

from typing import Any

from .engine.run import Listener
from .errors import (
    ArgumentError,
    InterpreterError,
    ModuleError,
    OpError,
    OpExecutionError,
    StopExecution,
    UnsupportedOpError,
)
from .engine.hostio import HostQueues
from .program import Program, load, run
from .program.registration import register_custom_call, register_op
from .ir.types import TOKEN, TensorType, Token

__version__ = "0.1.0"

# The tools load on first use: JAX imports this package when it discovers the
# device plugin, and most programs never need them.
_TOOLS = ("break_at", "compare", "debug", "explain", "explore", "find_nonfinite", "fuzz", "load_probes",
          "on_device", "portability", "probe", "profile", "run_per_device", "trace")


def __getattr__(name: str) -> Any:
    if name == "conform":
        from .frontends.conform import conform

        return conform
    if name in _TOOLS or name in ("tools", "validation"):
        import importlib

        tools = importlib.import_module(f"{__name__}.tools")  # (from . import would recurse here)
        return tools if name == "tools" else getattr(tools, name)
    raise AttributeError(f"module 'stablehlo_interp' has no attribute {name!r}")

__all__ = [
    "ArgumentError", "HostQueues", "InterpreterError", "Listener", "ModuleError", "OpError",
    "OpExecutionError",
    "Program", "StopExecution", "TOKEN", "TensorType", "Token", "UnsupportedOpError", "load",
    "conform", "register_custom_call", "register_op", "run", "run_per_device", "validation",
    # tools (see docs/tools.md)
    "break_at", "compare", "debug", "explain", "explore", "find_nonfinite", "fuzz", "load_probes", "on_device",
    "portability", "probe", "profile", "tools", "trace",
]
