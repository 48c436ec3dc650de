"""Hypothesis strategies for random gather, scatter and reduce_window
configurations that are valid per the StableHLO spec (constraints C1-C25 of
gather/scatter, C1-C16 of reduce_window), with index values that include out
of bounds ones. Gather and scatter configurations print as single-op MLIR
modules (any ``index_vector_dim``, which jax.lax does not expose) for XLA CPU
and the reference interpreter; reduce_window ones run through jax.lax."""

from __future__ import annotations

from dataclasses import dataclass

import hypothesis.strategies as st
import numpy as np
from jax import lax

from oracles import op_module, tensor_type

# ------------------------------------------------------------------ gather / scatter


@dataclass
class IndexSpace:
    """What gather and scatter share: an operand shape, its batching dims, the
    index array's layout and the dims the index vectors address."""

    operand_shape: tuple
    operand_batching_dims: tuple
    indices_batching_dims: tuple  # start_indices_batching_dims / scatter_indices_batching_dims
    index_map: tuple  # start_index_map / scatter_dims_to_operand_dims
    index_vector_dim: int
    indices_shape: tuple
    batch_shape: tuple  # indices_shape without index_vector_dim


@st.composite
def index_spaces(draw, max_rank: int = 4, max_size: int = 4, min_index_vector: int = 0):
    rank = draw(st.integers(1, max_rank))
    operand_shape = tuple(draw(st.lists(st.integers(1, max_size), min_size=rank, max_size=rank)))
    dims = list(range(rank))
    operand_batching = sorted(draw(st.lists(st.sampled_from(dims), unique=True, max_size=min(2, rank))))
    free = [d for d in dims if d not in operand_batching]
    if len(free) < min_index_vector:
        operand_batching, free = [], dims
    index_map = tuple(draw(st.permutations(free)))[:draw(st.integers(min_index_vector, len(free)))]
    # The index array: batch dims (some of them the batching dims) and the index vector dim.
    extra = draw(st.lists(st.integers(0, 3), max_size=2))
    batch_sizes = [operand_shape[d] for d in operand_batching] + extra
    order = draw(st.permutations(range(len(batch_sizes))))
    batch_shape = tuple(batch_sizes[i] for i in order)
    batching_positions = [order.index(i) for i in range(len(operand_batching))]  # in batch_shape
    implicit = len(index_map) == 1 and draw(st.booleans())
    index_vector_dim = len(batch_shape) if implicit else draw(st.integers(0, len(batch_shape)))
    indices_shape = list(batch_shape)
    if not implicit:
        indices_shape.insert(index_vector_dim, len(index_map))
    indices_batching = tuple(p + (p >= index_vector_dim) for p in batching_positions)
    return IndexSpace(operand_shape, tuple(operand_batching), indices_batching, index_map,
                      index_vector_dim, tuple(indices_shape), batch_shape)


def _index_values(draw, space: IndexSpace, window_sizes: dict, in_or_out: bool) -> np.ndarray:
    """Start index values per index-vector component, some out of bounds.

    ``in_or_out``: each window is either wholly in bounds or wholly out of bounds
    (where the spec's per-element skipping and XLA's per-window skipping agree).
    """
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    vector_shape = space.batch_shape + (len(space.index_map),)
    values = np.zeros(vector_shape, np.int64)
    for k, d in enumerate(space.index_map):
        size, window = space.operand_shape[d], window_sizes[d]
        if in_or_out:
            inside = rng.integers(0, size - window + 1, space.batch_shape)
            outside = rng.choice([size, size + 2, -window - 1, -max(window, 1)], space.batch_shape)
            values[..., k] = np.where(rng.random(space.batch_shape) < 0.8, inside, outside)
        else:
            values[..., k] = rng.integers(-2, size + 2, space.batch_shape)
    if space.index_vector_dim == len(space.batch_shape) and len(space.indices_shape) == len(space.batch_shape):
        return values[..., 0]
    return np.moveaxis(values, -1, space.index_vector_dim)


def _ints(values) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


