"""compare (spec: compare): directions EQ, NE, GE, GT, LE, LT under the
comparison types FLOAT (IEEE: NaN is unordered), TOTALORDER, SIGNED, UNSIGNED.

TOTALORDER orders -NaN < -Inf < -finite < -0.0 < +0.0 < +finite < +Inf < +NaN,
comparing the floats' bit patterns mapped to sortable integers.
"""

from __future__ import annotations

import numpy as np

from ..registry import op

_DIRECTIONS = {
    "EQ": np.equal, "NE": np.not_equal, "GE": np.greater_equal,
    "GT": np.greater, "LE": np.less_equal, "LT": np.less,
}


def total_order_key(x) -> np.ndarray:
    """Signed integers that order like the spec's totalOrder of the floats in x."""
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
        raise info.unsupported(f"complex operands only compare with EQ or NE, not {direction}")
    return ufunc
