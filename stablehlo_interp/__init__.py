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

import os
import sys


def _quiet_native_logging_in_the_command() -> None:
    """In the ``stablehlo-interp`` command (its console script, or ``python -m
    stablehlo_interp``), XLA's and PJRT's C++ logging shows only errors, unless the
    command's ``-v``/``--verbose`` (before the subcommand) asks for all of it.

    The C++ libraries read ``TF_CPP_MIN_LOG_LEVEL`` once, when jaxlib loads, which
    importing this package does (below): so it is set here, before, and the child
    processes the command starts inherit it. A level the user set is kept. A library
    user's process is left as it is."""
    arguments = sys.argv[1:]
    options = arguments[:next((i for i, a in enumerate(arguments) if not a.startswith("-")), len(arguments))]
    if "-v" in options or "--verbose" in options:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    else:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")   # errors only (1: warnings too, 0: everything)


def _is_the_command() -> bool:
    """Whether this import is that of the ``stablehlo-interp`` command, before it runs."""
    if os.path.basename(sys.argv[0]).removesuffix(".exe") == "stablehlo-interp":
        return True
    arguments = getattr(sys, "orig_argv", [])   # python -m: sys.argv[0] is "-m" until the module runs
    return sys.argv[:1] == ["-m"] and any(a == "-m" and b == __name__ for a, b in zip(arguments, arguments[1:]))


if _is_the_command():
    _quiet_native_logging_in_the_command()

# ruff: noqa: E402 - the package is imported after the logging level is set
# JAX before jaxlib: JAX sets the C++ libraries' logging level as it loads (TF_CPP_MIN_LOG_LEVEL=1
# unless set: warnings and errors), and they read it when jaxlib first loads, which the modules
# below do through jaxlib.mlir: first, they left it at 0, and every program that imported this
# package got a dozen INFO lines from PJRT as its backends started.
import jax  # noqa: F401
from . import toolbox
from .engine.hostio import HostQueues
from .engine.run import Listener
from .errors import (ArgumentError, InterpreterError, ModuleError, OpError, OpExecutionError, StopExecution,
                     UnsupportedOpError)
from .ir.types import TOKEN, TensorType, Token
from .program import Program, load, run
from .program.registration import register_custom_call, register_op

__version__ = "0.1.0"

# The tools load on first use (toolbox.py: each tool's module, and what si exports of it):
# JAX imports this package when it discovers the device plugin, and most programs never
# need them.
_TOOL_EXPORTS = toolbox.exports()


def __getattr__(name: str) -> Any:
    import importlib

    if name == "tools":
        return importlib.import_module(f"{__name__}.tools")   # (from . import would recurse here)
    if name in _TOOL_EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_TOOL_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'stablehlo_interp' has no attribute {name!r}")


# The tools' names come from the one table of them (toolbox.py), not from a second list here.
__all__ = [  # noqa: PLE0604
    "ArgumentError", "HostQueues", "InterpreterError", "Listener", "ModuleError", "OpError", "OpExecutionError",
    "Program", "StopExecution", "TOKEN", "TensorType", "Token", "UnsupportedOpError", "load",
    "register_custom_call", "register_op", "run", "tools", *_TOOL_EXPORTS,
]
