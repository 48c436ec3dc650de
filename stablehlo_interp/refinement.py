"""Shape refinement: a shape-polymorphic module made static for concrete arguments.

A function whose signature has dynamic dimensions (``tensor<?x4xf32>``, as in
JAX's shape-polymorphic exports) is run by refining a copy of the module for the
shapes of the actual arguments, as the StableHLO reference interpreter does:
the argument types are made static and StableHLO's ``stablehlo-refine-shapes``
pass propagates them through the function and the functions it calls
(dynamic_* ops whose shape operands become constants keep running as such).
"""

from __future__ import annotations

import io

from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import stablehlo

from .errors import ModuleError
from .sources import _diagnostics
from .types import TensorType


def refine(module: ir.Module, function: str, arg_shapes) -> ir.Module:
    """A copy of ``module`` where ``@function`` takes arguments of shapes
    ``arg_shapes`` (None for a non-tensor argument) and every type that follows
    from them is refined."""
    with module.context, ir.Location.unknown():
        buffer = io.BytesIO()
        module.operation.write_bytecode(buffer)
        copy = ir.Module.parse(buffer.getvalue())
        func_op = _find_function(copy, function)
        block = func_op.regions[0].blocks[0]
        inputs = []
        for argument, shape in zip(block.arguments, arg_shapes):
            if shape is not None:
                ranked = ir.RankedTensorType(argument.type)
                argument.set_type(ir.RankedTensorType.get(list(shape), ranked.element_type))
            inputs.append(argument.type)
        results = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value).results
        func_op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, results))
        stablehlo.register_stablehlo_passes()
        try:
            passmanager.PassManager.parse("builtin.module(stablehlo-refine-shapes)").run(copy.operation)
            copy.operation.verify()
        except ir.MLIRError as error:
            shapes = ", ".join("x".join(map(str, s)) if s is not None else "-" for s in arg_shapes)
            raise ModuleError(f"cannot refine the shapes of @{function} for arguments of shapes "
                              f"({shapes}):\n{_diagnostics(error)}") from None
        return copy


def shape_signature(arg_types, values) -> tuple:
    """The shapes that refine ``arg_types`` for ``values`` (None where nothing to refine)."""
    signature = []
    for ttype, value in zip(arg_types, values):
        if isinstance(ttype, TensorType):
            signature.append(None if ttype.is_static else tuple(value.shape))
        elif "?" in str(ttype):
            raise ModuleError(f"dynamic dimensions inside {ttype} are not supported")
        else:
            signature.append(None)
    return tuple(signature)


def _find_function(module: ir.Module, name: str):
    for operation in module.body.operations:
        if operation.operation.name == "func.func" and ir.StringAttr(operation.attributes["sym_name"]).value == name:
            return operation
    raise ModuleError(f"no function @{name} in the module")
