"""The ``check`` dialect of StableHLO's interpreter tests, and its custom-call
spellings (``stablehlo.custom_call @check.expect_eq`` ...). A failed check
raises :class:`CheckFailure`; ``stablehlo-interp test`` reports it.

- expect_eq / expect_eq_const / eq: equal values. NaN matches NaN and 0.0
  matches -0.0 (StableHLO's C++ checks compare floats with IEEE ``==``, where
  NaN never matches).
- expect_almost_eq / expect_almost_eq_const / almost_eq: as StableHLO's
  reference: equal, or both NaN, or finite with the same sign and
  ``|a - b| <= tolerance`` (default 1e-4); complex parts are compared separately.
- expect_close: ULP distance (:func:`~.numerics.ulp_difference`) within
  ``[min_ulp_difference, max_ulp_difference]`` (defaults 0 and 1); non-finite
  values must match exactly (any NaN matches any NaN).
- expect_serialized_eq (with interpreter.probe): ops/interpreter.py.
- The custom-call spellings of StableHLO's testdata are judged as
  ``stablehlo-translate --interpret`` judges them
  (stablehlo/tools/StablehloTranslateMain.cpp): ``@check.expect_close`` with ULP
  bounds [0, 3], ``@check.expect_almost_eq`` with tolerance 1e-3,
  ``@check.expect_eq`` exactly, and ``@check.eq`` exactly for integer and boolean
  types, else almost_eq with tolerance 1e-4; a declared ``tensor<i1>`` result is
  true. (stablehlo-translate ignores attributes on them; we take ``tolerance``,
  ``min_ulp_difference`` and ``max_ulp_difference`` if given.)
"""

from __future__ import annotations

import numpy as np

from ..errors import OpError
from ..engine.registry import custom_call, op
from ..ir.types import TensorType
from ..engine.numerics import ulp_difference

DEFAULT_TOLERANCE = 1e-4
# The bounds stablehlo-translate --interpret applies to the custom-call checks.
CUSTOM_CALL_MAX_ULP_DIFFERENCE = 3
CUSTOM_CALL_TOLERANCE = 1e-3


class CheckFailure(OpError):
    """A check op found values that differ from the expectation."""


def _display_name(info) -> str:
    if info.name == "stablehlo.custom_call":
        return f"stablehlo.custom_call @{info.attr('call_target_name')}"
    return info.name


def _first_mismatch(actual, expected, ok, detail=None) -> str:
    bad = np.argwhere(~np.asarray(ok))
    index = tuple(int(i) for i in bad[0])
    where = f" at index {list(index)}" if index else ""
    extra = f" ({detail(index)})" if detail else ""
    return (f"{len(bad)} of {np.size(ok)} elements differ; first{where}: "
            f"{np.asarray(actual)[index]!s} (actual) vs {np.asarray(expected)[index]!s} (expected){extra}")


def _equal(actual, expected) -> np.ndarray:
    actual, expected = np.asarray(actual), np.asarray(expected)
    same = actual == expected
    if actual.dtype.kind in "iub":
        return same
    return same | (np.isnan(actual) & np.isnan(expected))


def _almost_equal(actual, expected, tolerance) -> np.ndarray:
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.dtype.kind == "c":
        return (_almost_equal(actual.real, expected.real, tolerance)
                & _almost_equal(actual.imag, expected.imag, tolerance))
    a, b = actual.astype(np.float64), expected.astype(np.float64)
    equal = (a == b) | (np.isnan(a) & np.isnan(b))
    finite = np.isfinite(a) & np.isfinite(b)
    same_sign = np.signbit(a) == np.signbit(b)
    return equal | (finite & same_sign & (np.abs(a - b) <= tolerance))


