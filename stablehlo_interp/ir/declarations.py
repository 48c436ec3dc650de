"""What a module declares, decoded once: its functions' signatures and its
module-level attributes.

A ``func.func`` carries, besides its type, one attribute dictionary per argument
(``arg_attrs``) and per result (``res_attrs``). JAX writes there the shardings
(``mhlo.sharding``, ``sdy.sharding``), donation (``tf.aliasing_output``,
``jax.buffer_donor``), layouts (``mhlo.layout_mode``) and the path of each
output in the function's result pytree (``jax.result_info``); it names
arguments by their location (``%arg0: tensor<f32> loc("x")``). The module
itself carries the process grid (``mhlo.num_replicas``, ``mhlo.num_partitions``)
and Shardy's meshes (``sdy.mesh`` ops).
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxlib.mlir import ir

from .decode import decode_attribute, decode_location, decode_type
from .locations import SourceLocation
from .value_names import argument_name, refresh


@dataclass
class FunctionSignature:
    """A ``func.func`` as plain values: everything about it but its body.

    ``arg_names`` are JAX's names of the arguments (their ``loc("x")``) or, in a module
    written by hand, the names its text gives them (``%x``: ir/value_names.py),
    ``result_names`` those of the results (``jax.result_info``), None where there
    is none; ``arg_attributes[i]`` and ``result_attributes[i]`` are the decoded
    attribute dictionaries of argument and result ``i`` (empty without one).
    """

    name: str
    visibility: str
    arg_types: tuple
    result_types: tuple
    arg_names: tuple
    result_names: tuple
    arg_attributes: tuple
    result_attributes: tuple
    location: SourceLocation
    has_body: bool


@dataclass(frozen=True)
class ModuleDeclarations:
    """A module's attributes and function signatures as plain values.

    ``meshes`` maps the name of each ``sdy.mesh`` op to its mesh attribute's text
    (``#sdy.mesh<["x"=4]>``), for sharding/tiling.py's ``parse_mesh``.
    """

    name: str | None
    num_replicas: int
    num_partitions: int
    meshes: dict
    functions: tuple


def decode_module(module, file_name: str | None = None) -> ModuleDeclarations:
    """The declarations of a module (``file_name``: where its text came from, for locations)."""
    attributes = module.operation.attributes
    refresh(file_name)   # its lines name values (value_names.py)
    with module.context:
        meshes = {decode_attribute(op.attributes["sym_name"]): decode_attribute(op.attributes["mesh"])
                  for op in (operation.operation for operation in module.body.operations) if op.name == "sdy.mesh"}
        functions = tuple(decode_function(operation, file_name) for operation in function_operations(module).values())
    return ModuleDeclarations(
        name=decode_attribute(attributes["sym_name"]) if "sym_name" in attributes else None,
        num_replicas=_int_attribute(attributes, "mhlo.num_replicas", 1),
        num_partitions=_int_attribute(attributes, "mhlo.num_partitions", 1),
        meshes=meshes,
        functions=functions,
    )


def function_operations(module) -> dict:
    """The module's ``func.func`` operations by name, in module order."""
    return {decode_attribute(op.attributes["sym_name"]): op
            for op in (operation.operation for operation in module.body.operations) if op.name == "func.func"}


def decode_function(func_op, file_name: str | None = None) -> FunctionSignature:
    """The signature of a ``func.func`` operation."""
    attributes = func_op.attributes
    function_type = ir.FunctionType(ir.TypeAttr(attributes["function_type"]).value)
    arg_types = tuple(decode_type(t) for t in function_type.inputs)
    result_types = tuple(decode_type(t) for t in function_type.results)
    arg_attributes = _value_attributes(attributes, "arg_attrs", len(arg_types))
    result_attributes = _value_attributes(attributes, "res_attrs", len(result_types))
    blocks = func_op.regions[0].blocks
    has_body = len(blocks) > 0
    arg_names = list(_result_info(arg_attributes))
    if has_body:
        for i, arg in enumerate(blocks[0].arguments):
            location = decode_location(arg.location, file_name)
            if location.name and not location.frames:
                arg_names[i] = location.name
            elif arg_names[i] is None:
                arg_names[i] = argument_name(location)   # %x of a module written by hand
    return FunctionSignature(
        name=decode_attribute(attributes["sym_name"]),
        visibility=decode_attribute(attributes["sym_visibility"]) if "sym_visibility" in attributes else "public",
        arg_types=arg_types,
        result_types=result_types,
        arg_names=tuple(arg_names),
        result_names=_result_info(result_attributes),
        arg_attributes=arg_attributes,
        result_attributes=result_attributes,
        location=decode_location(func_op.location, file_name),
        has_body=has_body,
    )


def _value_attributes(attributes, key: str, count: int) -> tuple:
    """The decoded attribute dictionary of each of ``count`` arguments (``arg_attrs``)
    or results (``res_attrs``); empty for a value without one."""
    entries = decode_attribute(attributes[key]) if key in attributes else ()
    return tuple(dict(entries[i]) if i < len(entries) and isinstance(entries[i], dict) else {}
                 for i in range(count))


def _result_info(value_attributes: tuple) -> tuple:
    """The names JAX gives values in ``jax.result_info`` (None where it gives none)."""
    return tuple(entry["jax.result_info"] if isinstance(entry.get("jax.result_info"), str) else None
                 for entry in value_attributes)


def _int_attribute(attributes, name: str, default: int) -> int:
    try:
        return int(decode_attribute(attributes[name]))
    except (KeyError, IndexError, ValueError, TypeError):
        return default
