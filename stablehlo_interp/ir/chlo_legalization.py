"""CHLO ops rewritten as StableHLO ops, as ``stablehlo-opt --chlo-pre-serialization-pipeline`` does.

The interpreter evaluates CHLO ops directly (ops/chlo.py: SciPy's special
functions, rounded once). StableHLO's own test files instead run
``stablehlo-opt --chlo-pre-serialization-pipeline %s | stablehlo-translate --interpret``:
the reference interpreter sees CHLO's decomposition (a polynomial or series of
StableHLO ops, evaluated in the operand's type), and the files' expected values
and check tolerances were chosen to pass with it. The test-file frontend
(frontends/testfile.py) applies this rewrite where a file's RUN line asks for it.

The pipeline (stablehlo/transforms/PassPipelines.cpp,
``createChloPreSerializationPipeline``) is ``chlo-legalize-to-stablehlo``,
``shape-legalize-to-stablehlo`` and ``reconcile-unrealized-casts``; the last two
only matter for the shape dialect ops of dynamic CHLO broadcasts, and jaxlib
does not register the last one (its casts would be left for the loader to reject).
"""

from __future__ import annotations

from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import stablehlo

from ..errors import ModuleError
from .sources import captured_diagnostics

_PIPELINE = "builtin.module(func.func(chlo-legalize-to-stablehlo),func.func(shape-legalize-to-stablehlo))"


def has_chlo_ops(module: ir.Module) -> bool:
    found = []

    def visit(operation):
        if operation.name.startswith("chlo."):
            found.append(operation.name)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return bool(found)


def legalize_chlo(module: ir.Module) -> None:
    """Rewrite every CHLO op of ``module`` (in place) as the StableHLO ops of its decomposition."""
    if not has_chlo_ops(module):
        return
    stablehlo.register_stablehlo_passes()
    with module.context, captured_diagnostics(module.context) as diagnostics:
        try:
            passmanager.PassManager.parse(_PIPELINE).run(module.operation)
        except ir.MLIRError:
            raise ModuleError(f"cannot rewrite the CHLO ops as StableHLO:\n{diagnostics.text()}") from None
