"""Linear algebra (spec: dot_general; dot)."""

from __future__ import annotations

import numpy as np

from ..registry import op
from .support import integer_compute_dtype


def _accumulation_dtype(ttype):
    """Integers accumulate in their own (wrapping) type; floats narrower than f32 in f32."""
    if ttype.kind in ("signed", "unsigned"):
        return integer_compute_dtype(ttype.dtype)
    if ttype.kind == "bool":
        return np.dtype(np.int8)
    if ttype.kind == "float" and ttype.dtype.itemsize < 4:
        return np.dtype(np.float32)
    return ttype.dtype


@op("stablehlo.dot_general")
def dot_general(info):
    """Contract ``lhs_contracting`` with ``rhs_contracting`` per batch; the result
    dims are batch dims, then lhs free dims, then rhs free dims."""
    numbers = info.attr("dot_dimension_numbers")
    lhs_type, rhs_type = info.operand_types[:2]
    result = info.result_type
    lhs_batch, rhs_batch = list(numbers.lhs_batching_dimensions), list(numbers.rhs_batching_dimensions)
    lhs_contract, rhs_contract = list(numbers.lhs_contracting_dimensions), list(numbers.rhs_contracting_dimensions)
    lhs_free = [d for d in range(lhs_type.rank) if d not in lhs_batch + lhs_contract]
    rhs_free = [d for d in range(rhs_type.rank) if d not in rhs_batch + rhs_contract]
    lhs_order, rhs_order = lhs_batch + lhs_free + lhs_contract, rhs_batch + rhs_contract + rhs_free
    compute = _accumulation_dtype(result)
    is_bool = result.kind == "bool"

    def run(lhs, rhs):
        lhs = np.transpose(lhs, lhs_order).astype(compute, copy=False)
        rhs = np.transpose(rhs, rhs_order).astype(compute, copy=False)
        batch = lhs.shape[:len(lhs_batch)]
        free_l = lhs.shape[len(lhs_batch):len(lhs_batch) + len(lhs_free)]
        free_r = rhs.shape[len(rhs_batch) + len(rhs_contract):]
        size_b, size_l, size_r = int(np.prod(batch)), int(np.prod(free_l)), int(np.prod(free_r))
        size_c = int(np.prod(lhs.shape[len(lhs_batch) + len(lhs_free):]))
        product = np.matmul(lhs.reshape(size_b, size_l, size_c), rhs.reshape(size_b, size_c, size_r))
        product = product.reshape(batch + free_l + free_r)
        if is_bool:
            return product != 0
        return product.astype(result.dtype, copy=False)

    return run


@op("stablehlo.dot")
def dot(info):
    """dot: vector/matrix products, i.e. dot_general contracting lhs's last dim with rhs's first."""
    from ..decode import DotDimensionNumbers

    lhs_rank = info.operand_types[0].rank
    numbers = DotDimensionNumbers((), (), (lhs_rank - 1,), (0,))
    info.attributes = dict(info.attributes, dot_dimension_numbers=numbers)
    return dot_general(info)
