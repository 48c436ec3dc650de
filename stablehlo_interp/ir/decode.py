"""Decoding of MLIR types, attributes and locations into plain Python values.

It runs once, when a module is loaded: the compiler (program/compiler.py)
decodes each op with it, so no MLIR object reaches the plans.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import chlo, stablehlo

from ..errors import ModuleError
from .locations import UNKNOWN, Frame, SourceLocation
from .types import FutureType, Quantization, TensorType, TokenType, TupleType, dtype_of, element_kind

# --------------------------------------------------------------------------- types


_TYPE_CACHE: dict = {}


def decode_type(t: ir.Type):
    """``tensor<...>`` -> TensorType, ``!stablehlo.token`` -> TokenType, tuples -> TupleType.

    Decoded types are cached by their text (not by the ir.Type, which would keep
    its MLIR context alive).
    """
    text = str(t)
    try:
        return _TYPE_CACHE[text]
    except KeyError:
        pass
    decoded = _decode_type(t)
    if len(_TYPE_CACHE) > 10_000:
        _TYPE_CACHE.clear()
    _TYPE_CACHE[text] = decoded
    return decoded


def _decode_type(t: ir.Type):
    t = t.maybe_downcast() if type(t) is ir.Type else t
    if isinstance(t, ir.RankedTensorType):
        shape = tuple(None if t.is_dynamic_dim(i) else t.get_dim_size(i) for i in range(t.rank))
        element = str(t.element_type)
        if element.startswith("!quant."):
            return TensorType.quantized(shape, element, _quantization(element))
        return TensorType.of(shape, _element_spelling(t.element_type))
    if stablehlo.TokenType.isinstance(t):
        return TokenType()
    if isinstance(t, ir.TupleType):
        return TupleType(tuple(decode_type(t.get_type(i)) for i in range(t.num_types)))
    if stablehlo.FutureType.isinstance(t):
        return FutureType(tuple(decode_type(e) for e in stablehlo.FutureType(t).types))
    if isinstance(t, ir.UnrankedTensorType):
        raise ModuleError(f"unranked tensor type {t} is not supported (StableHLO requires ranked tensors)")
    text = str(t)
    if text.startswith("!quant."):
        raise ModuleError(f"quantized type {text} is not supported yet")
    # A bare element type (e.g. the scalar operands of some CHLO/custom ops).
    return TensorType.of((), _element_spelling(t))


def _element_spelling(t: ir.Type) -> str:
    text = str(t)
    dtype_of(text)  # raises ModuleError for element types we cannot hold
    return text


# !quant.uniform<storage[<min:max>]:expressed[:dimension], scale[:zero_point]>, or
# with {scale[:zero_point], ...} for per-axis quantization (spec: "Types").
_QUANT_UNIFORM = re.compile(
    r"!quant\.uniform<(u?i?\d+)(?:<(-?\d+):(-?\d+)>)?:(\w+)(?::(\d+))?,\s*(\{.*\}|[^{}]+)>", re.S)


def _quantization(text: str) -> Quantization:
    """Decode a ``!quant.uniform`` element type (MLIR omits zero points that are 0)."""
    match = _QUANT_UNIFORM.fullmatch(text)
    if not match:
        raise ModuleError(f"quantized element type {text} is not supported (only !quant.uniform "
                          "per-tensor and per-axis)")
    storage, low, high, expressed, dimension, parameters = match.groups()
    # MLIR spells unsigned storage types u8; StableHLO spells them ui8.
    storage = "ui" + storage[1:] if storage.startswith("u") and not storage.startswith("ui") else storage
    if element_kind(storage) not in ("signed", "unsigned") or element_kind(expressed) != "float":
        raise ModuleError(f"quantized element type {text}: storage must be an integer type and "
                          "expressed a floating-point type")
    limits = ml_dtypes.iinfo(dtype_of(storage))
    scales, zero_points = [], []
    for parameter in parameters.strip("{}").split(","):
        scale, _, zero_point = parameter.strip().partition(":")
        scales.append(float(scale))
        zero_points.append(int(zero_point or 0))
    return Quantization(storage, int(low) if low else limits.min, int(high) if high else limits.max,
                        expressed, tuple(scales), tuple(zero_points),
                        None if dimension is None else int(dimension))


def load_quant_dialect(context: ir.Context) -> None:
    """Load MLIR's ``quant`` dialect (home of ``!quant.uniform`` types) into a context.

    jaxlib registers it only as a dependency of the VHLO-to-StableHLO pass, so
    running that pass once on an empty module loads it.
    """
    stablehlo.register_stablehlo_passes()
    with context, ir.Location.unknown():
        pipeline = passmanager.PassManager.parse("builtin.module(vhlo-legalize-to-stablehlo)")
        pipeline.run(ir.Module.parse("").operation)


# ---------------------------------------------------------------------- attributes


@dataclass(frozen=True)
class DotDimensionNumbers:
    lhs_batching_dimensions: tuple
    rhs_batching_dimensions: tuple
    lhs_contracting_dimensions: tuple
    rhs_contracting_dimensions: tuple


@dataclass(frozen=True)
class GatherDimensionNumbers:
    offset_dims: tuple
    collapsed_slice_dims: tuple
    operand_batching_dims: tuple
    start_indices_batching_dims: tuple
    start_index_map: tuple
    index_vector_dim: int


@dataclass(frozen=True)
class ScatterDimensionNumbers:
    update_window_dims: tuple
    inserted_window_dims: tuple
    input_batching_dims: tuple
    scatter_indices_batching_dims: tuple
    scattered_dims_to_operand_dims: tuple
    index_vector_dim: int


@dataclass(frozen=True)
class ConvDimensionNumbers:
    input_batch_dimension: int
    input_feature_dimension: int
    input_spatial_dimensions: tuple
    kernel_input_feature_dimension: int
    kernel_output_feature_dimension: int
    kernel_spatial_dimensions: tuple
    output_batch_dimension: int
    output_feature_dimension: int
    output_spatial_dimensions: tuple


@dataclass(frozen=True)
class DotAlgorithm:
    lhs_precision_type: str
    rhs_precision_type: str
    accumulation_type: str
    lhs_component_count: int
    rhs_component_count: int
    num_primitive_operations: int
    allow_imprecise_accumulation: bool


@dataclass(frozen=True)
class RaggedDotDimensionNumbers:
    lhs_batching_dimensions: tuple
    rhs_batching_dimensions: tuple
    lhs_contracting_dimensions: tuple
    rhs_contracting_dimensions: tuple
    lhs_ragged_dimensions: tuple
    rhs_group_dimensions: tuple


@dataclass(frozen=True)
class ChannelHandle:
    handle: int
    type: int


@dataclass(frozen=True)
class OutputOperandAlias:
    output_tuple_indices: tuple
    operand_index: int
    operand_tuple_indices: tuple


@dataclass(frozen=True)
class ResultAccuracy:
    atol: float
    rtol: float
    ulps: int
    mode: str


def _fields(cls, attr, converters=None):
    converters = converters or {}
    values = {}
    for name in cls.__dataclass_fields__:
        value = getattr(attr, name)
        values[name] = converters.get(name, _plain)(value)
    return cls(**values)


def _plain(value):
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return value


# Enum-like StableHLO attributes: decoded to their spelling ("LT", "FLOAT", "DEFAULT" ...).
_ENUM_ATTRIBUTES = (
    chlo.ComparisonDirectionAttr,
    chlo.ComparisonTypeAttr,
    chlo.PrecisionAttr,
    stablehlo.ComparisonDirectionAttr,
    stablehlo.ComparisonTypeAttr,
    stablehlo.PrecisionAttr,
    stablehlo.FftTypeAttr,
    stablehlo.RngAlgorithmAttr,
    stablehlo.RngDistributionAttr,
    stablehlo.TransposeAttr,
)

_DENSE_ARRAYS = (
    ir.DenseI64ArrayAttr, ir.DenseI32ArrayAttr, ir.DenseI16ArrayAttr, ir.DenseI8ArrayAttr,
    ir.DenseBoolArrayAttr, ir.DenseF32ArrayAttr, ir.DenseF64ArrayAttr,
)


def _string(attr: ir.StringAttr) -> str | bytes:
    """A string attribute's text; its bytes when they are not UTF-8 (a custom call's
    ``backend_config`` may carry raw bytes, as JAX's ``InspectSharding`` does)."""
    raw = attr.value_bytes
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw


