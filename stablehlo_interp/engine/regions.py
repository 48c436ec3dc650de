"""What a compiled region computes, recognized from its plan (a :class:`~.plan.Region`'s steps).

Ops with regions (reduce, reduce_window, scatter, select_and_scatter, sort,
map, all_reduce ...) call their region once per element, or per pair of
elements, in the spec's terms. Run literally, that is one Python call of the
body per element. Most bodies JAX emits are a handful of known shapes, which
their op builders recognize at load time and run with whole-array NumPy calls
instead:

* an **element-wise body** (only ops registered ``elementwise=True`` and 0-d
  constants): it can be called once on whole tensors, each element of the
  result depending only on the same elements of the arguments
  (:func:`is_elementwise`);
* a **monoid body**, ``return op(arg0, arg1)`` for one associative op with an
  identity (add, multiply, maximum, minimum, and, or, xor): the reduction is
  NumPy's reduction of the matching ufunc, which the spec allows since it lets
  ``reduce`` combine the elements along any tree (:func:`monoid_of`,
  :func:`monoid_ufunc`);
* JAX's **argmax/argmin body** over (value, index) pairs, which has a closed
  form (:func:`argminmax_of`).

A pattern stands for what the built-in ops compute: it is recognized only in
a region whose ops all run their built-in implementations
(:func:`runs_builtin`). An op a user registered (``si.register_op``) runs in a
body as anywhere else, so a body with one runs as written, one call per element
(or pair) on the 0-d values its types say.

Everything here reads plans only; what the ops do with a recognized pattern
is theirs (ops/reduction.py, ops/indexing.py ...). Sort's comparator analysis,
which also evaluates the comparator's own steps to compute sort keys, stays
with sort (ops/sorting.py).
"""

from __future__ import annotations

import numpy as np

from .registry import ELEMENTWISE_OPS, is_builtin

MONOID_OPS = ("stablehlo.add", "stablehlo.multiply", "stablehlo.maximum", "stablehlo.minimum",
              "stablehlo.and", "stablehlo.or", "stablehlo.xor")


def runs_builtin(region) -> bool:
    """Whether every op of ``region`` runs its built-in implementation (registry.is_builtin)."""
    return all(is_builtin(step.info.name) for step in region.steps)


def is_elementwise_step(step) -> bool:
    """Whether ``step`` is a built-in element-wise op or (0-d) constant."""
    name = step.info.name
    return (name in ELEMENTWISE_OPS or name == "stablehlo.constant") and is_builtin(name)


def is_elementwise(region) -> bool:
    """Whether ``region`` can run on whole tensors: built-in element-wise ops and (0-d) constants."""
    return all(map(is_elementwise_step, region.steps))


def monoid_of(region) -> str | None:
    """The op name if ``region`` computes ``op(arg0, arg1)`` of one built-in monoid op, else None."""
    if len(region.steps) != 1 or region.n_args != 2 or region.n_captures:
        return None
    step = region.steps[0]
    if step.info.name not in MONOID_OPS or set(step.operands) != {0, 1} or len(step.operands) != 2:
        return None
    if region.outputs != step.results or not is_builtin(step.info.name):
        return None
    return step.info.name


_BOOL_UFUNCS = {"stablehlo.add": np.logical_or, "stablehlo.multiply": np.logical_and,
                "stablehlo.maximum": np.logical_or, "stablehlo.minimum": np.logical_and,
                "stablehlo.and": np.logical_and, "stablehlo.or": np.logical_or,
                "stablehlo.xor": np.logical_xor}
_NUMBER_UFUNCS = {"stablehlo.add": np.add, "stablehlo.multiply": np.multiply,
                  "stablehlo.maximum": np.maximum, "stablehlo.minimum": np.minimum,
                  "stablehlo.and": np.bitwise_and, "stablehlo.or": np.bitwise_or,
                  "stablehlo.xor": np.bitwise_xor}


def monoid_ufunc(name: str, kind: str):
    """The NumPy ufunc of a monoid op on booleans or integers (and add/multiply on floats).

    On i1 the spec's add/multiply/maximum/minimum are OR/AND. Float maximum and
    minimum order -0.0 below +0.0 where NumPy's return either zero, and complex
    ones are lexicographic: the ops that use these ufuncs handle both."""
    return (_BOOL_UFUNCS if kind == "bool" else _NUMBER_UFUNCS)[name]


# JAX's argmax/argmin body (jax._src.lax.lax._compute_argminmax), as step
# templates over the region's slots: args 0-3 are (value, index) of the
# accumulator, then of the element; each step's result takes the next slot.
def _argminmax_template(direction: str) -> tuple:
    return (("stablehlo.compare", direction, (0, 2)), ("stablehlo.compare", "NE", (0, 0)),
            ("stablehlo.or", None, (4, 5)), ("stablehlo.compare", "EQ", (0, 2)),
            ("stablehlo.compare", "LT", (1, 3)), ("stablehlo.and", None, (7, 8)),
            ("stablehlo.or", None, (6, 9)), ("stablehlo.select", None, (6, 0, 2)),
            ("stablehlo.select", None, (10, 1, 3)))


_ARGMINMAX = {_argminmax_template("GT"): np.greater, _argminmax_template("LT"): np.less}


def argminmax_of(region):
    """``np.greater`` (argmax) or ``np.less`` (argmin) if ``region`` is JAX's
    argmax/argmin body over (values, indices) of built-in ops, else None."""
    if region.n_args != 4 or region.n_captures or region.outputs != (11, 12):
        return None
    template = tuple((step.info.name, step.info.attributes.get("comparison_direction"), step.operands)
                     for step in region.steps)
    if any(step.info.attributes.get("compare_type") == "TOTALORDER" for step in region.steps):
        return None
    return _ARGMINMAX.get(template) if runs_builtin(region) else None
