"""Portability report: every place where a run depended on behaviour the spec
leaves to the implementation, or where XLA departs from the spec.

    report = si.portability(f, x)              # runs f as si.run does
    print(report)                              # one line per op and rule
    report.rules                               # the rule names met

Ops report such places through the run (``Execution.report``; the rules are in
engine/semantics.py and the table of docs/semantics.md); this tool is the
listener that collects them, once per op, rule and process, with how often
the op met the rule (an op in a loop body meets it every iteration).
"""

from __future__ import annotations

from typing import Any

from dataclasses import dataclass

from ..engine.run import Listener
from ..engine.semantics import Report
from ..program.calls import prepare
from .region_calls import op_heading


@dataclass
class Finding:
    """The first report of one rule at one op (in one process), and how many runs of
    the op met it."""

    report: Report
    times: int = 1

    def lines(self) -> list[str]:
        """``op at file:line (function): rule``, the JAX name, the source line, what
        happened, and the rule's two sides."""
        report, rule = self.report, self.report.rule
        process = getattr(report.stack, "process", None)
        title = f"{report.op}: {rule.name}" + (f" ({process})" if process and process.grid.size > 1 else "")
        lines = op_heading(title, report.location)
        if report.location.name:
            lines.insert(1, f"  jax: {report.location.name}")
        again = f" (and {self.times - 1} more time(s))" if self.times > 1 else ""
        return lines + [f"  {report.detail}{again}", f"  spec: {rule.spec}", f"  XLA:  {rule.xla}"]

    def __str__(self) -> str:
        return "\n".join(self.lines())


class PortabilityReport(Listener):
    """A listener that collects :class:`~stablehlo_interp.engine.semantics.Report` s
    by op, rule and process; ``findings`` in the order first met."""

    def __init__(self):
        self._findings: dict = {}
        self.outputs = None

    def on_report(self, report: Report) -> None:
        process = getattr(report.stack, "process", None)
        key = (report.op, report.location, report.rule.name, process and process.id)
        if key in self._findings:
            self._findings[key].times += 1
        else:
            self._findings[key] = Finding(report)

    @property
    def findings(self) -> list[Finding]:
        return list(self._findings.values())

    @property
    def rules(self) -> set[str]:
        """The names of the rules the run met."""
        return {finding.report.rule.name for finding in self.findings}

    def __len__(self) -> int:
        return len(self._findings)

    def __str__(self) -> str:
        if not self._findings:
            return "portable: the run met no behaviour the spec leaves open or XLA does differently"
        lines = [f"{len(self._findings)} place(s) where the result depends on who runs the program:"]
        for finding in self.findings:
            lines += finding.lines()
        return "\n".join(lines)


def portability(target: Any, *args: Any, function: str | None = None, semantics: str | None = None,
                **kwargs: Any) -> PortabilityReport:
    """Run ``target`` on its arguments (as ``si.run`` does, with ``semantics``) and
    return the :class:`PortabilityReport` of the run; its ``outputs`` are what
    ``si.run`` would have returned."""
    call = prepare(target, args, kwargs, function)
    report = PortabilityReport()
    report.outputs = call.results(call.run([report], semantics=semantics))
    return report
