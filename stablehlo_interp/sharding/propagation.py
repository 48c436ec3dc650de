"""The shardings XLA gives the values a program leaves open, from Shardy itself.

JAX lowers a multi-device ``jit`` with shardings only where the user gave them
(``in_shardings``, ``out_shardings``, constraints, ``shard_map`` borders) and
lets the compiler decide the rest; it then reads back the shardings of the
compiled program's parameters and outputs. XLA decides them with Shardy's
propagation (openxla/shardy, docs/propagation.md), and so does the device: it
runs Shardy's own ``sdy-propagation-pipeline`` on the module in a child process
(sharding/shardy.py) and maps the shardings found onto the values of the program's
plan. Only where something is open: a program whose arguments and results are
all annotated, with no inspection and no unreduced value, asks nothing.

A module without Shardy meshes (lowered for GSPMD) is not propagated: a value
produced directly by a custom call with an ``mhlo.sharding`` gets that
sharding, the rest are replicated.
"""

from __future__ import annotations

import dataclasses

from . import shardy
from ..ir.types import TensorType
from . import tiling as sharding

# Ops whose regions are the bodies of the functions they call (program/compiler.py): no
# regions of their own in the module.
_CALLS = frozenset({"func.call", "stablehlo.composite", "stablehlo.custom_call"})
_ANNOTATIONS = frozenset({"sdy.sharding_constraint", "sdy.reshard"})


class Propagated:
    """The sharding Shardy gives each value of a program's functions and of the regions
    they run, by the plan's ``(id(region), slot)`` key: a TensorSharding, or the rank of a
    tensor it leaves without one (replicated), or None for what is not a tensor; and
    each function's arguments' and results' (``arguments[name]``, ``results[name]``:
    a TensorSharding or None)."""

    def __init__(self, meshes: dict, module, functions: dict):
        self.meshes = meshes
        self.values: dict = {}
        self.arguments: dict = {}
        self.results: dict = {}
        self._calls: list = []   # (region, step) of each op that calls a function
        self._cache: dict = {}
        for name, found in shardy.propagate(module).items():
            function = functions.get(name)
            if function is None or function.region is None:
                continue
            self.arguments[name] = [self._parse(text) for text in found.arguments]
            self.results[name] = [self._parse(text) for text in found.results]
            region = function.region
            for index, (value, value_type) in enumerate(zip(self.arguments[name], function.arg_types)):
                self.values[(id(region), region.n_captures + index)] = _or_rank(value, value_type)
            self._add_region(region, found.ops)
        self._arguments_from_callers()

    def _parse(self, text):
        return None if text is None else self._parsed(sharding.parse_sharding, text)

    def _parsed(self, parse, text: str):
        """``parse(text, meshes)``, once per text (most values share a few shardings)."""
        key = (parse, text)
        if key not in self._cache:
            self._cache[key] = parse(text, self.meshes)
        return self._cache[key]

    def _add_region(self, region, ops) -> None:
        if len(ops) != len(region.steps):
            raise AssertionError(f"{region.description}: {len(region.steps)} steps, but Shardy's answer has "
                                 f"{len(ops)} ops")
        for step, op in zip(region.steps, ops):
            shardings = self._result_shardings(step, op)
            for slot, value, value_type in zip(step.results, shardings, step.info.result_types):
                self.values[(id(region), slot)] = _or_rank(value, value_type)
            if step.info.name in _CALLS:
                self._calls.append((region, step))
                continue
            arguments = self._region_arguments(step, op, shardings)
            for inner, captures, inner_ops in zip(step.regions, step.captures, op.regions):
                for index, outer in enumerate(captures):
                    self.values[(id(inner), index)] = self.values.get((id(region), outer))
                for index, value_type in enumerate(inner.arg_types):
                    value = arguments[index] if index < len(arguments) else None
                    self.values[(id(inner), inner.n_captures + index)] = _or_rank(value, value_type)
                self._add_region(inner, inner_ops)

    def _result_shardings(self, step, op) -> list:
        """Shardy's sharding of each result of the op; a constraint's (which became a
        reshard) is its own, a named or manual computation's its out-shardings."""
        text = op.attributes.get("sdy.sharding", op.attributes.get("out_shardings"))
        if text is not None:
            return self._parsed(sharding.parse_sharding_per_value, text)
        if step.info.name in _ANNOTATIONS:
            return [self._parsed(sharding.parse_sharding, step.info.attr("sharding"))]
        return [None] * len(step.results)

    def _arguments_from_callers(self) -> None:
        """A called function's arguments hold what its first caller hands it. XLA inlines
        calls before it propagates, so a value keeps its sharding into the callee; Shardy
        run on the module propagates each function apart and reshards at the call (the
        callee of ``reshard(x, P('x'))`` then a constraint to unreduced sees ``{}``
        where each device held its slice)."""
        done = set()
        for region, step in self._calls:
            for callee in step.regions:
                if callee is None or id(callee) in done:
                    continue
                done.add(id(callee))
                for index, operand in enumerate(step.operands[:len(callee.arg_types)]):
                    self.values[(id(callee), callee.n_captures + index)] = self.values.get((id(region), operand))

    def _region_arguments(self, step, op, results: list) -> list:
        """The shardings of the arguments of the op's regions: a loop's are its results'
        (Shardy's data-flow edges), a named or manual computation's its in-shardings."""
        if step.info.name == "stablehlo.while":
            return results
        if "in_shardings" in op.attributes:
            return self._parsed(sharding.parse_sharding_per_value, op.attributes["in_shardings"])
        return []

    def tiling(self, key, num_devices: int):
        """The tiling of the value ``key`` (None: not a tensor, or not known)."""
        value = self.values.get(key)
        if isinstance(value, int):
            return sharding.replicated(value, range(num_devices))
        return None if value is None else value.tiling()

    def dimension_axes(self, key):
        """The names of the mesh axes sharding each dimension of the value ``key`` (major to
        minor); None for a value whose sharding is not known or names sub-axes."""
        value = self.values.get(key)
        if isinstance(value, int):
            return [()] * value
        if value is None or any(axis.size is not None for dim in value.dims for axis in dim):
            return None
        return [tuple(axis.name for axis in dim) for dim in value.dims]


