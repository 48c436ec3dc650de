"""CHLO ops rewritten as StableHLO ops, as ``stablehlo-opt --chlo-pre-serialization-pipeline`` does.

The interpreter evaluates CHLO ops directly (ops/chlo.py: SciPy's special
functions, rounded once). StableHLO's own test files instead run
``stablehlo-opt --chlo-pre-serialization-pipeline %s | stablehlo-translate --interpret``:
the reference interpreter sees CHLO's decomposition (a polynomial or series of
StableHLO ops, evaluated in the operand's type), and the files' expected values
and check tolerances were chosen to pass with it. The test-file frontend
(conformance/testfile.py) applies this rewrite where a file's RUN line asks for it.

The pipeline (stablehlo/transforms/PassPipelines.cpp,
``createChloPreSerializationPipeline``) is ``chlo-legalize-to-stablehlo``,
``shape-legalize-to-stablehlo`` and ``reconcile-unrealized-casts``; the last two
only matter for the shape dialect ops of dynamic CHLO broadcasts, and jaxlib
does not register the last one (its casts would be left for the loader to reject).

jaxlib's legalization crashes its process on ops its verifier lets through
(``chlo.broadcast_next_after`` of complex operands), so it runs in a child
process (:class:`~stablehlo_interp.ir.child_process.ChildProcess`, started at
the first request), which answers with the rewritten module as text, each op
keeping the location of the text it came from.
"""

from __future__ import annotations

from ..errors import ModuleError
from .child_process import ERROR, ChildDied, ChildProcess

PIPELINE = "builtin.module(func.func(chlo-legalize-to-stablehlo),func.func(shape-legalize-to-stablehlo))"

_CHILD = ChildProcess(f"{__package__}.chlo_legalization_child")


def legalize_chlo(text: str) -> str:
    """``text`` (a module that parses) with every CHLO op rewritten as the StableHLO ops
    of its decomposition, as text with locations; ``text`` itself when it has no CHLO op.
    A module the pipeline rejects, or that kills it, is a ModuleError."""
    if "chlo." not in text:
        return text
    try:
        status, answer = _CHILD.ask(text.encode("utf-8"))
    except ChildDied as death:
        raise ModuleError(f"CHLO's decomposition into StableHLO killed the child process that ran it ({death})") \
            from None
    if status == ERROR:
        raise ModuleError(answer.decode("utf-8"))
    return answer.decode("utf-8")
