"""Unreduced values: one partial array per device group, as XLA holds them.

With sharding in types, JAX lets a value stay *unreduced* along some mesh axes
U (``P(None, unreduced={"x"})``, lowered as ``#sdy.sharding<@mesh, [{}],
unreduced={"x"}>``): the devices that differ along U hold different partial
values whose sum is the value. XLA produces them where a sum runs over a
dimension sharded on U: a ``dot_general`` whose contracting dimensions are
sharded on U, or a ``reduce`` (add) over such a dimension, computes on each
device the sum over the part that device holds and skips the all-reduce. An
op JAX lets through on an unreduced value (``add`` of two unreduced values,
``transpose``, ``reshape``, ``convert``, ``multiply`` by a value reduced on U
...) runs on each device's partial. A ``sharding_constraint`` or ``reshard``
to a sharding without some of the axes sums the partials over them (an
all-reduce); one that adds unreduced axes keeps on each device what it held
and zeros elsewhere (as XLA does). A ``shard_map`` whose ``out_specs`` are
unreduced returns each device's own result as its partial (ops/sdy.py).

The interpreter keeps its global view: such a value is a :class:`Partials`,
the list of global-shaped partial arrays, one per coordinate of U (row-major
over U in mesh order); a device at coordinate c holds its part of partial c.
:func:`carry_partials` makes a device program's plan compute them: the
producers' runners compute partial c on their operands with the elements that
coordinate c does not hold set to zero (the same sum as the device's, over the
same terms), every other op runs once per partial, and the Shardy annotations
convert between unreduced axes (:func:`retarget`). Sums of partials add them
one after the other in coordinate order.
"""

from __future__ import annotations

import math

import numpy as np

from ..engine.passes import replan
from ..engine.regions import monoid_of
from . import tiling as sharding

_PRODUCERS = ("stablehlo.dot_general", "stablehlo.dot", "stablehlo.reduce", "stablehlo.scatter")
_ANNOTATIONS = ("sdy.sharding_constraint", "sdy.reshard")
# Ops that hand their operands to their regions (or return them): partials flow through
# them to the ops inside, which run per partial; a manual computation cuts each device's
# own partial (ops/sdy.py).
_PASS_THROUGH = frozenset({"func.call", "stablehlo.composite", "sdy.named_computation", "stablehlo.while",
                           "stablehlo.if", "stablehlo.case", "stablehlo.optimization_barrier",
                           "sdy.manual_computation"})


class Partials:
    """A value unreduced along ``axes`` (``((name, size), ...)``, mesh order): ``parts[c]``
    is the global-shaped partial array of coordinate c, row-major over the axes."""

    __slots__ = ("axes", "parts")

    def __init__(self, axes: tuple, parts):
        self.axes = tuple(axes)
        self.parts = tuple(parts)
        if len(self.parts) != math.prod(size for _, size in self.axes):
            raise ValueError(f"{len(self.parts)} partials for the unreduced axes {self.axes}")

    @property
    def shape(self) -> tuple:
        return np.shape(self.parts[0])

    @property
    def dtype(self):
        return np.asarray(self.parts[0]).dtype

    def __repr__(self) -> str:
        names = ", ".join(name for name, _ in self.axes)
        return f"Partials(unreduced=({names}), {len(self.parts)} x {self.shape})"


def retarget(value, axes: tuple, dims=None, axis_sizes=None):
    """``value`` (an array or Partials) unreduced along ``axes`` instead.

    Over the axes it loses, the partials are summed one after the other in coordinate
    order (XLA's all-reduce). Along an axis it gains, each device keeps what it held
    and the others' parts of the sum are zeros: where the axis shards a dimension of
    the value (``dims``: the mesh axes of each dimension, ``axis_sizes`` their sizes),
    the devices at coordinate c keep their slice of it; otherwise the devices at
    coordinate 0 keep the whole value."""
    current = value.axes if isinstance(value, Partials) else ()
    if current == tuple(axes):
        return value
    if isinstance(value, Partials):
        value = _summed(value, [axis for axis in current if axis in axes])
    current = value.axes if isinstance(value, Partials) else ()
    if current == tuple(axes):
        return value
    base = value.parts if isinstance(value, Partials) else (value,)
    old_names = [name for name, _ in current]
    gained = [name for name, _ in axes if name not in old_names]
    sharding_dims = {name for dim in (dims or ()) for name in dim}
    zero = np.zeros_like(np.asarray(base[0]))
    parts = []
    for c in range(math.prod(size for _, size in axes)):
        coordinate = dict(zip((name for name, _ in axes), np.unravel_index(c, [size for _, size in axes])))
        if any(coordinate[name] for name in gained if name not in sharding_dims):
            parts.append(zero)
            continue
        old = np.ravel_multi_index([coordinate[name] for name in old_names], [s for _, s in current]) \
            if old_names else 0
        part = base[int(old)]
        slicing = {name: coordinate[name] for name in gained if name in sharding_dims}
        if slicing:
            shape = np.shape(part)
            mask = _mask(shape, range(len(shape)), dims, slicing, axis_sizes)
            part = np.where(mask, part, zero)
        parts.append(part)
    return Partials(axes, parts)


