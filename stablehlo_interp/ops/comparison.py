"""compare (spec: compare): directions EQ, NE, GE, GT, LE, LT under the
comparison types FLOAT (IEEE quiet comparisons: NaN is unordered, -0.0 ==
+0.0), TOTALORDER, SIGNED, UNSIGNED (i1 compares as unsigned: true > false).

TOTALORDER orders -NaN < -Inf < -finite < -0.0 < +0.0 < +finite < +Inf < +NaN
(NaNs by payload), comparing the floats' bit patterns mapped to sortable integers.
Complex operands compare lexicographically on (real, imag).
"""

from __future__ import annotations

import numpy as np

from ..registry import op

_DIRECTIONS = {
    "EQ": np.equal, "NE": np.not_equal, "GE": np.greater_equal,
    "GT": np.greater, "LE": np.less_equal, "LT": np.less,
}


def total_order_key(x) -> np.ndarray:
    """Signed integers that order like the spec's totalOrder of the floats in x.

    Floats narrower than f64 go through f32, which keeps sign, order and NaN
    payload order (f8E8M0FNU has no sign bit; its values are all positive).
    """
    x = np.asarray(x)
    wide = np.float64 if x.dtype == np.float64 else np.float32
    bits = x.astype(wide).view(np.int64 if wide == np.float64 else np.int32)
    magnitude_mask = np.iinfo(bits.dtype).max
    return np.where(bits < 0, bits ^ magnitude_mask, bits)


@op("stablehlo.compare", elementwise=True)
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
        return _lexicographic(ufunc)
    if info.operand_types[0].dtype.itemsize < 2 and kind == "float":
        return lambda lhs, rhs: ufunc(np.asarray(lhs, np.float32), np.asarray(rhs, np.float32))
    return ufunc


def _lexicographic(ufunc):
    """Complex GE/GT/LE/LT: the real parts decide unless they are equal."""

    def run(lhs, rhs):
        same_real = lhs.real == rhs.real
        return np.where(same_real, ufunc(lhs.imag, rhs.imag), ufunc(lhs.real, rhs.real))

    return run
