"""A listener that checks every op's results against the types the module declares.

The test suite runs with it, so an op implementation that returns the wrong
shape or element type fails loudly instead of giving a silently wrong number.
"""

from __future__ import annotations

import numpy as np

from ..engine.run import Listener
from ..errors import OpError
from ..ir.types import Token, TensorType, TokenType, TupleType


class ResultTypeChecker(Listener):
    def after_op(self, step, operands, results, stack):
        declared = step.info.result_types
        if len(results) != len(declared):
            raise OpError(step.info.name, step.info.location,
                          f"implementation returned {len(results)} results, the op declares {len(declared)}")
        vectorized = any(frame.vectorized for frame in stack)
        for index, (value, expected) in enumerate(zip(results, declared)):
            if vectorized and isinstance(expected, TensorType):
                # Whole tensors stand for the declared 0-d values: check the element type only.
                problem = None if np.asarray(value).dtype == expected.dtype else \
                    f"expected element type {expected.element_type}, got dtype {np.asarray(value).dtype}"
            else:
                problem = type_mismatch(value, expected)
            if problem:
                raise OpError(step.info.name, step.info.location, f"result #{index}: {problem}")
        return None


def type_mismatch(value, expected) -> str | None:
    """Why ``value`` does not have type ``expected`` (None if it does)."""
    if isinstance(expected, TokenType):
        return None if isinstance(value, Token) else f"expected a token, got {type(value).__name__}"
    if isinstance(expected, TupleType):
        if not isinstance(value, tuple) or len(value) != len(expected.elements):
            return f"expected {expected}, got {type(value).__name__}"
        for v, t in zip(value, expected.elements):
            problem = type_mismatch(v, t)
            if problem:
                return problem
        return None
    assert isinstance(expected, TensorType)
    if not isinstance(value, (np.ndarray, np.generic)):
        return f"expected {expected}, got {type(value).__name__}"
    if not expected.matches(value):
        return f"expected {expected}, got shape {value.shape} dtype {value.dtype}"
    return None