def _summed(value: Partials, kept: list):
    """The partials summed over the axes not ``kept``: an array, or Partials along ``kept``."""
    current = value.axes
    keep = [i for i, axis in enumerate(current) if axis in kept]
    lose = [i for i, axis in enumerate(current) if axis not in kept]
    grid = np.empty([size for _, size in current], dtype=object)
    for c, part in enumerate(value.parts):
        grid[np.unravel_index(c, grid.shape)] = part
    grid = grid.transpose(keep + lose).reshape([current[i][1] for i in keep] + [-1])
    sums = []
    for index in np.ndindex(*grid.shape[:-1]):
        terms = grid[index]
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        sums.append(np.asarray(total, dtype=value.dtype))
    return Partials(tuple(current[i] for i in keep), sums) if keep else sums[0]


def assemble(shape: tuple, dtype, tiling: sharding.Tiling, shard_of):
    """The global value from ``shard_of(device)``: an array, or Partials when ``tiling`` is
    unreduced (partial c read from the first holders of coordinate c)."""
    if not tiling.unreduced:
        return sharding.assemble(shape, dtype, tiling, shard_of)
    holders = tiling.replication // tiling.partials
    return Partials(tiling.unreduced, [sharding.assemble(shape, dtype, tiling, shard_of, r)
                                       for r in range(0, tiling.replication, holders)])


def differing_replica(tiling: sharding.Tiling | None, num_devices: int, shard_of) -> tuple | None:
    """``(first, other)``: two devices that hold the same part of a value under ``tiling``
    (the same tile of the same partial; every device when ``tiling`` is None) and hold
    different bits of it (``shard_of(device)``); None when every replica agrees. JAX's
    eager ``shard_map`` makes such values: a result its program declares replicated
    keeps each device's own (XLA runs each device's program on its own buffers)."""
    if tiling is None:
        groups = [list(range(num_devices))]
    else:
        holders = tiling.replication // tiling.partials
        groups = [[tiling.holder(tile, r) for r in range(first, first + holders)]
                  for tile in np.ndindex(*tiling.tiles) for first in range(0, tiling.replication, holders)]
    for group in groups:
        first = np.asarray(shard_of(group[0]))
        for other in group[1:]:
            if not _same_bits(first, np.asarray(shard_of(other))):
                return group[0], other
    return None


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.strides == b.strides:
        return True   # one buffer (the shards of a replicated result the device handed out)
    return bool(np.array_equal(np.ascontiguousarray(a).reshape(-1).view(np.uint8),
                               np.ascontiguousarray(b).reshape(-1).view(np.uint8)))


def held_by(value, tiling: sharding.Tiling, device: int):
    """What ``device`` holds of the global ``value`` (an array or Partials) under ``tiling``:
    its tile, of its own partial when the tiling is unreduced; None when it holds no tile."""
    located = tiling.locate(device)
    if located is None:
        return None
    tile, r = located
    if tiling.unreduced:
        value = retarget(value, tiling.unreduced).parts[tiling.partial_of(r)]
    elif isinstance(value, Partials):
        value = retarget(value, ())
    return np.asarray(np.asarray(value)[tiling.slices(np.shape(value), tile)])   # 0-d stays 0-d


def shard_of(value, tiling: sharding.Tiling | None, device: int):
    """What ``device`` holds of ``value`` (:func:`held_by`), dense and row-major; the whole
    value where it holds no tile (a maximal sharding elsewhere) or ``tiling`` is None."""
    shard = value if tiling is None else held_by(value, tiling, device)
    if shard is None:
        return value
    return shard if shard is value or shard.flags.c_contiguous else np.ascontiguousarray(shard)


# ------------------------------------------------------------------------------ the plan


