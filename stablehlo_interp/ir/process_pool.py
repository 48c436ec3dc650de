"""Run a function over many items in worker processes, results in the items' order."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
from concurrent.futures.process import BrokenProcessPool


def ordered_map(function, items: list, jobs: int = 1, on_crash=None):
    """Yield ``function(item)`` for each item, in order; ``jobs > 1`` computes them in
    that many fresh worker processes (``function`` must be a module-level function,
    or a ``functools.partial`` of one, and its results picklable).

    ``on_crash``: for work that may kill its process (a backend's compiler that
    aborts): the items always run in worker processes, and an item whose process
    dies yields ``on_crash(item)``; the other items go on in a new pool.
    """
    if on_crash is None and (jobs <= 1 or len(items) <= 1):
        for item in items:
            yield function(item)
        return
    context = multiprocessing.get_context("spawn")   # a clean interpreter; jaxlib's threads do not fork
    pool = concurrent.futures.ProcessPoolExecutor(max(jobs, 1), mp_context=context)
    futures = [pool.submit(function, item) for item in items]
    finished = False
    try:
        for index, item in enumerate(items):
            try:
                yield futures[index].result()
                continue
            except BrokenProcessPool:
                if on_crash is None:
                    raise
            # With several workers the item that killed the pool may be another one in
            # flight: run this one alone (with one, it is this one: a backend that holds
            # a device opens it once less), and every unfinished one again in a new pool.
            pool.shutdown(wait=False, cancel_futures=True)
            yield on_crash(item) if jobs <= 1 else _alone(function, item, context, on_crash)
            pool = concurrent.futures.ProcessPoolExecutor(max(jobs, 1), mp_context=context)
            for later in range(index + 1, len(items)):
                if not futures[later].done() or futures[later].exception() is not None:
                    futures[later] = pool.submit(function, items[later])
        finished = True
    finally:
        # Every item done: wait for the workers to end. A pool left running (wait=False)
        # races CPython's exit handler, which then writes to the pool's closed wake-up
        # pipe ("Exception ignored ... Bad file descriptor"); only an interrupted map
        # does not wait for the items still running.
        pool.shutdown(wait=finished, cancel_futures=True)


def _alone(function, item, context, on_crash):
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        try:
            return pool.submit(function, item).result()
        except BrokenProcessPool:
            return on_crash(item)