@dataclass
class GatherConfig:
    space: IndexSpace
    offset_dims: tuple
    collapsed_slice_dims: tuple
    slice_sizes: tuple
    start_indices: np.ndarray
    result_shape: tuple

    def text(self, element_type: str, index_type: str = "i32") -> str:
        """A module applying this gather (spec: gather) to (operand, start_indices)."""
        space = self.space
        attributes = (
            f"dimension_numbers = #stablehlo.gather<offset_dims = {_ints(self.offset_dims)}, "
            f"collapsed_slice_dims = {_ints(self.collapsed_slice_dims)}, "
            f"operand_batching_dims = {_ints(space.operand_batching_dims)}, "
            f"start_indices_batching_dims = {_ints(space.indices_batching_dims)}, "
            f"start_index_map = {_ints(space.index_map)}, index_vector_dim = {space.index_vector_dim}>, "
            f"slice_sizes = array<i64: {', '.join(map(str, self.slice_sizes))}>, indices_are_sorted = false")
        return op_module("stablehlo.gather",
                         [tensor_type(space.operand_shape, element_type),
                          tensor_type(space.indices_shape, index_type)],
                         tensor_type(self.result_shape, element_type), attributes)


@st.composite
def gather_configs(draw, index_dtype=np.int32):
    space = draw(index_spaces())
    rank = len(space.operand_shape)
    free = [d for d in range(rank) if d not in space.operand_batching_dims]
    collapsed = sorted(draw(st.lists(st.sampled_from(free), unique=True, max_size=len(free))) if free else [])
    slice_sizes = tuple(1 if d in collapsed or d in space.operand_batching_dims
                        else draw(st.integers(0, space.operand_shape[d])) for d in range(rank))
    offset_sizes = [slice_sizes[d] for d in free if d not in collapsed]
    result_rank = len(space.batch_shape) + len(offset_sizes)
    offset_dims = tuple(sorted(draw(st.permutations(range(result_rank)))[:len(offset_sizes)]))
    batch, offsets = iter(space.batch_shape), iter(offset_sizes)
    result_shape = tuple(next(offsets) if r in offset_dims else next(batch) for r in range(result_rank))
    windows = {d: slice_sizes[d] for d in range(rank)}
    indices = _index_values(draw, space, windows, in_or_out=False).astype(index_dtype)
    return GatherConfig(space, offset_dims, tuple(collapsed), slice_sizes, indices, result_shape)


# Update computations of scatter tests, as MLIR ops on %x (current) and %y (update).
SCATTER_BODIES = {
    "add": "%r = stablehlo.add %x, %y : {t}",
    "multiply": "%r = stablehlo.multiply %x, %y : {t}",
    "maximum": "%r = stablehlo.maximum %x, %y : {t}",
    "minimum": "%r = stablehlo.minimum %x, %y : {t}",
    # Not commutative: the order of duplicate updates shows.
    "subtract": "%r = stablehlo.subtract %x, %y : {t}",
    "affine": "%two = stablehlo.constant dense<{two}> : {t}\n    %m = stablehlo.multiply %x, %two : {t}\n"
              "    %r = stablehlo.add %m, %y : {t}",
    # Not element-wise (a reshape round trip): the one-update-at-a-time path.
    "reshaped_subtract": "%s = stablehlo.subtract %x, %y : {t}\n"
                         "    %v = stablehlo.reshape %s : ({t}) -> tensor<1x{e}>\n"
                         "    %r = stablehlo.reshape %v : (tensor<1x{e}>) -> {t}",
}


