"""The child process of chlo_legalization.py: parses each module it is sent, rewrites
its CHLO ops as StableHLO and replies with the module's text (see
:func:`stablehlo_interp.ir.chlo_legalization.legalize_chlo`)."""

from __future__ import annotations

from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import stablehlo

from ..errors import ModuleError
from .child_process import serve
from .chlo_legalization import PIPELINE
from .sources import captured_diagnostics, parse_bytes, shared_context


def legalized(data: bytes) -> str:
    module = parse_bytes(data, shared_context(len(data)))   # (a crash here ends only this process)
    with module.context, captured_diagnostics(module.context) as diagnostics:
        try:
            passmanager.PassManager.parse(PIPELINE).run(module.operation)
        except ir.MLIRError:
            raise ModuleError(f"cannot rewrite the CHLO ops as StableHLO:\n{diagnostics.text()}") from None
        return module.operation.get_asm(enable_debug_info=True)


if __name__ == "__main__":
    stablehlo.register_stablehlo_passes()
    serve(lambda request: legalized(request).encode("utf-8"), reported=(ModuleError,))
