"""compare (spec: compare): directions EQ, NE, GE, GT, LE, LT under the
comparison types FLOAT (IEEE quiet comparisons: NaN is unordered, -0.0 ==
+0.0), TOTALORDER, SIGNED, UNSIGNED (i1 compares as unsigned: true > false).

TOTALORDER orders -NaN < -Inf < -finite < -0.0 < +0.0 < +finite < +Inf < +NaN
(NaNs by payload), comparing the floats' bit patterns mapped to sortable integers.
Complex operands compare lexicographically on (real, imag).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..engine.registry import op
from ..ir.types import bit_width
from ..engine.dtypes import contiguous
from . import scalars

_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
_FNUZ = frozenset(map(np.dtype, (ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz,
                                 ml_dtypes.float8_e4m3b11fnuz)))

_DIRECTIONS = {
    "EQ": np.equal, "NE": np.not_equal, "GE": np.greater_equal,
    "GT": np.greater, "LE": np.less_equal, "LT": np.less,
}


def total_order_key(x) -> np.ndarray:
    """Signed integers that order like the spec's totalOrder of the floats in x.

    Read from the bit patterns (converting f8 NaNs to f32 would lose their
    payloads): sign-magnitude to two's complement. f8E8M0FNU has no sign bit.
    """
    x = np.asarray(x)
    width = bit_width(x.dtype)
    pattern = contiguous(x).view(f"u{x.dtype.itemsize}").astype(np.int64)
    if x.dtype == _E8M0:
        return pattern
    if width == 64:
        signed = pattern  # already the two's complement reading of the bits
        return np.where(signed < 0, signed ^ np.int64(2**63 - 1), signed)
    pattern &= (1 << width) - 1
    magnitude = pattern & ((1 << (width - 1)) - 1)
    key = np.where(pattern >> (width - 1) == 1, -magnitude - 1, magnitude)
    if x.dtype in _FNUZ:  # the "-0" pattern is their only NaN, a negative one: lowest
        key = np.where(pattern == 1 << (width - 1), -(1 << (width - 1)) - 1, key)
    return key


@op("stablehlo.compare", elementwise=True, scalar=scalars.compare)
def compare(info):
    direction = info.attr("comparison_direction")
    compare_type = info.attributes.get("compare_type")
    ufunc = _DIRECTIONS[direction]
    kind = info.operand_types[0].kind
    if compare_type == "TOTALORDER":
        if kind != "float":
            raise info.unsupported(f"TOTALORDER needs floating-point operands, got {kind}")
        return lambda lhs, rhs: ufunc(total_order_key(lhs), total_order_key(rhs))
    if kind == "complex" and direction not in ("EQ", "NE"):
        return _complex_order_comparison(ufunc)
    if info.operand_types[0].dtype.itemsize < 2 and kind == "float":
        return lambda lhs, rhs: ufunc(np.asarray(lhs, np.float32), np.asarray(rhs, np.float32))
    return ufunc


def _complex_order_comparison(ufunc):
    """Complex GE/GT/LE/LT: the real parts decide unless they are equal."""

    def run(lhs, rhs):
        same_real = lhs.real == rhs.real
        return np.where(same_real, ufunc(lhs.imag, rhs.imag), ufunc(lhs.real, rhs.real))

    return run
