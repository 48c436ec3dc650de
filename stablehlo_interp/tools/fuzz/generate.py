"""Random well-typed StableHLO programs and their arguments, deterministic from a seed.

A program is one to ``max_ops`` ops drawn from :data:`OPS` (92 ops of the spec:
element-wise, comparison, conversion, shape, ``pad``, ``sort`` (of one to three
operands), ``reduce``, ``reduce_window``, ``map``, ``dot_general``, dynamic
slices, ``gather``, ``scatter``, ``while`` (a bounded counter loop carrying up to
two more values), ``case`` and ``if`` (branches of constants or of values from
outside), ``convolution``, ``fft``, ``select_and_scatter``, the three batch norm
ops, ``triangular_solve``, ``cholesky``, ``rng``, ``rng_bit_generator``, the
collectives on a one-process grid, ``replica_id``, ``partition_id``,
``optimization_barrier``, ``tuple`` and ``get_tuple_element``, ``uniform_quantize``
and ``uniform_dequantize`` with the element-wise ops on quantized values), each
with operands of types the spec allows for it (StableHLO spec, each op's
constraints) and random attributes; the values nothing else reads are returned.
Not generated: host I/O and tokens (``infeed``, ``outfeed``, ``send``, ``recv``,
``after_all``: a host side no two backends share), ``composite`` and
``custom_call`` (they name functions and targets outside the op), and the ops
the spec does not list (the dynamic-shape ops, ``dot``, ``einsum`` ...).
Arguments come in every
element type the interpreter holds (f8 types, i4, complex, bool, unsigned ...),
in shapes of rank 0 to 3 with sizes 0 to 5, and their values include the special
ones of their type: NaN, ±inf, -0, subnormals, the largest and smallest numbers.

Where the spec leaves a result to the implementation, the generator keeps out of
it, so that a difference is somebody's bug: reductions start at their body's
identity and sum only with ``add`` for floats (the spec leaves the order of a
reduction open), sorts compare in a total order, floats convert to integers
only from values in range (the spec: implementation-defined otherwise), cholesky
factors only Hermitian positive-definite matrices and hides the other triangle,
and random numbers are judged by what the spec fixes (``rng``'s range, the bits of
``rng_bit_generator`` as a function of the state), not by their values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ...ir.types import dtype_of
from .programs import Op, Program, Spec, TupleSpec

# Element types and how often arguments take them.
FLOATS = {"f32": 4, "f64": 2, "f16": 2, "bf16": 2, "f8E4M3FN": .4, "f8E5M2": .4, "f8E4M3FNUZ": .2,
          "f8E5M2FNUZ": .2, "f8E4M3B11FNUZ": .2, "f8E4M3": .2, "f8E3M4": .2}
SIGNED = {"i32": 2, "i64": 1, "i8": 1, "i16": .7, "i4": .4}
UNSIGNED = {"ui32": 1, "ui8": 1, "ui16": .5, "ui64": .5, "ui4": .3}
BOOLS = {"i1": 1.5}
COMPLEX = {"complex<f32>": 1, "complex<f64>": .5}
ELEMENT_WEIGHTS = FLOATS | SIGNED | UNSIGNED | BOOLS | COMPLEX
ELEMENT_TYPES = tuple(ELEMENT_WEIGHTS)
# Quantized types (per tensor, f32 expressed): made by uniform_quantize only, so never arguments
# of a generated program (a reduced one may have them: their values are the stored integers).
QUANTIZED = ("!quant.uniform<i8:f32, 5.000000e-01:-1>", "!quant.uniform<i8:f32, 1.000000e-01>",
             "!quant.uniform<ui8:f32, 3.125000e-02:128>", "!quant.uniform<i16:f32, 2.000000e+00:7>",
             "!quant.uniform<i8<-127:127>:f32, 2.500000e-01:3>")


def storage_of(element: str) -> str:
    """The storage type of a quantized element type (the type itself otherwise)."""
    match = re.match(r"!quant\.uniform<(\w+)", element)
    return match.group(1) if match else element


def kind(element: str) -> str:
    """``f``, ``c``, ``si``, ``ui``, ``b``, ``q`` (a ``!quant.uniform`` type) or ``t`` (a tuple)."""
    return ("t" if element == "tuple" else "q" if element.startswith("!quant.") else "f" if element in FLOATS else "c" if element in COMPLEX else "b" if element in BOOLS
            else "ui" if element in UNSIGNED else "si")


NUMERIC = "f c si ui"
ANY = "f c si ui b"
# Element kinds per op; ``q``: on quantized values (spec: each of these ops allows them, and
# computes dequantize -> op -> quantize). Quantized values come from uniform_quantize only.
UNARY = {
    "abs": "f c si q", "negate": "f c si ui q", "sign": "f c si q", "not": "si ui b",
    "exponential": "f c q", "log": "f c q", "sqrt": "f c q", "rsqrt": "f c q", "cbrt": "f c q", "tanh": "f c q",
    "sine": "f c q", "cosine": "f c q", "tan": "f c q", "logistic": "f c q", "exponential_minus_one": "f c q",
    "log_plus_one": "f c q", "floor": "f q", "ceil": "f q", "round_nearest_afz": "f q",
    "round_nearest_even": "f q", "popcnt": "si ui", "count_leading_zeros": "si ui", "is_finite": "f",
    "real": "f c", "imag": "f c",
}
BINARY = {
    "add": ANY + " q", "multiply": ANY + " q", "maximum": ANY + " q", "minimum": ANY + " q",
    "subtract": NUMERIC + " q", "divide": NUMERIC + " q", "remainder": "f si ui q", "power": NUMERIC + " q",
    "atan2": "f c q", "and": "si ui b", "or": "si ui b",
    "xor": "si ui b", "shift_left": "si ui", "shift_right_arithmetic": "si ui", "shift_right_logical": "si ui",
}


def _real_of(element: str) -> str:
    return {"complex<f32>": "f32", "complex<f64>": "f64"}.get(element, element)


@dataclass
class Generated:
    """A generated program, its arguments, and the seed it came from."""

    program: Program
    arguments: list
    seed: int

    @property
    def text(self) -> str:
        return self.program.text()


def generate(seed: int, max_ops: int = 12, ops: tuple | None = None, element_types: tuple | None = None
             ) -> Generated:
    """The program and arguments of ``seed``: the same on every machine and run.

    ``ops``: draw only these (names without ``stablehlo.``; default :data:`OPS`);
    ``element_types``: give new values only these element types (default: all)."""
    rng = np.random.default_rng(seed)
    builder = _Builder(rng, tuple(element_types or ELEMENT_TYPES))
    names = sorted(ops or OPS)
    count = int(rng.integers(1, max_ops + 1)) if rng.random() < 0.5 else int(rng.integers(1, min(4, max_ops) + 1))
    attempts = 0
    while len(builder.ops) < count and attempts < 20 * count:
        attempts += 1
        OPS[names[int(rng.integers(len(names)))]](builder)
    if not builder.ops:
        OPS["add"](builder)
    program = builder.program()
    arguments = [random_values(spec, rng) for spec in program.argument_specs]
    return Generated(program, arguments, seed)


class _Builder:
    """Values made so far (arguments made on demand, op results), in the order made."""

    def __init__(self, rng, element_types: tuple):
        self.rng = rng
        self.element_types = element_types
        self.specs: list = []
        self.origin: list = []      # per value: None (an argument) or the op's index
        self.ops: list = []
        self.read: set = set()

    # --- choosing
    def choice(self, options):
        options = list(options)
        return options[int(self.rng.integers(len(options)))]

    def element(self, kinds: str) -> str | None:
        allowed = [e for e in self.element_types if kind(e) in kinds.split()]
        if not allowed:
            return None
        weights = np.array([ELEMENT_WEIGHTS[e] for e in allowed])
        return allowed[int(self.rng.choice(len(allowed), p=weights / weights.sum()))]

    def shape(self, min_rank: int = 0) -> tuple:
        rank = int(self.rng.choice([0, 1, 2, 3], p=[.15, .35, .3, .2]))
        rank = max(rank, min_rank)
        return tuple(0 if self.rng.random() < 0.04 else int(self.rng.integers(1, 6)) for _ in range(rank))

    def argument(self, spec: Spec) -> int:
        self.specs.append(spec)
        self.origin.append(None)
        return len(self.specs) - 1

    def value(self, kinds: str = ANY, min_rank: int = 0, accept=None) -> int | None:
        """A value whose element is of ``kinds``: mostly an op's result (chains), else a new argument."""
        fits = [v for v, s in enumerate(self.specs) if kind(s.element) in kinds.split() and len(s.shape) >= min_rank
                and (s.element in self.element_types or kind(s.element) == "q") and (accept is None or accept(s))]
        if fits and self.rng.random() < 0.8:
            made = [v for v in fits if self.origin[v] is not None and v not in self.read]
            return self.choice(made if made and self.rng.random() < 0.7 else fits)
        element = self.element(kinds)
        if element is None:
            return None
        spec = Spec(self.shape(min_rank), element)
        if accept is not None and not accept(spec):
            return None
        return self.argument(spec)

    def like(self, spec: Spec) -> int:
        """A value of type ``spec``: an existing one or a new argument."""
        same = [v for v, s in enumerate(self.specs) if s == spec]
        if same and self.rng.random() < 0.5:
            return self.choice(same)
        return self.argument(spec)

    def add(self, name: str, operands, result: Spec | TupleSpec, attributes: str = "", regions: str = "",
            captures: tuple = ()) -> int:
        """An op of one result; returns its value."""
        return self.add_results(name, operands, (result,), attributes, regions, captures)[0]

    def add_results(self, name: str, operands, results: tuple, attributes: str = "", regions: str = "",
                    captures: tuple = ()) -> list:
        """An op of any number of results; returns their values."""
        self.ops.append(Op(f"stablehlo.{name}", tuple(operands), tuple(results), attributes, regions,
                           tuple(captures)))
        self.read.update(operands)
        self.read.update(captures)
        made = []
        for result in results:
            self.specs.append(result)
            self.origin.append(len(self.ops) - 1)
            made.append(len(self.specs) - 1)
        return made

    def constant(self, spec: Spec, values: np.ndarray) -> int:
        return self.add("constant", (), spec, f"value = {dense(values, spec)}")

    def program(self) -> Program:
        """Arguments first, then the ops' results; returns what nothing reads."""
        arguments = [v for v, o in enumerate(self.origin) if o is None]
        made = sorted((o, v) for v, o in enumerate(self.origin) if o is not None)
        order = {v: i for i, v in enumerate(arguments + [v for _, v in made])}
        program = Program(len(arguments), [self.specs[v] for v in arguments + [v for _, v in made]])
        program.ops = [op.renumbered(order.__getitem__) for op in self.ops]
        sinks = [v for v, o in enumerate(self.origin) if o is not None and v not in self.read]
        program.outputs = [order[v] for v in sinks[-6:]]
        return program


