"""Parse support for the ``check`` dialect of StableHLO's interpreter tests.

jaxlib does not register that dialect, so its ops cannot be parsed in their
custom syntax. :func:`to_generic_form` rewrites each ``check.*`` op written in
custom syntax into the generic op syntax, which MLIR parses as an unregistered
op (the context allows unregistered dialects); ops/check.py implements the ops.

    check.expect_eq_const %0, dense<[1, 2]> : tensor<2xi32>
 -> "check.expect_eq_const"(%0) {value = dense<[1, 2]> : tensor<2xi32>} : (tensor<2xi32>) -> ()

The custom syntax of each op (StableHLO's CheckOps.td), ``[...]`` optional::

    check.expect_eq %a, %b [{attrs}] : type
    check.expect_almost_eq %a, %b [, tolerance = F [: f64]] [{attrs}] : type
    check.expect_eq_const %a, dense<...> : type [{attrs}]           (also check.eq)
    check.expect_almost_eq_const %a, dense<...> : type [, tolerance = F] [{attrs}]
                                                                    (also check.almost_eq)
    check.expect_close %a, %b, max_ulp_difference = N [, min_ulp_difference = M]
        : [{attrs}] type, type
    check.expect_serialized_eq %a, probe_id = "id" [, iter = N] [{attrs}] : type

An op may span several lines; the rewrite keeps it on its first line and leaves
the others empty, so line numbers (and the locations of later ops) are kept.

Ops already in generic syntax keep it, but their properties become attributes:
MLIR keeps the properties of an unregistered op (``<{...}>``, as StableHLO's
quantized testdata spells the checks) apart from its attributes, and the Python
bindings cannot read them::

    "check.expect_eq_const"(%0) <{value = dense<1> : tensor<i32>}> : (tensor<i32>) -> ()
 -> "check.expect_eq_const"(%0) {value = dense<1> : tensor<i32>} : (tensor<i32>) -> ()
"""

from __future__ import annotations

import re

from ..errors import ParseError

_CHECK_START = re.compile(r"^(\s*)check\.(\w+)(?=[\s%]|$)")
_GENERIC_CHECK_START = re.compile(r'^(\s*)"check\.(\w+)"(?=\()')
_SCALAR_TYPE = re.compile(r"^(?:[su]?i\d+|f\d+|bf16|index)$")
_CONST_CHECKS = {"expect_eq_const", "expect_almost_eq_const", "eq", "almost_eq"}
# Keyword arguments of the custom syntax: attribute name and type.
_KEYWORDS = {
    "tolerance": ("tolerance", "f64"),
    "max_ulp_difference": ("max_ulp_difference", "ui64"),
    "min_ulp_difference": ("min_ulp_difference", "ui64"),
    "probe_id": ("probe_id", None),
    "iter": ("iteration", "ui32"),
}
_PUNCTUATION = ",=:"


def to_generic_form(text: str) -> str:
    if "check." not in text:
        return text
    lines = text.split("\n")
    number = 0
    while number < len(lines):
        custom = _CHECK_START.match(lines[number])
        generic = None if custom else _GENERIC_CHECK_START.match(lines[number])
        match = custom or generic
        if not match:
            number += 1
            continue
        indent, name = match.groups()
        first = number
        statement, comment = _strip_comment(lines[number][match.end():])
        # The op continues while brackets are open or the line ends with a comma.
        while (_depth(statement) > 0 or statement.rstrip().endswith(",")) and number + 1 < len(lines):
            number += 1
            more, _ = _strip_comment(lines[number])
            statement += " " + more.strip()
            lines[number] = ""
        try:
            rewritten = (_rewrite(name, statement.strip()) if custom
                         else f'"check.{name}"' + _properties_as_attributes(statement.strip()))
        except ValueError as e:
            raise ParseError(f"line {first + 1}: cannot parse check.{name}: {e}") from None
        lines[first] = indent + rewritten + (f" {comment}" if comment else "")
        number += 1
    return "\n".join(lines)


def _properties_as_attributes(rest: str) -> str:
    """``(operands) <{props}> [{attrs}] : type`` -> ``(operands) {props, attrs} : type``."""
    tokens = _tokenize(rest)
    if len(tokens) < 2 or not tokens[0].startswith("(") or not tokens[1].startswith("<{"):
        return " ".join(tokens)
    operands, properties = tokens[0], tokens[1][2:-2].strip()
    del tokens[:2]
    attributes = [properties] if properties else []
    _take_attribute_dict(tokens, attributes)
    attribute_text = f" {{{', '.join(attributes)}}}" if attributes else ""
    return f"{operands}{attribute_text} {' '.join(tokens)}"


