"""Bitwise and logical ops (spec: and, or, xor, not, shift_left,
shift_right_arithmetic, shift_right_logical, popcnt, count_leading_zeros).

Shift amounts are read as unsigned: an amount of at least the bit width (a
negative one included) gives 0, or all sign bits for an arithmetic right
shift, as XLA and the reference interpreter do. NumPy's shift ufuncs already
behave this way for 8- to 64-bit integers, so those runners are bare ufuncs.
"""

from __future__ import annotations

import numpy as np

from ..engine.registry import op
from ..engine.dtypes import integer_compute_dtype, same_ufunc, unsigned_view_dtype
from . import scalars


op("stablehlo.and", elementwise=True, scalar=scalars.AND)(same_ufunc(np.bitwise_and))
op("stablehlo.or", elementwise=True, scalar=scalars.OR)(same_ufunc(np.bitwise_or))
op("stablehlo.xor", elementwise=True, scalar=scalars.XOR)(same_ufunc(np.bitwise_xor))
op("stablehlo.not", elementwise=True, scalar=scalars.NOT)(same_ufunc(np.invert))


class _Bits:
    """How an integer type is held: its dtype, the 8..64-bit compute dtype, the
    unsigned and signed dtypes of that width, and the type's own bit width."""

    def __init__(self, info):
        ttype = info.operand_types[0]
        if not ttype.is_integer:
            raise info.unsupported(f"element type {ttype.element_type} is not an integer type")
        self.dtype = ttype.dtype
        self.compute = integer_compute_dtype(ttype.dtype)
        self.unsigned = unsigned_view_dtype(self.compute)
        self.signed = np.dtype(f"i{self.compute.itemsize}")
        self.width = ttype.bit_width
        self.sub_byte = self.width < 8 * self.compute.itemsize

    def pattern(self, values):
        """The low ``width`` bits of each value, as unsigned integers."""
        pattern = np.asarray(values).astype(self.compute).astype(self.unsigned)
        if self.sub_byte:
            pattern &= self.unsigned.type((1 << self.width) - 1)
        return pattern

    def from_pattern(self, pattern):
        """Values of the type whose low ``width`` bits are ``pattern`` (sign-extended)."""
        if self.sub_byte and self.compute.kind == "i":
            return self.sign_extended(pattern).astype(self.dtype)
        return pattern.astype(self.compute).astype(self.dtype)

    def amount(self, rhs):
        """Shift amounts as unsigned, with every amount >= width mapped to width."""
        return np.minimum(self.pattern(rhs), self.unsigned.type(self.width))

    def sign_extended(self, values):
        """Sub-byte values as int8 whose upper bits copy the type's top bit."""
        sign = self.signed.type(1 << (self.width - 1))
        return (self.pattern(values).astype(self.signed) ^ sign) - sign


def _watch_shift_amounts(info, bits):
    """Report shift amounts that are negative or at least the bit width (engine/semantics.py)."""

    def out_of_range(lhs, rhs, result):
        amounts = np.broadcast_to(rhs, np.shape(result))
        count = np.count_nonzero((amounts < 0) | (amounts >= bits.width))
        return (f"{count} of {np.size(result)} shift amounts are negative or at least the bit width "
                f"{bits.width}" if count else None)

    info.watch("shift-out-of-range", out_of_range)


@op("stablehlo.shift_left", elementwise=True, scalar=scalars.SHIFT_LEFT)
def shift_left(info):
    bits = _Bits(info)
    _watch_shift_amounts(info, bits)
    if not bits.sub_byte:
        return np.left_shift  # NumPy: amounts >= width (as unsigned) give 0

    def run(lhs, rhs):
        return bits.from_pattern(np.left_shift(bits.pattern(lhs), bits.amount(rhs)) &
                                 bits.unsigned.type((1 << bits.width) - 1))

    return run


@op("stablehlo.shift_right_logical", elementwise=True,
    scalar=lambda info: scalars.SHIFT_RIGHT(info) if info.operand_types[0].kind == "unsigned" else None)
def shift_right_logical(info):
    bits = _Bits(info)
    _watch_shift_amounts(info, bits)
    if not bits.sub_byte and bits.dtype.kind == "u":
        return np.right_shift
    if not bits.sub_byte:
        unsigned = bits.unsigned

        def run(lhs, rhs):
            return np.right_shift(lhs.view(unsigned), rhs.view(unsigned)).view(bits.dtype)

        return run

    def run(lhs, rhs):
        return bits.from_pattern(np.right_shift(bits.pattern(lhs), bits.amount(rhs)))

    return run


@op("stablehlo.shift_right_arithmetic", elementwise=True,
    scalar=lambda info: scalars.SHIFT_RIGHT(info) if info.operand_types[0].kind == "signed" else None)
def shift_right_arithmetic(info):
    """Shifts in copies of the top bit, for unsigned types too (the spec's
    arithmetic shift is on bits; XLA and the reference interpreter agree)."""
    bits = _Bits(info)
    _watch_shift_amounts(info, bits)
    if not bits.sub_byte and bits.dtype.kind == "i":
        return np.right_shift  # NumPy: amounts >= width (as unsigned) give 0 or -1
    if not bits.sub_byte:
        signed = bits.signed

        def run(lhs, rhs):
            return np.right_shift(lhs.view(signed), rhs.view(signed)).view(bits.dtype)

        return run

    def run(lhs, rhs):
        shifted = np.right_shift(bits.sign_extended(lhs), bits.amount(rhs).astype(bits.signed))
        return bits.from_pattern(shifted.astype(bits.unsigned) & bits.unsigned.type((1 << bits.width) - 1))

    return run


@op("stablehlo.popcnt", elementwise=True)
def popcnt(info):
    """Bits set in the type's own width (XLA CPU counts the sign-extension bits
    of negative i2/i4 values too: popcnt(-8 : i4) is 5 there, 1 here and in the
    reference interpreter)."""
    bits = _Bits(info)
    return lambda x: np.bitwise_count(bits.pattern(x)).astype(bits.dtype)


@op("stablehlo.count_leading_zeros", elementwise=True)
def count_leading_zeros(info):
    bits = _Bits(info)

    def run(x):
        pattern = bits.pattern(x).astype(np.uint64)
        length = np.zeros(pattern.shape, np.int64)  # bit length, by binary search
        for step in (32, 16, 8, 4, 2, 1):
            if step < bits.width:
                high = pattern >> np.uint64(step)
                has_high = high != 0
                length += np.where(has_high, step, 0)
                pattern = np.where(has_high, high, pattern)
        length += pattern != 0
        return (bits.width - length).astype(bits.dtype)

    return run