def has_unreduced(function) -> bool:
    """Whether ``function`` or what it runs names an unreduced sharding."""
    attributes = list(function.arg_attributes) + list(function.result_attributes)
    if any("unreduced" in a.get("sdy.sharding", "") for a in attributes):
        return True
    return any("unreduced" in str(step.info.attributes.get(key, ""))
               for region in _regions(function.region) for step in region.steps
               for key in ("sharding", "in_shardings", "out_shardings"))


def carry_partials(function, meshes: dict, dimension_axes) -> None:
    """Make the plan of ``function`` (and of every region it runs) compute unreduced values
    as :class:`Partials`. ``dimension_axes((id(region), slot))``: the mesh axes sharding
    each dimension of that value (propagation.py), or None when unknown."""
    for region in _regions(function.region):
        producers = {slot: step for step in region.steps if step.info.name in _PRODUCERS for slot in step.results}
        unreduced_results = {}   # producer step -> (its result's unreduced axes, their mesh)
        for step in region.steps:
            if step.info.name in _ANNOTATIONS:
                annotation = sharding.parse_sharding(step.info.attr("sharding"), meshes)
                axes = annotation.unreduced_axes()
                dims = dimension_axes((id(region), step.operands[0]))
                sizes = annotation.mesh.axis_sizes
                _replace_run(step, lambda value, axes=axes, dims=dims, sizes=sizes: retarget(value, axes, dims, sizes))
                producer = producers.get(step.operands[0])
                if axes and producer is not None:
                    unreduced_results[producer] = (axes, annotation.mesh)
        for step in region.steps:
            if step in unreduced_results:
                axes, mesh = unreduced_results[step]
                _replace_run(step, _producer(step, axes, region, dimension_axes, mesh.axes))
            elif step.info.name not in _PASS_THROUGH and step.info.name not in _ANNOTATIONS:
                _replace_run(step, _per_partial(step, step.run))
        replan(region)


def _replace_run(step, run) -> None:
    """``step`` runs ``run``, for every result, 0-d ones too: its runner for 0-d results
    (Step.scalar, which the unobserved loop would call instead) is dropped, as it does not
    know Partials."""
    step.run, step.scalar = run, None


def _regions(root) -> list:
    """``root`` and every region its steps run, once each."""
    found, pending, seen = [], [root], set()
    while pending:
        region = pending.pop()
        if region is None or id(region) in seen:
            continue
        seen.add(id(region))
        found.append(region)
        pending.extend(r for step in region.steps for r in step.regions)
    return found


def _leading(step) -> int:
    """How many arguments the step's runner takes before its operands (engine/run.py)."""
    return int(step.execution) + int(bool(step.regions))


def _per_partial(step, run):
    """The runner, run once per partial when an operand is unreduced."""
    leading = _leading(step)
    variadic = step.variadic

    def runner(*arguments):
        operands = arguments[leading:]
        unreduced = [x for x in operands if isinstance(x, Partials)]
        if not unreduced:
            return run(*arguments)
        axes = unreduced[0].axes
        if any(x.axes != axes for x in unreduced):
            found = sorted({tuple(name for name, _ in x.axes) for x in unreduced})
            raise ValueError(f"operands unreduced along different mesh axes {found}")
        head = arguments[:leading]
        outs = [run(*head, *[x.parts[c] if isinstance(x, Partials) else x for x in operands])
                for c in range(len(unreduced[0].parts))]
        if not variadic:
            return Partials(axes, outs)
        return [Partials(axes, [out[j] for out in outs]) for j in range(len(outs[0]))]

    return runner