# ------------------------------------------------------------------ values


def special_values(element: str) -> list:
    """The values of ``element`` that break code: NaN, ±inf, -0, subnormals, extremes."""
    dtype = dtype_of(element)
    if kind(element) == "b":
        return [True, False]
    if kind(element) in ("si", "ui"):
        bounds = ml_dtypes.iinfo(dtype)
        return [int(bounds.min), int(bounds.max), 0, 1] + ([-1] if bounds.min < 0 else [])
    real = dtype_of(_real_of(element))
    info = ml_dtypes.finfo(real)
    tiny = float(info.smallest_subnormal)
    values = [np.nan, np.inf, -np.inf, -0.0, 0.0, tiny, -tiny, float(info.max), -float(info.max),
              float(info.smallest_normal), 1.0, -1.0]
    kept = []
    for value in values:
        stored = float(np.array(value).astype(real).astype(np.float64))
        if (np.isnan(value) == np.isnan(stored)) and (np.isnan(value) or stored == value):
            kept.append(value)
    if kind(element) == "c":
        return [complex(a, b) for a in kept for b in (0.0, kept[len(kept) // 2], np.nan)]
    return kept


def random_values(spec: Spec, rng) -> np.ndarray:
    """Random values of ``spec``, about a quarter of them special (:func:`special_values`);
    of a quantized type, its stored integers."""
    spec = Spec(spec.shape, storage_of(spec.element))
    dtype = dtype_of(spec.element)
    shape = spec.shape
    k = kind(spec.element)
    if k == "b":
        values = rng.random(shape) < 0.5
    elif k in ("si", "ui"):
        info = ml_dtypes.iinfo(dtype)
        low, high = (max(int(info.min), -10), min(int(info.max), 10)) if rng.random() < 0.6 else \
            (int(info.min), int(info.max))
        values = rng.integers(low, high, shape, dtype=np.uint64 if k == "ui" else np.int64, endpoint=True)
    else:
        scale = float(rng.choice([1.0, 10.0, 1000.0]))
        values = rng.standard_normal(shape) * scale
        if k == "c":
            values = values + 1j * rng.standard_normal(shape) * scale
    values = np.asarray(values).astype(dtype)
    specials = special_values(spec.element)
    swap = rng.random(shape) < 0.25
    if swap.any():
        picks = rng.integers(0, len(specials), shape)
        with np.errstate(all="ignore"):
            chosen = np.array([specials[i] for i in picks.ravel()], dtype=object).reshape(shape)
            special = np.array(chosen.tolist() if shape else chosen.item()).astype(dtype)
        values = np.where(swap, special, values).astype(dtype)
    return np.asarray(values, dtype)


def dense(values: np.ndarray, spec: Spec) -> str:
    """A ``dense<...>`` attribute of ``values``: floats as their bit patterns (NaN, -0 survive)."""
    k = kind(spec.element)

    def element(x) -> str:
        if k == "b":
            return "true" if x else "false"
        if k in ("si", "ui"):
            return str(int(x))
        bits = np.array(x).view(f"u{np.array(x).dtype.itemsize}")
        return f"0x{int(bits):0{2 * np.array(x).dtype.itemsize}X}"

    def nested(array) -> str:
        if array.ndim == 0:
            if k == "c":
                real = np.array(array.real)
                imag = np.array(array.imag)
                return f"({element(real)}, {element(imag)})"
            return element(array)
        return "[" + ", ".join(nested(a) for a in array) + "]"

    values = np.asarray(values)
    return f"dense<{nested(values) if values.size else ''}> : {spec}"


# ------------------------------------------------------------------ ops


def _ints(values) -> str:
    return ", ".join(str(int(v)) for v in values)


def _array(values) -> str:
    return f"array<i64{': ' + _ints(values) if len(values) else ''}>"


def _operand(*kinds, **constraints):
    """A builder of an op on a value :meth:`_Builder.value` picks (``kinds``, ``min_rank``,
    ``accept``), called with the value and its type; nothing when none fits."""
    def wrap(build):
        def picked(b: _Builder):
            x = b.value(*kinds, **constraints)
            if x is not None:
                build(b, x, b.specs[x])
        return picked
    return wrap


def _unary(name: str, kinds: str):
    @_operand(kinds)
    def build(b: _Builder, x: int, spec: Spec):
        element = {"is_finite": "i1"}.get(name, spec.element)
        if name in ("abs", "real", "imag"):
            element = _real_of(spec.element)
        b.add(name, (x,), Spec(spec.shape, element))
    return build


def _binary(name: str, kinds: str):
    @_operand(kinds)
    def build(b: _Builder, x: int, spec: Spec):
        b.add(name, (x, b.like(spec)), spec)
    return build


COMPARE_TYPES = {"f": "FLOAT", "c": "FLOAT", "si": "SIGNED", "ui": "UNSIGNED", "b": "UNSIGNED"}


@_operand(ANY)
def _compare(b: _Builder, x: int, spec: Spec):
    k = kind(spec.element)
    directions = ["EQ", "NE"] if k == "c" else ["EQ", "NE", "LT", "LE", "GT", "GE"]
    compare_type = "TOTALORDER" if k == "f" and b.rng.random() < 0.3 else COMPARE_TYPES[k]
    b.add("compare", (x, b.like(spec)), Spec(spec.shape, "i1"),
          f"comparison_direction = #stablehlo<comparison_direction {b.choice(directions)}>, "
          f"compare_type = #stablehlo<comparison_type {compare_type}>")


def _select(b: _Builder):
    x = b.value(ANY)
    if x is None or "i1" not in b.element_types:
        return
    spec = b.specs[x]
    pred_shape = () if b.rng.random() < 0.2 else spec.shape
    b.add("select", (b.like(Spec(pred_shape, "i1")), x, b.like(spec)), spec)


@_operand("f si ui")
def _clamp(b: _Builder, x: int, spec: Spec):
    bound = Spec((), spec.element) if b.rng.random() < 0.5 else spec
    b.add("clamp", (b.like(bound), x, b.like(bound)), spec)


@_operand(ANY)
def _convert(b: _Builder, x: int, spec: Spec):
    targets = [e for e in b.element_types if not (kind(spec.element) == "c" and kind(e) != "c")
               and not (kind(spec.element) in "f c" and kind(e) in ("si", "ui"))]
    b.add("convert", (x,), Spec(spec.shape, b.choice(targets)))


@_operand("f si ui c")
def _bitcast_convert(b: _Builder, x: int, spec: Spec):
    width = np.dtype(dtype_of(spec.element)).itemsize * (1 if spec.element not in ("i4", "ui4") else 0.5)
    same = [e for e in b.element_types if e != spec.element and kind(e) != "b"
            and (kind(e) == "c") == (kind(spec.element) == "c") and np.dtype(dtype_of(e)).itemsize * (1 if e not in ("i4", "ui4") else 0.5) == width]
    if same:
        b.add("bitcast_convert", (x,), Spec(spec.shape, b.choice(same)))


@_operand("f")
def _reduce_precision(b: _Builder, x: int, spec: Spec):
    b.add("reduce_precision", (x,), spec, f"exponent_bits = {int(b.rng.integers(1, 9))} : i32, "
          f"mantissa_bits = {int(b.rng.integers(0, 11))} : i32")


@_operand("f", accept=lambda s: s.element in ("f32", "f64"))
def _complex(b: _Builder, x: int, spec: Spec):
    b.add("complex", (x, b.like(spec)), Spec(spec.shape, f"complex<{spec.element}>"))


@_operand(ANY)
def _reshape(b: _Builder, x: int, spec: Spec):
    size, shape = spec.size, []
    if size == 0:
        shape = [0] + [int(b.rng.integers(1, 4)) for _ in range(int(b.rng.integers(0, 3)))]
    else:
        remaining = size
        while remaining > 1 and len(shape) < 3:
            divisors = [d for d in range(2, remaining + 1) if remaining % d == 0]
            d = b.choice(divisors)
            shape.append(d)
            remaining //= d
        if remaining > 1:
            shape[-1] *= remaining
        for _ in range(int(b.rng.integers(0, 2))):
            shape.insert(int(b.rng.integers(0, len(shape) + 1)), 1)
        b.rng.shuffle(shape)
    b.add("reshape", (x,), Spec(tuple(shape), spec.element))


@_operand(ANY, min_rank=2)
def _transpose(b: _Builder, x: int, spec: Spec):
    permutation = b.rng.permutation(len(spec.shape))
    b.add("transpose", (x,), Spec(tuple(spec.shape[p] for p in permutation), spec.element),
          f"permutation = {_array(permutation)}")


@_operand(ANY, accept=lambda s: len(s.shape) <= 2)
def _broadcast_in_dim(b: _Builder, x: int, spec: Spec):
    rank = len(spec.shape) + int(b.rng.integers(0, 3))
    dims = sorted(b.rng.choice(rank, len(spec.shape), replace=False).tolist())
    shape = [int(b.rng.integers(1, 4)) for _ in range(rank)]
    for d, size in zip(dims, spec.shape):
        shape[d] = size if size != 1 or b.rng.random() < 0.5 else int(b.rng.integers(1, 4))
    b.add("broadcast_in_dim", (x,), Spec(tuple(shape), spec.element), f"broadcast_dimensions = {_array(dims)}")


@_operand(ANY, min_rank=1)
def _slice(b: _Builder, x: int, spec: Spec):
    start, limit, strides, shape = [], [], [], []
    for size in spec.shape:
        s = int(b.rng.integers(0, size + 1))
        e = int(b.rng.integers(s, size + 1))
        stride = int(b.rng.integers(1, 4))
        start.append(s)
        limit.append(e)
        strides.append(stride)
        shape.append(-(-(e - s) // stride))
    b.add("slice", (x,), Spec(tuple(shape), spec.element),
          f"start_indices = {_array(start)}, limit_indices = {_array(limit)}, strides = {_array(strides)}")


@_operand(ANY, min_rank=1)
def _concatenate(b: _Builder, x: int, spec: Spec):
    dimension = int(b.rng.integers(len(spec.shape)))
    operands, total = [x], spec.shape[dimension]
    for _ in range(int(b.rng.integers(1, 3))):
        shape = list(spec.shape)
        shape[dimension] = int(b.rng.integers(0, 4))
        operands.append(b.like(Spec(tuple(shape), spec.element)))
        total += shape[dimension]
    shape = list(spec.shape)
    shape[dimension] = total
    b.add("concatenate", operands, Spec(tuple(shape), spec.element), f"dimension = {dimension} : i64")


@_operand(ANY)
def _pad(b: _Builder, x: int, spec: Spec):
    low, high, interior, shape = [], [], [], []
    for size in spec.shape:
        i = int(b.rng.integers(0, 3))
        dilated = size + max(size - 1, 0) * i
        lo = int(b.rng.integers(-min(dilated, 2), 3))
        hi = int(b.rng.integers(-min(dilated + lo, 2), 3))
        low.append(lo)
        high.append(hi)
        interior.append(i)
        shape.append(lo + hi + dilated)
    b.add("pad", (x, b.like(Spec((), spec.element))), Spec(tuple(shape), spec.element),
          f"edge_padding_low = {_array(low)}, edge_padding_high = {_array(high)}, "
          f"interior_padding = {_array(interior)}")


@_operand(ANY, min_rank=1)
def _reverse(b: _Builder, x: int, spec: Spec):
    dims = sorted(b.rng.choice(len(spec.shape), int(b.rng.integers(1, len(spec.shape) + 1)), replace=False))
    b.add("reverse", (x,), spec, f"dimensions = {_array(dims)}")


def _iota(b: _Builder):
    element = b.element("f si ui")
    if element is None:
        return
    shape = b.shape(min_rank=1)
    if kind(element) != "f" or element.startswith("f8"):
        shape = tuple(min(d, 4) for d in shape)   # within the range of i4 and ui4, exact in f8
    b.add("iota", (), Spec(shape, element), f"iota_dimension = {int(b.rng.integers(len(shape)))} : i64")


def _constant(b: _Builder):
    element = b.element(ANY)
    if element is None:
        return
    spec = Spec(tuple(max(d, 1) for d in b.shape()), element)   # (an empty dense literal names no shape)
    b.constant(spec, random_values(spec, b.rng))


def _identity(body: str, element: str):
    """The identity of ``body`` on ``element``: the reduction's init value (spec: reduce
    leaves the result to the implementation otherwise)."""
    dtype = dtype_of(element)
    k = kind(element)
    if body in ("add", "or", "xor"):
        return np.zeros((), dtype)
    if body == "multiply":
        return np.ones((), dtype)
    if k == "b":
        return np.array(body in ("and", "minimum"), dtype)
    if body == "and":
        return np.array(-1 if k == "si" else ml_dtypes.iinfo(dtype).max).astype(dtype)
    if k in ("si", "ui"):
        bounds = ml_dtypes.iinfo(dtype)
        return np.array(bounds.min if body == "maximum" else bounds.max).astype(dtype)
    info = ml_dtypes.finfo(dtype)
    infinite = np.isinf(np.array(np.inf).astype(dtype).astype(np.float64))
    extreme = np.inf if infinite else float(info.max)
    return np.array(-extreme if body == "maximum" else extreme).astype(dtype)


REDUCE_BODIES = {"f": ["add", "maximum", "minimum"], "c": ["add"], "si": ["add", "multiply", "maximum", "minimum",
                 "and", "or", "xor"], "b": ["and", "or"]}
REDUCE_BODIES["ui"] = REDUCE_BODIES["si"]


def _body(name: str, element: str, arguments: int = 2, result: str | None = None, attributes: str = "") -> str:
    scalar = Spec((), element)
    result = result or str(scalar)
    block = ", ".join(f"%a{i}: {scalar}" for i in range(arguments))
    attributes = f" {{{attributes}}}" if attributes else ""
    return (f'{{\n  ^bb0({block}):\n      %r = "{name}"(%a0, %a1){attributes} : ({scalar}, {scalar}) -> {result}\n'
            f'      "stablehlo.return"(%r) : ({result}) -> ()\n    }}')


@_operand("f c si ui b", min_rank=1)
def _reduce(b: _Builder, x: int, spec: Spec):
    body = b.choice(REDUCE_BODIES[kind(spec.element)])
    dims = sorted(b.rng.choice(len(spec.shape), int(b.rng.integers(1, len(spec.shape) + 1)), replace=False))
    init = b.constant(Spec((), spec.element), _identity(body, spec.element))
    shape = tuple(s for d, s in enumerate(spec.shape) if d not in dims)
    b.add("reduce", (x, init), Spec(shape, spec.element), f"dimensions = {_array(dims)}",
          _body(f"stablehlo.{body}", spec.element))


@_operand("f c si ui", min_rank=1)
def _dot_general(b: _Builder, x: int, spec: Spec):
    rank = len(spec.shape)
    dims = list(b.rng.permutation(rank))
    batch = dims[:int(b.rng.integers(0, min(1, rank - 1) + 1))]
    contracting = dims[len(batch):len(batch) + int(b.rng.integers(0, rank - len(batch) + 1))]
    free = [d for d in range(rank) if d not in batch and d not in contracting]
    rhs_free = [int(b.rng.integers(1, 4)) for _ in range(int(b.rng.integers(0, 2)))]
    rhs_shape = [spec.shape[d] for d in batch] + [spec.shape[d] for d in contracting] + rhs_free
    rhs = b.like(Spec(tuple(rhs_shape), spec.element))
    shape = [spec.shape[d] for d in batch] + [spec.shape[d] for d in free] + rhs_free
    nb = len(batch)
    b.add("dot_general", (x, rhs), Spec(tuple(shape), spec.element),
          f"dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [{_ints(batch)}], "
          f"rhs_batching_dimensions = [{_ints(range(nb))}], lhs_contracting_dimensions = [{_ints(contracting)}], "
          f"rhs_contracting_dimensions = [{_ints(range(nb, nb + len(contracting)))}]>")


@_operand("f c si ui b", min_rank=1)
def _reduce_window(b: _Builder, x: int, spec: Spec):
    """Windows of 1 to 3 elements with strides, dilations and padding of 0 to 2 (spec:
    reduce_window, C1-C16), reduced from the body's identity."""
    body = b.choice(REDUCE_BODIES[kind(spec.element)])
    windows, strides, base, dilations, padding, shape = [], [], [], [], [], []
    for size in spec.shape:
        w, s, bd, wd = (int(b.rng.integers(1, 4)), int(b.rng.integers(1, 3)), int(b.rng.integers(1, 3)),
                        int(b.rng.integers(1, 3)))
        low, high = int(b.rng.integers(0, 3)), int(b.rng.integers(0, 3))
        padded = ((size - 1) * bd + 1 if size else 0) + low + high
        window = (w - 1) * wd + 1
        windows.append(w)
        strides.append(s)
        base.append(bd)
        dilations.append(wd)
        padding.append((low, high))
        shape.append((padded - window) // s + 1 if padded >= window else 0)
    init = b.constant(Spec((), spec.element), _identity(body, spec.element))
    pads = ", ".join(f"[{low}, {high}]" for low, high in padding)
    b.add("reduce_window", (x, init), Spec(tuple(shape), spec.element),
          f"window_dimensions = {_array(windows)}, window_strides = {_array(strides)}, "
          f"base_dilations = {_array(base)}, window_dilations = {_array(dilations)}, "
          f"padding = dense<[{pads}]> : tensor<{len(padding)}x2xi64>",
          _body(f"stablehlo.{body}", spec.element))


@_operand("f c si ui b")
def _map(b: _Builder, x: int, spec: Spec):
    """An element-wise binary op of :data:`BINARY` as the body of ``map`` over every dimension."""
    names = [name for name, kinds in BINARY.items() if kind(spec.element) in kinds.split()]
    b.add("map", (x, b.like(spec)), spec, f"dimensions = {_array(range(len(spec.shape)))}",
          _body(f"stablehlo.{b.choice(names)}", spec.element))


@_operand("f si ui b", min_rank=1)
def _sort(b: _Builder, x: int, spec: Spec):
    """``x`` sorted along one dimension in a total order, stably, with 0 to 2 more
    operands of its shape (any element type) carried along (spec: sort, C1-C6:
    the comparator takes each operand's pair and compares the keys' only)."""
    k = kind(spec.element)
    compare_type = "TOTALORDER" if k == "f" else COMPARE_TYPES[k]
    direction = b.choice(["LT", "GT"])
    carried = [b.like(Spec(spec.shape, element)) for element in
               (b.element(ANY) for _ in range(int(b.rng.integers(0, 3)))) if element is not None]
    operands = [x] + carried
    types = [b.specs[v] for v in operands]
    block = ", ".join(f"%a{2 * i}: {Spec((), t.element)}, %a{2 * i + 1}: {Spec((), t.element)}"
                      for i, t in enumerate(types))
    scalar = Spec((), spec.element)
    comparator = (f'{{\n  ^bb0({block}):\n      %r = "stablehlo.compare"(%a0, %a1) {{comparison_direction = '
                  f'#stablehlo<comparison_direction {direction}>, compare_type = #stablehlo<comparison_type '
                  f'{compare_type}>}} : ({scalar}, {scalar}) -> tensor<i1>\n'
                  f'      "stablehlo.return"(%r) : (tensor<i1>) -> ()\n    }}')
    b.add_results("sort", operands, tuple(types),
                  f"dimension = {int(b.rng.integers(len(spec.shape)))} : i64, is_stable = true", comparator)


def _indices(b: _Builder, rank: int) -> list:
    element = b.choice([e for e in ("i32", "i64", "ui32", "i8") if e in ELEMENT_TYPES])
    return [b.like(Spec((), element)) for _ in range(rank)]


@_operand(ANY, min_rank=1)
def _dynamic_slice(b: _Builder, x: int, spec: Spec):
    sizes = [int(b.rng.integers(0, s + 1)) for s in spec.shape]
    b.add("dynamic_slice", [x] + _indices(b, len(spec.shape)), Spec(tuple(sizes), spec.element),
          f"slice_sizes = {_array(sizes)}")


@_operand(ANY, min_rank=1)
def _dynamic_update_slice(b: _Builder, x: int, spec: Spec):
    update = b.like(Spec(tuple(int(b.rng.integers(0, s + 1)) for s in spec.shape), spec.element))
    b.add("dynamic_update_slice", [x, update] + _indices(b, len(spec.shape)), spec)


@_operand(ANY, min_rank=1)
def _get_dimension_size(b: _Builder, x: int, spec: Spec):
    b.add("get_dimension_size", (x,), Spec((), "i32"), f"dimension = {int(b.rng.integers(len(spec.shape)))} : i64")


def _index_rows(b: _Builder, bounds: list, count: int, distinct: bool = False) -> list:
    """``count`` start indices, each in ``[0, bound]`` per dimension (distinct when asked
    and possible)."""
    rows: list = []
    for _ in range(20 * count):
        if len(rows) == count:
            break
        row = [int(b.rng.integers(0, bound + 1)) for bound in bounds]
        if not (distinct and row in rows):
            rows.append(row)
    return rows


def _index_constant(b: _Builder, rows: list, width: int) -> int:
    element = b.choice(["i32", "i64"])
    spec = Spec((len(rows), width), element)
    values = np.array(rows, dtype_of(element)).reshape(spec.shape)
    return b.constant(spec, values)


@_operand(ANY, min_rank=1, accept=lambda s: 0 not in s.shape)
def _gather(b: _Builder, x: int, spec: Spec):
    """Slices of ``x`` at 0 to 3 start indices of a constant, each in range or one past
    it (spec: gather clamps a start index into the operand, C1-C22)."""
    rank = len(spec.shape)
    start_map = [int(d) for d in b.rng.permutation(rank)[:int(b.rng.integers(1, rank + 1))]]
    sizes = [int(b.rng.integers(0, s + 1)) for s in spec.shape]
    collapsed = sorted(d for d in start_map if b.rng.random() < 0.5)
    for d in collapsed:
        sizes[d] = 1
    rows = _index_rows(b, [spec.shape[d] - sizes[d] + 1 for d in start_map], int(b.rng.integers(0, 4)))
    indices = _index_constant(b, rows, len(start_map))
    offsets = [sizes[d] for d in range(rank) if d not in collapsed]
    b.add("gather", (x, indices), Spec((len(rows), *offsets), spec.element),
          f"dimension_numbers = #stablehlo.gather<offset_dims = [{_ints(range(1, 1 + len(offsets)))}], "
          f"collapsed_slice_dims = [{_ints(collapsed)}], start_index_map = [{_ints(start_map)}], "
          f"index_vector_dim = 1>, slice_sizes = {_array(sizes)}, indices_are_sorted = false")


def _replace_body(element: str) -> str:
    scalar = Spec((), element)
    return (f'{{\n  ^bb0(%a0: {scalar}, %a1: {scalar}):\n      "stablehlo.return"(%a1) : ({scalar}) -> ()\n    }}')


@_operand("f c si ui b", min_rank=1, accept=lambda s: 0 not in s.shape)
def _scatter(b: _Builder, x: int, spec: Spec):
    """Updates of windows of ``x`` at 0 to 3 start indices in range (spec: scatter leaves
    an index out of range to the implementation, C1-C23). Integers and booleans combine
    with an exact body of :data:`REDUCE_BODIES` (any order gives the same sum), so windows
    may overlap; floats and complex numbers replace, add or compare in disjoint windows
    (``unique_indices``), each element updated at most once."""
    rank = len(spec.shape)
    k = kind(spec.element)
    exact = k in ("si", "ui", "b")
    to_operand = [int(d) for d in b.rng.permutation(rank)[:int(b.rng.integers(1, rank + 1))]]
    sizes = [int(b.rng.integers(0, s + 1)) for s in spec.shape]
    inserted = sorted(d for d in to_operand if b.rng.random() < 0.5)
    for d in to_operand if not exact else inserted:
        sizes[d] = 1
    rows = _index_rows(b, [spec.shape[d] - sizes[d] for d in to_operand], int(b.rng.integers(0, 4)),
                       distinct=not exact)
    indices = _index_constant(b, rows, len(to_operand))
    windows = [sizes[d] for d in range(rank) if d not in inserted]
    updates = b.like(Spec((len(rows), *windows), spec.element))
    body = b.choice(REDUCE_BODIES[k] if exact else ["replace"] + REDUCE_BODIES[k])
    region = _replace_body(spec.element) if body == "replace" else _body(f"stablehlo.{body}", spec.element)
    b.add("scatter", (x, indices, updates), spec,
          f"scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = "
          f"[{_ints(range(1, 1 + len(windows)))}], inserted_window_dims = [{_ints(inserted)}], "
          f"scatter_dims_to_operand_dims = [{_ints(to_operand)}], index_vector_dim = 1>, "
          f"indices_are_sorted = false, unique_indices = {'false' if exact else 'true'}", region)


LOOP_ELEMENTS = ("i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64")


@_operand("si ui", accept=lambda s: s.element in LOOP_ELEMENTS and len(s.shape) == 1 and s.shape[0] >= 1)
def _while(b: _Builder, x: int, spec: Spec):
    """A bounded loop on ``x`` clamped into [-8, 8]: its first element counts up by 1 to 3
    until it reaches a limit of at most 8, the others follow ``x * m + a`` (wrapping).
    Up to two more values of any type are carried, each adding (booleans: xor-ing) a
    value from outside the loop on every step: the body uses it where it is defined
    (spec: while; a region may use values defined above it, "Programs"). A step count
    carried last, from 0, stops it after 16 steps, which the clamped counter never
    needs: a reduced program whose clamp was bypassed stops too."""
    info = ml_dtypes.iinfo(dtype_of(spec.element))
    dtype = dtype_of(spec.element)
    scalar = Spec((), spec.element)
    low, high = max(int(info.min), -8), 8
    start = b.add("clamp", (b.constant(scalar, np.array(low, dtype)), x, b.constant(scalar, np.array(high, dtype))),
                  spec)
    size = spec.shape[0]
    factors = np.array([1] + [int(b.rng.integers(0, 4)) for _ in range(size - 1)], dtype)
    steps = np.array([int(b.rng.integers(1, 4))] + [int(b.rng.integers(0, 6)) for _ in range(size - 1)], dtype)
    limit = int(b.rng.integers(low, high + 1))
    counter, count = Spec((1,), spec.element), Spec((), "i32")
    carried = [v for v in (b.value(ANY) for _ in range(int(b.rng.integers(0, 3)))) if v is not None]
    captures = [b.like(b.specs[v]) for v in carried]
    types = [spec] + [b.specs[v] for v in carried] + [count]
    last = len(types) - 1
    block = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    condition = (f'{{\n  ^bb0({block}):\n'
                 f'      %s = "stablehlo.slice"(%a0) {{start_indices = array<i64: 0>, limit_indices = array<i64: 1>, '
                 f'strides = array<i64: 1>}} : ({spec}) -> {counter}\n'
                 f'      %c = "stablehlo.reshape"(%s) : ({counter}) -> {scalar}\n'
                 f'      %l = "stablehlo.constant"() {{value = {dense(np.array(limit, dtype), scalar)}}} : () -> {scalar}\n'
                 f'      %r = "stablehlo.compare"(%c, %l) {{comparison_direction = #stablehlo<comparison_direction LT>}}'
                 f' : ({scalar}, {scalar}) -> tensor<i1>\n'
                 f'      %m = "stablehlo.constant"() {{value = dense<16> : {count}}} : () -> {count}\n'
                 f'      %t = "stablehlo.compare"(%a{last}, %m) {{comparison_direction = #stablehlo<comparison_direction LT>}}'
                 f' : ({count}, {count}) -> tensor<i1>\n'
                 f'      %b = "stablehlo.and"(%r, %t) : (tensor<i1>, tensor<i1>) -> tensor<i1>\n'
                 f'      "stablehlo.return"(%b) : (tensor<i1>) -> ()\n    }}')
    updates = "".join(f'      %n{i} = "stablehlo.{"xor" if kind(t.element) == "b" else "add"}"(%a{i}, $c{i - 1}) : '
                      f'({t}, {t}) -> {t}\n' for i, t in enumerate(types) if 0 < i < last)
    body = (f'{{\n  ^bb0({block}):\n'
            f'      %m = "stablehlo.constant"() {{value = {dense(factors, spec)}}} : () -> {spec}\n'
            f'      %a = "stablehlo.constant"() {{value = {dense(steps, spec)}}} : () -> {spec}\n'
            f'      %p = "stablehlo.multiply"(%a0, %m) : ({spec}, {spec}) -> {spec}\n'
            f'      %n0 = "stablehlo.add"(%p, %a) : ({spec}, {spec}) -> {spec}\n{updates}'
            f'      %one = "stablehlo.constant"() {{value = dense<1> : {count}}} : () -> {count}\n'
            f'      %n{last} = "stablehlo.add"(%a{last}, %one) : ({count}, {count}) -> {count}\n'
            f'      "stablehlo.return"({", ".join(f"%n{i}" for i in range(len(types)))}) : '
            f'({", ".join(str(t) for t in types)}) -> ()\n    }}')
    zero = b.constant(count, np.array(0, np.int32))
    b.add_results("while", [start] + carried + [zero], tuple(types), "", f"{condition}, {body}", tuple(captures))


def _branches(b: _Builder, count: int, element: str) -> tuple:
    """``count`` regions returning a constant or a value from outside (spec: a region
    may use values defined above it), of one random type of ``element``; the regions'
    text, that type, and the values they use."""
    spec = Spec(tuple(max(d, 1) for d in b.shape()), element)
    regions: list = []
    captures: list = []
    for _ in range(count):
        if b.rng.random() < 0.3:
            regions.append(f'{{\n      "stablehlo.return"($c{len(captures)}) : ({spec}) -> ()\n    }}')
            captures.append(b.like(spec))
        else:
            regions.append(f'{{\n      %c = "stablehlo.constant"() {{value = {dense(random_values(spec, b.rng), spec)}}}'
                           f' : () -> {spec}\n      "stablehlo.return"(%c) : ({spec}) -> ()\n    }}')
    return ", ".join(regions), spec, captures


def _case(b: _Builder):
    """One of 1 to 4 branches chosen by an ``i32`` index, any value (spec: case runs the
    last branch for an index out of range)."""
    element = b.element(ANY)
    if element is None:
        return
    index = b.like(Spec((), "i32"))
    regions, spec, captures = _branches(b, int(b.rng.integers(1, 5)), element)
    b.add("case", (index,), spec, "", regions, captures)


def _if(b: _Builder):
    element = b.element(ANY)
    if element is None or "i1" not in b.element_types:
        return
    predicate = b.like(Spec((), "i1"))
    regions, spec, captures = _branches(b, 2, element)
    b.add("if", (predicate,), spec, "", regions, captures)


@_operand("f c si ui", min_rank=3, accept=lambda s: len(s.shape) <= 4 and 0 not in s.shape)
def _convolution(b: _Builder, x: int, spec: Spec):
    """``x`` as [batch, feature, spatial...] with a kernel [output, input, spatial...] of 1
    to 3 taps, strides, dilations, padding of 0 to 2, and feature groups (spec:
    convolution, C1-C33)."""
    features = spec.shape[1]
    groups = b.choice([g for g in range(1, features + 1) if features % g == 0])
    outputs = groups * int(b.rng.integers(1, 3))
    taps = [int(b.rng.integers(1, 4)) for _ in spec.shape[2:]]
    strides, lhs_dilations, rhs_dilations, padding, shape = [], [], [], [], []
    for size, tap in zip(spec.shape[2:], taps):
        stride, lhs_dilation, rhs_dilation = (int(b.rng.integers(1, 3)) for _ in range(3))
        low, high = int(b.rng.integers(0, 3)), int(b.rng.integers(0, 3))
        padded = (size - 1) * lhs_dilation + 1 + low + high
        window = (tap - 1) * rhs_dilation + 1
        strides.append(stride)
        lhs_dilations.append(lhs_dilation)
        rhs_dilations.append(rhs_dilation)
        padding.append(f"[{low}, {high}]")
        shape.append((padded - window) // stride + 1 if padded >= window else 0)
    kernel = b.like(Spec((outputs, features // groups, *taps), spec.element))
    spatial = ", ".join(str(d) for d in range(len(taps)))
    b.add("convolution", (x, kernel), Spec((spec.shape[0], outputs, *shape), spec.element),
          f"dimension_numbers = #stablehlo.conv<[b, f, {spatial}]x[o, i, {spatial}]->[b, f, {spatial}]>, "
          f"window_strides = {_array(strides)}, padding = dense<[{', '.join(padding)}]> : tensor<{len(taps)}x2xi64>, "
          f"lhs_dilation = {_array(lhs_dilations)}, rhs_dilation = {_array(rhs_dilations)}, "
          f"feature_group_count = {groups} : i64, batch_group_count = 1 : i64")


@_operand("f c", min_rank=1, accept=lambda s: s.element in ("f32", "f64") + tuple(COMPLEX) and 0 not in s.shape)
def _fft(b: _Builder, x: int, spec: Spec):
    """FFT or IFFT of complex values, RFFT of real ones, IRFFT of complex ones back to
    real, over the last 1 to 3 dimensions (spec: fft, C1-C5)."""
    lengths = list(spec.shape[-int(b.rng.integers(1, min(3, len(spec.shape)) + 1)):])
    shape = list(spec.shape)
    if kind(spec.element) == "f":
        fft_type, element = "RFFT", f"complex<{spec.element}>"
        shape[-1] = lengths[-1] // 2 + 1
    else:
        fft_type, element = b.choice(["FFT", "IFFT", "IRFFT"]), spec.element
        if fft_type == "IRFFT":
            element = _real_of(spec.element)
            lengths[-1] = shape[-1] = b.choice([n for n in (2 * spec.shape[-1] - 2, 2 * spec.shape[-1] - 1) if n > 0])
    b.add("fft", (x,), Spec(tuple(shape), element),
          f"fft_type = #stablehlo<fft_type {fft_type}>, fft_length = {_array(lengths)}")


def _compare_body(element: str, direction: str) -> str:
    k = kind(element)
    compare_type = "TOTALORDER" if k == "f" else COMPARE_TYPES[k]
    return _body("stablehlo.compare", element, result="tensor<i1>",
                 attributes=f"comparison_direction = #stablehlo<comparison_direction {direction}>, "
                            f"compare_type = #stablehlo<comparison_type {compare_type}>")


@_operand("f si ui", min_rank=1, accept=lambda s: 0 not in s.shape)
def _select_and_scatter(b: _Builder, x: int, spec: Spec):
    """The source scattered with ``add`` onto the element each window of ``x`` selects
    (GE or LE in a total order). Floats get disjoint windows (stride at least the window:
    the spec leaves the order of a sum open), integers any (spec: select_and_scatter)."""
    exact = kind(spec.element) != "f"
    windows, strides, shape = [], [], []
    for size in spec.shape:
        window = int(b.rng.integers(1, size + 1))
        stride = int(b.rng.integers(1, 3)) if exact else window + int(b.rng.integers(0, 2))
        windows.append(window)
        strides.append(stride)
        shape.append((size - window) // stride + 1)
    source = b.like(Spec(tuple(shape), spec.element))
    init = b.constant(Spec((), spec.element), _identity("add", spec.element))
    b.add("select_and_scatter", (x, source, init), spec,
          f"window_dimensions = {_array(windows)}, window_strides = {_array(strides)}",
          f"{_compare_body(spec.element, b.choice(['GE', 'LE']))}, {_body('stablehlo.add', spec.element)}")


@_operand("f", min_rank=2, accept=lambda s: s.element in ("f32", "f64", "f16", "bf16"))
def _batch_norm_inference(b: _Builder, x: int, spec: Spec):
    """``x`` normalized along one feature dimension (spec: batch_norm_inference)."""
    feature = int(b.rng.integers(len(spec.shape)))
    vector = Spec((spec.shape[feature],), spec.element)
    b.add("batch_norm_inference", [x] + [b.like(vector) for _ in range(4)], spec,
          f"epsilon = {b.choice(['1.000000e-03', '1.000000e-05', '0.000000e+00'])} : f32, "
          f"feature_index = {feature} : i64")


NORMALIZED = ("f32", "f64", "f16", "bf16")


def _feature(b: _Builder, spec: Spec) -> tuple:
    feature = int(b.rng.integers(len(spec.shape)))
    epsilon = b.choice(["1.000000e-03", "1.000000e-05", "0.000000e+00"])
    return Spec((spec.shape[feature],), spec.element), f"epsilon = {epsilon} : f32, feature_index = {feature} : i64"


@_operand("f", min_rank=2, accept=lambda s: s.element in NORMALIZED)
def _batch_norm_training(b: _Builder, x: int, spec: Spec):
    """``x`` normalized by its own mean and variance along all but one feature dimension;
    the result, the mean and the variance (spec: batch_norm_training)."""
    vector, attributes = _feature(b, spec)
    b.add_results("batch_norm_training", [x, b.like(vector), b.like(vector)], (spec, vector, vector), attributes)


@_operand("f", min_rank=2, accept=lambda s: s.element in NORMALIZED)
def _batch_norm_grad(b: _Builder, x: int, spec: Spec):
    """The gradients of batch normalization with respect to the operand, the scale and
    the offset (spec: batch_norm_grad)."""
    vector, attributes = _feature(b, spec)
    b.add_results("batch_norm_grad", [x] + [b.like(vector) for _ in range(3)] + [b.like(spec)],
                  (spec, vector, vector), attributes)


RANDOM_BITS = ("ui8", "ui16", "ui32", "ui64", "i32", "i64")


def _rng_bit_generator(b: _Builder):
    """Two ``rng_bit_generator`` of one state, their outputs and new states compared by
    ``xor`` (zeros). The spec leaves the bits to the implementation ("not guaranteed
    to be deterministic between implementations") but makes them a function of the
    state: that, the types and the state's size per algorithm (C1-C2: 2 for
    ``THREE_FRY``, 2 or 3 for ``PHILOX``) are what a backend can be held to."""
    algorithm = b.choice(["THREE_FRY", "PHILOX"])
    state = b.like(Spec((2 if algorithm == "THREE_FRY" else b.choice([2, 3]),), "ui64"))
    output = Spec(tuple(max(d, 1) for d in b.shape()), b.choice([e for e in RANDOM_BITS if e in ELEMENT_TYPES]))
    attributes = f"rng_algorithm = #stablehlo<rng_algorithm {algorithm}>"
    first = b.add_results("rng_bit_generator", (state,), (b.specs[state], output), attributes)
    again = b.add_results("rng_bit_generator", (state,), (b.specs[state], output), attributes)
    for one, other in zip(first, again):
        b.add("xor", (one, other), b.specs[one])


def _rng(b: _Builder):
    """``rng`` of a uniform distribution in [a, b), then whether every value lies there:
    the spec leaves the values to the implementation but not their range (spec: rng,
    ``UNIFORM``: "uniformly distributed over the interval [a, b)")."""
    elements = [e for e in ("f32", "f64", "i32", "i64") if e in b.element_types]
    if not elements or "i1" not in b.element_types:
        return
    element = b.choice(elements)
    shape = tuple(max(d, 1) for d in b.shape())
    low = int(b.rng.integers(-100, 100))
    bounds = [b.constant(Spec((), element), np.array(value, dtype_of(element)))
              for value in (low, low + int(b.rng.integers(1, 200)))]
    size = b.constant(Spec((len(shape),), "i64"), np.array(shape, np.int64))
    spec = Spec(shape, element)
    values = b.add("rng", (*bounds, size), spec, "rng_distribution = #stablehlo<rng_distribution UNIFORM>")
    checks = []
    for bound, direction in zip(bounds, ("GE", "LT")):
        wide = b.add("broadcast_in_dim", (bound,), spec, "broadcast_dimensions = array<i64>")
        checks.append(b.add("compare", (values, wide), Spec(shape, "i1"),
                            f"comparison_direction = #stablehlo<comparison_direction {direction}>"))
    b.add("and", checks, Spec(shape, "i1"))


LINEAR_ALGEBRA = ("f32", "f64", "complex<f32>", "complex<f64>")


def _triangular(b: _Builder, size: int, element: str, batch: tuple, lower: bool, diagonal: str) -> np.ndarray:
    """A triangular matrix (batched) of small integers, its diagonal ``unit`` (ones), or
    ``positive`` (1 to 3): exact in every type, well conditioned."""
    values = b.rng.integers(-3, 4, (*batch, size, size)).astype(np.float64)
    if kind(element) == "c":
        values = values + 1j * b.rng.integers(-3, 4, values.shape)
    values = np.tril(values) if lower else np.triu(values)
    index = np.arange(size)
    values[..., index, index] = 1 if diagonal == "unit" else b.rng.integers(1, 4, (*batch, size))
    return values.astype(dtype_of(element))


@_operand("f c", min_rank=2, accept=lambda s: s.element in LINEAR_ALGEBRA and len(s.shape) <= 3)
def _triangular_solve(b: _Builder, x: int, spec: Spec):
    """``a x = b`` (or ``x a = b``) for ``b`` = the picked value and ``a`` a constant
    triangular matrix of small integers, transposed or not (spec: triangular_solve)."""
    left = bool(b.rng.random() < 0.5)
    size = spec.shape[-2] if left else spec.shape[-1]
    lower, unit = bool(b.rng.random() < 0.5), bool(b.rng.random() < 0.3)
    a_spec = Spec((*spec.shape[:-2], size, size), spec.element)
    a = b.constant(a_spec, _triangular(b, size, spec.element, spec.shape[:-2], lower, "unit" if unit else "positive"))
    transpose = b.choice(["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"])
    b.add("triangular_solve", (a, x), spec,
          f"left_side = {str(left).lower()}, lower = {str(lower).lower()}, unit_diagonal = {str(unit).lower()}, "
          f"transpose_a = #stablehlo<transpose {transpose}>")


def _cholesky(b: _Builder):
    """The Cholesky factor of a constant Hermitian positive-definite matrix ``L Lᴴ``
    (``L`` of small integers: the factor is exact), its other triangle replaced by
    zeros (spec: cholesky leaves it, and the factor of any other matrix, to the
    implementation)."""
    element = b.element("f c")
    if element not in LINEAR_ALGEBRA or "i1" not in b.element_types:
        return
    batch = tuple(int(b.rng.integers(1, 3)) for _ in range(int(b.rng.integers(0, 2))))
    size = int(b.rng.integers(1, 5))
    lower = bool(b.rng.random() < 0.5)
    factor = _triangular(b, size, element, batch, True, "positive")
    matrix = factor @ np.conj(np.swapaxes(factor, -1, -2))
    spec = Spec((*batch, size, size), element)
    a = b.constant(spec, matrix)
    result = b.add("cholesky", (a,), spec, f"lower = {str(lower).lower()}")
    keep = np.broadcast_to(np.tril(np.ones((size, size), bool)) if lower else np.triu(np.ones((size, size), bool)),
                           spec.shape)
    mask = b.constant(Spec(spec.shape, "i1"), keep)
    b.add("select", (mask, result, b.constant(spec, np.zeros(spec.shape, dtype_of(element)))), spec)


ONE_DEVICE = "replica_groups = dense<[[0]]> : tensor<1x1xi64>"


@_operand("f c si ui b")
def _all_reduce(b: _Builder, x: int, spec: Spec):
    """A collective on a one-process grid (one replica: ``replica_groups = [[0]]``),
    where it returns its operand (spec: all_reduce)."""
    body = b.choice(REDUCE_BODIES[kind(spec.element)])
    b.add("all_reduce", (x,), spec, ONE_DEVICE, _body(f"stablehlo.{body}", spec.element))


@_operand("f c si ui b", min_rank=1, accept=lambda s: 0 not in s.shape)   # (a verifier rule)
def _all_gather(b: _Builder, x: int, spec: Spec):
    b.add("all_gather", (x,), spec, f"all_gather_dim = {int(b.rng.integers(len(spec.shape)))} : i64, {ONE_DEVICE}")


@_operand("f c si ui b", min_rank=1, accept=lambda s: 0 not in s.shape)   # (a verifier rule)
def _reduce_scatter(b: _Builder, x: int, spec: Spec):
    body = b.choice(REDUCE_BODIES[kind(spec.element)])
    b.add("reduce_scatter", (x,), spec, f"scatter_dimension = {int(b.rng.integers(len(spec.shape)))} : i64, "
          f"{ONE_DEVICE}", _body(f"stablehlo.{body}", spec.element))


@_operand("f c si ui b", min_rank=1, accept=lambda s: 0 not in s.shape)   # (a verifier rule)
def _all_to_all(b: _Builder, x: int, spec: Spec):
    rank = len(spec.shape)
    b.add("all_to_all", (x,), spec, f"split_dimension = {int(b.rng.integers(rank))} : i64, "
          f"concat_dimension = {int(b.rng.integers(rank))} : i64, split_count = 1 : i64, {ONE_DEVICE}")


@_operand(ANY)
def _collective_permute(b: _Builder, x: int, spec: Spec):
    b.add("collective_permute", (x,), spec, "source_target_pairs = dense<[[0, 0]]> : tensor<1x2xi64>")


@_operand(ANY)
def _collective_broadcast(b: _Builder, x: int, spec: Spec):
    b.add("collective_broadcast", (x,), spec, ONE_DEVICE)


def _tuple(b: _Builder):
    """A tuple of 1 to 3 values and 1 or 2 of its elements (spec: tuple, get_tuple_element)."""
    values = [v for v in (b.value(ANY) for _ in range(int(b.rng.integers(1, 4)))) if v is not None]
    if not values:
        return
    parts = tuple(b.specs[v] for v in values)
    made = b.add("tuple", values, TupleSpec(parts))
    for index in sorted({int(b.rng.integers(len(parts))) for _ in range(int(b.rng.integers(1, 3)))}):
        b.add("get_tuple_element", (made,), parts[index], f"index = {index} : i32")


def _process_id(name: str):
    def build(b: _Builder):
        b.add(name, (), Spec((), "ui32"))
    return build


def _optimization_barrier(b: _Builder):
    """1 to 3 values through a barrier, unchanged (spec: optimization_barrier)."""
    values = [v for v in (b.value(ANY) for _ in range(int(b.rng.integers(1, 4)))) if v is not None]
    if values:
        b.add_results("optimization_barrier", values, tuple(b.specs[v] for v in values))


@_operand("f q", accept=lambda s: s.element in ("f32",) + QUANTIZED)
def _uniform_quantize(b: _Builder, x: int, spec: Spec):
    """f32 values quantized, or quantized ones requantized, to one of :data:`QUANTIZED`
    (spec: uniform_quantize: round to nearest even, clamp to the storage range)."""
    b.add("uniform_quantize", (x,), Spec(spec.shape, b.choice([q for q in QUANTIZED if q != spec.element])))


@_operand("q")
def _uniform_dequantize(b: _Builder, x: int, spec: Spec):
    b.add("uniform_dequantize", (x,), Spec(spec.shape, "f32"))


OPS = {name: _unary(name, kinds) for name, kinds in UNARY.items()}
OPS |= {name: _binary(name, kinds) for name, kinds in BINARY.items()}
OPS |= {
    "compare": _compare, "select": _select, "clamp": _clamp, "convert": _convert,
    "bitcast_convert": _bitcast_convert, "reduce_precision": _reduce_precision, "complex": _complex,
    "reshape": _reshape, "transpose": _transpose, "broadcast_in_dim": _broadcast_in_dim, "slice": _slice,
    "concatenate": _concatenate, "pad": _pad, "reverse": _reverse, "iota": _iota, "constant": _constant,
    "reduce": _reduce, "reduce_window": _reduce_window, "map": _map, "dot_general": _dot_general, "sort": _sort, "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice, "get_dimension_size": _get_dimension_size,
    "gather": _gather, "scatter": _scatter, "while": _while,
    "case": _case, "if": _if, "convolution": _convolution,
    "fft": _fft, "select_and_scatter": _select_and_scatter, "batch_norm_inference": _batch_norm_inference,
    "batch_norm_training": _batch_norm_training, "batch_norm_grad": _batch_norm_grad,
    "rng": _rng, "rng_bit_generator": _rng_bit_generator, "triangular_solve": _triangular_solve, "cholesky": _cholesky,
    "all_reduce": _all_reduce, "all_gather": _all_gather, "reduce_scatter": _reduce_scatter,
    "all_to_all": _all_to_all, "collective_permute": _collective_permute,
    "collective_broadcast": _collective_broadcast, "replica_id": _process_id("replica_id"),
    "partition_id": _process_id("partition_id"), "optimization_barrier": _optimization_barrier,
    "tuple": _tuple,
    "uniform_quantize": _uniform_quantize, "uniform_dequantize": _uniform_dequantize,
}
