"""The child process of partition.py: partitions each module it is sent with Shardy's
passes and replies with the per-device program (see
:mod:`~stablehlo_interp.ir.partition`)."""

from __future__ import annotations

from jax._src.lib import _jax
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import sdy

from .child_process import serve
from .edit import inline_every_call
from .sources import make_context

# What jaxlib's ``sdy-propagation-pipeline`` runs (Shardy's propagation_pipeline.cc), with its
# export pipeline asked to insert every collective (``enable-insert-explicit-collectives``, which
# that registered pipeline leaves off): reshards, then reshards as collectives, on global shapes.
PROPAGATE_AND_INSERT_COLLECTIVES = (
    "sdy-import-pipeline", "sdy-import-func-calls", "symbol-dce", "sdy-pre-order-funcs",
    "sdy-user-priority-propagate{keep-sharding-rules=true}", "sdy-export-named-computations",
    "sdy-export-pipeline{enable-insert-explicit-collectives=true}")
# Then each value's global type becomes its device's tile (Shardy's partitioner_pipeline.cc ends so).
GLOBAL_TO_LOCAL = ("sdy-convert-global-to-local", "sdy-drop-sharding-and-mesh")

WHILE_TARGET = "stablehlo_interp.outlined_while"   # the stand-in for a while while its regions are functions
SLICE_TARGET = "stablehlo_interp.dynamic_slice"    # the stand-in for a dynamic_slice whose sizes are global


def _run(module: ir.Module, passes: tuple) -> None:
    passmanager.PassManager.parse(f"builtin.module({','.join(passes)})").run(module.operation)


def _walk(module: ir.Module, name: str) -> list:
    """The ops called ``name``, inner ones before the ops holding them."""
    found = []

    def visit(operation):
        if operation.name == name:
            found.append(operation)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.POST_ORDER)
    return found


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
    _move_block(block, function.regions[0], "func.return")


def _move_block(block: ir.Block, region: ir.Region, terminator: str) -> None:
    """Move ``block``'s arguments and ops into a new block of ``region``, its terminator
    replaced by a ``terminator`` op returning the same values."""
    moved = region.blocks.append(*[argument.type for argument in block.arguments],
                                 arg_locs=[argument.location for argument in block.arguments])
    for old, new in zip(block.arguments, moved.arguments):
        old.replace_all_uses_with(new)
    for operation in list(block.operations):
        operation.detach_from_parent()
        ir.InsertionPoint(moved).insert(operation)
    returned = moved.operations[len(moved.operations) - 1]
    with ir.InsertionPoint(returned), returned.location:
        ir.Operation.create(terminator, operands=list(returned.operands))
    returned.erase()


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
    for number, loop in enumerate(_walk(module, "stablehlo.while")):
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
    stand_ins = [op for op in _walk(module, "stablehlo.custom_call")
                 if ir.StringAttr(op.attributes["call_target_name"]).value == WHILE_TARGET]
    for stand_in in stand_ins:
        names = ir.StringAttr(stand_in.attributes["backend_config"]).value.split(",")
        with ir.InsertionPoint(stand_in), stand_in.location:
            loop = ir.Operation.create("stablehlo.while", results=[r.type for r in stand_in.results],
                                       operands=list(stand_in.operands), regions=2)
        for region, name in zip(loop.regions, names):
            function = functions[name].operation
            _move_block(function.regions[0].blocks[0], region, "stablehlo.return")
            function.erase()
        for old, new in zip(stand_in.results, loop.results):
            old.replace_all_uses_with(new)
        stand_in.erase()


def stand_in_for_dynamic_slices(module: ir.Module) -> None:
    """The global-to-local pass gives a ``dynamic_slice`` its local operand and result but
    keeps its global ``slice_sizes``, and then fails. Where every dimension the result is
    sharded on is taken whole (a scan's step takes a whole row of its sharded input), the
    slice is a stand-in custom call whose result the pass converts, and
    :func:`restore_dynamic_slices` writes the local sizes back."""
    for operation in _walk(module, "stablehlo.dynamic_slice"):
        if "sdy.sharding" not in operation.attributes:
            continue
        sharding = sdy.TensorShardingPerValueAttr(operation.attributes["sdy.sharding"]).shardings[0]
        sizes = list(ir.DenseI64ArrayAttr(operation.attributes["slice_sizes"]))
        whole = ir.RankedTensorType(operation.operands[0].type).shape
        dimensions = sdy.TensorShardingAttr(sharding).dimension_shardings
        if any(len(sdy.DimensionShardingAttr(dimension).axes) and size != full
               for dimension, size, full in zip(dimensions, sizes, whole)):
            continue
        with ir.InsertionPoint(operation), operation.location:
            stand_in = ir.Operation.create(
                "stablehlo.custom_call", results=[operation.results[0].type], operands=list(operation.operands),
                attributes={"call_target_name": ir.StringAttr.get(SLICE_TARGET),
                            "sdy.sharding": operation.attributes["sdy.sharding"]})
        operation.results[0].replace_all_uses_with(stand_in.results[0])
        operation.erase()


def restore_dynamic_slices(module: ir.Module) -> None:
    """Each stand-in of :func:`stand_in_for_dynamic_slices` a ``dynamic_slice`` of its
    result's (local) shape."""
    for stand_in in _walk(module, "stablehlo.custom_call"):
        if ir.StringAttr(stand_in.attributes["call_target_name"]).value != SLICE_TARGET:
            continue
        result_type = stand_in.results[0].type
        with ir.InsertionPoint(stand_in), stand_in.location:
            operation = ir.Operation.create(
                "stablehlo.dynamic_slice", results=[result_type], operands=list(stand_in.operands),
                attributes={"slice_sizes": ir.DenseI64ArrayAttr.get(ir.RankedTensorType(result_type).shape)})
        stand_in.results[0].replace_all_uses_with(operation.results[0])
        stand_in.erase()


def _erase_unused_replicated_to_unreduced(module: ir.Module) -> None:
    """Shardy's export leaves an unused ``sdy.replicated_to_unreduced`` where a value is
    made unreduced and then reduced again; the global-to-local pass has no rule for it."""
    for operation in _walk(module, "sdy.replicated_to_unreduced"):
        if not list(operation.results[0].uses):
            operation.erase()


def partition(text: str) -> str:
    """The per-device program of the module ``text``, as StableHLO text that jaxlib's
    StableHLO-to-HLO converter accepts."""
    with make_context():
        module = ir.Module.parse(text)
        # The global-to-local pass leaves a call's results their global types (and MLIR's
        # inliner declines calls in StableHLO's regions); XLA inlines calls too.
        inline_every_call(module)
        _run(module, ("symbol-dce",) + PROPAGATE_AND_INSERT_COLLECTIVES)
        _erase_unused_replicated_to_unreduced(module)
        stand_in_for_dynamic_slices(module)
        outline_whiles(module)
        _run(module, GLOBAL_TO_LOCAL)
        inline_whiles(module)
        restore_dynamic_slices(module)
        module.operation.verify()
        local = module.operation.get_asm(enable_debug_info=True)
    _jax.mlir.mlir_module_to_xla_computation(local, use_tuple_args=False, return_tuple=False)
    return local


if __name__ == "__main__":
    serve(lambda request: partition(request.decode("utf-8")).encode("utf-8"),
          reported=(Exception,),   # a pass's or the converter's failure, of several types: reported to the parent
          describe=lambda error: str(error).strip() or type(error).__name__)
