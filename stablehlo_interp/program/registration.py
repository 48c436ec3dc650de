"""Users' op implementations (``si.register_op``, ``si.register_custom_call``).

The registry (engine/registry.py) holds them; here the built-in implementations
load first, as the compiler loads them before its first module, so that what a
registration returns is the builder it replaces, the built-in one included, and
registering that builder again restores the built-in implementation::

    previous = si.register_op("stablehlo.add", my_add)
    ...                                   # modules loaded here run my_add
    si.register_op("stablehlo.add", previous)
"""

from __future__ import annotations

from .. import ops
from ..engine import registry


def register_op(name: str, builder: registry.Builder, *, variadic: bool = False,
                execution: bool = False) -> registry.Builder | None:
    """Register (or replace) the implementation of op ``name``; returns the builder it
    replaces. ``builder(info)`` is called once per op at load time and returns the
    runner (engine/registry.py: the calling convention, ``variadic``, ``execution``).

    Takes effect for modules loaded afterwards, wherever the op appears: in a
    function and in the regions of other ops, whose bodies then run as written
    (a ``reduce`` of a registered ``stablehlo.add`` calls its runner on the
    body's 0-d values, pair by pair: engine/regions.py recognizes a sum or a max
    only in bodies of built-in ops). The registration holds for the process, as
    the registry does, until the builder it returned is registered again."""
    ops.load_all()
    return registry.register_op(name, builder, variadic=variadic, execution=execution)


def register_custom_call(target: str, builder: registry.Builder, *, variadic: bool = False,
                         execution: bool = False) -> registry.Builder | None:
    """Register (or replace) the implementation of a custom-call target, as register_op."""
    ops.load_all()
    return registry.register_custom_call(target, builder, variadic=variadic, execution=execution)
