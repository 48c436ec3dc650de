"""Steps around the global-to-local pass for ``while`` loops: their regions as functions
while it runs (it converts a loop's operands and results but not its regions' arguments)."""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from .rewriting import move_block, walk

WHILE_TARGET = "stablehlo_interp.outlined_while"   # the stand-in for a while while its regions are functions


def _captures(operation) -> list:
    """``(op, operand index)`` of each use, in the regions of ``operation``, of a value
    defined outside them."""
    inside = set()

    def collect(inner):
        for region in inner.regions:
            for block in region.blocks:
                inside.update(block.arguments)
        inside.update(inner.results)
        return ir.WalkResult.ADVANCE

    operation.walk(collect)
    captured = []

    def check(inner):
        if inner != operation:
            captured.extend((inner, index) for index, value in enumerate(inner.operands) if value not in inside)
        return ir.WalkResult.ADVANCE

    operation.walk(check)
    return captured


def _sink_captured_constants(loop) -> bool:
    """Give each use in ``loop``'s regions of a constant defined outside them (XLA's
    compile path hoists constants) a copy of its own; whether no other capture is left."""
    captured = _captures(loop)
    for user, index in captured:
        value = user.operands[index]
        producer = value.owner if isinstance(value, ir.OpResult) else None
        producer = getattr(producer, "operation", producer)
        if producer is None or len(producer.operands) or len(producer.regions):
            return False
        user.operands[index] = producer.clone(ip=ir.InsertionPoint(user)).results[value.result_number]
    return True


def _move_block_into_function(block: ir.Block, module: ir.Module, name: str, argument_shardings: list,
                              result_shardings: list | None) -> None:
    """A private ``func.func @name`` whose body is ``block``'s ops (its ``stablehlo.return``
    a ``func.return``), its arguments and results sharded as given (None: left open)."""
    argument_types = [argument.type for argument in block.arguments]
    terminator = block.operations[len(block.operations) - 1]
    result_types = [value.type for value in terminator.operands]
    with ir.InsertionPoint(module.body), terminator.location:
        function = ir.Operation.create(
            "func.func", regions=1,
            attributes={"sym_name": ir.StringAttr.get(name), "sym_visibility": ir.StringAttr.get("private"),
                        "function_type": ir.TypeAttr.get(ir.FunctionType.get(argument_types, result_types))})
    _set_shardings(function, "arg_attrs", argument_shardings)
    if result_shardings is not None:
        _set_shardings(function, "res_attrs", result_shardings)
    move_block(block, function.regions[0], "func.return")


def _set_shardings(function, key: str, shardings: list) -> None:
    if any(sharding is not None for sharding in shardings):
        function.attributes[key] = ir.ArrayAttr.get([
            ir.DictAttr.get({} if sharding is None else {"sdy.sharding": sharding}) for sharding in shardings])


def outline_whiles(module: ir.Module) -> None:
    """``sdy-convert-global-to-local`` gives a while's operands and results their local types
    but not its regions' block arguments, and then fails. So each while (that captures no
    value from outside) becomes a stand-in custom call, and its condition and body private
    functions with the while's shardings, which the pass converts like any function;
    constants it captures are copied in first;
    :func:`inline_whiles` puts them back."""
    for number, loop in enumerate(walk(module, "stablehlo.while")):
        if not _sink_captured_constants(loop):
            continue
        count = len(loop.operands)
        shardings = ([sdy.TensorShardingAttr(s) for s in sdy.TensorShardingPerValueAttr(
            loop.attributes["sdy.sharding"]).shardings] if "sdy.sharding" in loop.attributes else [None] * count)
        names = (f"{WHILE_TARGET}_cond_{number}", f"{WHILE_TARGET}_body_{number}")
        _move_block_into_function(loop.regions[0].blocks[0], module, names[0], shardings, None)
        _move_block_into_function(loop.regions[1].blocks[0], module, names[1], shardings, shardings)
        attributes = {"call_target_name": ir.StringAttr.get(WHILE_TARGET),
                      "backend_config": ir.StringAttr.get(",".join(names))}
        if "sdy.sharding" in loop.attributes:
            attributes["sdy.sharding"] = loop.attributes["sdy.sharding"]
        with ir.InsertionPoint(loop), loop.location:
            stand_in = ir.Operation.create("stablehlo.custom_call", results=[r.type for r in loop.results],
                                           operands=list(loop.operands), attributes=attributes)
        for old, new in zip(loop.results, stand_in.results):
            old.replace_all_uses_with(new)
        loop.erase()


def inline_whiles(module: ir.Module) -> None:
    """Each stand-in of :func:`outline_whiles` a ``stablehlo.while`` again, with the
    (now local) types of its functions."""
    functions = {ir.StringAttr(op.attributes["sym_name"]).value: op
                 for op in module.body.operations if op.operation.name == "func.func"}
    stand_ins = [op for op in walk(module, "stablehlo.custom_call")
                 if ir.StringAttr(op.attributes["call_target_name"]).value == WHILE_TARGET]
    for stand_in in stand_ins:
        names = ir.StringAttr(stand_in.attributes["backend_config"]).value.split(",")
        with ir.InsertionPoint(stand_in), stand_in.location:
            loop = ir.Operation.create("stablehlo.while", results=[r.type for r in stand_in.results],
                                       operands=list(stand_in.operands), regions=2)
        for region, name in zip(loop.regions, names):
            function = functions[name].operation
            move_block(function.regions[0].blocks[0], region, "stablehlo.return")
            function.erase()
        for old, new in zip(stand_in.results, loop.results):
            old.replace_all_uses_with(new)
        stand_in.erase()
