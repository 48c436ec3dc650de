"""The one place that maps op names and custom-call targets to implementations.

An implementation is a *builder*: a function called once per op at load time
with the op's :class:`~stablehlo_interp.engine.plan.OpInfo` (decoded attributes,
types, compiled regions, location). It returns the *runner*, the callable that
the run loop calls with the op's operand values (NumPy arrays, tokens, tuples).
A runner returns the op's result, or a tuple of results when the op has several.
Ops with regions get their bound regions first: ``runner(regions, *operands)``,
each region callable as ``region(*block_args) -> list of values``.

Runners must never modify their operands in place.

Example::

    @op("stablehlo.transpose")
    def transpose(info):
        permutation = info.attributes["permutation"]
        return lambda operand: operand.transpose(permutation)
"""

from __future__ import annotations

from typing import Callable

Builder = Callable[["OpInfo"], Callable]  # noqa: F821

# The built-in implementations (stablehlo_interp.ops registers them by decorator when
# the compiler loads it) and the ones users register, which take precedence.
_OPS: dict[str, Builder] = {}
_CUSTOM_CALLS: dict[str, Builder] = {}
_USER_OPS: dict[str, Builder] = {}
_USER_CUSTOM_CALLS: dict[str, Builder] = {}
# Ops whose result element i depends only on operand elements i (and that accept
# any shape): a region made of these can run on whole tensors at once.
ELEMENTWISE_OPS: set[str] = set()


def op(*names: str, elementwise: bool = False):
    """Decorator: register a builder for one or more op names."""

    def decorate(builder: Builder) -> Builder:
        for name in names:
            _OPS[name] = builder
            if elementwise:
                ELEMENTWISE_OPS.add(name)
        return builder

    return decorate


def custom_call(*targets: str):
    """Decorator: register a builder for ``stablehlo.custom_call`` targets."""

    def decorate(builder: Builder) -> Builder:
        for target in targets:
            _CUSTOM_CALLS[target] = builder
        return builder

    return decorate


def register_op(name: str, builder: Builder) -> Builder | None:
    """Register (or replace) the implementation of an op; returns the previous one.

    Takes effect for modules loaded afterwards. A user's registration wins over
    the built-in one whenever it was made.
    """
    previous = op_builder(name)
    _USER_OPS[name] = builder
    return previous


def register_custom_call(target: str, builder: Builder) -> Builder | None:
    """Register (or replace) the implementation of a custom-call target."""
    previous = custom_call_builder(target)
    _USER_CUSTOM_CALLS[target] = builder
    return previous


def unregister_op(name: str) -> None:
    """Drop a user's registration (the built-in implementation, if any, applies again)."""
    _USER_OPS.pop(name, None)


def unregister_custom_call(target: str) -> None:
    _USER_CUSTOM_CALLS.pop(target, None)


def op_builder(name: str) -> Builder | None:
    return _USER_OPS.get(name) or _OPS.get(name)


def custom_call_builder(target: str) -> Builder | None:
    return _USER_CUSTOM_CALLS.get(target) or _CUSTOM_CALLS.get(target)


def registered_ops() -> list[str]:
    """Every op with an implementation (the built-in ones once stablehlo_interp.ops is loaded)."""
    return sorted(_OPS.keys() | _USER_OPS.keys())


def registered_custom_calls() -> list[str]:
    return sorted(_CUSTOM_CALLS.keys() | _USER_CUSTOM_CALLS.keys())