def _rewrite(name: str, rest: str) -> str:
    tokens = _tokenize(rest)
    operands = _take_operands(tokens)
    attributes: list[str] = []
    if name in _CONST_CHECKS:
        # The value is an elements attribute with its type: dense<...> : tensor<...>
        if len(tokens) < 3 or tokens[1] != ":":
            raise ValueError("expected ', dense<...> : tensor<...>' after the operand")
        value, value_type = tokens[0], tokens[2]
        del tokens[:3]
        attributes.append(f"value = {value} : {value_type}")
        types = [value_type]
        _take_keywords(tokens, attributes)
        _take_attribute_dict(tokens, attributes)
    elif name in ("expect_eq", "expect_almost_eq", "expect_close", "expect_serialized_eq"):
        _take_keywords(tokens, attributes)
        _take_attribute_dict(tokens, attributes)
        if not tokens:
            raise ValueError("missing ': type'")
        if tokens[0] != ":":
            raise ValueError(f"unexpected {' '.join(tokens)!r}")
        tokens.pop(0)
        _take_attribute_dict(tokens, attributes)
        types = [t for t in tokens if t != ","]
        tokens.clear()
        if len(types) == 1:
            types = types * len(operands)
    else:
        raise ValueError(f"unknown check op check.{name}")
    if tokens:
        raise ValueError(f"unexpected {' '.join(tokens)!r}")
    if len(types) != len(operands):
        raise ValueError(f"{len(operands)} operands but {len(types)} types")
    attribute_text = f" {{{', '.join(attributes)}}}" if attributes else ""
    return f'"check.{name}"({", ".join(operands)}){attribute_text} : ({", ".join(types)}) -> ()'


def _take_operands(tokens: list[str]) -> list[str]:
    operands = []
    while tokens and tokens[0].startswith("%"):
        operands.append(tokens.pop(0))
        if tokens and tokens[0] == ",":
            tokens.pop(0)
    if not operands:
        raise ValueError("expected an operand")
    return operands


def _take_keywords(tokens: list[str], attributes: list[str]) -> None:
    """``[,] key = value [: scalar type]`` pairs, as typed attributes."""
    while True:
        start = 1 if tokens and tokens[0] == "," else 0
        if len(tokens) < start + 3 or tokens[start] not in _KEYWORDS or tokens[start + 1] != "=":
            return
        name, attribute_type = _KEYWORDS[tokens[start]]
        value = tokens[start + 2]
        del tokens[:start + 3]
        if len(tokens) >= 2 and tokens[0] == ":" and _SCALAR_TYPE.match(tokens[1]):
            attribute_type = attribute_type or tokens[1]
            del tokens[:2]
        if attribute_type == "f64" and re.fullmatch(r"[-+]?\d+", value):
            value += ".0"  # MLIR wants a float literal for a float attribute
        attributes.append(f"{name} = {value} : {attribute_type}" if attribute_type else f"{name} = {value}")


def _take_attribute_dict(tokens: list[str], attributes: list[str]) -> None:
    if tokens and tokens[0].startswith("{"):
        inner = tokens.pop(0)[1:-1].strip()
        if inner:
            attributes.append(inner)


def _tokenize(text: str) -> list[str]:
    """Top-level tokens: bracketed groups and strings stay whole, ``, = :`` stand alone."""
    tokens: list[str] = []
    current = ""
    depth = 0
    quoted = False
    for ch in text:
        if quoted:
            current += ch
            quoted = ch != '"' or current.endswith('\\"')
            continue
        if ch == '"':
            quoted = True
        elif depth == 0 and (ch.isspace() or ch in _PUNCTUATION or ch == "{"):
            if current:
                tokens.append(current)
            current = ""
            if ch.isspace():
                continue
            if ch in _PUNCTUATION:
                tokens.append(ch)
                continue
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}" and not current.endswith("-"):  # not the '>' of '->'
            depth -= 1
        current += ch
    if depth or quoted:
        raise ValueError("unbalanced brackets or quotes")
    if current:
        tokens.append(current)
    return tokens


def _depth(text: str) -> int:
    depth, quoted = 0, False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "<([{":
            depth += 1
        elif not quoted and ch in ">)]}":
            depth -= 1
    return depth


def _strip_comment(line: str) -> tuple[str, str]:
    """Split a ``// comment`` (outside strings) off a line."""
    quoted = False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif not quoted and line.startswith("//", i):
            return line[:i], line[i:]
    return line, ""
