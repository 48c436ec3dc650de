"""The one place that maps op names and custom-call targets to implementations.

An implementation is a *builder*: a function called once per op at load time
with the op's :class:`~stablehlo_interp.engine.plan.OpInfo` (decoded attributes,
types, compiled regions, location). It returns the *runner*, the callable that
the run loop calls with the op's operand values (NumPy arrays, tokens, tuples).

The calling convention of the runner is declared with the builder:

* ``runner(*operands)`` returns the op's one result. The compiler refuses an op
  with any other number of results unless the builder is ``variadic``.
* ``variadic=True``: the runner returns a sequence (tuple or list) of all the
  op's results, however many there are (none, one, several); the run loop
  checks the count.
* Ops with regions get their bound regions first: ``runner(regions, *operands)``,
  each region callable as ``region(*block_args) -> list of values``.
* ``execution=True``: the runner gets the run's
  :class:`~stablehlo_interp.engine.run.Execution` first (its process in a grid,
  the run context with the host queues), before the regions if any:
  ``runner(execution, *operands)`` or ``runner(execution, regions, *operands)``.

Runners must never modify their operands in place.

Example::

    @op("stablehlo.transpose")
    def transpose(info):
        permutation = info.attributes["permutation"]
        return lambda operand: operand.transpose(permutation)
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .plan import OpInfo

Builder = Callable[["OpInfo"], Callable]
ScalarBuilder = Callable[["OpInfo"], "Callable | None"]   # Implementation.scalar
CUSTOM_CALL = "stablehlo.custom_call"   # dispatched on call_target_name to the custom-call table


@dataclass(frozen=True)
class Implementation:
    """A builder and the calling convention of the runners it returns (module docstring)."""

    builder: Builder
    variadic: bool = False
    execution: bool = False
    # Whether the runner depends on nothing but the op's name, attributes and types
    # (not its location, module or regions), so that equal ops may share one runner
    # (the built-in element-wise ops; a chain of 10 000 adds on f32[4] builds one).
    shareable: bool = False
    # The builder of a runner for the op with 0-d results (an element-wise op's operands
    # are 0-d too), or None: ``scalar(info)`` returns a runner of the op's calling
    # convention, or None where the op's types have none. The unobserved run loop calls
    # it instead of the runner (engine/passes/flatten.py); it must give what the runner
    # gives, bit for bit, on NumPy scalars and 0-d arrays alike (ops/scalars.py), its
    # 0-d results as NumPy scalars where it can.
    scalar: ScalarBuilder | None = None

class _Table:
    """The implementations of one kind of name (ops, or custom-call targets): the
    built-in ones (stablehlo_interp.ops registers them by decorator when the compiler
    loads it) and the ones users register, which take precedence."""

    def __init__(self):
        self.builtin: dict[str, Implementation] = {}
        self.user: dict[str, Implementation] = {}

    def implementation(self, name: str) -> Implementation | None:
        return self.user.get(name) or self.builtin.get(name)

    def builder(self, name: str) -> Builder | None:
        implementation = self.implementation(name)
        return implementation.builder if implementation else None

    def register(self, name: str, implementation: Implementation) -> Builder | None:
        """A user's implementation for ``name``; the built-in builder again (or None, what
        registering a name without one returns) drops the user's. Returns the builder
        that applied before."""
        previous = self.builder(name)
        builtin = self.builtin.get(name)
        if implementation.builder is None or (builtin is not None and implementation.builder is builtin.builder):
            self.user.pop(name, None)
        else:
            self.user[name] = implementation
        return previous

    def names(self) -> list[str]:
        return sorted(self.builtin.keys() | self.user.keys())


_OPS, _CUSTOM_CALLS = _Table(), _Table()
# Ops whose result element i depends only on operand elements i (and that accept
# any shape): a region made of these can run on whole tensors at once.
ELEMENTWISE_OPS: set[str] = set()


def op(*names: str, elementwise: bool = False, variadic: bool = False, execution: bool = False,
       scalar: ScalarBuilder | None = None):
    """Decorator: register a builder for one or more op names (module docstring);
    ``scalar``: the builder of its runners on 0-d values (Implementation.scalar)."""

    def decorate(builder: Builder) -> Builder:
        for name in names:
            _OPS.builtin[name] = Implementation(builder, variadic, execution, shareable=elementwise, scalar=scalar)
            if elementwise:
                ELEMENTWISE_OPS.add(name)
        return builder

    return decorate


def custom_call(*targets: str, variadic: bool = False, execution: bool = False):
    """Decorator: register a builder for ``stablehlo.custom_call`` targets; it receives
    the custom call's OpInfo."""

    def decorate(builder: Builder) -> Builder:
        for target in targets:
            _CUSTOM_CALLS.builtin[target] = Implementation(builder, variadic, execution)
        return builder

    return decorate


def register_op(name: str, builder: Builder, *, variadic: bool = False,
                execution: bool = False) -> Builder | None:
    """Register (or replace) the implementation of an op; returns the previous builder
    (the built-in ones once stablehlo_interp.ops is loaded: si.register_op,
    program/registration.py, loads them first). Registering the previous builder
    again restores what was: the built-in implementation, its calling convention
    included, or none (for None).
    Takes effect for modules loaded afterwards, in regions too (engine/regions.py)."""
    return _OPS.register(name, Implementation(builder, variadic, execution))


def register_custom_call(target: str, builder: Builder, *, variadic: bool = False,
                         execution: bool = False) -> Builder | None:
    """Register (or replace) the implementation of a custom-call target, as register_op."""
    return _CUSTOM_CALLS.register(target, Implementation(builder, variadic, execution))


@contextlib.contextmanager
def replaced(ops: dict | None = None, custom_calls: dict | None = None):
    """``with replaced(ops={name: builder}, custom_calls={target: builder}):`` the builders
    are registered for the block, each with the calling convention of the
    implementation it replaces; afterwards the registrations are as they were."""
    replacements = [(_OPS, ops or {}), (_CUSTOM_CALLS, custom_calls or {})]
    saved = [(table, name, table.user.get(name)) for table, builders in replacements for name in builders]
    try:
        for table, builders in replacements:
            for name, builder in builders.items():
                previous = table.implementation(name)
                table.user[name] = (dataclasses.replace(previous, builder=builder, shareable=False, scalar=None)
                                    if previous else Implementation(builder))
        yield
    finally:
        for table, name, entry in saved:
            if entry is None:
                table.user.pop(name, None)
            else:
                table.user[name] = entry


def op_implementation(name: str) -> Implementation | None:
    return _OPS.implementation(name)


def custom_call_implementation(target: str) -> Implementation | None:
    return _CUSTOM_CALLS.implementation(target)


def is_builtin(name: str) -> bool:
    """Whether op ``name`` runs its built-in builder (no user's registration replaces
    it): only a region of such ops may be computed by a pattern engine/regions.py
    recognizes in it, since its steps compute what the built-in ops compute."""
    builtin = _OPS.builtin.get(name)
    return builtin is not None and _OPS.builder(name) is builtin.builder


def op_builder(name: str) -> Builder | None:
    return _OPS.builder(name)


def custom_call_builder(target: str) -> Builder | None:
    return _CUSTOM_CALLS.builder(target)


def registered_ops() -> list[str]:
    """Every op with an implementation (the built-in ones once stablehlo_interp.ops is
    loaded); ``stablehlo.custom_call`` dispatches to the custom-call targets."""
    return sorted({*_OPS.names(), CUSTOM_CALL})


def registered_custom_calls() -> list[str]:
    return _CUSTOM_CALLS.names()
