"""Choosing ops: by name, by source line, or by a predicate.

A *selector* is one of:

* ``None``: every op;
* an op name, ``"stablehlo.log"``, or its short form ``"log"``;
* a source line, ``"model.py:12"`` (the file name may be a path suffix) or
  just the line number ``12``; it matches ops whose innermost Python frame
  (the line that produced them) is there;
* a file name, ``"model.py"`` or a path suffix ``"optax/losses/_classification.py"``:
  the ops whose innermost Python frame is in that file (a dotted name is an op
  name or a file name, whichever matches: no op name is a file's);
* a callable ``predicate(step) -> bool`` (``step.info`` holds the name,
  attributes, types and location);
* a list or tuple of selectors: any of them.
"""

from __future__ import annotations


def matcher(selector):
    """A predicate ``step -> bool`` for ``selector``."""
    if selector is None:
        return lambda step: True
    if isinstance(selector, (list, tuple, set, frozenset)):
        predicates = [matcher(s) for s in selector]
        return lambda step: any(p(step) for p in predicates)
    if isinstance(selector, bool):
        raise TypeError("an op selector cannot be a bool")
    if isinstance(selector, int):
        return _located(None, selector)
    if isinstance(selector, str):
        file, _, line = selector.rpartition(":")
        if file and line.isdigit():
            return _located(file, int(line))
        if "/" in selector:
            return _located(selector, None)
        if "." not in selector:
            return lambda step: step.info.name == f"stablehlo.{selector}"
        in_file = _located(selector, None)
        return lambda step: step.info.name == selector or in_file(step)
    if callable(selector):
        return selector
    raise TypeError(f"cannot select ops with {selector!r}: give an op name, 'file.py:LINE', a file name, "
                    f"a line number, a predicate or a list of these")


def _located(file: str | None, line: int | None):
    """Ops whose innermost frame is at ``line`` (None: any) of ``file`` (None: any)."""
    def located(step) -> bool:
        frame = step.info.location.frame
        if frame is None or (line is not None and frame.line != line):
            return False
        return file is None or frame.file == file or frame.file.endswith("/" + file.lstrip("/"))

    return located


def describe(selector) -> str:
    """How ``matcher`` reads a selector, for a message about what it chose."""
    if selector is None:
        return "every op"
    if isinstance(selector, (list, tuple, set, frozenset)):
        return "any of: " + "; ".join(describe(s) for s in selector)
    if isinstance(selector, int):
        return f"the ops of line {selector}"
    if isinstance(selector, str):
        file, _, line = selector.rpartition(":")
        if file and line.isdigit():
            return f"the ops of line {line} of a file named {file!r}"
        if "/" in selector:
            return f"the ops of a file named {selector!r}"
        if "." not in selector:
            return f"the op name stablehlo.{selector}"
        return f"the op name {selector} or a file named {selector!r}"
    return f"the ops the predicate {getattr(selector, '__name__', selector)!r} chooses"
