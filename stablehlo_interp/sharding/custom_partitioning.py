"""``jax.experimental.custom_partitioning``: the op learns its shardings before the
module is compiled, and JAX's callbacks are asked for its per-device program.

``jax.experimental.custom_partitioning`` lowers to ``stablehlo.custom_call
@CustomSPMDPartitioning``, whose meaning is the per-device program the user's
``partition`` callback returns when XLA's SPMD partitioner asks it with the shardings
it chose for the op's operands and results (ops/sharding_calls.py). An op's
builder sees only its own attributes, so the shardings are written onto the op:

* :data:`OPERAND_SHARDINGS`: the sharding of each operand where it is made, a function
  argument's or the producing op's result's (fully replicated where propagation gives
  none, as for the arguments of a loop body);
* :data:`RESULT_SHARDINGS`: the op's own results'.

Both as the text of ``#sdy.sharding_per_value<[...]>``, meshes written out; and :data:`OPERAND_TYPES` and
:data:`RESULT_TYPES`, the global types, which the op keeps in the per-device program
Shardy's partitioner makes of the module (where its own types are each device's
shards). Shardy's propagation runs in a child process (sharding/shardy.py); a module
without meshes is left as it is.

:func:`ask_jax` then asks JAX's registered callbacks in-process, as XLA's SPMD partitioner
asks them: ``jax.experimental.custom_partitioning`` registers each lowered op's callbacks
in a table of ``jax._src.custom_partitioning`` keyed by the op's ``backend_config`` (kept
alive by the compiled executable). The ``interp`` device is Python in the same process,
so :func:`ask_jax` calls JAX's ``_custom_partitioning_partition`` itself, with the op's
shapes and the shardings Shardy's propagation gave it: the callback returns the
per-device program's bytecode and the shardings it wants the operands and result in,
which become tilings here and a loaded program in program/program.py
(``jax_partition_callback``).
"""

from __future__ import annotations

import re

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import sdy

from . import shardy
from ..ir.declarations import function_operations
from ..ir.decode import decode_attribute
from ..ir.sources import CUSTOM_PARTITIONING_TARGET as TARGET
from ..ir.sources import copy_module
from . import tiling as sharding

OPERAND_SHARDINGS = "stablehlo_interp.operand_shardings"
RESULT_SHARDINGS = "stablehlo_interp.result_shardings"
OPERAND_TYPES = "stablehlo_interp.operand_types"
RESULT_TYPES = "stablehlo_interp.result_types"


def annotate_custom_partitioning(module: ir.Module, owned: bool) -> ir.Module:
    """Give every ``CustomSPMDPartitioning`` custom call of a module with Shardy meshes
    the attributes :data:`OPERAND_SHARDINGS`, :data:`RESULT_SHARDINGS`,
    :data:`OPERAND_TYPES` and :data:`RESULT_TYPES`.

    Returns the annotated module: a copy, when the caller handed us its module
    (``owned`` false) and there is something to annotate."""
    with module.context:
        meshes = {decode_attribute(op.attributes["sym_name"]): str(op.attributes["mesh"]).removeprefix("#sdy.")
                  for op in (operation.operation for operation in module.body.operations) if op.name == "sdy.mesh"}
        if not meshes or not _targets(module):
            return module
        found = shardy.propagate(module)
        if not owned:
            module = copy_module(module)
        made = {}   # (the producing op, or the function for its arguments) -> sharding texts of its values
        for name, function in function_operations(module).items():
            made[function] = [text and _element(text) for text in found[name].arguments]
            if len(function.regions[0].blocks):
                _record(function.regions[0], found[name].ops, made)
        replicated_on = next(iter(meshes))
        for operation in _targets(module):
            operands = [_sharding_of(value, made) or _replicated(replicated_on, value.type)
                        for value in operation.operands]
            results = made.get(operation) or [None] * len(operation.results)
            results = [text or _replicated(replicated_on, value.type) for text, value in zip(results, operation.results)]
            operation.attributes[OPERAND_SHARDINGS] = ir.StringAttr.get(_per_value(operands, meshes))
            operation.attributes[RESULT_SHARDINGS] = ir.StringAttr.get(_per_value(results, meshes))
            operation.attributes[OPERAND_TYPES] = ir.ArrayAttr.get([ir.TypeAttr.get(v.type) for v in operation.operands])
            operation.attributes[RESULT_TYPES] = ir.ArrayAttr.get([ir.TypeAttr.get(v.type) for v in operation.results])
    return module


