"""How a JAX function's arguments and results map to its module's ``@main``.

``jax.jit(f).lower(*args, **kwargs)`` makes a module whose ``@main`` takes the
flat leaves of ``(args, kwargs)``, with these differences from ``f``'s call,
all recorded by JAX and read here from its records, never re-derived:

* static arguments are no arguments of the module (their values are built in);
* leaves the function never uses are dropped (the lowering's ``kept_var_idx``,
  an ``Exported``'s ``module_kept_var_idx``);
* constants JAX hoists out of the program come first (the lowering's ``const_args``);
* a module lowered for several platforms takes the platform's index first
  (an argument marked ``jax.global_constant = "_platform_index"``);
* ordered effects thread tokens (arguments and results marked ``jax.token``).

The results are the leaves of the function's output pytree (``out_tree``),
after the effect tokens.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentError, ModuleError
from ..ir.types import TOKEN

# The platforms whose lowering the interpreter runs when a module has several, best first.
_PREFERRED_PLATFORMS = ("interp", "cpu")
_MAX_STATIC_PLACEMENTS = 4096   # ways to place static arguments tried before giving up
_MISSING = object()


def is_jax_function(target) -> bool:
    """A Python function or a jitted one (``Lowered``/``Exported`` are callable too, but
    are modules; so is a ``Compiled``)."""
    if not callable(target) or isinstance(target, type):
        return False
    return not any(hasattr(target, name) for name in ("compiler_ir", "mlir_module_serialized", "runtime_executable"))


@dataclass(frozen=True)
class JaxSignature:
    """The calling convention of a module made by JAX: what ``f(*args, **kwargs)``
    passes to ``@main`` and how ``@main``'s results become ``f``'s output pytree."""

    name: str
    in_tree: object          # PyTreeDef of (args, kwargs), static arguments left out
    in_avals: tuple          # per leaf of in_tree: its ShapedArray
    kept: frozenset          # the leaves that are arguments of @main
    const_args: tuple        # values JAX passes before the leaves
    out_tree: object         # PyTreeDef of the function's output
    platforms: tuple         # the platforms it was lowered for

    @classmethod
    def of(cls, source) -> "JaxSignature | None":
        """The signature of a ``jax.stages.Lowered`` or a ``jax.export.Exported``; None for
        a module in any other form (it is called with ``@main``'s own arguments)."""
        if not type(source).__module__.startswith(("jax", "jaxlib")):
            return None
        import jax

        if isinstance(source, jax.stages.Lowered):
            lowering = source._lowering
            const_args = tuple(np.asarray(value) for value in getattr(lowering, "const_args", ()))
            offset = len(const_args)  # kept_var_idx counts the hoisted constants first
            kept = frozenset(i - offset for i in lowering.compile_args["kept_var_idx"] if i >= offset)
            return cls(_lowered_name(source), source.in_tree, tuple(jax.tree.leaves(source.in_avals)), kept,
                       const_args, source.out_tree, tuple(getattr(lowering, "_platforms", None) or ()))
        if isinstance(source, jax.export.Exported):
            return cls(source.fun_name, source.in_tree, tuple(source.in_avals),
                       frozenset(source.module_kept_var_idx), (), source.out_tree, tuple(source.platforms))
        if isinstance(source, jax.stages.Compiled):
            raise ModuleError("a jax.stages.Compiled holds XLA's compiled executable, not StableHLO: pass the "
                              "Lowered it was compiled from (jax.jit(f).lower(*args)), or the function")
        return None

    def __str__(self) -> str:
        args, kwargs = self.in_tree.unflatten([_Shown(a.str_short(short_dtypes=True)) for a in self.in_avals])
        return f"{self.name}{_call_text(args, kwargs)}"

    def arguments(self, main, args: tuple, kwargs: dict, static_argnums=None) -> list:
        """``@main``'s arguments for the call ``f(*args, **kwargs)``, not yet checked
        against its types. ``static_argnums``: the positions of static arguments when
        known (a jitted function's); else they are found by structure (see
        :meth:`dynamic_arguments`)."""
        import jax

        dynamic = self.dynamic_arguments(args, kwargs, static_argnums)
        leaves, tree = jax.tree.flatten(dynamic)
        if tree != self.in_tree:
            raise self.mismatch(args, kwargs, self._tree_difference(tree))
        values = iter([*self.const_args, *(as_argument(leaf) for i, leaf in enumerate(leaves) if i in self.kept)])
        module_args = []
        for arg_type, attributes in zip(main.arg_types, main.arg_attributes):
            if attributes.get("jax.token"):
                module_args.append(TOKEN)
            elif attributes.get("jax.global_constant") == "_platform_index":
                module_args.append(np.asarray(self.platform_index, arg_type.dtype))
            else:
                module_args.append(next(values, _MISSING))
        if any(value is _MISSING for value in module_args) or next(values, _MISSING) is not _MISSING:
            raise ModuleError(f"@{main.name} of {self.name}'s module does not take the {len(self.kept)} arguments "
                              f"JAX's records give it: it takes {len(main.arg_types)}")
        return module_args

    @property
    def platform_index(self) -> int:
        """The platform whose lowering runs, for a module lowered for several."""
        preferred = [p for p in _PREFERRED_PLATFORMS if p in self.platforms]
        return self.platforms.index(preferred[0]) if preferred else 0

    def dynamic_arguments(self, args: tuple, kwargs: dict, static_argnums=None) -> tuple:
        """``(args, kwargs)`` without the static arguments.

        Keyword arguments the lowering did not see are static. A lowering does not
        record where its static positional arguments were: unless ``static_argnums``
        says, they are the extra positions whose removal leaves exactly one way for
        the others to have the lowering's pytree structure, shapes and dtypes (JAX's
        static arguments are hashable, so never arrays)."""
        expected_args, expected_kwargs = self.in_tree.unflatten(self.in_avals)
        missing = [name for name in expected_kwargs if name not in kwargs]
        if missing:
            raise self.mismatch(args, kwargs, f"missing keyword argument(s) {', '.join(missing)}")
        dynamic_kwargs = {name: value for name, value in kwargs.items() if name in expected_kwargs}
        if len(args) < len(expected_args):
            raise self.mismatch(args, kwargs, f"{len(args)} positional argument(s) for {len(expected_args)}")
        if static_argnums is not None:
            static = {i % len(args) for i in static_argnums if -len(args) <= i < len(args)}
            kept = [i for i in range(len(args)) if i not in static]
            if len(kept) != len(expected_args):
                raise self.mismatch(args, kwargs, f"{len(kept)} dynamic positional argument(s) for "
                                                  f"{len(expected_args)}")
        elif len(args) == len(expected_args):
            kept = list(range(len(args)))
        else:
            kept = self._placement(args, expected_args, kwargs)
        return tuple(args[i] for i in kept), dynamic_kwargs

    def _placement(self, args: tuple, expected_args: tuple, kwargs: dict) -> list:
        """The one choice of positions for the dynamic arguments (the rest are static)."""
        choices = itertools.islice(itertools.combinations(range(len(args)), len(expected_args)),
                                   _MAX_STATIC_PLACEMENTS)
        fitting = [kept for kept in choices
                   if all(_hashable(args[i]) for i in set(range(len(args))) - set(kept))
                   and all(_fits(args[i], aval) for i, aval in zip(kept, expected_args))][:2]
        if len(fitting) == 1:
            return list(fitting[0])
        extra = len(args) - len(expected_args)
        if not fitting:
            raise self.mismatch(args, kwargs, f"no {extra} of the {len(args)} positional arguments can be the "
                                              "static ones")
        raise self.mismatch(args, kwargs, f"which {extra} of the {len(args)} positional arguments are static is "
                                          "ambiguous: pass only the others (as a Compiled is called), or the "
                                          "jitted function")

    def results(self, main, outputs: list):
        """``@main``'s results as the function's output pytree (effect tokens dropped)."""
        values = [value for value, attributes in zip(outputs, main.result_attributes)
                  if not attributes.get("jax.token")]
        if len(values) != self.out_tree.num_leaves:
            raise ModuleError(f"@{main.name} of {self.name}'s module returns {len(values)} values; the function's "
                              f"output has {self.out_tree.num_leaves}")
        return self.out_tree.unflatten(values)

    def mismatch(self, args, kwargs, detail: str) -> ArgumentError:
        """An error showing the expected call next to the given one, in the function's terms."""
        import jax

        expected_args, expected_kwargs = self.in_tree.unflatten(self.in_avals)
        given = jax.tree.map(lambda leaf: _Shown(_leaf_text(leaf)), (args, kwargs), is_leaf=lambda x: x is None)
        statics = (" (its static arguments left out)" if len(args) > len(expected_args)
                   or set(kwargs) - set(expected_kwargs) else "")
        return ArgumentError(f"{self} is the call {self.name} was lowered for{statics}; it was called as "
                             f"{self.name}{_call_text(*given)}: {detail}")

    def _tree_difference(self, tree) -> str:
        """Where the structure of the dynamic arguments (``tree``) differs from the lowering's."""
        import jax

        (given_args, given_kwargs), (expected_args, expected_kwargs) = (
            tree.unflatten([_Shown("*")] * tree.num_leaves),
            self.in_tree.unflatten([_Shown("*")] * self.in_tree.num_leaves))
        places = [(f"argument #{i}", g, e) for i, (g, e) in enumerate(zip(given_args, expected_args))]
        places += [(f"argument {name}", given_kwargs[name], e) for name, e in expected_kwargs.items()]
        for place, given, expected in places:
            if jax.tree.structure(given) != jax.tree.structure(expected):
                return f"{place} has the structure {given!r}, the lowering's was {expected!r}"
        return "the pytree structure differs"


def as_argument(leaf):
    """A pytree leaf as the value the module receives: JAX arrays to NumPy, with
    JAX's canonical dtype (float64 becomes float32 unless x64 is on), a PRNG key as
    its key data (JAX lowers a key to it: ``uint32[..., 2]`` for threefry). Python
    scalars are left to Program.run, which converts them to the argument type."""
    import jax

    if isinstance(leaf, (bool, int, float, complex)):
        return leaf
    if jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.extended):
        leaf = jax.random.key_data(leaf)
    array = np.asarray(leaf)
    try:
        return array.astype(jax.dtypes.canonicalize_dtype(array.dtype), copy=False)
    except TypeError as error:
        raise ArgumentError(f"cannot pass {type(leaf).__name__} to a jitted function: {error}") from None


