"""Built-in op implementations, one module per family. Importing this package
registers them all (registry.py imports it on first use)."""

from . import (  # noqa: F401
    bitwise,
    check,
    chlo,
    comparison,
    control_flow,
    conversion,
    convolution,
    custom_call,
    dynamic,
    elementwise,
    fft,
    indexing,
    io,
    lapack,
    linalg,
    normalization,
    quantization,
    random,
    reduction,
    shape,
    sharding_calls,
    sorting,
    structure,
)
