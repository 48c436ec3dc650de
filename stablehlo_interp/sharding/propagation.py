"""The shardings XLA gives the arguments and results a program leaves open.

JAX lowers a multi-device ``jit`` with shardings only where the user gave them
(``in_shardings``, ``out_shardings``, constraints, ``shard_map`` borders) and
lets the compiler decide the rest; it then reads back the shardings of the
compiled program's parameters and outputs. XLA decides them with Shardy's
propagation (openxla/shardy, docs/propagation.md): shardings flow along the
data flow, forward and backward, through per-op *sharding rules* that map the
dimensions of an op's operands and results to shared *factors*
(``op_sharding_rule_registry.cc``): an element-wise op maps dimension d of
every tensor to factor d, a dot maps the batch, non-contracting and
contracting dimensions, a reshape splits dimensions into common factors...

This module does the same on the program's plan:

* each tensor starts with its annotation (closed dimensions stay as they are)
  or unsharded and open;
* for each op, the axes of each factor are the longest ones compatible with
  every tensor that has the factor (on a conflict, the first tensor's), and
  open dimensions of the op's tensors grow to them; an axis shards at most one
  dimension of a tensor and is added to a factor only while it divides it;
* element-wise ops first, then every op forward, then every op both ways, each
  until nothing changes (Shardy's op-priority propagation).

The members of an ``sdy.sharding_group`` get the same sharding; the free axes
of a manual computation flow through its body. Simplifications: whole mesh axes
only (no sub-axes), a module with one mesh, no user priorities, and only the
ops whose rules are below (others stop propagation). A value produced directly
by a custom call with an ``mhlo.sharding`` (modules lowered without Shardy)
gets that sharding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import tiling as sharding
from ..engine.registry import ELEMENTWISE_OPS
from ..ir.types import TensorType

_POINTWISE = frozenset({
    "stablehlo.convert", "stablehlo.bitcast_convert", "stablehlo.reverse", "stablehlo.select",
    "stablehlo.clamp", "stablehlo.reduce_precision", "sdy.sharding_constraint", "sdy.propagation_barrier",
})
# Ops that keep the shape and may move data along it (Shardy: pointwise for propagation).
_SAME_SHAPE = frozenset({"stablehlo.slice", "stablehlo.pad", "stablehlo.reduce_window", "stablehlo.concatenate"})


@dataclass
class Rule:
    """Factors of an op: ``operands[i][d]`` / ``results[j][d]`` list the factors of dimension d."""

    sizes: list = field(default_factory=list)
    operands: list = field(default_factory=list)
    results: list = field(default_factory=list)

    def factor(self, size: int, operand_dims=(), result_dims=()) -> int:
        """Add a factor; ``operand_dims[i]`` / ``result_dims[j]``: its dimension there (None: none)."""
        index = len(self.sizes)
        self.sizes.append(size)
        for mapping, dims in ((self.operands, operand_dims), (self.results, result_dims)):
            for tensor, dim in zip(mapping, dims):
                if dim is not None:
                    tensor[dim].append(index)
        return index


def _empty_rule(info) -> Rule:
    return Rule([], [[[] for _ in range(_rank(t))] for t in info.operand_types],
                [[[] for _ in range(_rank(t))] for t in info.result_types])


def _rank(value_type) -> int:
    return value_type.rank if isinstance(value_type, TensorType) else 0


def _pointwise(info, shape=None) -> Rule:
    """Dimension d of every tensor of that rank is factor d (scalars take no part)."""
    rule = _empty_rule(info)
    shape = shape if shape is not None else info.result_types[0].shape
    for d, size in enumerate(shape):
        rule.factor(size, [d if _rank(t) == len(shape) else None for t in info.operand_types],
                    [d if _rank(t) == len(shape) else None for t in info.result_types])
    return rule


def _broadcast_in_dim(info) -> Rule:
    rule = _empty_rule(info)
    operand, result = info.operand_types[0], info.result_type
    mapping = {out: d for d, out in enumerate(info.attr("broadcast_dimensions"))}
    for out, size in enumerate(result.shape):
        d = mapping.get(out)
        if d is not None and operand.shape[d] == 1 and size != 1:
            rule.factor(1, [d])
            d = None
        rule.factor(size, [d], [out])
    return rule


def _transpose(info) -> Rule:
    rule = _empty_rule(info)
    for out, d in enumerate(info.attr("permutation")):
        rule.factor(info.operand_types[0].shape[d], [d], [out])
    return rule


def _reshape(info) -> Rule:
    """Common factors of the input and output dimensions (Shardy's ReshapeOp rule)."""
    rule = _empty_rule(info)
    ins, outs = info.operand_types[0].shape, info.result_type.shape
    if 0 in ins:
        return rule
    i = o = 0
    dims_in = dims_out = factors_in = factors_out = 1
    while i < len(ins) or o < len(outs):
        if i < len(ins) and ins[i] == 1:
            rule.factor(1, [i])
            i += 1
            continue
        if o < len(outs) and outs[o] == 1:
            rule.factor(1, [], [o])
            o += 1
            continue
        if i < len(ins) and dims_in == factors_in:
            dims_in *= ins[i]
        if o < len(outs) and dims_out == factors_out:
            dims_out *= outs[o]
        next_in, next_out = dims_in // factors_in, dims_out // factors_out
        gcd = math.gcd(next_in, next_out)
        if factors_in == factors_out:
            if gcd > 1:
                rule.factor(gcd, [i], [o])
                factors_in *= gcd
                factors_out *= gcd
            else:
                rule.factor(next_in, [i])
                factors_in *= next_in
                rule.factor(next_out, [], [o])
                factors_out *= next_out
        elif factors_in < factors_out:
            size = _next_diverged(next_in, factors_in, factors_out, gcd)
            rule.factor(size, [i])
            factors_in *= size
        else:
            size = _next_diverged(next_out, factors_out, factors_in, gcd)
            rule.factor(size, [], [o])
            factors_out *= size
        if i < len(ins) and dims_in == factors_in:
            i += 1
        if o < len(outs) and dims_out == factors_out:
            o += 1
    return rule


def _next_diverged(next_factor: int, smaller: int, larger: int, gcd: int) -> int:
    if larger % smaller == 0 and next_factor % (larger // smaller) == 0:
        return larger // smaller
    return next_factor // gcd if next_factor > gcd else next_factor


def _reduce(info) -> Rule:
    rule = _empty_rule(info)
    count = len(info.result_types)
    reduced = set(info.attr("dimensions"))
    out = 0
    for d, size in enumerate(info.operand_types[0].shape):
        operand_dims = [d] * count + [None] * count
        if d in reduced:
            rule.factor(size, operand_dims)
        else:
            rule.factor(size, operand_dims, [out] * count)
            out += 1
    return rule


def _dot_general(info) -> Rule:
    rule = _empty_rule(info)
    numbers = info.attr("dot_dimension_numbers")
    lhs, rhs = info.operand_types[0].shape, info.operand_types[1].shape
    out = 0
    for l, r in zip(numbers.lhs_batching_dimensions, numbers.rhs_batching_dimensions):
        rule.factor(lhs[l], [l, r], [out])
        out += 1
    for d in range(len(lhs)):
        if d not in numbers.lhs_contracting_dimensions and d not in numbers.lhs_batching_dimensions:
            rule.factor(lhs[d], [d, None], [out])
            out += 1
    for d in range(len(rhs)):
        if d not in numbers.rhs_contracting_dimensions and d not in numbers.rhs_batching_dimensions:
            rule.factor(rhs[d], [None, d], [out])
            out += 1
    for l, r in zip(numbers.lhs_contracting_dimensions, numbers.rhs_contracting_dimensions):
        rule.factor(lhs[l], [l, r])
    return rule


def _matching_dims(info) -> Rule:
    """dynamic_slice / dynamic_update_slice: only dimensions of equal size correspond."""
    rule = _empty_rule(info)
    operand, result = info.operand_types[0], info.result_type
    update = info.operand_types[1] if info.name == "stablehlo.dynamic_update_slice" else None
    for d, size in enumerate(operand.shape):
        if update is not None:
            rule.factor(size, [d, d if update.shape[d] == size else None], [d])
        elif result.shape[d] == size:
            rule.factor(size, [d], [d])
    return rule


def _gather_scatter_factors(input_shape, slices_shape, index_vector_dim, offset_dims, collapsed_dims,
                            input_batching_dims, indices_batching_dims):
    """``(input dim, indices dim, slices dim, size)`` of each factor of a gather (slices:
    its result) or a scatter (slices: its updates); None where a tensor lacks the factor
    (Shardy's ``addGatherScatterFactors``). An offset dimension taken whole is one factor
    with its input dimension, a sliced one is two; a batch dimension of the slices is one
    factor with its dimension of the indices and, for explicit batching, of the input."""
    skipped = set(collapsed_dims) | set(input_batching_dims)
    input_dims = iter(d for d in range(len(input_shape)) if d not in skipped)
    batching = dict(zip(indices_batching_dims, input_batching_dims))
    batch = 0
    for slices_dim, size in enumerate(slices_shape):
        if slices_dim in offset_dims:
            d = next(input_dims)
            if input_shape[d] == size:
                yield d, None, slices_dim, size
            else:
                yield d, None, None, input_shape[d]
                yield None, None, slices_dim, size
        else:
            indices_dim = batch if batch < index_vector_dim else batch + 1
            yield batching.get(indices_dim), indices_dim, slices_dim, size
            batch += 1
    for d in collapsed_dims:
        yield d, None, None, input_shape[d]


def _gather(info) -> Rule:
    rule = _empty_rule(info)
    dims = info.attr("dimension_numbers")
    for input_dim, indices_dim, slices_dim, size in _gather_scatter_factors(
            info.operand_types[0].shape, info.result_type.shape, dims.index_vector_dim, dims.offset_dims,
            dims.collapsed_slice_dims, dims.operand_batching_dims, dims.start_indices_batching_dims):
        rule.factor(size, [input_dim, indices_dim], [slices_dim])
    return rule


def _scatter(info) -> Rule:
    """Operands: n inputs, the indices, n updates; results: n, like the inputs."""
    rule = _empty_rule(info)
    n = len(info.result_types)
    dims = info.attr("scatter_dimension_numbers")
    for input_dim, indices_dim, update_dim, size in _gather_scatter_factors(
            info.operand_types[0].shape, info.operand_types[n + 1].shape, dims.index_vector_dim,
            dims.update_window_dims, dims.inserted_window_dims, dims.input_batching_dims,
            dims.scatter_indices_batching_dims):
        rule.factor(size, [input_dim] * n + [indices_dim] + [update_dim] * n, [input_dim] * n)
    return rule


_RULES = {
    "stablehlo.broadcast_in_dim": _broadcast_in_dim,
    "stablehlo.transpose": _transpose,
    "stablehlo.reshape": _reshape,
    "stablehlo.reduce": _reduce,
    "stablehlo.dot_general": _dot_general,
    "stablehlo.dynamic_slice": _matching_dims,
    "stablehlo.dynamic_update_slice": _matching_dims,
    "stablehlo.gather": _gather,
    "stablehlo.scatter": _scatter,
    "stablehlo.sort": lambda info: _pointwise(info, info.operand_types[0].shape),
}


def _rule(info) -> Rule | None:
    if info.name in _RULES:
        return _RULES[info.name](info)
    if info.name in _SAME_SHAPE:
        return _pointwise(info)
    if info.name in ELEMENTWISE_OPS or info.name in _POINTWISE:
        if info.result_types and isinstance(info.result_types[0], TensorType):
            return _pointwise(info)
    return None


# ---------------------------------------------------------------------------------- the graph


@dataclass
class Node:
    """A tensor: the mesh axes sharding each dimension, and which dimensions may still grow."""

    shape: tuple
    dims: list
    open: list
    replicated: frozenset = frozenset()

    @classmethod
    def unknown(cls, shape: tuple) -> "Node":
        return cls(tuple(shape), [()] * len(shape), [True] * len(shape))

    def constrain(self, annotation: sharding.TensorSharding) -> None:
        self.dims = [tuple(a.name for a in dim if a.size is None) for dim in annotation.dims]
        self.open = [bool(annotation.open_dims) and annotation.open_dims[d] for d in range(len(self.dims))]
        self.replicated = frozenset(a.name for a in annotation.replicated)


@dataclass
class Edge:
    """An op's sharding rule over its tensors (node keys; None for non-tensors).
    ``manual``: axes that do not flow along the edge (into and out of manual code)."""

    rule: Rule
    operands: list
    results: list
    elementwise: bool
    manual: frozenset = frozenset()


def _identity_rule(shape: tuple) -> Rule:
    rule = Rule([], [[[] for _ in shape]], [[[] for _ in shape]])
    for d, size in enumerate(shape):
        rule.factor(size, [d], [d])
    return rule


class _Graph:
    """The tensors of a function (and the regions it runs) and the rules between them."""

    def __init__(self, mesh: sharding.Mesh, meshes: dict):
        self.mesh = mesh
        self.meshes = meshes
        self.nodes: dict = {}
        self.edges: list = []
        self._seen: set = set()
        self._groups: dict = {}   # sdy.sharding_group id -> its first member

    def node(self, key, value_type=None, shape=None):
        if shape is None:
            if not isinstance(value_type, TensorType) or not value_type.is_static:
                return None
            shape = value_type.shape
        if key not in self.nodes:
            self.nodes[key] = Node.unknown(shape)
        return key

    def same(self, first, second, manual: frozenset = frozenset()) -> None:
        """Two keys for one tensor (a call's operand and the callee's argument ...); the
        second one's shape (a manual computation's local one) sizes the factors."""
        if first is not None and second is not None:
            self.edges.append(Edge(_identity_rule(self.nodes[second].shape), [first], [second], True, manual))

    def pinned(self, key, annotation: sharding.TensorSharding, tag) -> None:
        """``annotation`` on one use of the tensor ``key`` (a manual computation's operand ...)."""
        if key is not None and annotation.mesh == self.mesh:
            pin = self.node((tag, key), shape=self.nodes[key].shape)
            self.nodes[pin].constrain(annotation)
            self.same(key, pin)

    def add_region(self, region) -> None:
        if id(region) in self._seen:
            return
        self._seen.add(id(region))
        for index, value_type in enumerate(region.arg_types):
            self.node((id(region), region.n_captures + index), value_type)
        for step in region.steps:
            self._add_step(region, step)

    def _add_step(self, region, step) -> None:
        info = step.info
        operands = [self.node((id(region), s), t) for s, t in zip(step.operands, info.operand_types)]
        results = [self.node((id(region), s), t) for s, t in zip(step.results, info.result_types)]
        if info.name == "sdy.manual_computation":
            self._add_manual(region, step, operands, results)
            return
        if info.name == "sdy.sharding_group" and operands[0] is not None:
            first = self._groups.setdefault(info.attr("group_id"), operands[0])
            if first != operands[0]:
                self.same(first, operands[0])
            return
        if info.name in ("sdy.sharding_constraint", "sdy.reshard") and results[0] is not None:
            annotation = sharding.parse_sharding(info.attr("sharding"), self.meshes)
            if annotation.mesh == self.mesh:
                self.nodes[results[0]].constrain(annotation)
        rule = _rule(info)
        if rule is not None and info.name != "sdy.reshard":
            elementwise = info.name in ELEMENTWISE_OPS or info.name in _POINTWISE
            self.edges.append(Edge(rule, operands, results, elementwise))
        if info.name in _REGION_FLOW:
            self._add_regions(region, step, operands, results)

    def _add_regions(self, region, step, operands, results) -> None:
        """Values that are the same tensor inside and outside an op's regions."""
        kind = _REGION_FLOW[step.info.name]
        if kind == "loop":
            for operand, result in zip(operands, results):
                self.same(operand, result)
        for inner, captures in zip(step.regions, step.captures):
            self.add_region(inner)
            for index, outer in enumerate(captures):
                if (id(region), outer) in self.nodes:
                    key = self.node((id(inner), index), shape=self.nodes[(id(region), outer)].shape)
                    self.same((id(region), outer), key)
            if kind in ("call", "loop"):
                for index, operand in enumerate(operands):
                    key = (id(inner), inner.n_captures + index)
                    self.same(operand, key if key in self.nodes else None)
            if kind in ("call", "branches") or (kind == "loop" and inner is step.regions[-1]):
                for slot, result in zip(inner.outputs, results):
                    key = (id(inner), slot)
                    self.same(key if key in self.nodes else None, result)

    def _add_manual(self, region, step, operands, results) -> None:
        """A manual computation: its in- and out-shardings on its operands and results, and
        its free axes flowing through its body (whose values are local along the manual axes)."""
        info = step.info
        for keys, attribute in ((operands, "in_shardings"), (results, "out_shardings")):
            annotations = sharding.parse_sharding_per_value(info.attr(attribute), self.meshes)
            for index, (key, annotation) in enumerate(zip(keys, annotations)):
                self.pinned(key, annotation, ("manual", id(step), attribute, index))
        manual = frozenset(sharding.parse_manual_axes(info.attr("manual_axes")))
        body = step.regions[0]
        self.add_region(body)
        for index, operand in enumerate(operands):
            key = (id(body), body.n_captures + index)
            self.same(operand, key if key in self.nodes else None, manual)
        for slot, result in zip(body.outputs, results):
            key = (id(body), slot)
            if key in self.nodes and result is not None:
                self.edges.append(Edge(_identity_rule(self.nodes[key].shape), [key], [result], True, manual))

    # -------------------------------------------------------------------------- propagation

    def propagate(self) -> None:
        for edges, backward in (([e for e in self.edges if e.elementwise], True), (self.edges, False),
                                (self.edges, True)):
            changed = True
            while changed:
                changed = False
                for edge in edges:
                    changed |= self._apply(edge, backward)

    def _apply(self, edge: Edge, backward: bool) -> bool:
        rule = edge.rule
        tensors = list(zip(edge.operands, rule.operands)) + list(zip(edge.results, rule.results))
        chosen = {}
        for factor in range(len(rule.sizes)):
            candidates = [axes for key, dims in tensors if key is not None
                          for axes in [self._factor_axes(self.nodes[key], dims, factor, rule.sizes, edge.manual)]
                          if axes]
            if candidates:
                chosen[factor] = _compatible(candidates)
        targets = tensors if backward else list(zip(edge.results, rule.results))
        changed = False
        for key, dims in targets:
            if key is not None:
                changed |= self._grow(self.nodes[key], dims, chosen, rule.sizes, edge.manual)
        return changed

    def _axis_size(self, axis: str) -> int:
        return self.mesh.axis_sizes[axis]

    def _split(self, axes, factors, sizes) -> dict:
        """The axes of one dimension dealt to its factors, major to minor: each factor takes
        axes while they divide it, the next one only once it is fully sharded."""
        axes, dealt = list(axes), {}
        for factor in factors:
            taken, product = [], 1
            while axes and sizes[factor] % (product * self._axis_size(axes[0])) == 0:
                product *= self._axis_size(axes[0])
                taken.append(axes.pop(0))
            dealt[factor] = tuple(taken)
            if product != sizes[factor]:
                break
        return dealt

    def _factor_axes(self, node: Node, dims, factor: int, sizes, manual: frozenset) -> tuple:
        for d, factors in enumerate(dims):
            if factor in factors:
                free = [a for a in node.dims[d] if a not in manual]
                return self._split(free, factors, sizes).get(factor, ())
        return ()

    def _grow(self, node: Node, dims, chosen: dict, sizes, manual: frozenset) -> bool:
        """Open dimensions take the axes chosen for their factors (after the manual axes
        they have, which lie outside the edge)."""
        changed = False
        for d, factors in enumerate(dims):
            if not node.open[d] or not factors:
                continue
            used = {a for other, axes in enumerate(node.dims) if other != d for a in axes} | node.replicated
            proposed = [a for a in node.dims[d] if a in manual]
            for factor in factors:
                axes = chosen.get(factor, ())
                proposed.extend(axes)
                if math.prod(self._axis_size(a) for a in axes) != sizes[factor]:
                    break
            usable = []
            for axis in proposed:
                if axis in used or axis in usable:
                    break
                usable.append(axis)
            current = node.dims[d]
            if len(usable) > len(current) and tuple(usable[:len(current)]) == current:
                node.dims[d] = tuple(usable)
                changed = True
        return changed

    def annotation(self, key, evenly: bool = False) -> sharding.TensorSharding:
        """The tensor's sharding; ``evenly``: each dimension's axes only while their product
        divides it."""
        node = self.nodes[key]
        dims = []
        for size, axes in zip(node.shape, node.dims):
            if evenly:
                kept, product = [], 1
                for axis in axes:
                    if size % (product * self._axis_size(axis)):
                        break
                    product *= self._axis_size(axis)
                    kept.append(axis)
                axes = kept
            dims.append(tuple(sharding.AxisRef(a) for a in axes))
        return sharding.TensorSharding(self.mesh, tuple(dims))


# How values flow into and out of the regions of ops that run them.
_REGION_FLOW = {"func.call": "call", "sdy.named_computation": "call", "stablehlo.composite": "call",
                "stablehlo.while": "loop", "stablehlo.case": "branches", "stablehlo.if": "branches",
                "stablehlo.optimization_barrier": "loop"}


def _compatible(candidates: list) -> tuple:
    """The longest candidate that every other one is a prefix of; on a conflict, the first."""
    longest = max(candidates, key=len)
    if all(longest[:len(c)] == c for c in candidates):
        return longest
    return candidates[0]


# ------------------------------------------------------------------------------------ entry


def value_tilings(program, function, num_devices: int, inspected=()) -> tuple[list, list, list]:
    """The tiling of each argument and result of ``function`` (None for tokens and tuples):
    its annotation, else what propagation infers, else replicated; and the same for
    the ``inspected`` values, ``(id(region), slot)`` keys of values in its regions."""
    arg_attributes, result_attributes = function.arg_attributes, function.result_attributes
    meshes = program.meshes
    region = function.region
    arg_keys = [(id(region), region.n_captures + i) for i in range(region.n_args)]
    graph = _propagated(program, function)
    producers = _mhlo_producers(region)

    def tiling(attributes, value_type, key, pin, result=False):
        """A result left open takes its value's sharding as far as it divides each dimension
        evenly (Shardy's edge from a value to the function's result)."""
        if not isinstance(value_type, TensorType):
            return None
        annotated = sharding.value_tiling(attributes, value_type.rank, meshes, num_devices)
        if annotated is not None and not _is_open(attributes):
            return annotated
        if graph is not None and pin in graph.nodes:
            return graph.annotation(pin).tiling()
        if graph is not None and key in graph.nodes:
            return graph.annotation(key, evenly=result).tiling()
        if key[0] == id(region) and key[1] in producers:
            return sharding.hlo_tiling(producers[key[1]], value_type.rank, num_devices)
        return sharding.replicated(value_type.rank, range(num_devices))

    args = [tiling(a, t, key, key) for a, t, key in zip(arg_attributes, function.arg_types, arg_keys)]
    results = [tiling(a, t, (id(region), slot), (("result", index), (id(region), slot)), result=True)
               for index, (a, t, slot) in enumerate(zip(result_attributes, function.result_types, region.outputs))]
    return args, results, [tiling({}, value_type, key, key) for key, value_type in inspected]


def _propagated(program, function) -> "_Graph | None":
    """The propagated graph of ``function``'s values (None without exactly one mesh)."""
    meshes = program.meshes
    mesh = _only_mesh(meshes)
    if mesh is None:
        return None
    region = function.region
    arg_keys = [(id(region), region.n_captures + i) for i in range(region.n_args)]
    graph = _Graph(mesh, meshes)
    for key, attributes, value_type in zip(arg_keys, function.arg_attributes, function.arg_types):
        if graph.node(key, value_type) is not None and "sdy.sharding" in attributes:
            graph.nodes[key].constrain(sharding.parse_sharding(attributes["sdy.sharding"], meshes))
    graph.add_region(region)
    for index, (slot, attributes) in enumerate(zip(region.outputs, function.result_attributes)):
        if "sdy.sharding" in attributes and (id(region), slot) in graph.nodes:
            graph.pinned((id(region), slot), sharding.parse_sharding(attributes["sdy.sharding"], meshes),
                         ("result", index))
    graph.propagate()
    return graph


def dimension_axes(program, function):
    """``axes((id(region), slot))``: the mesh axes (names, major to minor) sharding each
    dimension of that value of ``function`` or a region it runs, as propagation finds
    them; None for a value it does not know."""
    graph = _propagated(program, function)

    def axes(key):
        node = graph.nodes.get(key) if graph is not None else None
        return None if node is None else list(node.dims)

    return axes


def _is_open(attributes: dict) -> bool:
    return "sdy.sharding" in attributes and "?" in attributes["sdy.sharding"]


def _only_mesh(meshes: dict):
    """The one mesh with axes shardings refer to (maximal meshes aside), or None."""
    found = {mesh for mesh in meshes.values() if mesh.axes}
    return found.pop() if len(found) == 1 else None


def _mhlo_producers(region) -> dict:
    """Slots produced by custom calls that carry an ``mhlo.sharding`` (GSPMD borders)."""
    return {step.results[0]: step.info.attributes["mhlo.sharding"] for step in region.steps
            if step.info.name == "stablehlo.custom_call" and "mhlo.sharding" in step.info.attributes
            and len(step.results) == 1}
