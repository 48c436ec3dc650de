"""A sharded program and a backend that differs from the interpreter on one device
only, for the explorer's per-device comparison (tests/test_tools_explorer.py and
tests/test_explorer_browser.py)."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def doubled_and_off_on_device_2():
    """``(function, x, backend)``: ``x * 2`` of an f32[8, 16] sharded by rows over 8
    devices, resharded to columns (device 2 holds columns 4-5), and a backend whose
    global result is off by one at row 0, column 5."""
    mesh = Mesh(np.array(jax.devices("cpu")[:8]), ("x",))
    x = jax.device_put(np.arange(128, dtype=np.float32).reshape(8, 16), NamedSharding(mesh, P("x", None)))
    columns = NamedSharding(mesh, P(None, "x"))

    def off_by_one(module_text, arguments):
        wrong = np.asarray(arguments[0]) * 2
        wrong[0, 5] += 1
        return [wrong]

    return jax.jit(lambda v: jax.lax.with_sharding_constraint(v * 2, columns)), x, off_by_one
