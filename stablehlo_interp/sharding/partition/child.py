"""The partitioner's child process (sharding/partition/__init__.py asks it): each module it
is sent becomes its per-device program, by the steps of :data:`PIPELINE` in their order.

The backbone is Shardy's own partitioner (passes.py: propagation, reshards as collectives,
global to local); the other steps mend what it gets wrong or refuses, each where it must
stand: before propagation, between the reshards and the collectives, around the
global-to-local pass, after it. Every step is a function of the module, in a module of its
own; the per-device program's tests (tests/test_per_device*.py, the device's modes) hold
each to XLA's partitioned program.
"""

from __future__ import annotations

from jax._src.lib import _jax
from jaxlib.mlir import ir

from ...ir.child_process import serve
from ...ir.edit import async_pairs_as_collectives, inline_every_call
from ...ir.sources import make_context
from .gathers_from_shards import stand_in_for_gathers_from_shards
from .one_device import replicate_maximal_ops, run_on_their_device
from .partial_sums import combine_all_reduces, reduce_partials_by_their_op, split_reduce_scatters_of_partial_sums
from .passes import global_to_local, insert_collectives, propagate
from .stand_ins import restore_stand_ins, stand_in_for_chlo, stand_in_for_unconverted_ops
from .uneven_shards import refuse_uneven_shards
from .unreduced import lower_replicated_to_unreduced
from .whiles import inline_whiles, outline_whiles
from .whole_dimensions import gather_dimensions_shardy_cannot_split

# (step, why it stands where it stands)
PIPELINE = (
    (inline_every_call, "the global-to-local pass leaves a call's results their global types (and MLIR's inliner "
                        "declines calls in StableHLO's regions); XLA inlines calls too"),
    (async_pairs_as_collectives, "XLA's converter refuses async ops; XLA's CPU shows the collective"),
    (stand_in_for_chlo, "before propagation: Shardy has no sharding rule for CHLO's ops"),
    (propagate, "Shardy's propagation, with reshards where a value's sharding changes"),
    (gather_dimensions_shardy_cannot_split, "on the reshards, before they become collectives"),
    (replicate_maximal_ops, "likewise: an op on one device takes its operands whole"),
    (insert_collectives, "Shardy's export: the reshards become collectives, on global shapes"),
    (refuse_uneven_shards, "before the global-to-local pass, which aborts on them"),
    (split_reduce_scatters_of_partial_sums, "the global-to-local pass expects those partials all-reduced"),
    (stand_in_for_gathers_from_shards, "after the collectives: the all-reduce of the gather's partials is there"),
    (lower_replicated_to_unreduced, "the global-to-local pass has no rule for it"),
    (stand_in_for_unconverted_ops, "last before the global-to-local pass, which refuses these ops"),
    (outline_whiles, "the global-to-local pass converts functions, not a loop's regions"),
    (global_to_local, "each value's global type becomes its device's tile"),
    (inline_whiles, "the loops again, on local types"),
    (run_on_their_device, "on local types: the device's branch, and a broadcast of its results"),
    (restore_stand_ins, "the stood-in ops again, on local types"),
    (reduce_partials_by_their_op, "Shardy's export writes a sum whatever the reduction was"),
    (combine_all_reduces, "as XLA's CPU compiler combines them"),
)


def partition(text: str) -> str:
    """The per-device program of the module ``text``, as StableHLO text that jaxlib's
    StableHLO-to-HLO converter accepts."""
    with make_context():
        module = ir.Module.parse(text)
        for step, _ in PIPELINE:
            step(module)
        module.operation.verify()
        local = module.operation.get_asm(enable_debug_info=True)
    _jax.mlir.mlir_module_to_xla_computation(local, use_tuple_args=False, return_tuple=False)
    return local


if __name__ == "__main__":
    serve(lambda request: partition(request.decode("utf-8")).encode("utf-8"),
          reported=(Exception,),   # a pass's or the converter's failure, of several types: reported to the parent
          describe=lambda error: str(error).strip() or type(error).__name__)
