"""Short descriptions of values: type, a few elements or min/max/mean, NaN and inf counts.

``f32[] 0.5``, ``f32[4] [0 1.3863 nan nan]``, ``f32[2,2] [[1 2] [3 4]]``,
``f32[64,32] min=-2.1 max=3.7 mean=0.0132 nan=3``.
The type is written as in a jaxpr, with StableHLO's element type names
(``i1`` is the boolean type).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ModuleError
from ..ir.types import Token, element_type_of

SMALL = 8  # values with at most this many elements are shown in full


@dataclass(frozen=True)
class ValueSummary:
    """What a trace keeps of one value (``elements`` for tuples, else None)."""

    type: str                      # "f32[4]", "token", "tuple"
    shape: tuple | None = None
    element_type: str | None = None
    values: tuple | None = None    # every element, when there are at most SMALL
    min: float | None = None       # over the elements that are not NaN (floats: as float)
    max: float | None = None
    mean: float | None = None
    nan: int = 0
    inf: int = 0
    true: int | None = None        # booleans: how many are true
    elements: tuple | None = None

    @property
    def nonfinite(self) -> int:
        return self.nan + self.inf

    def __str__(self) -> str:
        if self.elements is not None:
            return "(" + ", ".join(map(str, self.elements)) + ")"
        if self.shape is None:
            return self.type
        if self.values is not None:
            numbers = [format_number(v) for v in self.values]
            text = f"{self.type} {numbers[0] if self.shape == () else nested(numbers, self.shape)}"
        else:
            parts = [self.type]
            if self.true is not None:
                parts.append(f"true={self.true}")
            if self.element_type and self.element_type.startswith("complex"):
                parts.append("|x|")
            if self.min is not None:
                parts += [f"min={format_number(self.min)}", f"max={format_number(self.max)}"]
            if self.mean is not None:
                parts.append(f"mean={format_number(self.mean)}")
            text = " ".join(parts)
        counts = "".join(f" {name}={count}" for name, count in (("nan", self.nan), ("inf", self.inf))
                         if count and self.values is None)
        return text + counts


def nested(numbers: list[str], shape: tuple) -> str:
    """The elements (in row-major order) as an array of ``shape``, a pair of brackets per
    dimension as NumPy prints them on one line: ``[[1 2 3] [4 5 6]]`` for a 2x3 array."""
    if len(shape) <= 1:
        return "[" + " ".join(numbers) + "]"
    if shape[0] == 0:
        return "[]"
    row = len(numbers) // shape[0]
    return "[" + " ".join(nested(numbers[i * row:(i + 1) * row], shape[1:]) for i in range(shape[0])) + "]"


def summarize(value) -> ValueSummary:
    if isinstance(value, tuple):
        return ValueSummary("tuple", elements=tuple(summarize(v) for v in value))
    if isinstance(value, Token):
        return ValueSummary("token")
    array = np.asarray(value)
    element = element_name(array.dtype)
    text = type_text(array)
    if array.size <= SMALL:
        values = tuple(_python_number(v) for v in array.reshape(-1))
        nan, inf = _nonfinite_counts(array)
        return ValueSummary(text, array.shape, element, values, nan=nan, inf=inf)
    if array.dtype.kind == "b":
        return ValueSummary(text, array.shape, element, true=int(np.count_nonzero(array)))
    return ValueSummary(text, array.shape, element, None, *_statistics(array))


def element_name(dtype) -> str:
    try:
        return element_type_of(dtype)
    except ModuleError:
        return str(dtype)


def type_text(value) -> str:
    """``f32[4]`` for an array; ``token``; ``(f32[], i32[])`` for a tuple."""
    if isinstance(value, tuple):
        return "(" + ", ".join(type_text(v) for v in value) + ")"
    if isinstance(value, Token):
        return "token"
    array = np.asarray(value)
    return f"{element_name(array.dtype)}[{','.join(map(str, array.shape))}]"


def format_number(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, complex):
        return f"{format_number(value.real)}{'+' if value.imag >= 0 or np.isnan(value.imag) else '-'}" \
               f"{format_number(abs(value.imag))}j"
    if np.isnan(value):
        return "nan"
    if np.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.5g}"


def format_pair(ours, theirs) -> tuple[str, str]:
    """Two numbers as text, each with the significant digits their difference needs (at
    least :func:`format_number`'s five): two values that differ never print alike
    (``0.00099999 vs 0.00099999`` hid a difference in the eighth digit)."""
    first, second = format_number(ours), format_number(theirs)
    if first != second or ours == theirs or isinstance(ours, (bool, int)) or isinstance(theirs, (bool, int)):
        return first, second
    if isinstance(ours, complex) or isinstance(theirs, complex):
        real, imag = (format_pair(complex(ours).real, complex(theirs).real),
                      format_pair(complex(ours).imag, complex(theirs).imag))
        first, second = (f"{r}{'-' if i.startswith('-') else '+'}{i.lstrip('-')}j" for r, i in zip(real, imag))
        return first, second
    for digits in range(6, 18):   # 17 significant digits tell any two float64 values apart
        first, second = f"{ours:.{digits}g}", f"{theirs:.{digits}g}"
        if first != second:
            break
    return first, second


def _python_number(value):
    kind = np.asarray(value).dtype.kind
    if kind == "b":
        return bool(value)
    if kind in "iu":
        return int(value)
    if kind == "c":
        return complex(value)
    return float(value)


def widened(value) -> np.ndarray | None:
    """A float or complex value as float64 / complex128; None for values that
    cannot hold NaN or inf (integers, booleans, tokens)."""
    if not isinstance(value, (np.ndarray, np.generic)):
        return None
    array = np.asarray(value)
    if array.dtype.kind == "c":
        return array.astype(np.complex128)
    return array.astype(np.float64) if is_float_dtype(array.dtype) else None


def _nonfinite_counts(array: np.ndarray) -> tuple[int, int]:
    wide = widened(array)
    if wide is None:
        return 0, 0
    return int(np.count_nonzero(np.isnan(wide))), int(np.count_nonzero(np.isinf(wide)))


def _statistics(array: np.ndarray):
    """(min, max, mean, nan, inf) of numbers; min/max/mean skip NaN; complex values give |x| statistics."""
    kind = array.dtype.kind
    if not is_float_dtype(array.dtype) and kind != "c":
        wide = array.astype(np.int64 if kind == "i" else np.uint64)
        return int(wide.min()), int(wide.max()), float(wide.mean(dtype=np.float64)), 0, 0
    nan, inf = _nonfinite_counts(array)
    wide = np.abs(array.astype(np.complex128)) if kind == "c" else array.astype(np.float64)
    present = wide[~np.isnan(wide)]
    if not present.size:
        return float("nan"), float("nan"), float("nan"), nan, inf
    with np.errstate(all="ignore"):
        return float(present.min()), float(present.max()), float(present.mean()), nan, inf


def is_float_dtype(dtype) -> bool:
    """Floats, including the ml_dtypes ones (bfloat16, float8 ...), whose kind is 'V'."""
    try:
        return np.dtype(dtype).kind == "f" or element_type_of(dtype).startswith(("f", "bf"))
    except ModuleError:
        return False
