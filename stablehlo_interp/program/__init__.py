"""Programs: a module compiled into plans with the registered ops, run on NumPy values."""

from .program import Program, coerce_arguments, load, run

__all__ = ["Program", "coerce_arguments", "load", "run"]
