"""Runners of element-wise ops on 0-d values (registry.Implementation.scalar).

Samplers, ODE solvers and line searches run long loops of ops on 0-d tensors.
Their runners' ufuncs cost about 0.45 us on NumPy scalars where the scalars' own
operators (``a + b``, ``a < b``) cost 0.03, and ``np.where`` of three 0-d values
1.7. The unobserved run loop calls the runners built here instead of the ops'
own runners when every operand and the result of an op are 0-d tensors
(program/compiler.py); listeners see the ops' own runners at work.

Each runner gives what the op's own runner gives, bit for bit, on every value it
may get: NumPy scalars (what a ufunc returns for 0-d operands), 0-d arrays (the
run's arguments, constants) and, in a region an op runs on whole tensors
(RegionFrame.vectorized: a reduce's body), arrays of any shape. A NumPy
scalar's operator is the C operation the ufunc's loop performs on one element
(IEEE-754 arithmetic of the type, integers wrapping, f16 computed in f32 and
rounded once as NumPy's f16 loops do); an array's operator is the ufunc itself.
Only the element types where that holds get one: NumPy's own booleans,
integers of 8 to 64 bits, f16, f32, f64 (complex for the ops exact on each
part); bf16, the f8 types (ml_dtypes) and sub-byte integers keep their runners.

The scalar operators report overflow and division by zero through NumPy's
floating-point error setting, which a run turns off (run.py: numpy_warnings_off).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from ..engine.plan import OpInfo

_BOOL = frozenset({np.dtype(np.bool_)})
_INTEGERS = frozenset(map(np.dtype, (np.int8, np.int16, np.int32, np.int64,
                                     np.uint8, np.uint16, np.uint32, np.uint64)))
_FLOATS = frozenset(map(np.dtype, (np.float16, np.float32, np.float64)))
_COMPLEX = frozenset(map(np.dtype, (np.complex64, np.complex128)))
_REAL = _INTEGERS | _FLOATS


def scalar_operator(function: Callable, dtypes: frozenset = _BOOL | _REAL) -> Callable[[OpInfo], Callable | None]:
    """Builder of the 0-d runner ``function`` (an operator) for operands of ``dtypes``."""

    def build(info: OpInfo) -> Callable | None:
        return function if info.operand_types[0].dtype in dtypes else None

    return build


def commutative_operator(function: Callable, ufunc: np.ufunc,
                         dtypes: frozenset = _BOOL | _REAL) -> Callable[[OpInfo], Callable | None]:
    """Builder of the 0-d runner ``function`` (``+`` or ``*``, whose ufunc is ``ufunc``) for
    operands of ``dtypes``. Of two NaN operands, the ufunc returns the first (quieted);
    NumPy's scalar arithmetic, compiled as ``b + a`` (this NumPy: x86's ``addss`` keeps its
    first operand's NaN), may return the second. Which one each does is found once per
    float type, on two NaNs of different sign and payload: where the scalars' operator
    keeps the second, two NumPy scalars are given to it the other way round (an array
    operand goes to its ufunc in order)."""

    def build(info: OpInfo) -> Callable | None:
        dtype = info.operand_types[0].dtype
        if dtype not in dtypes:
            return None
        if dtype.kind not in "fc":
            return function
        first, second = _two_nans(dtype)
        expected = _bits(ufunc(np.array(first), np.array(second)))
        if _bits(function(first, second)) == expected:
            return function
        if _bits(function(second, first)) != expected:
            return None
        scalar_type = dtype.type

        def swapped(lhs, rhs):
            if type(lhs) is scalar_type and type(rhs) is scalar_type:
                return function(rhs, lhs)
            return function(lhs, rhs)

        return swapped

    return build


def _two_nans(dtype: np.dtype) -> tuple:
    """Two quiet NaNs of ``dtype`` with different signs and payloads (complex: in both parts)."""
    part = np.dtype(f"f{dtype.itemsize // 2}") if dtype.kind == "c" else dtype
    bits = np.dtype(f"u{part.itemsize}")
    quiet = np.array(np.nan, part).view(bits)
    first = (quiet | bits.type(1)).view(part)
    second = (quiet | bits.type(2) | bits.type(1 << (8 * part.itemsize - 1))).view(part)
    if dtype.kind == "c":
        return _complex_of(first, first, dtype), _complex_of(second, second, dtype)
    return first[()], second[()]


def _complex_of(real, imag, dtype: np.dtype):
    value = np.empty((), dtype)
    value.real, value.imag = real, imag
    return value[()]


def _bits(value) -> bytes:
    return np.asarray(value).tobytes()


# add/multiply of i1 are OR/AND for NumPy's booleans and their operators alike.
# Complex subtract is exact on each part, NaNs as the ufunc's; complex add keeps
# the ufunc (of two complex128 NaNs its parts do not keep the same operand's
# NaN as the scalars'), and so do complex multiply and divide (not one rounding).
ADD = commutative_operator(operator.add, np.add)
SUBTRACT = scalar_operator(operator.sub, _REAL | _COMPLEX)
MULTIPLY = commutative_operator(operator.mul, np.multiply)
NEGATE = scalar_operator(operator.neg, _REAL | _COMPLEX)
DIVIDE = scalar_operator(operator.truediv, _FLOATS)   # (integer division has its own rules)
AND = scalar_operator(operator.and_, _BOOL | _INTEGERS)
OR = scalar_operator(operator.or_, _BOOL | _INTEGERS)
XOR = scalar_operator(operator.xor, _BOOL | _INTEGERS)
NOT = scalar_operator(operator.invert, _BOOL | _INTEGERS)
# NumPy's scalar shifts are its shift ufuncs' loops (npy_lshift, npy_rshift): an amount
# of at least the width, a negative one included, gives 0 (or the sign bits). Right
# shifts are logical for unsigned types and arithmetic for signed ones, as the ufunc.
SHIFT_LEFT = scalar_operator(operator.lshift, _INTEGERS)
SHIFT_RIGHT = scalar_operator(operator.rshift, _INTEGERS)

_COMPARISONS = {"EQ": operator.eq, "NE": operator.ne, "GE": operator.ge, "GT": operator.gt,
                "LE": operator.le, "LT": operator.lt}


def compare(info: OpInfo) -> Callable | None:
    """compare's 0-d runner: the operator of its direction (FLOAT, SIGNED and UNSIGNED
    compare types: the element type decides, as for the ufuncs; TOTALORDER and
    complex order keep their runners)."""
    if info.attributes.get("compare_type") == "TOTALORDER":
        return None
    direction = info.attr("comparison_direction")
    dtypes = _BOOL | _REAL | (_COMPLEX if direction in ("EQ", "NE") else frozenset())
    return scalar_operator(_COMPARISONS[direction], dtypes)(info)


def select(info: OpInfo) -> Callable:
    """select's 0-d runner: the operand the predicate picks, itself (np.where copies
    it into a new 0-d array); any other predicate (a 0-d array, a vectorized region's
    array) goes to np.where, as the op's runner."""

    def run(pred, on_true, on_false):
        if type(pred) is np.bool_:
            return on_true if pred else on_false
        return np.where(pred, on_true, on_false)

    return run


