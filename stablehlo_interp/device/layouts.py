"""Memory layouts: the physical order of a buffer's elements, as XLA's CPU keeps them.

A layout is XLA's ``minor_to_major``: the dimensions from the fastest-varying to
the slowest (``(1, 0)`` is a row-major matrix, ``(0, 1)`` a column-major one).
The interpreter computes on logical arrays, so a layout changes no value: it is
where the bytes of a buffer go when they leave it (``np.asarray`` reads the
buffer in place, ``ToHostBuffer``, ``CopyRawToHost``, ``unsafe_buffer_pointer``)
and what the device reports to JAX (the Layouts extension, pjrt/calls_layouts.py).
Dense layouts only: XLA's tiles and packed sub-byte elements are refused.

JAX asks for layouts through the ``mhlo.layout_mode`` attribute of the entry
function's arguments and results (``jax.jit(f, in_shardings=Format(...))``,
``device_put(x, Format(layout, sharding))``, which is a jitted identity):
``"default"`` (or no attribute) is row-major, ``"{0,1}"`` a concrete layout in
XLA's text, ``"auto"`` the layout XLA's layout assignment picks. For ``auto``
the device follows what XLA's CPU picks, measured on jaxlib 0.10.2
(:func:`assign`): parameters are row-major; inside the program every value is
row-major except where an op makes a bitcast of its operand, whose layout it
then carries: a transpose (the permuted layout of its operand), an
element-wise op whose layout-carrying operands agree (broadcasts and constants
carry none), a reduce (its operand's layout without the reduced dimensions), a
reshape that only inserts or removes dimensions of size 1 (XLA puts those most
major), the annotations that forward their operand (``sdy.sharding_constraint``
...), and the ``LayoutConstraint`` custom call of
``with_sharding_constraint(x, Format(layout, s))``, whose result takes the
layout it names. A ``func.call`` passes its operands' layouts into its body (XLA
inlines calls). A result that is a parameter keeps the parameter's layout. XLA's algebraic simplifier rewrites some programs before
it assigns layouts; two of its rewrites are followed here (a transpose of a
broadcast is a broadcast, a transpose that moves only dimensions of size 1 is a
reshape), others are not (docs/device.md, "Layouts").
"""

from __future__ import annotations

from ..engine.registry import ELEMENTWISE_OPS
from ..ir.types import TensorType

AUTO, DEFAULT = "auto", "default"
LAYOUT_MODE = "mhlo.layout_mode"

# Ops whose result is their operand, unchanged (annotations): the result keeps its layout.
_FORWARDING_OPS = frozenset({"sdy.sharding_constraint", "sdy.reshard", "stablehlo.optimization_barrier"})
_FORWARDING_CALLS = frozenset({"Sharding", "annotate_device_placement", "MoveToHost", "MoveToDevice",
                               "xla.sdy.FuncResultSharding"})
# Ops whose result takes any layout its users want: they carry none into an element-wise op.
_LAYOUT_FREE_OPS = frozenset({"stablehlo.constant", "stablehlo.broadcast_in_dim", "stablehlo.iota"})
LAYOUT_CONSTRAINT = "LayoutConstraint"


def row_major(rank: int) -> tuple:
    """The default layout of arrays of ``rank`` dimensions: dense row-major."""
    return tuple(range(rank - 1, -1, -1))


def major_to_minor(minor_to_major: tuple) -> tuple:
    return tuple(reversed(minor_to_major))


def parse(text: str, rank: int, what: str) -> tuple:
    """A concrete layout in XLA's text (``"{1,0}"``), checked against ``rank``."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise ValueError(f"{what}: cannot read the layout {text!r}")
    body = body[1:-1]
    if ":" in body:
        raise NotImplementedError(f"{what}: the layout {text!r} has tiles or a packed element size; the interp "
                                  "device keeps dense layouts only")
    try:
        minor_to_major = tuple(int(part) for part in body.split(",")) if body.strip() else ()
    except ValueError:
        raise ValueError(f"{what}: cannot read the layout {text!r}") from None
    check(minor_to_major, rank, what)
    return minor_to_major


def check(minor_to_major: tuple, rank: int, what: str) -> None:
    if sorted(minor_to_major) != list(range(rank)):
        raise ValueError(f"{what}: the layout {{{','.join(map(str, minor_to_major))}}} is not a permutation of "
                         f"the {rank} dimension(s)")


def _rank(value_type) -> int:
    return len(value_type.shape) if isinstance(value_type, TensorType) else 0


def _declared(attributes: dict, value_type, what: str) -> tuple | str:
    """A parameter's or result's layout as the program declares it: a minor_to_major, or AUTO."""
    mode = attributes.get(LAYOUT_MODE, DEFAULT)
    rank = _rank(value_type)
    if mode == AUTO:
        return AUTO
    if mode == DEFAULT or not isinstance(value_type, TensorType):
        return row_major(rank)
    return parse(mode, rank, what)


def assign(function) -> tuple[tuple, tuple]:
    """The layouts (minor_to_major) of the parameters and results of the entry
    ``function`` (its plan and its signature): the declared ones, and for ``auto``
    what XLA's CPU picks (module docstring)."""
    parameters = tuple(
        row_major(_rank(t)) if layout == AUTO else layout
        for index, (t, a) in enumerate(zip(function.arg_types, function.arg_attributes))
        for layout in (_declared(a, t, f"parameter {index}"),))
    declared = [_declared(a, t, f"result {index}")
                for index, (t, a) in enumerate(zip(function.result_types, function.result_attributes))]
    if AUTO not in declared:
        return parameters, tuple(declared)
    region = function.region   # None for a shape-polymorphic program, which runs refined copies
    outputs = region.outputs if region is not None else (None,) * len(declared)
    chosen = _propagate(region, {}, {}) if region is not None else {}
    if region is not None:   # a result that is a parameter keeps the parameter's layout
        for index, layout in enumerate(parameters):
            chosen.setdefault(region.n_captures + index, layout)
    results = tuple(chosen.get(slot, row_major(_rank(t))) if layout == AUTO else layout
                    for slot, t, layout in zip(outputs, function.result_types, declared))
    return parameters, results