def _checker(info, compare, describe="", detail=None):
    """The runner of a check: compare, raise CheckFailure on a mismatch.

    Load time: both sides must have the same element type and compatible shapes
    (the check ops are parsed as unregistered ops, which MLIR does not verify; a
    dynamic dimension, as in ``tensor<?x4xi64>``, is compared at run time). A
    custom call declaring a result gets ``true`` (a failure raises before).
    """
    actual_type, expected_type = info.operand_types[0], _expected_type(info)
    if not _compatible(actual_type, expected_type):
        raise info.error(f"compares {actual_type} with {expected_type}: the types must be equal")
    name = _display_name(info)
    passed = tuple(np.array(True) for _ in info.result_types)

    def run(actual, expected):
        if np.shape(actual) != np.shape(expected):
            raise CheckFailure(name, info.location, f"shape {np.shape(actual)} (actual) vs "
                                                    f"{np.shape(expected)} (expected)")
        ok = compare(actual, expected)
        if not np.all(ok):
            raise CheckFailure(name, info.location, describe + _first_mismatch(
                actual, expected, ok, detail and (lambda i: detail(actual, expected, i))))
        return passed

    return run


def _compatible(a: TensorType, b: TensorType) -> bool:
    return (a.element_type == b.element_type and a.rank == b.rank
            and all(x is None or y is None or x == y for x, y in zip(a.shape, b.shape)))


def _expected_type(info):
    if "value" in info.attributes and len(info.operand_types) == 1:
        return TensorType.like(info.attr("value"))
    if len(info.operand_types) != 2:
        raise info.error(f"expects 2 operands (actual, expected), got {len(info.operand_types)}")
    return info.operand_types[1]


def _with_constant(info, check):
    expected = info.attr("value")
    return lambda actual: check(actual, expected)


def _expect_eq(info):
    return _checker(info, _equal)


def _expect_almost_eq(info, default_tolerance=DEFAULT_TOLERANCE):
    tolerance = info.attributes.get("tolerance", default_tolerance)
    return _checker(info, lambda a, b: _almost_equal(a, b, tolerance), f"tolerance {tolerance}: ")


def _expect_close(info, default_max_ulp_difference=1):
    low = info.attributes.get("min_ulp_difference", 0)
    high = info.attributes.get("max_ulp_difference", default_max_ulp_difference)
    if not (info.operand_types[0].is_float or info.operand_types[0].is_complex):
        raise info.error(f"expects floating-point or complex operands, got {info.operand_types[0]}")

    def within(actual, expected):
        distance = ulp_difference(actual, expected)
        return (distance >= low) & (distance <= high)

    def distance(actual, expected, index):
        return f"{int(ulp_difference(np.asarray(actual)[index], np.asarray(expected)[index]))} ULP"

    return _checker(info, within, f"ULP difference outside [{low}, {high}]: ", distance)


op("check.expect_eq", variadic=True)(_expect_eq)
op("check.expect_almost_eq", variadic=True)(_expect_almost_eq)
op("check.expect_close", variadic=True)(_expect_close)


@op("check.expect_eq_const", "check.eq", variadic=True)
def expect_eq_const(info):
    return _with_constant(info, _expect_eq(info))


@op("check.expect_almost_eq_const", "check.almost_eq", variadic=True)
def expect_almost_eq_const(info):
    return _with_constant(info, _expect_almost_eq(info))


custom_call("check.expect_eq", variadic=True)(_expect_eq)


@custom_call("check.expect_almost_eq", variadic=True)
def custom_expect_almost_eq(info):
    return _expect_almost_eq(info, CUSTOM_CALL_TOLERANCE)


@custom_call("check.expect_close", variadic=True)
def custom_expect_close(info):
    return _expect_close(info, CUSTOM_CALL_MAX_ULP_DIFFERENCE)


@custom_call("check.eq", variadic=True)
def custom_check_eq(info):
    """StableHLO's testdata check: exact for integers and booleans, else almost_eq (1e-4)."""
    if info.operand_types[0].is_integer or info.operand_types[0].is_bool:
        return _expect_eq(info)
    return _expect_almost_eq(info, DEFAULT_TOLERANCE)
