"""Shape refinement: a shape-polymorphic module made static for concrete arguments.

A function whose signature has dynamic dimensions (``tensor<?x4xf32>``, as in
JAX's shape-polymorphic exports) is run by refining a copy of the module for the
shapes of the actual arguments, as the StableHLO reference interpreter does:
StableHLO's ``stablehlo-refine-arguments`` pass makes the argument types static,
then ``stablehlo-refine-shapes`` propagates them through the function and the
functions it calls. Modules exported by JAX with symbolic shapes get the
refinement JAX applies to them instead (StableHLO's, extended to JAX's dimension
arguments, shape assertions and dynamic custom calls); a shape assertion that
fails is an error then. JAX marks its exports with ``jax.uses_shape_polymorphism``
since its calling convention 7; an older export is known by the custom calls
only JAX's refinement makes static (``stablehlo.dynamic_top_k`` and its kin). Shapes that depend on data stay dynamic: dynamic_* ops
compute them at run time.
"""

from __future__ import annotations

import dataclasses
import io

from jax.extend.mlir import refine_polymorphic_shapes
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import stablehlo

from ..errors import ModuleError
from .sources import captured_diagnostics
from .types import TensorType


def refine(module: ir.Module, function: str, arg_types) -> ir.Module:
    """A copy of ``module`` where ``@function`` takes arguments of the static
    ``arg_types`` and every type that follows from them is refined."""
    if any(getattr(t, "is_quantized", False) for t in arg_types):
        raise ModuleError("shape-polymorphic functions with quantized arguments are not supported "
                          "(the refinement pass cannot take their types)")
    if function != "main":
        raise ModuleError(f"shape refinement needs the shape-polymorphic function to be @main, "
                          f"not @{function}")
    with module.context, ir.Location.unknown():
        copy = ir.Module.parse(_bytecode(module))
        types = ",".join(map(str, arg_types))
        stablehlo.register_stablehlo_passes()
        from_jax = "jax.uses_shape_polymorphism" in copy.operation.attributes or _calls_jax_dynamic_targets(copy)
        pipeline = f"stablehlo-refine-arguments{{types={types}}}"
        if not from_jax:
            pipeline += ",stablehlo-refine-shapes"
        cannot = f"cannot refine the shapes of @{function} for arguments of types ({', '.join(map(str, arg_types))})"
        with captured_diagnostics(copy.context) as diagnostics:
            try:
                passmanager.PassManager.parse(f"builtin.module({pipeline})").run(copy.operation)
            except ir.MLIRError:
                raise ModuleError(f"{cannot}:\n{diagnostics.text()}") from None
        if from_jax:
            try:
                copy = ir.Module.parse(refine_polymorphic_shapes(
                    mlir_module=_bytecode(copy), enable_shape_assertions=True, validate_static_shapes=False,
                    enable_shardy=False))
            except Exception as error:  # noqa: BLE001 - the XlaRuntimeError of JAX's refinement, in its own context
                raise ModuleError(f"{cannot}:\n{error}") from None
        return copy


# The custom calls that JAX's refinement (XLA's ``stablehlo_ext`` shape refinement)
# turns into static ops or removes, and StableHLO's ``stablehlo-refine-shapes`` leaves.
_JAX_DYNAMIC_TARGETS = frozenset({
    "shape_assertion", "stablehlo.dynamic_top_k", "stablehlo.dynamic_approx_top_k",
    "stablehlo.dynamic_rng_bit_generator", "stablehlo.dynamic_reduce_window"})


def _calls_jax_dynamic_targets(module: ir.Module) -> bool:
    found = []

    def visit(operation):
        if operation.name == "stablehlo.custom_call" and \
                ir.StringAttr(operation.attributes["call_target_name"]).value in _JAX_DYNAMIC_TARGETS:
            found.append(operation)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return bool(found)


def refinable(module: ir.Module) -> bool:
    """Whether the refinement passes can take ``module``: they crash on ops of
    unregistered dialects (such as the ``check`` ops of interpreter tests)."""
    unregistered = []

    def visit(operation):
        if not module.context.is_registered_operation(operation.name):
            unregistered.append(operation.name)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return not unregistered


def _bytecode(module: ir.Module) -> bytes:
    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    return buffer.getvalue()


def static_types(arg_types, values) -> tuple:
    """``arg_types`` with the shapes of ``values`` where they are dynamic."""
    static = []
    for ttype, value in zip(arg_types, values):
        if isinstance(ttype, TensorType) and not ttype.is_static:
            ttype = dataclasses.replace(ttype, shape=tuple(value.shape))
        elif "?" in str(ttype):
            raise ModuleError(f"dynamic dimensions inside {ttype} are not supported")
        static.append(ttype)
    return tuple(static)
