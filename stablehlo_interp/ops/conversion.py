"""Type conversions (spec: convert, bitcast_convert, reduce_precision)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..engine.registry import op
from ..ir.types import bit_width
from ..engine.dtypes import NATIVE_FLOATS, contiguous, integer_compute_dtype
from . import scalars


@op("stablehlo.convert", elementwise=True, scalar=lambda info: scalars.convert(info, convert(info)))
def convert(info):
    """Element type conversion.

    The spec leaves inexact cases to the implementation (#180); we do what XLA
    does: float -> integer truncates toward zero and saturates, NaN -> 0;
    integers wrap; floats round to nearest even. As the spec says, complex ->
    anything else keeps the real part (complex -> i1 too: real != 0), and
    anything -> i1 is ``x != 0``. Denormals are kept (XLA CPU flushes them:
    it converts f32 1e-45 to i1 false and to f64 0.0).
    """
    source, target = info.operand_types[0], info.result_type
    dtype = target.dtype
    read = _exact_reader(source, target)
    if target.kind == "bool":
        return lambda x: np.asarray(np.not_equal(read(x), 0))   # (an array, also for a 0-d operand)
    if source.kind in ("float", "complex") and target.kind in ("signed", "unsigned"):
        def out_of_range(x, result):
            too_low, too_high, nan = _outside(read(x), dtype)
            count = np.count_nonzero(too_low | too_high | nan)
            return (f"{count} of {np.size(x)} values are NaN or outside {target.element_type}: "
                    f"{np.count_nonzero(too_low)} below, {np.count_nonzero(too_high)} above, "
                    f"{np.count_nonzero(nan)} NaN" if count else None)

        info.watch("float-to-integer-out-of-range", out_of_range)
        return lambda x: _float_to_integer(read(x), dtype)
    if read is _identity:
        return lambda x: x.astype(dtype)
    return lambda x: read(x).astype(dtype)


def _identity(x):
    return x


def _exact_reader(ttype, target):
    """A function giving the values of ``ttype`` in a dtype NumPy converts from
    freely and exactly to ``target``: int8/uint8 for sub-byte integers, f32 for
    bf16 and the f8/f6/f4 types (ml_dtypes lacks some casts between its own
    types), the real part of complex values when the target is not complex."""
    dtype = ttype.dtype
    if ttype.kind == "complex" and target.kind != "complex":
        return np.real
    if ttype.kind in ("signed", "unsigned") and integer_compute_dtype(dtype) != dtype:
        compute = integer_compute_dtype(dtype)
        return lambda x: np.asarray(x).astype(compute)
    if ttype.kind == "float" and dtype not in NATIVE_FLOATS:
        return lambda x: np.asarray(x).astype(np.float32)
    return _identity


def _outside(x, dtype):
    """Masks of the float values whose truncation lies below or above the integer
    ``dtype``, and of the NaNs."""
    info = ml_dtypes.iinfo(dtype)
    truncated = np.trunc(np.asarray(x, np.float64))
    return truncated < info.min, truncated >= float(info.max) + 1, np.isnan(truncated)  # (max + 1: a power of two)


def _float_to_integer(x, dtype):
    info = ml_dtypes.iinfo(dtype)
    truncated = np.trunc(np.asarray(x, np.float64))
    too_low, too_high, nan = _outside(x, dtype)
    in_range = ~(too_low | too_high | nan)
    exact = np.where(in_range, truncated, 0)
    wide_int = np.int64 if info.min < 0 else np.uint64
    result = exact.astype(wide_int)
    result = np.where(too_low, wide_int(info.min), result)
    result = np.where(too_high, wide_int(info.max), result)
    return result.astype(dtype)


# ------------------------------------------------------------- bitcast_convert


def _to_bits(x, dtype) -> np.ndarray:
    """Bit patterns of the elements, as uint64."""
    dtype = np.dtype(dtype)
    width = bit_width(dtype)
    x = contiguous(x)
    if width == dtype.itemsize * 8:
        return x.view(f"u{dtype.itemsize}").astype(np.uint64)
    return (x.view(np.uint8) & ((1 << width) - 1)).astype(np.uint64)


def _from_bits(bits, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    width = bit_width(dtype)
    if dtype == np.bool_:
        return bits != 0
    if width == dtype.itemsize * 8:
        return bits.astype(f"u{dtype.itemsize}").view(dtype)
    if dtype.kind != "V" or dtype in (np.dtype(ml_dtypes.uint2), np.dtype(ml_dtypes.uint4)):
        return bits.astype(np.uint8).astype(dtype)
    if dtype in (np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.int4)):
        signed = bits.astype(np.int16)
        signed = np.where(signed >= 1 << (width - 1), signed - (1 << width), signed)
        return signed.astype(dtype)
    return bits.astype(np.uint8).view(dtype)


@op("stablehlo.bitcast_convert")
def bitcast_convert(info):
    """Reinterpret bits. With different widths the last dimension of the wider
    side holds the narrower elements, least significant first (little-endian,
    as XLA on CPU). A complex number's bits are its real part's, then its
    imaginary part's (complex<f64> -> 2 x complex<f32> gives the real part's
    low and high words, then the imaginary part's)."""
    source, target = info.operand_types[0], info.result_type
    source_width, target_width = bit_width(source.dtype), bit_width(target.dtype)
    shape = target.shape

    if source_width == 8 * source.dtype.itemsize and target_width == 8 * target.dtype.itemsize:
        # Whole bytes on both sides: the little-endian memory layout is the rule.
        return lambda x: contiguous(x).reshape(-1).view(target.dtype).reshape(shape)

    def run(x):
        bits = _to_bits(x, source.dtype)
        if source_width > target_width:
            ratio = source_width // target_width
            shifts = np.arange(ratio, dtype=np.uint64) * np.uint64(target_width)
            mask = np.uint64((1 << target_width) - 1)
            bits = (bits[..., None] >> shifts) & mask
        elif source_width < target_width:
            shifts = np.arange(bits.shape[-1], dtype=np.uint64) * np.uint64(source_width)
            bits = np.bitwise_or.reduce(bits << shifts, axis=-1)
        return _from_bits(bits, target.dtype).reshape(shape)

    return run


# ------------------------------------------------------------ reduce_precision


@op("stablehlo.reduce_precision", elementwise=True)
def reduce_precision(info):
    """Round to a float format with ``exponent_bits`` and ``mantissa_bits``
    (round to nearest even), overflow to infinity, underflow to zero (no
    denormals in the reduced format). NaN stays NaN, except that a format
    without mantissa bits has no NaN: there NaN becomes +inf, as in the C++
    reference interpreter (XLA CPU keeps the NaN)."""
    dtype = info.operand_types[0].dtype
    exponent_bits = info.attr("exponent_bits")
    mantissa_bits = info.attr("mantissa_bits")
    finfo = ml_dtypes.finfo(dtype)
    total = bit_width(dtype)
    source_mantissa = int(finfo.nmant)
    source_exponent = total - source_mantissa - 1
    if total not in (16, 32, 64) or source_exponent + source_mantissa + 1 != total:
        raise info.unsupported(f"reduce_precision of {info.operand_types[0].element_type}")
    unsigned = np.dtype(f"u{dtype.itemsize}")
    one = unsigned.type(1)

    def run(x):
        x = np.asarray(x)
        bits = x.view(unsigned).copy()
        if mantissa_bits < source_mantissa:
            shift = unsigned.type(source_mantissa - mantissa_bits)
            last_bit_mask = one << shift
            base_bias = (last_bit_mask >> one) - one
            last_bit = (bits & last_bit_mask) >> shift
            bits = (bits + last_bit + base_bias) & ~(last_bit_mask - one)
        if exponent_bits < source_exponent:
            sign_mask = one << unsigned.type(total - 1)
            exponent_mask = unsigned.type((1 << source_exponent) - 1) << unsigned.type(source_mantissa)
            bias = (1 << (source_exponent - 1)) - 1
            reduced_bias = (1 << (exponent_bits - 1)) - 1
            max_exponent = unsigned.type(bias + reduced_bias) << unsigned.type(source_mantissa)
            min_exponent = unsigned.type(bias - reduced_bias) << unsigned.type(source_mantissa)
            exponent = bits & exponent_mask
            signed_zero = bits & sign_mask
            bits = np.where(exponent > max_exponent, signed_zero | exponent_mask,
                            np.where(exponent <= min_exponent, signed_zero, bits))
        result = np.asarray(bits, unsigned).view(dtype)
        return np.where(np.isnan(x), x if mantissa_bits > 0 else dtype.type(np.inf), result)

    return run
