"""The child process of xla_passes.py: XLA's CPU compiler and jaxlib's HLO → StableHLO
translator, both of which may abort their process on a program they were not written
for: only this process dies.

A request is a pickled ``(kind, payload)``:

* ``("compile", (module_text, partitions))``: compile ``@main`` with XLA's CPU client for
  ``partitions`` devices, dumping the module after every pass that changed it (XLA's own
  dump options: ``xla_dump_to``, ``xla_dump_hlo_pass_re=.*``, as ``HloProto`` and as
  text). The reply: the pickled stages, each ``(file name, HloModuleProto bytes, HLO
  text)`` in the order XLA dumped them.
* ``("run", arguments)``: the last compiled program run on ``arguments`` (each device's,
  ``[d][i]``, for more than one device); the reply: its pickled results (each device's).
* ``("translate", (hlo_module_proto, partitions))``: the module translated to StableHLO by
  jaxlib's translator (``hlo_to_stablehlo``), as MLIR text with locations.

An error XLA reports is an ERROR reply with its message. The child asks XLA for
:data:`HOST_DEVICES` CPU devices (unless ``XLA_FLAGS`` says how many), for sharded programs.
"""

from __future__ import annotations

import os
import pickle
import re
import tempfile
from pathlib import Path
from typing import Any, cast

from ..ir.child_process import serve

# XLA's dump options: every pass that changed the module, as HloProto and as text.
DUMP_OPTIONS = (("xla_dump_hlo_pass_re", ".*"), ("xla_dump_hlo_as_proto", True), ("xla_dump_hlo_as_text", True))
# A dump of the module between passes: module_NNNN.NAME.NNNN.PIPELINE.after_PASS.before_PASS.hlo.pb
_BETWEEN_PASSES = re.compile(r"^module_\d+\.(?P<module>.+)\.(?P<order>\d{4})\.(?P<stage>.+)\.hlo\.pb$")
_HLO_MODULE_FIELD = 1   # HloProto.hlo_module (xla/service/hlo.proto)
HOST_DEVICES = 8


_COMPILED: list = []   # the executable the last compile made, and its devices (for "run")


def compile_with_dumps(module_text: str, partitions: int = 1) -> list:
    """The stages of ``@main`` compiled by XLA's CPU client for ``partitions`` devices
    (module docstring); the executable is kept for :func:`run_compiled`."""
    import jax
    from jax._src.lax.linalg import initialize_lapack

    from .jax import _compile

    initialize_lapack()   # LAPACK's kernels behind XLA CPU's lapack_* custom calls (JAX does it as it lowers one)
    devices = jax.devices("cpu")[:partitions]
    if len(devices) < partitions:
        raise ValueError(f"the program is partitioned over {partitions} devices; XLA's CPU here has {len(devices)}")
    with tempfile.TemporaryDirectory(prefix="xla-passes-") as folder:
        _COMPILED[:] = [_compile("cpu", module_text, (), partitions, (("xla_dump_to", folder), *DUMP_OPTIONS)),
                        devices]
        return _stages(Path(folder))


def run_compiled(arguments: list) -> list:
    """The last compiled program's results on ``arguments`` (each device's, ``[d][i]``,
    for more than one device)."""
    from .jax import execute, execute_per_device

    executable, devices = _COMPILED
    return execute(executable, devices[0], arguments) if len(devices) == 1 else \
        execute_per_device(executable, devices, arguments)


def _stages(folder: Path) -> list:
    """The dumps between passes in XLA's order: ``(stage name, HloModuleProto, text)``."""
    found = []
    for path in folder.glob("*.hlo.pb"):
        match = _BETWEEN_PASSES.match(path.name)
        if match is None:
            continue
        text_path = path.with_name(path.name.removesuffix(".hlo.pb") + ".txt")
        text = text_path.read_text() if text_path.exists() else ""
        module = _length_delimited_field(path.read_bytes(), _HLO_MODULE_FIELD)
        found.append((int(match["order"]), match["stage"], module, text))
    return [(stage, module, text) for _, stage, module, text in sorted(found)]


