"""Run a function over many items in worker processes, results in the items' order."""

from __future__ import annotations


def ordered_map(function, items: list, jobs: int = 1):
    """Yield ``function(item)`` for each item, in order; ``jobs > 1`` computes them in
    that many fresh worker processes (``function`` must be a module-level function,
    or a ``functools.partial`` of one, and its results picklable)."""
    if jobs <= 1 or len(items) <= 1:
        for item in items:
            yield function(item)
        return
    import concurrent.futures
    import multiprocessing

    context = multiprocessing.get_context("spawn")   # a clean interpreter; jaxlib's threads do not fork
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        yield from pool.map(function, items)