def _producer(step, axes: tuple, region, dimension_axes, mesh_axes: tuple):
    """The runner of a dot_general / reduce / scatter whose result is unreduced along ``axes``.

    On operands unreduced along V it runs per partial; along each axis of ``axes`` not
    in V (which must shard a summed dimension), partial c is the op on its operands with
    the elements outside coordinate c's part of the summed dimensions set to zero: the
    same terms as the device's own sum. A scatter (add) sums its updates' scatter
    dimensions into its inputs, which only the devices at coordinate 0 keep (the others
    start from zeros), so that the partials add up to the scatter's result."""
    info = step.info
    origin_only = ()   # operands that only coordinate 0 of the new axes keeps
    if info.name in ("stablehlo.reduce", "stablehlo.scatter") and monoid_of(info.regions[0]) != "stablehlo.add":
        raise info.unsupported(f"an unreduced result of a {info.name.split('.')[1]} other than a sum "
                               "(of the built-in stablehlo.add)")
    if info.name == "stablehlo.reduce":
        summed = {i: tuple(info.attr("dimensions")) for i in range(len(info.result_types))}
    elif info.name == "stablehlo.scatter":
        count = len(info.result_types)
        windows = info.attr("scatter_dimension_numbers").update_window_dims
        scatter_dims = tuple(d for d in range(info.operand_types[count + 1].rank) if d not in windows)
        summed = {count + 1 + i: scatter_dims for i in range(count)}
        origin_only = tuple(range(count))
    else:
        numbers = info.attr("dot_dimension_numbers", None)
        if numbers is None:   # stablehlo.dot
            summed = {0: (info.operand_types[0].rank - 1,), 1: (0,)}
        else:
            summed = {0: tuple(numbers.lhs_contracting_dimensions), 1: tuple(numbers.rhs_contracting_dimensions)}
    # The axes of each summed dimension: the operand's own where known; a dot's lhs and rhs
    # contracting dimensions are sharded alike (JAX requires it), so one side tells both.
    known = {}
    for index, dims in summed.items():
        found = dimension_axes((id(region), step.operands[index]))
        if found is not None:
            known[index] = [found[d] for d in dims]
    covered = {a for axes_of in known.values() for dim in axes_of for a in dim}
    axis_sizes = dict(mesh_axes)
    masks_for: dict = {}

    def masks(new: tuple) -> list:
        """Per coordinate of the ``new`` axes, the mask of each summed operand."""
        if new not in masks_for:
            missing = [name for name, _ in new if name not in covered]
            if missing:
                raise ValueError(f"the result is unreduced along {', '.join(missing)}, which shard none of "
                                 "the summed dimensions of its operands (as far as the interpreter can tell)")
            reference = next(iter(known.values()))
            per_coordinate = []
            for c in range(math.prod(size for _, size in new)):
                coordinate = dict(zip((name for name, _ in new), np.unravel_index(c, [size for _, size in new])))
                per_coordinate.append({index: _mask(info.operand_types[index].shape, dims,
                                                    known.get(index, reference), coordinate, axis_sizes)
                                       for index, dims in summed.items()})
            masks_for[new] = per_coordinate
        return masks_for[new]

    run = step.run
    leading = _leading(step)
    count = len(info.result_types)

    def runner(*arguments):
        head, operands = arguments[:leading], arguments[leading:]
        unreduced = [x for x in operands if isinstance(x, Partials)]
        old = unreduced[0].axes if unreduced else ()
        if any(x.axes != old for x in unreduced):
            raise ValueError("operands unreduced along different mesh axes")
        new = tuple(axis for axis in axes if axis not in old)
        if not new:
            return per_partial(*arguments)
        both = tuple(axis for axis in mesh_axes if axis in old or axis in new)
        outs = {}
        for v in range(max(1, math.prod(size for _, size in old))):
            local = [x.parts[v] if isinstance(x, Partials) else x for x in operands]
            at = dict(zip((name for name, _ in old), np.unravel_index(v, [size for _, size in old])))
            for w, per_operand in enumerate(masks(new)):
                at.update(zip((name for name, _ in new), np.unravel_index(w, [size for _, size in new])))
                masked = [np.where(per_operand[i], x, np.zeros((), np.asarray(x).dtype)) if i in per_operand
                          else np.zeros_like(x) if w and i in origin_only else x for i, x in enumerate(local)]
                out = run(*head, *masked)
                outs[tuple(int(at[name]) for name, _ in both)] = out if step.variadic else (out,)
        flat = [outs[index] for index in np.ndindex(*[size for _, size in both])]
        results = [Partials(both, [out[j] for out in flat]) for j in range(count)]
        return results if step.variadic else results[0]

    per_partial = _per_partial(step, run)
    return runner


def _mask(shape: tuple, dims: tuple, dim_axes: list, coordinate: dict, axis_sizes: dict) -> np.ndarray:
    """Which elements of an operand of ``shape`` the devices at ``coordinate`` (of the
    unreduced axes) hold along the summed ``dims``, sharded by ``dim_axes``."""
    mask = np.ones([1] * len(shape), dtype=bool)
    for d, axes in zip(dims, dim_axes):
        sizes = [axis_sizes[a] for a in axes]
        tiles = math.prod(sizes)
        chunk = -(-shape[d] // tiles) if tiles else shape[d]
        keep = np.zeros(shape[d], dtype=bool)
        for tile in range(tiles):
            coords = dict(zip(axes, np.unravel_index(tile, sizes)))
            if all(coords[a] == coordinate[a] for a in axes if a in coordinate):
                keep[tile * chunk:(tile + 1) * chunk] = True
        view = [1] * len(shape)
        view[d] = shape[d]
        mask = mask & keep.reshape(view)
    return mask
