"""JAX's custom partitioning callbacks, asked in-process as XLA's SPMD partitioner asks them.

``jax.experimental.custom_partitioning`` registers each lowered op's callbacks in a
table of ``jax._src.custom_partitioning`` keyed by the op's ``backend_config``
(kept alive by the compiled executable), and registers with jaxlib the functions XLA's
partitioner calls with XLA's shapes and ``HloSharding``s. The ``interp`` device is
Python in the same process, so :func:`partition` calls JAX's
``_custom_partitioning_partition`` itself, with the op's shapes and the shardings
Shardy's propagation gave it: the callback returns the per-device program's bytecode
and the shardings it wants the operands and result in, which become a loaded
program and tilings for the interpreter (ops/custom_partitioning.py).
"""

from __future__ import annotations

from ..ir import sources
from ..ops.custom_partitioning import Partitioned
from ..program.program import load
from ..sharding import tiling as sharding


def partition(key: str, operand_types, operand_tilings, result_types, result_tilings,
              num_devices: int) -> Partitioned | None:
    """The per-device program of the custom partitioning op ``key`` for these shardings
    (None: JAX has no callbacks of that key in this process)."""
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
    program = load(sources.parse(bytes(code), trusted=True), partition_callback=partition)

    def tilings(shardings, types) -> tuple:
        return tuple(sharding.hlo_tiling(str(s), t.rank, num_devices) for s, t in zip(shardings, types))

    return Partitioned(program.runnable(), program, tilings(operand_shardings, operand_types),
                       tilings(result_shardings, result_types))
