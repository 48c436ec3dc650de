"""Shardings: which part of a global array each device holds.

A multi-device program is global and unpartitioned; its values carry
shardings, written two ways:

* Shardy (``sdy`` dialect): a mesh of named axes over the logical devices
  (``sdy.mesh @mesh = <["x"=4, "y"=2], device_ids=[...]>``, ``device_ids``
  iota when absent; ``<[], device_ids=[d]>``, a maximal mesh, puts a tensor on
  device d alone; ``<[]>``, the empty mesh, replicates it on every device) and,
  per tensor, the axes that shard each dimension, major to minor (``#sdy.sharding<@mesh, [{"x"}, {"y", ?}], replicated={...}>``);
  a sub-axis ``"x":(m)k`` is the k-sized piece of axis ``x`` after the first
  ``m`` (openxla/shardy, docs/sharding_representation.md). Axes that shard no
  dimension replicate the tensor. A dimension of size ``d`` sharded ``n``
  ways holds ``ceil(d / n)`` elements per shard, the last shards fewer (or none).
* HLO shardings (``mhlo.sharding = "{devices=[4,2]<=[8]}"``), parsed by XLA's
  own parser in jaxlib.

Both become a :class:`Tiling`: the number of tiles along each dimension and,
for every tile, the logical devices holding it. :func:`split` cuts a global
array into per-device shards, :func:`assemble` puts shards back together, and
:meth:`Tiling.op_sharding` gives the serialized ``xla.OpSharding`` that JAX
reads back through the PJRT Shardings extension.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..errors import ModuleError

# ------------------------------------------------------------------ meshes and Shardy shardings


@dataclass(frozen=True)
class Mesh:
    """Named axes over the logical devices; ``device_ids[k]`` is at row-major position k."""

    axes: tuple            # ((name, size), ...)
    device_ids: tuple

    @property
    def size(self) -> int:
        return len(self.device_ids)

    @property
    def axis_sizes(self) -> dict:
        return dict(self.axes)

    def devices(self) -> np.ndarray:
        """The logical device ids as an array with one dimension per axis."""
        return np.array(self.device_ids, dtype=np.int64).reshape([size for _, size in self.axes])


@dataclass(frozen=True)
class AxisRef:
    """A mesh axis, or its sub-axis ``"name":(pre_size)size``."""

    name: str
    pre_size: int = 1
    size: int | None = None   # None: the whole axis

    def bounds(self, mesh: Mesh) -> tuple[int, int]:
        """The piece of the axis it covers, as (pre-size, pre-size * size)."""
        full = mesh.axis_sizes[self.name]
        return self.pre_size, self.pre_size * (full if self.size is None else self.size)

    def __str__(self) -> str:
        return f'"{self.name}"' if self.size is None else f'"{self.name}":({self.pre_size}){self.size}'


@dataclass(frozen=True)
class TensorSharding:
    """A Shardy tensor sharding: the axes sharding each dimension, major to minor."""

    mesh: Mesh
    dims: tuple                      # (tuple of AxisRef, ...) per dimension
    replicated: tuple = ()
    unreduced: tuple = ()
    open_dims: tuple = ()            # dimensions that propagation may shard further (``{"x", ?}``)

    def restricted_to(self, axis_names) -> "TensorSharding":
        """The sharding along the named axes only (the manual axes of a manual computation)."""
        keep = set(axis_names)
        return TensorSharding(self.mesh, tuple(tuple(a for a in dim if a.name in keep) for dim in self.dims),
                              unreduced=tuple(a for a in self.unreduced if a.name in keep))

    def unreduced_axes(self) -> tuple:
        """The unreduced axes as ``((name, size), ...)`` in mesh order (whole axes only)."""
        names = set()
        for axis in self.unreduced:
            if axis.size is not None:
                raise ModuleError(f"unreduced sub-axis {axis} is not supported (whole mesh axes only)")
            names.add(axis.name)
        return tuple((name, size) for name, size in self.mesh.axes if name in names)

    def tiling(self) -> "Tiling":
        """The tiles and their devices. The devices of a tile that differ along the
        unreduced axes hold different partial values: the tile's replicas are ordered
        by their coordinate along those axes first (XLA's ``last_tile_dims={unreduced,
        replicated}``)."""
        mesh = self.mesh
        unreduced = self.unreduced_axes()
        if not mesh.axes:   # a maximal mesh (one device holds the tensor) or the empty mesh (all do)
            return Tiling((1,) * len(self.dims), np.array(mesh.device_ids).reshape((1,) * len(self.dims) + (-1,)))
        used = [a for dim in self.dims for a in dim]
        pieces = _axis_pieces(mesh, used)
        order, tiles = [], []
        for dim in self.dims:
            dim_pieces = [p for a in dim for p in _pieces_of(a, mesh, pieces)]
            order.extend(dim_pieces)
            tiles.append(math.prod(pieces[p] for p in dim_pieces))
        rest = [p for p in pieces if p not in order]
        names = {name for name, _ in unreduced}
        rest = [p for p in rest if p[0] in names] + [p for p in rest if p[0] not in names]
        keys = list(pieces)
        sizes, permutation = tuple(pieces[p] for p in keys), tuple(keys.index(p) for p in order + rest)
        devices = mesh.devices().reshape(sizes).transpose(permutation)
        iota = (sizes, permutation) if mesh.device_ids == tuple(range(mesh.size)) else None
        return Tiling(tuple(tiles), devices.reshape(tuple(tiles) + (-1,)), iota, unreduced)

    def __str__(self) -> str:
        dims = ", ".join("{" + ", ".join(map(str, dim)) + "}" for dim in self.dims)
        return f"<[{dims}]>"


def _axis_pieces(mesh: Mesh, used) -> dict:
    """The mesh axes cut where the used sub-axes need: ``{(axis, start): size}`` in
    mesh order, major to minor within an axis."""
    cuts = {name: {1, size} for name, size in mesh.axes}
    for axis in used:
        if axis.name not in cuts:
            raise ModuleError(f"axis {axis} is not in the mesh {list(mesh.axis_sizes)}")
        cuts[axis.name].update(axis.bounds(mesh))
    pieces = {}
    for name, _ in mesh.axes:
        bounds = sorted(cuts[name])
        for low, high in zip(bounds, bounds[1:]):
            pieces[(name, low)] = high // low
    return pieces


def _pieces_of(axis: AxisRef, mesh: Mesh, pieces: dict) -> list:
    low, high = axis.bounds(mesh)
    return [key for key in pieces if key[0] == axis.name and low <= key[1] < high]


# Text forms, as MLIR prints them (decode_attribute keeps sdy attributes as text).
_TOKENS = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|(-?\d+)|([A-Za-z_][\w.]*)|(@[\w.$-]+)|(\S))')


def _tokens(text: str) -> list:
    tokens = []
    for match in _TOKENS.finditer(text):
        string, number, word, symbol, char = match.groups()
        if string is not None:
            tokens.append(("str", string))
        elif number is not None:
            tokens.append(("int", int(number)))
        elif word is not None:
            tokens.append(("word", word))
        elif symbol is not None:
            tokens.append(("sym", symbol[1:]))
        elif char is not None:
            tokens.append(("char", char))
    return tokens


class _Parser:
    def __init__(self, text: str, meshes: dict):
        self.text = text
        self.tokens = _tokens(text)
        self.position = 0
        self.meshes = meshes

    def peek(self, value=None):
        token = self.tokens[self.position] if self.position < len(self.tokens) else (None, None)
        return token if value is None else token[1] == value

    def take(self, value=None):
        token = self.peek()
        if value is not None and token[1] != value:
            raise ModuleError(f"cannot parse the sharding {self.text!r}: expected {value!r} at {token[1]!r}")
        self.position += 1
        return token[1]

    def maybe(self, value) -> bool:
        if self.peek(value):
            self.position += 1
            return True
        return False

    def bracketed(self, item) -> list:
        """``[a, b, ...]``, each element read by ``item()``."""
        self.take("[")
        values = []
        while not self.maybe("]"):
            values.append(item())
            self.maybe(",")
        return values

    def skip_to_body(self) -> None:
        """Past the attribute's name (``#sdy.sharding``), to its ``<``."""
        while not self.peek("<"):
            self.take()

    def mesh(self, num_devices: int = 1) -> Mesh:
        """``<["x"=4, "y"=2], device_ids=[...]>`` (after ``mesh`` or ``#sdy.mesh``); the
        empty mesh ``<[]>`` spans the program's ``num_devices``, in order."""
        self.take("<")
        axes = self.bracketed(self.mesh_axis)
        device_ids = None
        if self.maybe(","):
            self.take("device_ids")
            self.take("=")
            device_ids = self.bracketed(self.take)
        self.take(">")
        if device_ids is None:
            device_ids = list(range(math.prod(size for _, size in axes) if axes else num_devices))
        return Mesh(tuple(axes), tuple(device_ids))

    def mesh_axis(self) -> tuple:
        """``"x"=4``"""
        name = self.take()
        self.take("=")
        return name, self.take()

    def axis(self) -> AxisRef:
        name = self.take()
        if self.maybe(":"):
            self.take("(")
            pre_size = self.take()
            self.take(")")
            return AxisRef(name, pre_size, self.take())
        return AxisRef(name)

    def axis_set(self) -> tuple[tuple, bool]:
        """``{"x", "y":(1)2, ?}``: the axes and whether the set is open (a priority
        ``p1`` may follow)."""
        self.take("{")
        axes, is_open = [], False
        while not self.maybe("}"):
            if self.maybe("?"):
                is_open = True
                continue
            axes.append(self.axis())
            self.maybe(",")
        if self.peek()[0] == "word" and re.fullmatch(r"p\d+", str(self.peek()[1])):
            self.take()
        return tuple(axes), is_open

    def tensor_sharding(self) -> TensorSharding:
        """``<@mesh, [{...}, ...], replicated={...}, unreduced={...}>``."""
        self.take("<")
        if self.peek()[0] == "sym":
            name = self.take()
            if name not in self.meshes:
                raise ModuleError(f"the sharding {self.text!r} names mesh @{name}, which the module does not define")
            mesh = self.meshes[name]
        else:
            self.take("mesh")
            mesh = self.mesh()
        self.take(",")
        dim_sets = self.bracketed(self.axis_set)
        dims, open_dims = tuple(a for a, _ in dim_sets), tuple(o for _, o in dim_sets)
        extra = {"replicated": (), "unreduced": ()}
        while self.maybe(","):
            key = self.take()
            self.take("=")
            extra[key] = self.axis_set()[0]
        self.take(">")
        return TensorSharding(mesh, dims, extra["replicated"], extra["unreduced"], open_dims)


