"""stablehlo_interp: a pure-Python reference interpreter for StableHLO.

    import stablehlo_interp as si
    (out,) = si.run(jax.jit(f).lower(x, y), x, y)
    program = si.load("model.mlir"); program.run(x, function="main")
"""

from .engine import Listener
from .errors import (
    ArgumentError,
    InterpreterError,
    ModuleError,
    OpError,
    OpExecutionError,
    StopExecution,
    UnsupportedOpError,
)
from .program import Program, load, run
from .registry import register_custom_call, register_op
from . import validation
from .types import TOKEN, TensorType, Token

__version__ = "0.1.0"

__all__ = [
    "ArgumentError", "InterpreterError", "Listener", "ModuleError", "OpError", "OpExecutionError",
    "Program", "StopExecution", "TOKEN", "TensorType", "Token", "UnsupportedOpError", "load",
    "register_custom_call", "register_op", "run", "validation",
]
