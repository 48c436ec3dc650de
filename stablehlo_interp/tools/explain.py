"""Explain how ``jax.jit`` lowers a function: its jaxpr, its StableHLO, and the run.

    si.explain(f, x)

prints three sections: the jaxpr JAX traced (for a Python function), the
StableHLO module it lowered to, and the run of that module on the arguments,
op by op with the values each op produced, grouped under the Python source
line each op came from. Given a module instead of a function (an .mlir file
on the command line), there is no jaxpr to show.
"""

from __future__ import annotations

from typing import Any, TextIO

import sys
from dataclasses import dataclass

from ..program import prepare
from ..judge.summary import summarize
from .trace import Trace, record_run


@dataclass
class Explanation:
    jaxpr: str | None
    stablehlo: str
    trace: Trace
    head: int = 2      # loop iterations shown before and after the folded ones
    tail: int = 1
    result_names: tuple = ()   # each result by its name (result['loss']), or by number where it has none

    def __str__(self) -> str:
        sections = []
        if self.jaxpr is not None:
            sections.append(("jaxpr", self.jaxpr))
        sections.append(("StableHLO", self.stablehlo.rstrip()))
        sections.append(("run: each op and its results, under the source line it came from",
                         self.trace.text(sources=True, head=self.head, tail=self.tail)))
        if self.trace.outputs is not None:
            names = self.result_names or tuple(f"result #{i}" for i in range(len(self.trace.outputs)))
            sections.append(("results", "\n".join(f"{name}: {summarize(value)}"
                                                  for name, value in zip(names, self.trace.outputs))))
        return "\n\n".join(f"== {title} ==\n{body}" for title, body in sections)

    def __repr__(self) -> str:
        return f"<Explanation: {len(self.trace)} ops run>"


def explain(target: Any, *args: Any, function: str | None = None, file: TextIO | None = None, head: int = 2,
            tail: int = 1, **kwargs: Any) -> Explanation:
    """Print (to ``file``, default stdout) and return the explanation of ``target`` on ``args``."""
    call = prepare(target, args, kwargs, function)
    jaxpr = str(call.traced.jaxpr) if call.traced is not None else None
    stablehlo = call.program.module.operation.get_asm(large_elements_limit=16)
    trace = record_run(call)
    entry = call.program.function(call.function)
    names = tuple(entry.result_name(index) for index in range(len(trace.outputs or ())))
    explanation = Explanation(jaxpr, stablehlo, trace, head, tail, names)
    print(explanation, file=file or sys.stdout)
    return explanation
