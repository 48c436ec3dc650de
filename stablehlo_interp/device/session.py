"""Tools on the interp device: observe every program JAX runs there.

The device passes the listeners in :func:`device_listeners` to every
``Program.run`` it makes (``stablehlo_interp.device.runtime.listeners``, changed under
its lock). Attach any :class:`~stablehlo_interp.Listener` for the duration of a block::

    with si.on_device(si.tools.TraceRecorder()) as recorder:
        jax.jit(f, device=jax.devices("interp")[0])(x)
    print(recorder.traces[-1])

or for the whole process, with environment variables read when the device starts
(JAX calls its ``initialize`` when it loads the plugin):

* ``STABLEHLO_INTERP_TRACE=1`` prints the trace of every run to stderr;
  ``STABLEHLO_INTERP_TRACE=path`` appends it to that file.
* ``STABLEHLO_INTERP_NONFINITE=1`` stops the first computation in which an op
  makes a NaN or inf: JAX raises an error whose message is the report.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine.run import Listener

import contextlib
import os
import sys
import threading

from ..tools.nonfinite import NonFiniteFinder
from ..tools.trace import TraceRecorder

TRACE_VARIABLE = "STABLEHLO_INTERP_TRACE"
NONFINITE_VARIABLE = "STABLEHLO_INTERP_NONFINITE"


def device_listeners() -> list:
    """The list of listeners the interp device attaches to every run."""
    from . import runtime

    return runtime.listeners


def _device_lock() -> threading.Lock:
    from . import runtime

    return runtime.listeners_lock


@contextlib.contextmanager
def on_device(*listeners: Listener) -> Iterator[Listener | tuple[Listener, ...]]:
    """Attach ``listeners`` to every program run on the interp device inside the block.

    Yields the listener (or the tuple of them when several are given).
    """
    attached, lock = device_listeners(), _device_lock()
    with lock:
        attached.extend(listeners)
    try:
        yield listeners[0] if len(listeners) == 1 else listeners
    finally:
        with lock:
            for listener in listeners:
                attached.remove(listener)


def printing_recorder(stream) -> TraceRecorder:
    """A TraceRecorder that writes each finished run's transcript to ``stream``
    and keeps no traces."""

    def write(trace) -> None:
        title = f"@{trace.function}" if trace.function else "a program"
        stream.write(f"== stablehlo-interp trace of {title} ==\n{trace}\n")
        stream.flush()
        recorder.traces.clear()

    recorder = TraceRecorder(on_trace=write)
    return recorder


def listeners_from_environment(environ=os.environ) -> list:
    """The listeners that the environment variables ask for."""
    listeners: list[Listener] = []
    destination = environ.get(TRACE_VARIABLE, "")
    if destination and destination != "0":
        stream = sys.stderr if destination in ("1", "stderr") else open(destination, "a", encoding="utf-8")
        listeners.append(printing_recorder(stream))
    if environ.get(NONFINITE_VARIABLE, "") not in ("", "0"):
        listeners.append(NonFiniteFinder(stop=True))
    return listeners


def install_from_environment() -> None:
    """Attach the listeners the environment asks for to the device (once per process:
    the device's ``initialize`` calls it)."""
    global _installed
    with _device_lock():
        if _installed:
            return
        _installed = True
        device_listeners().extend(listeners_from_environment())


_installed = False
