"""The child process of shardy.py: parses each module it is sent, runs Shardy's
propagation pipeline on it and replies with the shardings found, as JSON (see
:func:`stablehlo_interp.sharding.shardy.propagate`). CHLO ops (``chlo.square`` of a variance,
``chlo.top_k`` ...) get a sharding rule first: Shardy has none for CHLO, and propagation
stopped at them (a variance's result left unsharded where XLA splits it)."""

from __future__ import annotations

import json

from jaxlib.mlir import ir, passmanager

from ..errors import ModuleError
from ..ir.declarations import function_operations
from ..ir.child_process import serve
from ..ir.edit import chlo_sharding_rule, inline_every_call
from .shardy import PIPELINE, SHARDING_ATTRIBUTES
from ..ir.sources import captured_diagnostics, parse_bytes, shared_context

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
        calls = any(operation.name == "func.call" for operation in tagged)
        _give_chlo_rules(tagged)
        _run_pipeline(module, diagnostics)
        found = {}   # tag -> the op's sharding attributes (the last op carrying it)

        def visit(operation):
            attributes = operation.attributes
            if TAG in attributes:
                found[ir.IntegerAttr(attributes[TAG]).value] = _sharding_texts(attributes, SHARDING_ATTRIBUTES)
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)

        def ops(tree):
            return [[found.get(index, {}), [ops(region) for region in regions]] for index, regions in tree]

        answer = {name: {**_borders(func_op), "ops": ops(trees.get(name, []))}
                  for name, func_op in function_operations(module).items()}
        open_borders = any(None in answer[name]["arguments"] + answer[name]["results"]
                           for name, func_op in function_operations(module).items() if _public(func_op))
        if calls and open_borders:   # else no second propagation: nothing it could set
            for name, borders in _borders_through_calls(data, diagnostics).items():
                answer[name].update(borders)
    return answer


def _public(func_op) -> bool:
    return ("sym_visibility" not in func_op.attributes
            or ir.StringAttr(func_op.attributes["sym_visibility"]).value != "private")


def _borders(func_op) -> dict:
    """A function's argument and result shardings."""
    function_type = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)
    return {"arguments": _argument_shardings(func_op, "arg_attrs", len(function_type.inputs)),
            "results": _argument_shardings(func_op, "res_attrs", len(function_type.results))}


def _give_chlo_rules(operations: list) -> None:
    """Give each CHLO op a sharding rule: Shardy has none for CHLO's ops."""
    for operation in operations:
        if operation.name.startswith("chlo.") and "sdy.sharding_rule" not in operation.attributes:
            rule = chlo_sharding_rule(operation)
            if rule is not None:
                operation.attributes["sdy.sharding_rule"] = rule


def _run_pipeline(module, diagnostics) -> None:
    try:
        passmanager.PassManager.parse(PIPELINE).run(module.operation)
    except ir.MLIRError:
        raise ModuleError(f"Shardy's sharding propagation rejects the module:\n{diagnostics.text()}") from None


def _borders_through_calls(data: bytes, diagnostics) -> dict:
    """The public functions' argument and result shardings as propagation gives them
    through the bodies of the functions they call, inlined in place of the calls (as the
    partitioner's child and XLA see them): propagation stops at a call, and left a loop's
    gradient replicated (``vmap`` of a ``fori_loop``, ``closed_call``) where XLA splits
    it. The ops' own shardings stay the ones on the functions as written: the interpreter
    runs a called function once for all its calls."""
    module = parse_bytes(data, shared_context(len(data)))
    with module.context:
        inline_every_call(module)
        operations: list = []

        def collect(operation):
            operations.append(operation)
            return ir.WalkResult.ADVANCE

        module.operation.walk(collect)
        _give_chlo_rules(operations)
        _run_pipeline(module, diagnostics)
        return {name: _borders(func_op) for name, func_op in function_operations(module).items() if _public(func_op)}


if __name__ == "__main__":
    serve(lambda request: json.dumps(propagate(request)).encode("utf-8"), reported=(ModuleError,))
