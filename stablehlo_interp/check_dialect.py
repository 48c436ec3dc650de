"""Parse support for the ``check`` dialect of StableHLO's interpreter tests.

jaxlib does not register that dialect, so its ops cannot be parsed in their
custom syntax. :func:`to_generic_form` rewrites each ``check.*`` line into the
generic op syntax, which MLIR parses as an unregistered op (the context allows
unregistered dialects); ops/check.py implements the ops themselves.

    check.expect_eq_const %0, dense<[1, 2]> : tensor<2xi32>
 -> "check.expect_eq_const"(%0) {value = dense<[1, 2]> : tensor<2xi32>} : (tensor<2xi32>) -> ()
"""

from __future__ import annotations

import re

from .errors import ModuleError

_CHECK_LINE = re.compile(r"^(\s*)check\.(\w+)\s+(.*?)\s*(//.*)?$")
_OPERAND = re.compile(r"%[\w.$#-]+")
_CONST_CHECKS = {"expect_eq_const", "expect_almost_eq_const", "eq", "almost_eq"}
_PAIR_CHECKS = {"expect_eq", "expect_almost_eq"}


def to_generic_form(text: str) -> str:
    if "check." not in text:
        return text
    lines = text.split("\n")
    for number, line in enumerate(lines):
        match = _CHECK_LINE.match(line)
        if match:
            indent, name, rest, comment = match.groups()
            try:
                lines[number] = indent + _rewrite(name, rest) + (f" {comment}" if comment else "")
            except ValueError as e:
                raise ModuleError(f"line {number + 1}: cannot parse check.{name}: {e}") from None
    return "\n".join(lines)


def _rewrite(name: str, rest: str) -> str:
    operands, rest = _leading_operands(rest)
    if name in _CONST_CHECKS:
        pieces = split_top_level(rest, ",")
        value = pieces[0]
        value_type = _after_last_colon(value)
        attrs = {"value": value}
        attrs.update(_keyword_attrs(pieces[1:], {"tolerance": "f64"}))
        return _generic(name, operands, attrs, [value_type])
    if name in _PAIR_CHECKS or name == "expect_serialized_eq":
        head, value_type = _split_type(rest)
        kinds = {"tolerance": "f64", "probe_id": None, "iter": "ui32"}
        attrs = _keyword_attrs(split_top_level(head, ",") if head else [], kinds)
        if "iter" in attrs:
            attrs["iteration"] = attrs.pop("iter")
        return _generic(name, operands, attrs, [value_type] * len(operands))
    if name == "expect_close":
        head, types = _split_type(rest)
        head = head.split("{")[0]
        attrs = _keyword_attrs(split_top_level(head, ","),
                               {"max_ulp_difference": "ui64", "min_ulp_difference": "ui64"})
        type_list = split_top_level(types, ",")
        return _generic(name, operands, attrs, type_list)
    raise ValueError(f"unknown check op check.{name}")


def _leading_operands(rest: str):
    operands = []
    rest = rest.strip()
    while True:
        match = _OPERAND.match(rest)
        if not match:
            break
        operands.append(match.group(0))
        rest = rest[match.end():].lstrip()
        if not rest.startswith(","):
            break
        rest = rest[1:].lstrip()
        if not rest.startswith("%"):
            break
    return operands, rest


def _split_type(rest: str):
    """Split ``<head> : <type>`` at the last top-level colon followed by a type."""
    depth = 0
    split = None
    for i, ch in enumerate(rest):
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == ":" and depth == 0 and rest[i + 1:].lstrip().startswith(("tensor", "!", "{")):
            split = i
    if split is None:
        raise ValueError("missing ': type'")
    return rest[:split].strip().rstrip(",").strip(), rest[split + 1:].strip()


def _after_last_colon(value: str) -> str:
    return _split_type(value)[1]


def _keyword_attrs(pieces, kinds) -> dict:
    attrs = {}
    for piece in pieces:
        piece = piece.strip()
        if not piece:
            continue
        key, _, value = piece.partition("=")
        key, value = key.strip(), value.strip()
        if key not in kinds:
            raise ValueError(f"unexpected {piece!r}")
        value = value.split(":")[0].strip() if kinds[key] else value
        attrs[key] = f"{value} : {kinds[key]}" if kinds[key] else value
    return attrs


def _generic(name: str, operands, attrs: dict, types) -> str:
    attr_text = ", ".join(f"{k} = {v}" for k, v in attrs.items())
    attr_text = f" {{{attr_text}}}" if attr_text else ""
    return f'"check.{name}"({", ".join(operands)}){attr_text} : ({", ".join(types)}) -> ()'


def split_top_level(text: str, separator: str) -> list[str]:
    """Split on a separator outside brackets and quotes."""
    pieces, depth, start, quoted = [], 0, 0, False
    for i, ch in enumerate(text):
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == separator and depth == 0:
            pieces.append(text[start:i].strip())
            start = i + 1
    pieces.append(text[start:].strip())
    return pieces