def parse_mesh(text: str, num_devices: int = 1) -> Mesh:
    """``#sdy.mesh<["x"=4], device_ids=[...]>`` as a :class:`Mesh`; the empty mesh ``<[]>``
    spans a program's ``num_devices`` (its partitions)."""
    parser = _Parser(text, {})
    parser.skip_to_body()
    return parser.mesh(num_devices)


def parse_sharding(text: str, meshes: dict) -> TensorSharding:
    """``#sdy.sharding<@mesh, [...]>`` as a :class:`TensorSharding` (``meshes``: by name)."""
    parser = _Parser(text, meshes)
    parser.skip_to_body()
    return parser.tensor_sharding()


def parse_sharding_per_value(text: str, meshes: dict) -> list:
    """``#sdy.sharding_per_value<[<@mesh, ...>, ...]>`` as a list of TensorSharding."""
    parser = _Parser(text, meshes)
    parser.skip_to_body()
    parser.take("<")
    return parser.bracketed(parser.tensor_sharding)


def parse_manual_axes(text: str) -> tuple:
    """``#sdy<manual_axes{"x", "y"}>`` as a tuple of axis names."""
    return tuple(re.findall(r'"((?:[^"\\]|\\.)*)"', text))


# ------------------------------------------------------------------------------- tilings