def decode_attribute(attr: ir.Attribute):
    """An MLIR attribute as a plain Python value (ints, floats, str, tuples, ndarrays ...).

    Attributes we do not know are kept as their MLIR text, so no MLIR object ever
    reaches the run loop.
    """
    if isinstance(attr, ir.BoolAttr):
        return bool(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return int(attr.value)
    if isinstance(attr, ir.FloatAttr):
        return float(attr.value)
    if isinstance(attr, ir.StringAttr):
        return _string(attr)
    if isinstance(attr, ir.UnitAttr):
        return True
    if isinstance(attr, ir.FlatSymbolRefAttr):
        return attr.value
    if isinstance(attr, _DENSE_ARRAYS):
        return tuple(attr)
    if isinstance(attr, ir.DenseElementsAttr):
        return decode_elements(attr)
    if isinstance(attr, ir.ArrayAttr):
        return tuple(decode_attribute(a) for a in attr)
    if isinstance(attr, ir.DictAttr):
        return {attr[i].name: decode_attribute(attr[i].attr) for i in range(len(attr))}
    if isinstance(attr, ir.TypeAttr):
        return decode_type(attr.value)
    for enum in _ENUM_ATTRIBUTES:
        if enum.isinstance(attr):
            return enum(attr).value
    if stablehlo.DotDimensionNumbers.isinstance(attr):
        return _fields(DotDimensionNumbers, stablehlo.DotDimensionNumbers(attr))
    if stablehlo.GatherDimensionNumbers.isinstance(attr):
        return _fields(GatherDimensionNumbers, stablehlo.GatherDimensionNumbers(attr))
    if stablehlo.ScatterDimensionNumbers.isinstance(attr):
        return _fields(ScatterDimensionNumbers, stablehlo.ScatterDimensionNumbers(attr))
    if stablehlo.ConvDimensionNumbers.isinstance(attr):
        return _fields(ConvDimensionNumbers, stablehlo.ConvDimensionNumbers(attr))
    if stablehlo.DotAlgorithm.isinstance(attr):
        spelled = {name: lambda t: str(t) for name in
                   ("lhs_precision_type", "rhs_precision_type", "accumulation_type")}
        return _fields(DotAlgorithm, stablehlo.DotAlgorithm(attr), spelled)
    if stablehlo.ChannelHandle.isinstance(attr):
        channel = stablehlo.ChannelHandle(attr)
        return ChannelHandle(channel.handle, channel.channel_type)
    if stablehlo.OutputOperandAlias.isinstance(attr):
        return _fields(OutputOperandAlias, stablehlo.OutputOperandAlias(attr))
    if stablehlo.ResultAccuracyAttr.isinstance(attr):
        accuracy = stablehlo.ResultAccuracyAttr(attr)
        return ResultAccuracy(accuracy.atol, accuracy.rtol, accuracy.ulps,
                              str(accuracy.mode).split()[-1].rstrip(">"))
    if chlo.RaggedDotDimensionNumbers.isinstance(attr):
        return _fields(RaggedDotDimensionNumbers, chlo.RaggedDotDimensionNumbers(attr))
    text = str(attr)
    number = _COMPLEX_NUMBER.fullmatch(text)
    if number:
        return complex(float(number.group(1)), float(number.group(2)))
    return text


# ``#complex.number<:f32 1.0, 2.0> : complex<f32>`` (a complex scalar attribute)
_COMPLEX_NUMBER = re.compile(r"#complex\.number<:\w+ ([^,]+), ([^>]+)>.*", re.S)


def decode_op_attributes(operation: ir.Operation) -> dict:
    """All attributes of an op, decoded. Safe for every attribute kind.

    jaxlib's bindings cannot hand out some dense attributes (complex elements) as
    objects; those are decoded from their printed form instead.
    """
    attributes = operation.attributes
    decoded = {}
    for index in range(len(attributes)):
        name = None
        try:
            named = attributes[index]
            name = named.name
            attr = attributes[name]
        except (TypeError, ValueError):
            # str() of the NamedAttribute is safe where its .attr getter is not.
            text = str(attributes[index])
            match = re.fullmatch(r"NamedAttribute\((.+?)=(.*)\)", text, re.S)
            if not match:
                raise ModuleError(f"cannot decode attribute {text}") from None
            decoded[match.group(1)] = parse_elements_text(match.group(2))
            continue
        decoded[name] = decode_attribute(attr)
    return decoded


# ------------------------------------------------------------------ dense elements

_NUMPY_READABLE = frozenset(
    np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                          np.uint32, np.uint64, np.float16, np.float32, np.float64))