def _lowered_name(lowered) -> str:
    name = getattr(lowered._lowering, "_name", None) or "main"   # "jit(f)"
    return name[len("jit("):-1] if name.startswith("jit(") and name.endswith(")") else name


def _fits(value, expected) -> bool:
    """Whether ``value`` has the pytree structure and the leaf types of ``expected``
    (a pytree of ShapedArrays; symbolic dimensions take any size)."""
    import jax

    values, tree = jax.tree.flatten(value)
    avals, expected_tree = jax.tree.flatten(expected)
    if tree != expected_tree:
        return False
    for leaf, aval in zip(values, avals):
        try:
            given = jax.typeof(leaf)
        except TypeError:
            return False
        if given.dtype != aval.dtype or len(given.shape) != len(aval.shape) or any(
                type(want) is int and want != got for got, want in zip(given.shape, aval.shape)):
            return False
    return True


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _leaf_text(leaf) -> str:
    import jax

    if leaf is None:
        return "None"
    if isinstance(leaf, (bool, int, float, complex)):
        return type(leaf).__name__
    try:
        return jax.typeof(leaf).str_short(short_dtypes=True)
    except TypeError:
        return repr(leaf)


class _Shown:
    """A leaf printed as its text (a type such as ``f32[3]``)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _call_text(args, kwargs) -> str:
    parts = [repr(a) for a in args] + [f"{name}={value!r}" for name, value in kwargs.items()]
    return f"({', '.join(parts)})"
