"""Shardy's own passes, as steps of the partitioner's pipeline: propagation (and reshards
where values change sharding), the reshards written as collectives, and each value's
global type made its device's tile (Shardy's partitioner_pipeline.cc ends so)."""

from __future__ import annotations

from jaxlib.mlir import ir

from .rewriting import run_passes

# What jaxlib's ``sdy-propagation-pipeline`` runs (Shardy's propagation_pipeline.cc), with its
# export pipeline asked to insert every collective (``enable-insert-explicit-collectives``, which
# that registered pipeline leaves off): reshards, then reshards as collectives, on global shapes.
# The registered ``sdy-import-pipeline`` lacks two passes the C++ pipeline adds after importing calls:
# ``sdy-apply-sharding-constraints`` gives a constrained value's producer (a while's operand,
# an op with one user) the constraint's sharding; without it an unreduced loop carry
# was replicated, and all-reduced at every step (the per-device program's tests).
PROPAGATE_AND_INSERT_COLLECTIVES = (
    "sdy-import-pipeline", "sdy-import-func-calls", "symbol-dce", "sdy-apply-sharding-constraints",
    "sdy-sharding-group-import", "sdy-pre-order-funcs", "sdy-user-priority-propagate{keep-sharding-rules=true}",
    "sdy-export-named-computations", "sdy-export-pipeline{enable-insert-explicit-collectives=true}")


GLOBAL_TO_LOCAL = ("sdy-convert-global-to-local", "sdy-drop-sharding-and-mesh")


def propagate(module: ir.Module) -> None:
    """Shardy's propagation, reshards where a value's sharding changes; not yet collectives."""
    run_passes(module, ("symbol-dce",) + PROPAGATE_AND_INSERT_COLLECTIVES[:-1])


def insert_collectives(module: ir.Module) -> None:
    """Shardy's export: every reshard becomes a collective, still on global shapes."""
    run_passes(module, PROPAGATE_AND_INSERT_COLLECTIVES[-1:])


def global_to_local(module: ir.Module) -> None:
    """Each value's global type becomes its device's tile; the shardings and meshes go."""
    run_passes(module, GLOBAL_TO_LOCAL)