def decode_elements(attr: ir.DenseElementsAttr) -> np.ndarray:
    """A DenseElementsAttr as a read-only ndarray of its exact element type.

    ``index`` elements (layouts and other attribute-only data) become int64.
    """
    if str(attr.type).endswith("index>"):
        return parse_elements_text(str(attr))
    ttype = decode_type(attr.type)
    if ttype.dtype in _NUMPY_READABLE:
        array = np.array(attr, copy=True)
        if array.shape != ttype.shape:  # splats come back with the full shape or as one value
            array = np.broadcast_to(array, ttype.shape).copy()
        array = array.astype(ttype.dtype, copy=False)
        array.flags.writeable = False
        return array
    return parse_elements_text(str(attr))


_DENSE_TEXT = re.compile(r"\s*dense<(.*)>\s*:\s*(tensor<.*>)\s*", re.S)
_TENSOR_TEXT = re.compile(r"tensor<((?:(?:\d+|\?)x)*)([^,>]+>?)(?:,.*)?>", re.S)
_LITERAL = re.compile(r"\(\s*([^,()\s]+)\s*,\s*([^,()\s]+)\s*\)|[^\s\[\](),]+")


def parse_elements_text(text: str) -> np.ndarray:
    """Parse ``dense<...> : tensor<...>`` (list, splat or hex form) into an ndarray."""
    match = _DENSE_TEXT.fullmatch(text)
    if not match:
        raise ModuleError(f"cannot decode dense elements attribute {text[:200]}")
    body, type_text = match.groups()
    ttype = _parse_tensor_type(type_text)
    count = int(np.prod(ttype.shape, dtype=np.int64))
    if body.startswith('"0x'):
        flat = _from_storage_bytes(bytes.fromhex(body[3:-1]), ttype)
    else:
        tokens = [m.group(0) if m.group(1) is None else m.groups() for m in _LITERAL.finditer(body)]
        flat = _from_literal_tokens(tokens, ttype)
    if flat.size == 1 and count != 1:
        flat = np.broadcast_to(flat, (count,))
    if flat.size != count:
        raise ModuleError(f"dense attribute has {flat.size} elements, its type {ttype} needs {count}")
    array = np.array(flat.reshape(ttype.shape), order="C")  # (ascontiguousarray makes 0-d 1-d)
    array.flags.writeable = False
    return array


