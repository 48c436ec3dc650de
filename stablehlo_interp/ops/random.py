"""Random numbers (spec: rng, rng_bit_generator).

``rng_bit_generator`` reproduces XLA's CPU backend bit for bit: XLA expands the
op into the counter-based generators of ``xla/hlo/builder/lib/prng.cc``
(Threefry-2x32 with 20 rounds, Philox-4x32 with 10 rounds), and ``DEFAULT`` is
Philox on CPU. Here the same arithmetic runs on whole uint32/uint64 arrays.

``rng`` values are implementation-defined (spec: rng); see :func:`rng`.
"""

from __future__ import annotations

import math

import numpy as np

from ..engine.registry import op
from .conversion import _from_bits as bits_to_values

_U32 = np.uint32
_U64 = np.uint64
_MASK64 = (1 << 64) - 1


# ------------------------------------------------------------------ rng


# The k-th rng op of a module (ModuleInfo.next_rng_op) draws from its own generator
# seeded with (_RNG_SEED, k).
_RNG_SEED = 0x5EED


@op("stablehlo.rng")
def rng(info):
    """The spec leaves the numbers implementation-defined and allows hidden state.

    Each rng op owns a NumPy ``Generator`` (PCG64) seeded when the module is
    loaded: the k-th rng op of a program is seeded with ``(0x5EED, k)``, so a
    loaded program gives the same sequence on every load, and successive runs of
    one loaded program continue the sequence. UNIFORM draws from ``[a, b)``
    (``a`` everywhere if ``a >= b``); NORMAL draws mean ``a``, deviation ``b``.
    """
    distribution = info.attr("rng_distribution")
    result = info.result_type
    dtype, kind = result.dtype, result.kind
    number = info.module.next_rng_op() if info.module is not None else 0
    generator = np.random.default_rng((_RNG_SEED, number))
    static_shape = result.shape if result.is_static else None

    if distribution == "NORMAL":
        if kind != "float":
            raise info.unsupported(f"NORMAL needs a floating-point type, got {result.element_type}")

        def draw(a, b, shape):
            values = generator.normal(float(a), float(b), shape)
            return values.astype(dtype)
    elif kind == "float":

        def draw(a, b, shape):
            a, b = float(a), float(b)
            values = (a + (b - a) * generator.random(shape)).astype(dtype)
            # Rounding to a narrow type can land on b itself: keep [a, b).
            return np.where(values < dtype.type(b), values, dtype.type(a)).astype(dtype)
    elif kind in ("signed", "unsigned", "bool"):
        wide = np.uint64 if kind == "unsigned" else np.int64

        def draw(a, b, shape):
            low, high = int(a), int(b)
            if low >= high:
                return np.full(shape, a, dtype)
            return generator.integers(low, high, shape, dtype=wide).astype(dtype)
    else:
        raise info.unsupported(f"element type {result.element_type} is not allowed")

    def run(a, b, shape):
        return draw(np.asarray(a)[()], np.asarray(b)[()],
                    static_shape if static_shape is not None else tuple(int(n) for n in shape))

    return run


# ------------------------------------------------------- rng_bit_generator


def _rotate_left(value, distance: int):
    return (value << _U32(distance)) | (value >> _U32(32 - distance))


def threefry2x32(x0, x1, k0, k1):
    """Threefry-2x32 with 20 rounds (Salmon et al. 2011), as XLA's ThreeFry2x32."""
    keys = (k0, k1, k0 ^ k1 ^ _U32(0x1BD11BDA))
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0, x1 = x0 + k0, x1 + k1
    for group in range(5):
        for distance in rotations[group % 2]:
            x0 = x0 + x1
            x1 = x0 ^ _rotate_left(x1, distance)
        x0 = x0 + keys[(group + 1) % 3]
        x1 = x1 + keys[(group + 2) % 3] + _U32(group + 1)
    return x0, x1


def philox4x32(x, k0, k1):
    """Philox-4x32 with 10 rounds, as XLA's Philox4x32; ``x`` is four uint32 arrays."""
    x0, x1, x2, x3 = x
    for _ in range(10):
        p0 = x0.astype(_U64) * _U64(0xD2511F53)
        p1 = x2.astype(_U64) * _U64(0xCD9E8D57)
        x0, x1, x2, x3 = (_high(p1) ^ x1 ^ k0, _low(p1), _high(p0) ^ x3 ^ k1, _low(p0))
        k0, k1 = k0 + _U32(0x9E3779B9), k1 + _U32(0xBB67AE85)
    return x0, x1, x2, x3


def _low(u64):
    return u64.astype(_U32)


def _high(u64):
    return (u64 >> _U64(32)).astype(_U32)


def _join(low, high):
    return low.astype(_U64) | (high.astype(_U64) << _U64(32))


