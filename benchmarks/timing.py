"""Timing helpers shared by the benchmark scripts."""

from __future__ import annotations

import time


def best_time(fn, repeat: int, clock=time.perf_counter) -> float:
    """The best of ``repeat`` timed calls, after one warm-up call (seconds). What a
    call returns is freed after the clock stops (freeing a large program is no
    part of loading it). ``clock=time.process_time``: this process's CPU time, which
    waits for no other process on a loaded machine."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = clock()
        result = fn()
        best = min(best, clock() - start)
        del result
    return best


def format_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"