def _parse_tensor_type(text: str) -> TensorType:
    match = _TENSOR_TEXT.fullmatch(text.strip())
    if not match:
        raise ModuleError(f"cannot parse tensor type {text}")
    dims = [d for d in match.group(1).split("x") if d]
    element = "i64" if match.group(2) == "index" else match.group(2)  # MLIR stores index as 64 bits
    return TensorType.of(tuple(None if d == "?" else int(d) for d in dims), element)


def _storage_dtype(ttype: TensorType) -> np.dtype:
    """MLIR stores dense data with one whole byte (or more) per element."""
    if ttype.kind == "signed" and ttype.bit_width < 8:
        return np.dtype(np.int8)
    if ttype.kind == "unsigned" and ttype.bit_width < 8:
        return np.dtype(np.uint8)
    if ttype.kind == "bool":
        return np.dtype(np.uint8)
    return ttype.dtype


def _from_storage_bytes(raw: bytes, ttype: TensorType) -> np.ndarray:
    storage = _storage_dtype(ttype)
    values = np.frombuffer(raw, dtype=storage)
    if storage == ttype.dtype:
        return values.copy()
    if ttype.kind == "bool":
        return values != 0
    return values.astype(ttype.dtype)


def _from_literal_tokens(tokens, ttype: TensorType) -> np.ndarray:
    kind = ttype.kind
    if kind == "complex":
        part = np.float32 if ttype.dtype == np.complex64 else np.float64
        values = [complex(_float_token(re_, part), _float_token(im, part)) for re_, im in tokens]
        return np.array(values, dtype=ttype.dtype)
    if kind == "bool":
        return np.array([t in ("true", "1") for t in tokens], dtype=np.bool_)
    if kind in ("signed", "unsigned"):
        wide = np.int64 if kind == "signed" else np.uint64
        return np.array([int(t, 16) if t.startswith("0x") else int(t) for t in tokens],
                        dtype=wide).astype(ttype.dtype)
    return np.array([_float_token(t, ttype.dtype) for t in tokens], dtype=ttype.dtype)


