"""``jax.debug.inspect_array_sharding`` on the interp device.

On a program over several devices, XLA answers the inspection at compile time:
JAX emits a custom call ``InspectSharding`` whose ``backend_config`` encodes a
C callback, and the SPMD partitioner calls it with the ``HloSharding`` it chose
for the operand. A PJRT C API plugin cannot call that callback, so for the
``interp`` platform :func:`lower` emits ``stablehlo_interp.inspect_sharding``
instead, naming a Python function in the host-callback table
(ops/host_callback.py). When the device compiles the program (placement.py), it
calls that function with the tiling it gives the operand, the same sharding
the program's results get; at run time the custom call passes its operand
through (ops/sharding_calls.py). A program on one device needs no compiling:
JAX's own rule calls back at once with a replicated sharding.
"""

from __future__ import annotations

import numpy as np

from ..ops.host_callback import HostCallback, lookup

TARGET = "stablehlo_interp.inspect_sharding"
PLATFORM = "interp"
# A serialized xla.OpSharding {type: MANUAL}: the sharding of values in a shard_map body.
MANUAL = b"\x08\x04"


def _devices_and_mesh(axis_context):
    """The devices the program runs on and the mesh the user's sharding refers to."""
    from jax._src import mesh as mesh_lib, sharding_impls

    if isinstance(axis_context, sharding_impls.SPMDAxisContext):
        return axis_context.mesh._flat_devices_tuple, axis_context.mesh
    if not isinstance(axis_context, sharding_impls.ShardingContext):
        raise NotImplementedError(f"inspect_array_sharding in a {type(axis_context).__name__}")
    devices, abstract = axis_context.device_assignment, axis_context.abstract_mesh
    if abstract is None:
        return devices, mesh_lib.thread_resources.env.physical_mesh
    return devices, mesh_lib.Mesh(np.array(devices).reshape(abstract.axis_sizes), abstract.axis_names)


def lower(ctx, value, *, callback, original_rule):
    """The lowering rule of ``inspect_sharding_p`` for the interp platform."""
    from jax._src.interpreters import mlir

    devices, mesh = _devices_and_mesh(ctx.module_context.axis_context)
    if len(devices) == 1:
        return original_rule(ctx, value, callback=callback)

    def report(op_sharding: bytes):
        """Call the user's callback with the sharding, as JAX would with XLA's."""
        from jax._src import sharding_impls
        from jaxlib import xla_client

        proto = xla_client.OpSharding()
        proto.ParseFromString(op_sharding)
        hlo_sharding = xla_client.HloSharding.from_proto(proto)
        if mesh.empty:
            return callback(sharding_impls.GSPMDSharding(devices, hlo_sharding))
        spec = sharding_impls.PartitionSpec() if hlo_sharding.is_manual() else \
            sharding_impls.parse_flatten_op_sharding(hlo_sharding, mesh)[0]
        return callback(sharding_impls.NamedSharding(mesh, spec))

    entry = HostCallback(report)
    ctx.module_context.add_keepalive(entry)
    mlir.custom_call(TARGET, result_types=[value.type], operands=[value], backend_config=str(entry.key),
                     has_side_effect=True)
    return []


def register() -> None:
    from jax._src import debugging
    from jax._src.interpreters import mlir

    original_rule = debugging._inspect_sharding_lowering_rule
    mlir.register_lowering(debugging.inspect_sharding_p,
                           lambda ctx, value, *, callback: lower(ctx, value, callback=callback,
                                                                 original_rule=original_rule),
                           platform=PLATFORM)


def inspections(region, manual: bool = False, seen=None) -> list:
    """``(report, key, value_type, manual)`` for each inspection in ``region`` and the
    regions of its ops: the reporting function, the operand's propagation key, and
    whether it is inside a manual computation (a shard_map body)."""
    seen = set() if seen is None else seen
    if id(region) in seen:
        return []
    seen.add(id(region))
    found = []
    for step in region.steps:
        info = step.info
        if info.name == "stablehlo.custom_call" and info.attributes.get("call_target_name") == TARGET:
            entry = lookup(int(info.attributes["backend_config"]))
            if entry is not None:
                found.append((entry.function, (id(region), step.operands[0]), info.operand_types[0], manual))
        inner_manual = manual or info.name == "sdy.manual_computation"
        for inner in step.regions:
            found.extend(inspections(inner, inner_manual, seen))
    return found
