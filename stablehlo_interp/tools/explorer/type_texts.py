"""How the explorer page writes types: ``f32[4,3]``, as the trace writes values, for
StableHLO's declared types and for XLA's shapes alike."""

from __future__ import annotations

import re
from typing import Any

_SHAPE = re.compile(r"^(?P<type>[a-z][a-z0-9]*)\[(?P<dims>[^\]]*)\]$")
_INTEGER = re.compile(r"^(?P<sign>[su])(?P<bits>\d+)$")


def type_text_of(declared: Any) -> str:
    """``tensor<4x3xf32>`` as ``f32[4,3]`` (as the trace writes values)."""
    shape = getattr(declared, "shape", None)
    if shape is None:
        return str(declared)
    return f"{declared.element_type}[{','.join('?' if d is None else str(d) for d in shape)}]"


def xla_type_text(shape: str) -> str:
    """XLA's shape text (layout left out) as the page writes StableHLO's types: ``s32[4]``
    as ``i32[4]``, ``u8[]`` as ``ui8[]``, ``pred[2]`` as ``i1[2]`` (a tuple as it is)."""
    match = _SHAPE.match(shape)
    if match is None:
        return shape
    element, integer = match["type"], _INTEGER.match(match["type"])
    if element == "pred":
        element = "i1"
    elif integer:
        element = ("ui" if integer["sign"] == "u" else "i") + integer["bits"]
    return f"{element}[{match['dims']}]"
