"""JUnit XML reports for CI systems, shared by ``stablehlo-interp test`` and ``conform``.

One ``<testsuite>`` per file, one ``<testcase>`` per verdict. A case is passed,
failed (``<failure>``), an error (``<error>``: the thing under test could not run,
e.g. a backend that cannot compile the module) or skipped (``<skipped>``: cannot
parse, disabled); the message is the first line of the report, the text all of it.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass

PASSED, FAILURE, ERROR, SKIPPED = "passed", "failure", "error", "skipped"


@dataclass
class Case:
    suite: str        # the file
    name: str         # the test (function), or what the verdict is about
    status: str       # PASSED, FAILURE, ERROR or SKIPPED
    seconds: float = 0.0
    text: str = ""    # the report


def write(path, cases: list[Case], name: str = "stablehlo-interp") -> None:
    """Write ``cases`` to ``path`` as JUnit XML, suites in the order they first appear."""
    suites: dict[str, list[Case]] = {}
    for case in cases:
        suites.setdefault(case.suite, []).append(case)
    root = ElementTree.Element("testsuites", name=name, tests=str(len(cases)),
                               failures=str(sum(c.status == FAILURE for c in cases)),
                               errors=str(sum(c.status == ERROR for c in cases)),
                               skipped=str(sum(c.status == SKIPPED for c in cases)),
                               time=f"{sum(c.seconds for c in cases):.3f}")
    for suite, members in suites.items():
        element = ElementTree.SubElement(
            root, "testsuite", name=suite, tests=str(len(members)),
            failures=str(sum(c.status == FAILURE for c in members)),
            errors=str(sum(c.status == ERROR for c in members)),
            skipped=str(sum(c.status == SKIPPED for c in members)),
            time=f"{sum(c.seconds for c in members):.3f}")
        for case in members:
            testcase = ElementTree.SubElement(element, "testcase", classname=suite, name=case.name,
                                              time=f"{case.seconds:.3f}")
            if case.status != PASSED:
                detail = ElementTree.SubElement(testcase, case.status, message=case.text.split("\n")[0])
                detail.text = case.text
    tree = ElementTree.ElementTree(root)
    ElementTree.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
