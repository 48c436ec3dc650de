"""The ``interp`` JAX device: a PJRT plugin, in Python, that runs programs on the interpreter."""

from .plugin import initialize
from .runtime import listeners

__all__ = ["initialize", "listeners"]