@dataclass(frozen=True, eq=False)
class Tiling:
    """Tiles of a tensor and their devices.

    ``tiles[d]`` tiles along dimension d; ``assignment[t + (r,)]`` is the r-th logical
    device holding tile t (all the devices of a tile hold the same data). ``iota``:
    ``(dims, permutation)`` when the assignment is ``iota(n).reshape(dims).transpose(permutation)``,
    the compact form XLA prints (``<=[4,2]T(1,0)``).
    """

    tiles: tuple
    assignment: np.ndarray
    iota: tuple | None = None
    unreduced: tuple = ()   # ((axis, size), ...): the replicas of a tile hold one partial per coordinate

    @property
    def partials(self) -> int:
        """How many different partial values the replicas of a tile hold (1: reduced)."""
        return math.prod(size for _, size in self.unreduced)

    def partial_of(self, r: int) -> int:
        """The partial (coordinate along the unreduced axes) the r-th holder of a tile holds."""
        return r // (self.replication // self.partials)

    @property
    def devices(self) -> list:
        return sorted(int(d) for d in self.assignment.flat)

    @property
    def replication(self) -> int:
        return self.assignment.shape[-1]

    def locate(self, device: int) -> tuple | None:
        """``(tile, r)`` of ``device``, or None if it holds no tile."""
        found = np.argwhere(self.assignment == device)
        if not len(found):
            return None
        *tile, r = found[0]
        return tuple(int(t) for t in tile), int(r)

    def holder(self, tile: tuple, r: int = 0) -> int:
        return int(self.assignment[tuple(tile) + (r,)])

    def coarsened(self, tiles: tuple) -> "Tiling":
        """Fewer tiles: each new tile is a block of old ones, the old ones become replicas."""
        blocks = [old // new for old, new in zip(self.tiles, tiles)]
        if any(old != new * block for old, new, block in zip(self.tiles, tiles, blocks)):
            raise ModuleError(f"cannot merge {self.tiles} tiles into {tiles}")
        rank = len(tiles)
        shape = [size for new, block in zip(tiles, blocks) for size in (new, block)] + [self.replication]
        grouped = self.assignment.reshape(shape)
        order = list(range(0, 2 * rank, 2)) + list(range(1, 2 * rank, 2)) + [2 * rank]
        return Tiling(tuple(tiles), grouped.transpose(order).reshape(tuple(tiles) + (-1,)))

    def slices(self, shape: tuple, tile: tuple) -> tuple:
        """The part of a global array of ``shape`` that ``tile`` holds (uneven: the
        last tiles hold fewer elements, or none)."""
        parts = []
        for size, count, index in zip(shape, self.tiles, tile):
            chunk = -(-size // count)
            parts.append(slice(min(index * chunk, size), min((index + 1) * chunk, size)))
        return tuple(parts)

    def same_placement(self, other: "Tiling") -> bool:
        """Whether every device holds the same part of an array under both tilings."""
        if self.tiles != other.tiles or self.devices != other.devices or self.unreduced != other.unreduced:
            return False
        return all(self._holders(index) == other._holders(index) for index in np.ndindex(*self.tiles))

    def _holders(self, tile: tuple) -> list:
        """The devices holding ``tile``, as a sorted list per partial."""
        return [sorted(group) for group in self.assignment[tile].reshape(self.partials, -1).tolist()]

    def is_replicated(self) -> bool:
        return all(t == 1 for t in self.tiles)

    def op_sharding(self, num_devices: int) -> bytes:
        """The serialized ``xla.OpSharding`` (devices are logical ids)."""
        from jaxlib import xla_client

        proto = xla_client.OpSharding()
        if self.unreduced:
            replicas = self.replication // self.partials
            proto.type = xla_client.OpSharding.Type.OTHER
            proto.tile_assignment_dimensions = list(self.tiles) + [self.partials] + ([replicas] if replicas > 1 else [])
            if self.iota is not None:
                proto.iota_reshape_dims, proto.iota_transpose_perm = self.iota
            else:
                proto.tile_assignment_devices = [int(d) for d in self.assignment.flat]
            proto.last_tile_dims = [xla_client.OpSharding.Type.UNREDUCED] + \
                ([xla_client.OpSharding.Type.REPLICATED] if replicas > 1 else [])
        elif self.is_replicated() and self.replication == num_devices:
            proto.type = xla_client.OpSharding.Type.REPLICATED
        elif self.is_replicated() and self.replication == 1:
            proto.type = xla_client.OpSharding.Type.MAXIMAL
            proto.tile_assignment_devices = [int(self.assignment.flat[0])]
        else:
            proto.type = xla_client.OpSharding.Type.OTHER
            dims = list(self.tiles) + ([self.replication] if self.replication > 1 else [])
            proto.tile_assignment_dimensions = dims
            if self.iota is not None:
                proto.iota_reshape_dims, proto.iota_transpose_perm = self.iota
            else:
                proto.tile_assignment_devices = [int(d) for d in self.assignment.flat]
            proto.replicate_on_last_tile_dim = self.replication > 1
        return proto.SerializeToString()

    def hlo_text(self, num_devices: int) -> str:
        """The HLO sharding string (``{devices=[2,1]<=[2]}``) of :meth:`op_sharding`."""
        from jaxlib import xla_client

        proto = xla_client.OpSharding()
        proto.ParseFromString(self.op_sharding(num_devices))
        return str(xla_client.HloSharding.from_proto(proto))

    def __repr__(self) -> str:
        return f"<Tiling tiles={self.tiles} devices={self.assignment.tolist()}>"


def replicated(rank: int, devices) -> Tiling:
    return Tiling((1,) * rank, np.array(list(devices)).reshape((1,) * rank + (-1,)))


def hlo_tiling(text: str, rank: int, num_devices: int) -> Tiling:
    """An HLO sharding (``{devices=[2,1,4]<=[8] last_tile_dim_replicate}`` ...) as a Tiling;
    manual subgroups count as replicas."""
    from jaxlib import xla_client

    try:
        hlo = xla_client.HloSharding.from_string(text)
    except Exception as error:  # noqa: BLE001 - XLA's parser raises several types
        raise ModuleError(f"cannot parse the HLO sharding {text!r}: {error}") from None
    if hlo.tuple_elements():
        raise ModuleError(f"tuple sharding {text!r} of a tensor")
    if hlo.is_replicated() or hlo.is_manual() or hlo.is_unknown():
        return replicated(rank, range(num_devices))
    if hlo.is_maximal():
        return replicated(rank, hlo.tile_assignment_devices())
    dims = hlo.tile_assignment_dimensions()
    devices = np.array(hlo.tile_assignment_devices()).reshape(dims)
    return Tiling(tuple(dims[:rank]), devices.reshape(tuple(dims[:rank]) + (-1,)))


# ------------------------------------------------------------------------- global <-> shards


def split(array: np.ndarray, tiling: Tiling) -> dict:
    """``{device: its shard}`` for every device of ``tiling`` (views of ``array``)."""
    array = np.asarray(array)
    shards = {}
    for index in np.ndindex(*tiling.tiles):
        part = array[tiling.slices(array.shape, index)]
        for device in tiling.assignment[index]:
            shards[int(device)] = part
    return shards


def assemble(shape: tuple, dtype, tiling: Tiling, shard_of, r: int = 0) -> np.ndarray:
    """The global array from ``shard_of(device)``: each tile is read from its r-th holder."""
    array = np.empty(shape, dtype)
    for index in np.ndindex(*tiling.tiles):
        where = tiling.slices(shape, index)
        shard = np.asarray(shard_of(tiling.holder(index, r)))
        expected = tuple(s.stop - s.start for s in where)
        if shard.shape != expected:
            raise ValueError(f"the shard of tile {index} on device {tiling.holder(index, r)} has shape "
                             f"{shard.shape}, expected {expected} (global shape {tuple(shape)})")
        array[where] = shard
    return array


# ------------------------------------------------------------------- shardings of a function's values


def value_tiling(attributes: dict, rank: int, meshes: dict, num_devices: int) -> Tiling | None:
    """The tiling an argument's or result's attribute dictionary gives (``sdy.sharding``
    or ``mhlo.sharding``), None without one."""
    if "sdy.sharding" in attributes:
        return parse_sharding(attributes["sdy.sharding"], meshes).tiling()
    if "mhlo.sharding" in attributes:
        return hlo_tiling(attributes["mhlo.sharding"], rank, num_devices)
    return None
