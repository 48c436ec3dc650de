"""Programs: a module compiled into plans with the registered ops, run on NumPy values;
the front door (calls.py) that calls one as a JAX function or as its module."""

from .calls import Call, prepare, run
from .program import Program, coerce_arguments, load
from .signature import JaxSignature

__all__ = ["Call", "JaxSignature", "Program", "coerce_arguments", "load", "prepare", "run"]
