"""The child process of shardy.py: parses each module it is sent, runs Shardy's
propagation pipeline on it and replies with the shardings found, as JSON (see
:func:`stablehlo_interp.ir.shardy.propagate`). CHLO ops (``chlo.square`` of a variance,
``chlo.top_k`` ...) get a sharding rule first: Shardy has none for CHLO, and propagation
stopped at them (a variance's result left unsharded where XLA splits it)."""

from __future__ import annotations

import json

from jaxlib.mlir import ir, passmanager

from ..errors import ModuleError
from .declarations import function_operations
from .child_process import serve
from .edit import chlo_sharding_rule
from .shardy import PIPELINE, SHARDING_ATTRIBUTES
from .sources import captured_diagnostics, parse_bytes, shared_context

TAG = "stablehlo_interp.op"


def _tag_blocks(region, ops: list) -> list:
    """Tag each op of ``region``'s block (all but its terminator) with its index in
    ``ops``, and its regions' ops after it; returns the tree of indices."""
    tree = []
    for operation in list(region.blocks[0].operations)[:-1]:
        operation = operation.operation
        index = len(ops)
        ops.append(operation)
        operation.attributes[TAG] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), index)
        tree.append((index, [_tag_blocks(inner, ops) for inner in operation.regions]))
    return tree


def _sharding_texts(attributes, names) -> dict:
    return {name: str(attributes[name]) for name in names if name in attributes}


def _argument_shardings(func_op, key: str, count: int) -> list:
    if key not in func_op.attributes:
        return [None] * count
    dictionaries = ir.ArrayAttr(func_op.attributes[key])
    return [str(d["sdy.sharding"]) if "sdy.sharding" in d else None for d in map(ir.DictAttr, dictionaries)]


def propagate(data: bytes) -> dict:
    module = parse_bytes(data, shared_context(len(data)))   # a fresh context would cost more than the pipeline
    with module.context, captured_diagnostics(module.context) as diagnostics:
        tagged: list[ir.Operation] = []   # every op of every function: the tags are unique in the module
        trees = {name: _tag_blocks(op.regions[0], tagged) if len(op.regions[0].blocks) else []
                 for name, op in function_operations(module).items()}
        for operation in tagged:
            if operation.name.startswith("chlo.") and "sdy.sharding_rule" not in operation.attributes:
                rule = chlo_sharding_rule(operation)   # Shardy has no rule for CHLO's ops
                if rule is not None:
                    operation.attributes["sdy.sharding_rule"] = rule
        try:
            passmanager.PassManager.parse(PIPELINE).run(module.operation)
        except ir.MLIRError:
            raise ModuleError(f"Shardy's sharding propagation rejects the module:\n{diagnostics.text()}") from None
        found = {}   # tag -> the op's sharding attributes (the last op carrying it)

        def visit(operation):
            attributes = operation.attributes
            if TAG in attributes:
                found[ir.IntegerAttr(attributes[TAG]).value] = _sharding_texts(attributes, SHARDING_ATTRIBUTES)
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)

        def ops(tree):
            return [[found.get(index, {}), [ops(region) for region in regions]] for index, regions in tree]

        answer = {}
        for name, func_op in function_operations(module).items():
            function_type = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)
            answer[name] = {"arguments": _argument_shardings(func_op, "arg_attrs", len(function_type.inputs)),
                            "results": _argument_shardings(func_op, "res_attrs", len(function_type.results)),
                            "ops": ops(trees.get(name, []))}
    return answer


if __name__ == "__main__":
    serve(lambda request: json.dumps(propagate(request)).encode("utf-8"), reported=(ModuleError,))
