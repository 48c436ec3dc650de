"""The one rewrite of a module before it is compiled: the borders of manual code
in modules lowered without Shardy learn their operand's sharding.

JAX lowers a ``shard_map`` without Shardy to a ``Sharding`` custom call (the
global operand's ``mhlo.sharding``) followed by ``SPMDFullToShardShape`` (the
process's tile of it). An op's builder sees only its own attributes, so the
sharding is copied onto the second op (ops/sdy.py reads it there).
"""

from __future__ import annotations

from jaxlib.mlir import ir

from ..ir.decode import decode_attribute
from ..ir.sources import MANUAL_BORDER_TARGET, copy_module

# The HLO sharding of the operand of each SPMDFullToShardShape custom call, copied
# there from the Sharding custom call before it.
OPERAND_SHARDING = "stablehlo_interp.operand_sharding"


def annotate_manual_borders(module: ir.Module, owned: bool) -> ir.Module:
    """Give every ``SPMDFullToShardShape`` custom call the ``mhlo.sharding`` of the
    ``Sharding`` custom call that produces its operand (JAX always emits the pair),
    as attribute :data:`OPERAND_SHARDING`.

    Returns the annotated module: a copy, when the caller handed us its module
    (``owned`` false) and there is something to annotate."""
    borders = _manual_borders(module)
    if not borders:
        return module
    if not owned:
        module = copy_module(module)
        borders = _manual_borders(module)
    for operation, operand_sharding in borders:
        operation.attributes[OPERAND_SHARDING] = operand_sharding
    return module


def _manual_borders(module: ir.Module) -> list:
    """``(SPMDFullToShardShape op, mhlo.sharding of its Sharding operand)`` pairs."""
    borders = []

    def visit(operation):
        if operation.name == "stablehlo.custom_call" and _target(operation) == MANUAL_BORDER_TARGET:
            producer = operation.operands[0].owner if len(operation.operands) else None
            if isinstance(producer, ir.OpView):
                producer = producer.operation
            if (isinstance(producer, ir.Operation) and _target(producer) == "Sharding"
                    and "mhlo.sharding" in producer.attributes):
                borders.append((operation, producer.attributes["mhlo.sharding"]))
        return ir.WalkResult.ADVANCE

    with module.context:
        module.operation.walk(visit)
    return borders


def _target(operation) -> str | None:
    attributes = operation.attributes
    return decode_attribute(attributes["call_target_name"]) if "call_target_name" in attributes else None