@dataclass
class ScatterConfig:
    space: IndexSpace
    update_window_dims: tuple
    inserted_window_dims: tuple
    updates_shape: tuple
    scatter_indices: np.ndarray

    @property
    def orders_agree(self) -> bool:
        """Whether XLA's order of updates (scatter index outermost) is the reference
        interpreter's (row-major over the updates): window dims come last."""
        rank = len(self.updates_shape)
        return self.update_window_dims == tuple(range(rank - len(self.update_window_dims), rank))

    def text(self, element_type: str, bodies=("add",), index_type: str = "i32", operands: int = 1) -> str:
        """A module applying this scatter (spec: scatter) to (inputs..., indices, updates...),
        once per update computation in ``bodies`` (names of SCATTER_BODIES or
        ``replace``), returning all the results. With several operands, result
        ``i`` of each scatter is its body applied to input ``i`` and update ``i``."""
        space = self.space
        t = tensor_type((), element_type)
        operand, update = tensor_type(space.operand_shape, element_type), tensor_type(self.updates_shape, element_type)
        types = [operand] * operands + [tensor_type(space.indices_shape, index_type)] + [update] * operands
        args = ", ".join(f"%a{i}: {ty}" for i, ty in enumerate(types))
        names = ", ".join(f"%a{i}" for i in range(len(types)))
        block = ", ".join([f"%x{i}: {t}" for i in range(operands)] + [f"%y{i}: {t}" for i in range(operands)])
        attributes = (
            f"scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = {_ints(self.update_window_dims)}, "
            f"inserted_window_dims = {_ints(self.inserted_window_dims)}, "
            f"input_batching_dims = {_ints(space.operand_batching_dims)}, "
            f"scatter_indices_batching_dims = {_ints(space.indices_batching_dims)}, "
            f"scatter_dims_to_operand_dims = {_ints(space.index_map)}, "
            f"index_vector_dim = {space.index_vector_dim}>, indices_are_sorted = false, unique_indices = false")
        results = ", ".join([operand] * operands)
        ops, returned = [], []
        for b, body in enumerate(bodies):
            lines, outs = [], []
            for i in range(operands):
                if body == "replace":
                    outs.append(f"%y{i}")
                    continue
                two = "2" if element_type.startswith(("i", "ui")) else "2.0"
                op_text = SCATTER_BODIES[body].format(t=t, e=element_type, two=two)
                for name in ("%two", "%m", "%s", "%v", "%r"):
                    op_text = op_text.replace(name, f"{name}_{i}")
                lines.append("    " + op_text.replace("%x", f"%x{i}").replace("%y", f"%y{i}"))
                outs.append(f"%r_{i}")
            lhs = f"%out{b}:{operands}" if operands > 1 else f"%out{b}"
            returned += [f"%out{b}#{i}" for i in range(operands)] if operands > 1 else [f"%out{b}"]
            ops.append(f"  {lhs} = \"stablehlo.scatter\"({names}) ({{\n"
                       f"  ^bb0({block}):\n" + "".join(line + "\n" for line in lines) +
                       f"    stablehlo.return {', '.join(outs)} : {', '.join([t] * operands)}\n"
                       f"  }}) {{{attributes}}} : ({', '.join(types)}) -> ({results})\n")
        all_results = ", ".join([operand] * (operands * len(bodies)))
        return (f"func.func @main({args}) -> ({all_results}) {{\n" + "".join(ops) +
                f"  return {', '.join(returned)} : {all_results}\n}}\n")


@st.composite
def scatter_configs(draw, in_or_out: bool = True, index_dtype=np.int32):
    """``in_or_out``: comparable with XLA, whose CPU backend differs from the spec
    in two corners: windows are wholly in or wholly out of bounds (XLA skips a
    whole window, the spec each element out of bounds) and index vectors are not
    empty (XLA drops all but one of the updates then)."""
    space = draw(index_spaces(min_index_vector=1 if in_or_out else 0))
    rank = len(space.operand_shape)
    free = [d for d in range(rank) if d not in space.operand_batching_dims]
    inserted = sorted(draw(st.lists(st.sampled_from(free), unique=True, max_size=len(free))) if free else [])
    window_input_dims = [d for d in free if d not in inserted]
    window_sizes = {d: 1 for d in range(rank)}
    window_sizes.update({d: draw(st.integers(0, space.operand_shape[d])) for d in window_input_dims})
    update_rank = len(space.batch_shape) + len(window_input_dims)
    update_window_dims = tuple(sorted(draw(st.permutations(range(update_rank)))[:len(window_input_dims)]))
    batch = iter(space.batch_shape)
    windows = iter(window_sizes[d] for d in window_input_dims)
    updates_shape = tuple(next(windows) if a in update_window_dims else next(batch) for a in range(update_rank))
    indices = _index_values(draw, space, window_sizes, in_or_out).astype(index_dtype)
    return ScatterConfig(space, update_window_dims, tuple(inserted), updates_shape, indices)


# -------------------------------------------------------------------- reduce_window


@dataclass
class WindowConfig:
    shape: tuple
    window_dimensions: tuple
    window_strides: tuple
    padding: tuple
    base_dilation: tuple
    window_dilation: tuple

    def run(self, operand, init, computation):
        return lax.reduce_window(operand, init, computation, self.window_dimensions, self.window_strides,
                                 self.padding, self.base_dilation, self.window_dilation)


@st.composite
def window_configs(draw, max_rank: int = 3, max_size: int = 6):
    rank = draw(st.integers(1, max_rank))
    shape, windows, strides, padding, base, dilation = [], [], [], [], [], []
    for _ in range(rank):
        size = draw(st.integers(0, max_size))
        b = draw(st.integers(1, 2))
        dilated = (size - 1) * b + 1 if size else 0
        low = draw(st.integers(-min(2, dilated), 3))
        high = draw(st.integers(max(-2, -(dilated + low)), 3))
        shape.append(size)
        base.append(b)
        padding.append((low, high))
        windows.append(draw(st.integers(1, 4)))
        strides.append(draw(st.integers(1, 3)))
        dilation.append(draw(st.integers(1, 2)))
    return WindowConfig(tuple(shape), tuple(windows), tuple(strides), tuple(padding), tuple(base),
                        tuple(dilation))
