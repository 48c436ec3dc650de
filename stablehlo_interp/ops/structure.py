"""Tuples and tokens (spec: tuple, get_tuple_element, create_token, after_all)."""

from __future__ import annotations

from ..engine.registry import op
from ..ir.types import TOKEN


@op("stablehlo.tuple")
def tuple_(info):
    return lambda *values: tuple(values)


@op("stablehlo.get_tuple_element")
def get_tuple_element(info):
    index = info.attr("index")
    return lambda value: value[index]


@op("stablehlo.create_token", "stablehlo.after_all")
def token(info):
    """Tokens only order side effects, which the interpreter runs in program order."""
    return lambda *tokens: TOKEN