def _propagate(region, layouts: dict, producers: dict) -> dict:
    """slot -> layout of the values of ``region`` that carry one other than row-major,
    given those of its arguments (``layouts``; ``producers``: slot -> the op that made
    it). XLA inlines calls: a ``func.call`` runs its function's region on the layouts
    of its operands."""
    for step in region.steps:
        name = step.info.name
        if name == "stablehlo.custom_call":
            name = step.info.attributes.get("call_target_name", name)
        for slot in step.results:
            producers[slot] = name
        if name == "func.call" and step.regions:
            callee = step.regions[0]
            first = callee.n_captures
            inner = _propagate(callee, {first + i: layouts[slot] for i, slot in enumerate(step.operands)
                                        if slot in layouts},
                               {first + i: producers[slot] for i, slot in enumerate(step.operands)
                                if slot in producers})
            for output, result in zip(callee.outputs, step.results):
                if output in inner:
                    layouts[result] = inner[output]
            continue
        layout = _result_layout(step, name, layouts, producers)
        if layout is not None and len(step.results) == 1:
            layouts[step.results[0]] = layout
        elif name in _FORWARDING_OPS or name in _FORWARDING_CALLS:
            for operand, result in zip(step.operands, step.results):
                if operand in layouts:
                    layouts[result] = layouts[operand]
    return layouts


def _result_layout(step, name: str, layouts: dict, producers: dict) -> tuple | None:
    """The layout of the one result of ``step`` when it is not row-major, else None."""
    info = step.info
    if not info.result_types or not isinstance(info.result_types[0], TensorType):
        return None
    rank = len(info.result_types[0].shape)
    operand = step.operands[0] if step.operands else None
    if name == LAYOUT_CONSTRAINT:
        wanted = info.attributes.get("result_layouts")
        if not wanted:
            return None
        minor_to_major = tuple(int(d) for d in wanted[0])
        check(minor_to_major, rank, LAYOUT_CONSTRAINT)
        return minor_to_major
    if name == "stablehlo.transpose":
        return _transposed(info, layouts.get(operand), producers.get(operand))
    if name == "stablehlo.reshape":
        return _reshaped(info.operand_types[0].shape, info.result_types[0].shape)
    if name == "stablehlo.reduce":
        return _reduced(info, layouts.get(operand))
    if name in ELEMENTWISE_OPS:
        carried = {layouts.get(slot, row_major(rank)) for slot in step.operands
                   if producers.get(slot) not in _LAYOUT_FREE_OPS}
        if len(carried) == 1:
            (layout,) = carried
            return layout if layout != row_major(rank) else None
    if name in _FORWARDING_OPS or name in _FORWARDING_CALLS:
        return layouts.get(operand) if len(step.results) == 1 else None
    return None


def _transposed(info, operand_layout: tuple | None, producer: str | None) -> tuple | None:
    """A transpose is a bitcast: its result takes the permuted layout of its operand.
    XLA's simplifier first makes a transpose of a broadcast a broadcast, and one that
    moves only dimensions of size 1 a reshape: those stay row-major."""
    permutation = tuple(info.attributes["permutation"])
    shape = info.operand_types[0].shape
    kept = [dimension for dimension in permutation if shape[dimension] != 1]
    if producer == "stablehlo.broadcast_in_dim":
        return None
    if kept == sorted(kept):
        return _reshaped(shape, tuple(shape[dimension] for dimension in permutation))
    operand_layout = operand_layout or row_major(len(shape))
    inverse = {dimension: index for index, dimension in enumerate(permutation)}
    layout = tuple(inverse[dimension] for dimension in operand_layout)
    return layout if layout != row_major(len(shape)) else None


def _reduced(info, operand_layout: tuple | None) -> tuple | None:
    """A reduce keeps its operand's layout, without the reduced dimensions."""
    if operand_layout is None:
        return None
    reduced = set(info.attributes["dimensions"])
    layout = tuple(d - sum(r < d for r in reduced) for d in operand_layout if d not in reduced)
    return layout if layout != row_major(len(layout)) else None


def _reshaped(operand_shape: tuple, shape: tuple) -> tuple | None:
    """A reshape is row-major, but one that only inserts or removes dimensions of size
    1 is a bitcast, where XLA puts the dimensions of size 1 most major."""
    kept = [size for size in shape if size != 1]
    if kept != [size for size in operand_shape if size != 1]:
        return None
    units = [dimension for dimension, size in enumerate(shape) if size == 1]
    others = [dimension for dimension, size in enumerate(shape) if size != 1]
    layout = tuple(reversed(units + others))
    return layout if layout != row_major(len(shape)) else None
