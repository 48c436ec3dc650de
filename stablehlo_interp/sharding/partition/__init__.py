"""The per-device program of a sharded module, made by Shardy's own partitioner.

XLA shows, for ``jax.jit(f).lower(x).compile().as_text()``, the program each device
runs after SPMD partitioning: local shapes (each device's tile) and the collectives
(``all-reduce``, ``all-gather`` ...) that move data between devices. The interpreter
runs the global program (the global view, docs/sharding.md), but the same question
(what does each device run?) is answered here by the passes jaxlib ships from Shardy:
propagation, explicit reshards written as collectives, then ``sdy-convert-global-to-local``
(sharding/partition/ has the pipeline and the two rewrites around it).

Those passes abort their process on input they were not written for (a dimension that
the mesh does not divide, for one), so they run in a child process
(:class:`~stablehlo_interp.ir.child_process.ChildProcess`), started at the first
request only: nothing runs the partitioner unless the per-device text is asked for.
"""

from __future__ import annotations

from jaxlib.mlir import ir

from ...errors import ModuleError
from ...ir.child_process import ERROR, ChildDied, ChildProcess

_CHILD = ChildProcess(f"{__package__}.child")


class PartitionError(ModuleError):
    """Shardy's partitioner could not make the per-device program (a pass failed, or
    aborted the child process that ran it)."""


def per_device_program(module: ir.Module) -> str:
    """The per-device program of the sharded ``module`` (StableHLO with Shardy meshes
    and shardings), as StableHLO text with local shapes and collectives that jaxlib's
    StableHLO-to-HLO converter reads. Raises :class:`PartitionError`."""
    text = module.operation.get_asm(enable_debug_info=True)
    try:
        status, answer = _CHILD.ask(text.encode("utf-8"))
    except ChildDied as death:
        raise PartitionError(f"Shardy's partitioner aborted the child process that ran it ({_quotable(str(death))})") from None
    if status == ERROR:
        raise PartitionError(f"Shardy's partitioner failed: {_quotable(answer.decode('utf-8'))}")
    return answer.decode("utf-8")


def _quotable(message: str, count: int = 3) -> str:
    """The first ``count`` lines of ``message`` as one line without double quotes (it
    becomes an attribute of the HLO module's text)."""
    return " ".join(line.strip() for line in message.strip().splitlines()[:count]).replace('"', "'")