def _length_delimited_field(data: bytes, number: int) -> bytes:
    """The bytes of field ``number`` (a message) of a serialized protobuf message."""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        field, wire_type = key >> 3, key & 7
        if wire_type == 2:
            size, position = _varint(data, position)
            if field == number:
                return data[position:position + size]
            position += size
        elif wire_type == 0:
            position = _varint(data, position)[1]
        elif wire_type in (1, 5):
            position += 8 if wire_type == 1 else 4
        else:
            raise ValueError(f"unexpected protobuf wire type {wire_type}")
    raise ValueError(f"no field {number} in the message")


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def translate(hlo_module: bytes, partitions: int = 1, reordered: dict | None = None) -> str:
    """The HloModuleProto as StableHLO text with locations (jaxlib's translator). A module
    the SPMD partitioner made (its ``mhlo.spmd_parameters_shardings``) is each device's
    program: it gets the grid it runs on (``mhlo.num_partitions``) and its collectives'
    groups as device ids (:func:`_mesh_axes_groups`; ``reordered``: the groups, by
    channel id, of those over a mesh of reordered devices, which the translation loses)."""
    from jax._src.interpreters import mlir
    from jaxlib import _jax
    from jaxlib.mlir import ir

    bytecode = _jax.mlir.hlo_to_stablehlo(hlo_module)
    with mlir.make_ir_context(), ir.Location.unknown():
        module = ir.Module.parse(bytecode)
        attributes = module.operation.attributes
        if partitions > 1 and "mhlo.spmd_parameters_shardings" in attributes:
            i32 = ir.IntegerType.get_signless(32)
            attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(i32, partitions)
            attributes["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, 1)
            _result_shardings(module, ir.StringAttr(attributes["mhlo.spmd_output_sharding"]).value)
            _mesh_axes_groups(module, reordered or {})
        return str(module.operation.get_asm(enable_debug_info=True))


def _result_shardings(module, output_sharding: str) -> None:
    """``@main``'s results annotated with the output sharding the partitioner chose (a
    tuple sharding: one for each result), as its arguments are with theirs."""
    from jaxlib import xla_client
    from jaxlib.mlir import ir

    sharding = xla_client.HloSharding.from_string(output_sharding)
    for operation in module.body.operations:
        if operation.operation.name != "func.func" or ir.StringAttr(operation.attributes["sym_name"]).value != "main":
            continue
        count = len(ir.FunctionType(ir.TypeAttr(operation.attributes["function_type"]).value).results)
        each = [str(element) for element in sharding.tuple_elements()] or [output_sharding] * count
        operation.attributes["res_attrs"] = ir.ArrayAttr.get(
            [ir.DictAttr.get({"mhlo.sharding": ir.StringAttr.get(text)}) for text in each])


_MESH_AXES = re.compile(r'^#stablehlo\.replica_group_mesh_axes<mesh = @([\w.$-]+), axes = \[(.*)\]>$')
_AXIS_REF = re.compile(r'^#stablehlo\.axis_ref<name = "([^"]+)">$')


def _mesh_axes_groups(module, reordered: dict) -> None:
    """Each collective's ``replica_groups`` given as mesh axes
    (``#stablehlo.replica_group_mesh_axes<mesh = @m, axes = [...]>``: the devices that
    differ only along those axes form a group, in the axes' order) as the dense device
    ids the interpreter reads; ``reordered[channel id]`` where XLA's mesh had other
    device ids than the translation's."""
    import numpy as np
    from jaxlib.mlir import ir

    from ..sharding.tiling import parse_mesh

    meshes = {ir.StringAttr(op.attributes["sym_name"]).value: parse_mesh(str(op.attributes["mesh"]))
              for op in module.body.operations if op.operation.name == "sdy.mesh"}

    def visit(operation) -> None:
        for region in operation.regions:
            for block in region.blocks:
                for inner in block.operations:
                    visit(inner.operation)
        if "replica_groups" not in operation.attributes:
            return
        match = _MESH_AXES.match(str(operation.attributes["replica_groups"]))
        if match is None:
            return
        channel = operation.attributes["channel_handle"] if "channel_handle" in operation.attributes else None
        handle = re.search(r"handle = (\d+)", str(channel)) if channel is not None else None
        if handle is not None and int(handle.group(1)) in reordered:
            operation.attributes["replica_groups"] = ir.DenseElementsAttr.get(
                cast(Any, np.array(reordered[int(handle.group(1))], np.int64)))
            return
        mesh = meshes[match.group(1)]
        names = [name for name, _ in mesh.axes]
        axes = []
        for reference in filter(None, (part.strip() for part in match.group(2).split(", #"))):
            axis = _AXIS_REF.match(reference if reference.startswith("#") else "#" + reference)
            if axis is None:
                raise ValueError(f"replica groups over a sub-axis ({reference}) are not read")
            axes.append(names.index(axis.group(1)))
        others = [axis for axis in range(len(names)) if axis not in axes]
        devices = mesh.devices().transpose(others + axes)
        groups = devices.reshape(-1, int(np.prod([devices.shape[len(others) + i] for i in range(len(axes))])))
        groups = np.ascontiguousarray(groups, np.int64)
        operation.attributes["replica_groups"] = ir.DenseElementsAttr.get(cast(Any, groups))   # (an i64 tensor)

    for operation in module.body.operations:
        visit(operation.operation)


def _answer(request: bytes) -> bytes:
    kind, payload = pickle.loads(request)
    if kind == "compile":
        return pickle.dumps(compile_with_dumps(*payload))
    if kind == "run":
        return pickle.dumps(run_compiled(payload))
    return translate(*payload).encode("utf-8")


if __name__ == "__main__":
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):   # before JAX starts
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + f" --xla_force_host_platform_device_count={HOST_DEVICES}").strip()
    serve(_answer, reported=(Exception,), describe=lambda error: f"{type(error).__name__}: {error}")
