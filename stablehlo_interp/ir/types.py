"""StableHLO types as plain Python values, decoded once from MLIR at load time.

A tensor's element type keeps its MLIR spelling (``f32``, ``ui8``, ``i1``,
``complex<f32>``, ``f8E4M3FN`` ...) next to the NumPy dtype that holds its values
(sub-byte integers and small floats come from ``ml_dtypes``). Tokens are a
singleton value, tuples are Python tuples.

A quantized tensor (``tensor<4x!quant.uniform<i8:f32, 0.1:3>>``) is a TensorType
of kind ``quantized`` whose ``quantization`` holds the parameters; its values are
held as integers of the storage type (``dtype`` is the storage dtype).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from ..errors import ModuleError

# MLIR element type spelling -> NumPy dtype. Signless integers (i8, i32 ...) are
# signed in StableHLO; i1 is the boolean type (spec: "Types").
_ELEMENT_DTYPES: dict[str, np.dtype] = {
    "i1": np.dtype(np.bool_),
    "i2": np.dtype(ml_dtypes.int2),
    "i4": np.dtype(ml_dtypes.int4),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "ui2": np.dtype(ml_dtypes.uint2),
    "ui4": np.dtype(ml_dtypes.uint4),
    "ui8": np.dtype(np.uint8),
    "ui16": np.dtype(np.uint16),
    "ui32": np.dtype(np.uint32),
    "ui64": np.dtype(np.uint64),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "f8E4M3FN": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "f8E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f8E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8E4M3B11FNUZ": np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    "f8E4M3": np.dtype(ml_dtypes.float8_e4m3),
    "f8E3M4": np.dtype(ml_dtypes.float8_e3m4),
    "f8E8M0FNU": np.dtype(ml_dtypes.float8_e8m0fnu),
    "f4E2M1FN": np.dtype(ml_dtypes.float4_e2m1fn),
    "f6E2M3FN": np.dtype(ml_dtypes.float6_e2m3fn),
    "f6E3M2FN": np.dtype(ml_dtypes.float6_e3m2fn),
    "complex<f32>": np.dtype(np.complex64),
    "complex<f64>": np.dtype(np.complex128),
}
# Explicitly signed spellings are accepted as aliases of the signless ones.
_ELEMENT_DTYPES.update({f"si{bits}": _ELEMENT_DTYPES[f"i{bits}"] for bits in (2, 4, 8, 16, 32, 64)})

_ELEMENT_NAMES: dict[np.dtype, str] = {}
for _name, _dtype in _ELEMENT_DTYPES.items():
    _ELEMENT_NAMES.setdefault(_dtype, _name)

BOOL, SIGNED, UNSIGNED, FLOAT, COMPLEX = "bool", "signed", "unsigned", "float", "complex"
QUANTIZED = "quantized"


def element_kind(element_type: str) -> str:
    """One of ``bool``, ``signed``, ``unsigned``, ``float``, ``complex``."""
    if element_type == "i1":
        return BOOL
    if element_type.startswith("ui"):
        return UNSIGNED
    if element_type.startswith(("i", "si")):
        return SIGNED
    if element_type.startswith("complex"):
        return COMPLEX
    return FLOAT


def dtype_of(element_type: str) -> np.dtype:
    try:
        return _ELEMENT_DTYPES[element_type]
    except KeyError:
        raise ModuleError(f"unsupported element type {element_type!r}") from None


def element_type_of(dtype) -> str:
    """The MLIR spelling of a NumPy dtype (``float32`` -> ``f32``)."""
    dtype = np.dtype(dtype)
    try:
        return _ELEMENT_NAMES[dtype]
    except KeyError:
        raise ModuleError(f"no StableHLO element type for NumPy dtype {dtype}") from None


def bit_width(dtype) -> int:
    """Bits of one element (4 for int4, 1 for the spec's i1)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return 1
    if dtype.kind == "c":
        return dtype.itemsize * 8
    try:
        return ml_dtypes.iinfo(dtype).bits
    except ValueError:
        return ml_dtypes.finfo(dtype).bits


@dataclass(frozen=True)
class Quantization:
    """The parameters of a ``!quant.uniform`` element type (spec: "Types").

    ``f = (i - zero_point) * scale`` for a stored integer ``i``; per-axis
    quantization has one scale and zero point per index of ``dimension``
    (``None`` for per-tensor quantization).
    """

    storage_type: str
    storage_min: int
    storage_max: int
    expressed_type: str
    scales: tuple
    zero_points: tuple
    dimension: int | None = None

    @property
    def storage_dtype(self) -> np.dtype:
        return dtype_of(self.storage_type)

    @property
    def expressed_dtype(self) -> np.dtype:
        return dtype_of(self.expressed_type)

    def parameters(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """Scales (of the expressed type) and zero points (int64), shaped to
        broadcast against a tensor of this rank."""
        view = [1] * rank
        if self.dimension is not None:
            view[self.dimension] = len(self.scales)
        scales = np.array(self.scales, np.float64).astype(self.expressed_dtype).reshape(view)
        return scales, np.array(self.zero_points, np.int64).reshape(view)


@dataclass(frozen=True)
class TensorType:
    """``tensor<shape x element_type>``; a dynamic dimension is ``None``."""

    shape: tuple
    element_type: str
    dtype: np.dtype = field(compare=False)
    kind: str = field(compare=False)
    quantization: Quantization | None = None

    @classmethod
    def of(cls, shape: Iterable[int | None], element_type: str) -> "TensorType":
        return cls(tuple(shape), element_type, dtype_of(element_type), element_kind(element_type))

    @classmethod
    def quantized(cls, shape: Iterable[int | None], element_type: str, quantization: Quantization) -> "TensorType":
        """A quantized tensor type; ``element_type`` is the ``!quant.uniform<...>`` spelling."""
        return cls(tuple(shape), element_type, quantization.storage_dtype, QUANTIZED, quantization)

    @classmethod
    def like(cls, array: Any) -> "TensorType":
        array = np.asarray(array)
        return cls.of(array.shape, element_type_of(array.dtype))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return None not in self.shape

    @property
    def is_float(self) -> bool:
        return self.kind == FLOAT

    @property
    def is_complex(self) -> bool:
        return self.kind == COMPLEX

    @property
    def is_bool(self) -> bool:
        return self.kind == BOOL

    @property
    def is_integer(self) -> bool:
        """Signed or unsigned integer (not i1)."""
        return self.kind in (SIGNED, UNSIGNED)

    @property
    def is_quantized(self) -> bool:
        return self.kind == QUANTIZED

    def storage(self) -> "TensorType":
        """A quantized type's storage tensor type (the type itself otherwise)."""
        return TensorType.of(self.shape, self.quantization.storage_type) if self.is_quantized else self

    def expressed(self) -> "TensorType":
        """A quantized type's expressed (floating-point) tensor type (the type itself otherwise)."""
        return TensorType.of(self.shape, self.quantization.expressed_type) if self.is_quantized else self

    @property
    def bit_width(self) -> int:
        return bit_width(self.dtype)

    def matches(self, array: Any) -> bool:
        """Whether a runtime value has this type (dynamic dims match any size)."""
        return (array.dtype == self.dtype and array.ndim == len(self.shape)
                and all(d is None or d == n for d, n in zip(self.shape, array.shape)))

    def __str__(self) -> str:
        dims = "".join(("?" if d is None else str(d)) + "x" for d in self.shape)
        return f"tensor<{dims}{self.element_type}>"


@dataclass(frozen=True)
class TokenType:
    def __str__(self) -> str:
        return "!stablehlo.token"


@dataclass(frozen=True)
class TupleType:
    elements: tuple

    def __str__(self) -> str:
        return f"tuple<{', '.join(map(str, self.elements))}>"


@dataclass(frozen=True)
class FutureType(TupleType):
    """``!stablehlo.future<...>``: the results an ``async_start`` hands to its
    ``async_done``, held as a tuple."""

    def __str__(self) -> str:
        return f"!stablehlo.future<{', '.join(map(str, self.elements))}>"


class Token:
    """The runtime value of ``!stablehlo.token`` (spec: "Types", token)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "Token()"


TOKEN = Token()