def extremum(build_runner: Callable[[OpInfo], Callable], prefer: Callable) -> Callable[[OpInfo], Callable | None]:
    """Builder of maximum's or minimum's 0-d runner, given the builder of the op's own
    runner and the operator ``prefer`` (``>`` for maximum): ``a`` if ``prefer(a, b)``,
    ``b`` if ``prefer(b, a)``; equal values (-0.0 and +0.0 among them), a NaN and
    whatever is not a NumPy scalar go to the op's runner, which decides them."""

    def build(info: OpInfo) -> Callable | None:
        dtype = info.operand_types[0].dtype
        if dtype not in _REAL:
            return None
        scalar_type, runner = dtype.type, build_runner(info)

        def run(lhs, rhs):
            if type(lhs) is scalar_type and type(rhs) is scalar_type:
                if prefer(lhs, rhs):
                    return lhs
                if prefer(rhs, lhs):
                    return rhs
            return runner(lhs, rhs)

        return run

    return build


def convert(info: OpInfo, runner: Callable) -> Callable | None:
    """convert's 0-d runner, given the op's own ``runner``, where the scalar type's
    constructor converts exactly as ``astype`` and cannot overflow (a constructor
    warns of an overflow whatever the error setting says): integers to integers
    (wrapping), to f32 and f64; booleans to anything; floats to wider floats;
    anything real to i1 (``x != 0``); to its own type, the operand itself. Values that
    are not NumPy scalars of the operand's type go to ``runner``."""
    source, target = info.operand_types[0].dtype, info.result_type.dtype
    if source == target:
        return _same   # (JAX converts f64 to f64 and the like)
    if source not in _BOOL | _REAL or target not in _BOOL | _REAL:
        return None
    source_type = source.type
    if target in _BOOL:
        zero = source_type(0)

        def nonzero(x):
            return x != zero if type(x) is source_type else runner(x)

        return nonzero
    if not (source in _BOOL or (source in _INTEGERS and (target in _INTEGERS or target.itemsize >= 4))
            or (source in _FLOATS and target in _FLOATS and target.itemsize > source.itemsize)):
        return None
    target_type = target.type

    def constructed(x):
        return target_type(x) if type(x) is source_type else runner(x)

    return constructed


def _same(x):
    """A conversion to the operand's own type: the operand (runners never change one)."""
    return x
