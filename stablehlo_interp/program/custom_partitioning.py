"""JAX's custom partitioning callbacks, asked in-process as XLA's SPMD partitioner asks them.

``jax.experimental.custom_partitioning`` registers each lowered op's callbacks in a
table of ``jax._src.custom_partitioning`` keyed by the op's ``backend_config``
(kept alive by the compiled executable), and registers with jaxlib the functions XLA's
partitioner calls with XLA's shapes and ``HloSharding``s. The ``interp`` device is
Python in the same process, so :func:`partition` calls JAX's
``_custom_partitioning_partition`` itself, with the op's shapes and the shardings
Shardy's propagation gave it: the callback returns the per-device program's bytecode
and the shardings it wants the operands and result in, which become tilings here
and a loaded program in program.py (``jax_partition_callback``, which every
``Lowered`` of this process and the ``interp`` device's programs are loaded with).
"""

from __future__ import annotations

from ..sharding import tiling as sharding


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