def _float_token(token: str, dtype) -> np.generic:
    """A float literal; MLIR prints non-finite (and inexact) values as hex bit patterns."""
    dtype = np.dtype(dtype)
    if token.lower().startswith("0x"):
        bits = int(token, 16)
        unsigned = np.dtype(f"u{dtype.itemsize}")
        return np.array(bits, dtype=unsigned).view(dtype)[()]
    return dtype.type(float(token))


# ----------------------------------------------------------------------- locations


def decode_location(loc: ir.Location, file_name: str | None = None, cache: dict | None = None) -> SourceLocation:
    """Name and Python frames of an MLIR location (see locations.py).

    ``file_name`` replaces the ``-`` that MLIR uses for text parsed from a string.
    ``cache`` (a location's attribute -> decoded, for one module) decodes each of
    JAX's shared locations once; a plain ``file:line:col`` is quicker decoded than
    looked up. (The key is ``loc.attr``: MLIR uniques locations, and an Attribute
    hashes as what it wraps, where a Location object hashes as itself, a new one
    at each ``op.location``.)
    """
    if type(loc) is ir.FileLineColLoc:
        file = loc.filename
        return SourceLocation.at_line(file_name if file == "-" and file_name else file, loc.start_line,
                                      loc.start_col)
    if cache is not None:
        key = loc.attr
        decoded = cache.get(key)
        if decoded is None:
            decoded = cache[key] = decode_location(loc, file_name)
        return decoded
    name, frames = _walk_location(loc, file_name)
    if not name and not frames:
        return UNKNOWN
    return SourceLocation(name, tuple(frames))


def _walk_location(loc, file_name):
    if isinstance(loc, ir.NameLoc):
        child_name, frames = _walk_location(loc.child_loc, file_name)
        if frames and frames[0].function is None and not child_name:
            # "f"("x.py":3:4): a frame named after its function.
            frames[0] = Frame(loc.name_str, frames[0].file, frames[0].line, frames[0].column)
            return None, frames
        return loc.name_str, frames
    if isinstance(loc, ir.CallSiteLoc):
        _, callee = _walk_location(loc.callee, file_name)
        _, caller = _walk_location(loc.caller, file_name)
        return None, callee + caller
    if isinstance(loc, ir.FileLineColLoc):
        file = loc.filename
        if file == "-" and file_name:
            file = file_name
        return None, [Frame(None, file, loc.start_line, loc.start_col)]
    if isinstance(loc, ir.FusedLoc):
        for inner in loc.locations:
            name, frames = _walk_location(inner, file_name)
            if name or frames:
                return name, frames
    return None, []