def _record(region, ops, made: dict) -> None:
    """The sharding text of each result of each op of ``region``'s block (Shardy's answer
    ``ops`` lists them in block order, the terminator left out) and of its regions' ops."""
    for operation, answer in zip(list(region.blocks[0].operations)[:-1], ops):
        operation = operation.operation
        text = answer.attributes.get("sdy.sharding")
        if text is not None and text.startswith("#sdy.sharding_per_value"):
            made[operation] = [_element(str(sharding)) for sharding in
                               sdy.TensorShardingPerValueAttr(ir.Attribute.parse(text)).shardings]
        for inner, inner_ops in zip(operation.regions, answer.regions):
            if len(inner.blocks):
                _record(inner, inner_ops, made)


def _sharding_of(value, made: dict) -> str | None:
    """The sharding text of ``value`` where it is made (None: not known)."""
    if isinstance(value.owner, ir.Block):
        parent = value.owner.owner.operation
        if parent.name != "func.func":   # a region's argument: no sharding of its own
            return None
        return _at(made.get(parent), ir.BlockArgument(value).arg_number)
    return _at(made.get(value.owner.operation), ir.OpResult(value).result_number)


def _at(texts, index: int):
    return texts[index] if texts is not None and index < len(texts) else None


def _element(text: str) -> str:
    """``#sdy.sharding<@mesh, [...]>`` as an element of a per-value list: ``<@mesh, [...]>``."""
    return text.removeprefix("#sdy.sharding")


def _replicated(mesh: str, value_type) -> str:
    rank = value_type.rank if isinstance(value_type, ir.RankedTensorType) else 0
    return f"<@{mesh}, [{', '.join(['{}'] * rank)}]>"


def _per_value(elements: list, meshes: dict) -> str:
    """``#sdy.sharding_per_value<[...]>`` with each mesh written out in place of its name
    (``<mesh<["x"=4]>, [...]>``): Shardy's per-device program no longer declares them."""
    inline = [re.sub(r"^<@([\w.$-]+)", lambda name: "<" + meshes[name.group(1)], element) for element in elements]
    return f"#sdy.sharding_per_value<[{', '.join(inline)}]>"


def _targets(module: ir.Module) -> list:
    found = []

    def visit(operation):
        attributes = operation.attributes
        if (operation.name == "stablehlo.custom_call" and "call_target_name" in attributes
                and decode_attribute(attributes["call_target_name"]) == TARGET):
            found.append(operation)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def ask_jax(key: str, operand_types, operand_tilings, result_types, result_tilings,
            num_devices: int) -> tuple[bytes, tuple, tuple] | None:
    """The per-device program (bytecode) of the custom partitioning op ``key`` for these
    shardings, and the tilings it wants its operands and results in (None: JAX has no
    callbacks of that key in this process)."""
    from jax._src import custom_partitioning
    from jax._src.lib import xla_client

    backend_string = key.encode()
    if backend_string not in custom_partitioning._sharding_callbacks:
        return None

    def hlo(tiling) -> object:
        return xla_client.HloSharding.from_string(tiling.hlo_text(num_devices))

    operand_shapes = [xla_client.Shape.array_shape(t.dtype, t.shape) for t in operand_types]
    result_shapes = [xla_client.Shape.array_shape(t.dtype, t.shape) for t in result_types]
    if len(result_shapes) == 1:
        result_shape, result_sharding = result_shapes[0], hlo(result_tilings[0])
    else:   # XLA's custom call of several results has a tuple shape
        result_shape = xla_client.Shape.tuple_shape(result_shapes)
        result_sharding = xla_client.HloSharding.tuple_sharding(result_shape, [hlo(t) for t in result_tilings])
    code, operand_shardings, result_sharding = custom_partitioning._custom_partitioning_partition(
        operand_shapes, [hlo(t) for t in operand_tilings], result_shape, result_sharding, backend_string)
    result_shardings = result_sharding.tuple_elements() if len(result_shapes) != 1 else [result_sharding]

    def tilings(shardings, types) -> tuple:
        return tuple(sharding.hlo_tiling(str(s), t.rank, num_devices) for s, t in zip(shardings, types))

    return bytes(code), tilings(operand_shardings, operand_types), tilings(result_shardings, result_types)