def _halves_layout(shape):
    """XLA's SplitShapeIntoHalves: the dim whose two halves the 2x32 outputs fill.

    The first even dim, else the first largest one; a scalar counts as [1].
    """
    if not shape:
        return None
    even = [i for i, size in enumerate(shape) if size % 2 == 0]
    return even[0] if even else int(np.argmax(shape))


def threefry_bits(key, counter, shape, bits: int):
    """XLA's ThreeFryBitGenerator: ``(bits, new_counter)`` (bits as uint32/uint64)."""
    k0, k1 = _U32(key & 0xFFFFFFFF), _U32(key >> 32)
    if bits == 64:
        count = math.prod(shape)
        inputs = _U64(counter) + np.arange(count, dtype=_U64)
        y0, y1 = threefry2x32(_low(inputs), _high(inputs), k0, k1)
        return _join(y0, y1).reshape(shape), counter + count
    # 32 bits and narrower: each 2x32 output pair fills both halves of one dim.
    split = _halves_layout(shape)
    half = (1,) if split is None else shape[:split] + ((shape[split] + 1) // 2, 1) + shape[split + 1:]
    count = math.prod(half)
    inputs = _U64(counter) + np.arange(count, dtype=_U64)
    y0, y1 = threefry2x32(_low(inputs), _high(inputs), k0, k1)
    if split is None:
        return y0.reshape(()), counter + count
    pairs = np.concatenate([y0.reshape(half), y1.reshape(half)], axis=split + 1)
    even = shape[:split] + (2 * half[split],) + shape[split + 1:]
    values = pairs.reshape(even)[tuple(slice(0, n) for n in shape)]
    return values, counter + count


def philox_bits(key, counter_low, counter_high, shape, bits: int):
    """XLA's PhiloxBitGenerator: ``(bits, new_counter_low, new_counter_high)``.

    The 128-bit counter advances by one per 128 output bits; the four 32-bit
    outputs of each block are interleaved.
    """
    count = math.prod(shape)
    words = count * 2 if bits == 64 else count
    blocks = -(-words // 4)
    low = _U64(counter_low) + np.arange(blocks, dtype=_U64)
    high = np.where(low < _U64(counter_low), _U64((counter_high + 1) & _MASK64), _U64(counter_high))
    x = philox4x32((_low(low), _high(low), _low(high), _high(high)),
                   _U32(key & 0xFFFFFFFF), _U32(key >> 32))
    if bits == 64:
        values = np.stack([_join(x[0], x[1]), _join(x[2], x[3])], axis=1).reshape(-1)
    else:
        values = np.stack(x, axis=1).reshape(-1)
    new_low = (counter_low + blocks) & _MASK64
    new_high = (counter_high + (new_low < counter_low)) & _MASK64
    return values[:count].reshape(shape), new_low, new_high


@op("stablehlo.rng_bit_generator", variadic=True)
def rng_bit_generator(info):
    """Bit-exact with XLA CPU. State ``[key, counter]`` for THREE_FRY; PHILOX
    takes ``[key, counter_low]`` (XLA then uses ``key`` as the counter's high
    word and keeps only the low word in the new state) or
    ``[key, counter_low, counter_high]``. Types narrower than 32 bits keep the
    low bits of 32-bit values; floating-point and signed outputs hold those
    bits (XLA CPU returns them as a buffer of the unsigned type).
    """
    algorithm = info.attr("rng_algorithm", "DEFAULT")
    algorithm = "PHILOX" if algorithm == "DEFAULT" else algorithm
    output_type = info.result_types[1]
    state_size = info.operand_types[0].shape[0]
    allowed = {"THREE_FRY": (2,), "PHILOX": (2, 3)}[algorithm]
    if state_size not in allowed:
        raise info.error(f"{algorithm} needs a state of {' or '.join(map(str, allowed))} ui64 values, "
                         f"got {state_size}")
    shape = tuple(output_type.shape)
    if None in shape:
        raise info.unsupported(f"dynamic output shape {output_type} needs shape refinement")
    width = output_type.bit_width
    bits = 64 if width == 64 else 32
    mask = (1 << width) - 1
    result_dtype = output_type.dtype

    def finish(values):
        return bits_to_values(values & values.dtype.type(mask), result_dtype)

    if algorithm == "THREE_FRY":

        def run(state):
            key, counter = (int(v) for v in state)
            values, counter = threefry_bits(key, counter, shape, bits)
            return np.array([key, counter & _MASK64], _U64), finish(values)
    else:

        def run(state):
            words = [int(v) for v in state]
            key = words[0]
            low, high = (words[1], words[0]) if state_size == 2 else (words[1], words[2])
            values, low, high = philox_bits(key, low, high, shape, bits)
            new_state = [key, low] if state_size == 2 else [key, low, high]
            return np.array(new_state, _U64), finish(values)

    return run
