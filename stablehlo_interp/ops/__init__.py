"""Built-in op implementations, one module per family. Importing this package
registers them all (registry.py imports it on first use)."""

from . import (  # noqa: F401
    bitwise,
    check,
    comparison,
    control_flow,
    conversion,
    custom_call,
    elementwise,
    linalg,
    reduction,
    shape,
    structure,
)