def _or_rank(value, value_type):
    """``value``, or the rank of a tensor without one; None for what is not a tensor. A
    maximal sharding (``<@maximal_mesh_0, []>``: one device holds the whole tensor, as
    JAX's lowering places a host callback) names no dimension whatever the rank: it gets
    one unsharded dimension per dimension of the tensor."""
    if not isinstance(value_type, TensorType):
        return None
    if value is not None and not value.mesh.axes and not value.dims:
        return dataclasses.replace(value, dims=((),) * value_type.rank)
    if value is not None and len(value.dims) != value_type.rank:
        raise AssertionError(f"Shardy's sharding {value} is not one of a {value_type}")
    return value_type.rank if value is None else value


# ------------------------------------------------------------------------------------ entry


class Propagation:
    """Shardy's propagation of a program's ``module``, run at the first question (once):
    None for a module without meshes. It holds the program's parts, not the program, so
    that dropping a program frees it without the cyclic collector."""

    def __init__(self, meshes: dict, module, functions: dict):
        self.meshes = meshes
        self._module = module
        self._functions = functions
        self._found: Propagated | None = None

    @property
    def found(self) -> "Propagated | None":
        if self._found is None and self.meshes:
            self._found = Propagated(self.meshes, self._module, self._functions)
        return self._found

    def dimension_axes(self, key):
        """The mesh axes (names, major to minor) sharding each dimension of the value ``key``
        (``(id(region), slot)``), as Shardy's propagation finds them; None for a value it
        does not know."""
        return None if self.found is None else self.found.dimension_axes(key)


def value_tilings(propagation: Propagation, function, num_devices: int, inspected=()) -> tuple[list, list, list]:
    """The tiling of each argument and result of ``function`` (None for tokens and tuples):
    its annotation, else what Shardy's propagation gives it, else replicated; and the
    same for the ``inspected`` values, ``(id(region), slot)`` keys of values in its
    regions. Shardy runs only when a value is open."""
    meshes = propagation.meshes
    region = function.region
    producers = _mhlo_producers(region)
    name = function.name

    def tiling(attributes, value_type, key, of_function=None):
        if not isinstance(value_type, TensorType):
            return None
        annotated = sharding.value_tiling(attributes, value_type.rank, meshes, num_devices)
        if annotated is not None and not _is_open(attributes):
            return annotated
        replicated = sharding.replicated(value_type.rank, range(num_devices))
        if meshes:
            if of_function is not None:
                value = of_function(propagation.found)
                return replicated if value is None else value.tiling()
            return propagation.found.tiling(key, num_devices) or replicated
        if key[0] == id(region) and key[1] in producers:
            return sharding.hlo_tiling(producers[key[1]], value_type.rank, num_devices)
        return replicated

    args = [tiling(a, t, (id(region), region.n_captures + i), lambda p, i=i: p.arguments[name][i])
            for i, (a, t) in enumerate(zip(function.arg_attributes, function.arg_types))]
    results = [tiling(a, t, (id(region), slot), lambda p, i=i: p.results[name][i])
               for i, (a, t, slot) in enumerate(zip(function.result_attributes, function.result_types,
                                                    region.outputs))]
    return args, results, [tiling({}, value_type, key) for key, value_type in inspected]


def _is_open(attributes: dict) -> bool:
    return "sdy.sharding" in attributes and "?" in attributes["sdy.sharding"]


def _mhlo_producers(region) -> dict:
    """Slots produced by custom calls that carry an ``mhlo.sharding`` (GSPMD borders)."""
    return {step.results[0]: step.info.attributes["mhlo.sharding"] for step in region.steps
            if step.info.name == "stablehlo.custom_call" and "mhlo.sharding" in step.info.attributes
            and len(step.results) == 1}
