"""Choosing ops: by name, by source line, or by a predicate.

A *selector* is one of:

* ``None``: every op;
* an op name, ``"stablehlo.log"``, or its short form ``"log"``;
* a source line, ``"model.py:12"`` (the file name may be a path suffix) or
  just the line number ``12``; it matches ops whose innermost Python frame
  (the line that produced them) is there;
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
        return _at_line(None, selector)
    if isinstance(selector, str):
        file, _, line = selector.rpartition(":")
        if file and line.isdigit():
            return _at_line(file, int(line))
        name = selector if "." in selector else f"stablehlo.{selector}"
        return lambda step: step.info.name == name
    if callable(selector):
        return selector
    raise TypeError(f"cannot select ops with {selector!r}: give an op name, 'file.py:LINE', "
                    f"a line number, a predicate or a list of these")


def _at_line(file: str | None, line: int):
    def at_line(step) -> bool:
        frame = step.info.location.frame
        if frame is None or frame.line != line:
            return False
        return file is None or frame.file == file or frame.file.endswith("/" + file.lstrip("/"))

    return at_line
