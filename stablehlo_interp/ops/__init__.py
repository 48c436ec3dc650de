"""Built-in op implementations, one module per family.

The compiler imports them all (:func:`load_all`) when it first compiles a
module, so that importing stablehlo_interp (e.g. when JAX discovers the device
plugin) does not pay for SciPy and every op module.
"""

import importlib
import sys

FAMILIES = (
    "bitwise",
    "buffer_callback",
    "check",
    "chlo",
    "collectives",
    "comparison",
    "control_flow",
    "conversion",
    "convolution",
    "dynamic",
    "elementwise",
    "fft",
    "host_callback",
    "indexing",
    "interpreter",
    "io",
    "lapack",
    "linalg",
    "normalization",
    "quantization",
    "random",
    "reduction",
    "shape",
    "sdy",
    "sharding_calls",
    "sorting",
    "sparse",
    "structure",
    "xla",
)

_MODULES = tuple(f"{__name__}.{name}" for name in FAMILIES)


def load_all() -> None:
    """Import every family module; each registers its ops by decorator (on first import)."""
    for name in _MODULES:
        if name not in sys.modules:   # (import_module costs more than this test, at every load)
            importlib.import_module(name)
