"""Bitwise and logical ops (spec: and, or, xor, not, shift_left,
shift_right_arithmetic, shift_right_logical, popcnt, count_leading_zeros).

Shift amounts are read as unsigned: an amount of at least the bit width gives
0 (or -1 for an arithmetic right shift of a negative value), as in XLA.
"""

from __future__ import annotations

import numpy as np

from ..registry import op
from .support import in_integer_precision, integer_compute_dtype


def _logical_or_bitwise(ufunc):
    def build(info):
        ttype = info.operand_types[0]
        if ttype.kind not in ("bool", "signed", "unsigned"):
            raise info.unsupported(f"element type {ttype.element_type} is not allowed")
        return in_integer_precision(ufunc, ttype.dtype)

    return build


op("stablehlo.and", elementwise=True)(_logical_or_bitwise(np.bitwise_and))
op("stablehlo.or", elementwise=True)(_logical_or_bitwise(np.bitwise_or))
op("stablehlo.xor", elementwise=True)(_logical_or_bitwise(np.bitwise_xor))
op("stablehlo.not", elementwise=True)(_logical_or_bitwise(np.invert))


def _integer_layout(info):
    """(dtype, compute dtype, unsigned compute dtype, bit width) of an integer operand."""
    ttype = info.operand_types[0]
    if ttype.kind not in ("signed", "unsigned"):
        raise info.unsupported(f"element type {ttype.element_type} is not an integer type")
    compute = integer_compute_dtype(ttype.dtype)
    return ttype.dtype, compute, np.dtype(f"u{compute.itemsize}"), ttype.bit_width


def _bit_pattern(values, compute, unsigned, bits):
    """The low ``bits`` bits of each value, as unsigned integers."""
    pattern = np.asarray(values).astype(compute).astype(unsigned)
    if bits < 8 * unsigned.itemsize:
        pattern &= unsigned.type((1 << bits) - 1)
    return pattern


@op("stablehlo.shift_left", elementwise=True)
def shift_left(info):
    dtype, compute, unsigned, bits = _integer_layout(info)

    def run(lhs, rhs):
        amount = _bit_pattern(rhs, compute, unsigned, bits)
        in_range = amount < bits
        shifted = np.left_shift(np.asarray(lhs).astype(compute),
                                np.where(in_range, amount, 0).astype(compute))
        return np.where(in_range, shifted, 0).astype(dtype)

    return run


@op("stablehlo.shift_right_logical", elementwise=True)
def shift_right_logical(info):
    dtype, compute, unsigned, bits = _integer_layout(info)

    def run(lhs, rhs):
        amount = _bit_pattern(rhs, compute, unsigned, bits)
        in_range = amount < bits
        shifted = np.right_shift(_bit_pattern(lhs, compute, unsigned, bits),
                                 np.where(in_range, amount, 0).astype(unsigned))
        result = np.where(in_range, shifted, 0).astype(unsigned)
        return _from_pattern(result, dtype, compute, bits)

    return run


def _from_pattern(pattern, dtype, compute, bits):
    """Integers of ``dtype`` whose low ``bits`` bits are ``pattern``."""
    if np.dtype(dtype).kind == "u" or (compute.kind == "u"):
        return pattern.astype(dtype)
    if bits < 8 * compute.itemsize:  # sign-extend a sub-byte pattern
        pattern = pattern.astype(compute)
        sign = compute.type(1 << (bits - 1))
        return ((pattern ^ sign) - sign).astype(dtype)
    return pattern.view(compute).astype(dtype)


@op("stablehlo.shift_right_arithmetic", elementwise=True)
def shift_right_arithmetic(info):
    dtype, compute, unsigned, bits = _integer_layout(info)
    if info.operand_types[0].kind == "unsigned":
        return shift_right_logical(info)

    def run(lhs, rhs):
        amount = _bit_pattern(rhs, compute, unsigned, bits)
        clamped = np.minimum(amount, bits - 1).astype(compute)
        return np.right_shift(np.asarray(lhs).astype(compute), clamped).astype(dtype)

    return run


@op("stablehlo.popcnt", elementwise=True)
def popcnt(info):
    dtype, compute, unsigned, bits = _integer_layout(info)
    return lambda x: np.bitwise_count(_bit_pattern(x, compute, unsigned, bits)).astype(dtype)


@op("stablehlo.count_leading_zeros", elementwise=True)
def count_leading_zeros(info):
    dtype, compute, unsigned, bits = _integer_layout(info)

    def run(x):
        pattern = _bit_pattern(x, compute, unsigned, bits).astype(np.uint64)
        length = np.zeros(pattern.shape, np.int64)  # bit length, by binary search
        for step in (32, 16, 8, 4, 2, 1):
            if step < bits:
                high = pattern >> np.uint64(step)
                has_high = high != 0
                length += np.where(has_high, step, 0)
                pattern = np.where(has_high, high, pattern)
        length += (pattern != 0)
        return (bits - length).astype(dtype)

    return run
