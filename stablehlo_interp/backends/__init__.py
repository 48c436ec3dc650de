"""The other side of a comparison: anything that runs a module on arguments.

Every backend follows one protocol, :class:`Backend`: a ``name``, the
``settings`` in effect that change what a program computes (reports print them),
and ``backend(module_text, args) -> list of arrays`` (``@main``'s results); one
that computes less precisely than the spec's rounding on purpose (a TPU's bf16
matrix passes) says so in ``precision`` (judge/precision.py), which ``compare``
reads to label what it explains. A
backend that gives no values raises one of the :class:`BackendError`\\ s, with
the backend's own message: :class:`BackendCompileError` (it cannot compile the
program), :class:`BackendCrash` (its compiler or runtime died: a signal, an
abort, a timeout) or :class:`BackendError` itself (it compiled the program and
failed to run it). They are verdicts on the backend: ``conform``, ``compare`` and
``fuzz`` report them and go on.

:func:`resolve` turns what users pass as ``backend=`` into one:

* a JAX platform name (``"cpu"``, ``"gpu"``, ``"interp"`` ...): the module is
  compiled by that platform's PJRT client (:class:`~.jax.JaxBackend`); a
  :class:`~.jax.JaxChildBackend` compiles in a child process whose XLA reads other
  ``XLA_FLAGS`` (tools/codegen.py recompiles under each candidate flag with one);
* ``"reference"``: StableHLO's C++ reference interpreter in jaxlib, in a child process
  (:class:`~.reference.ReferenceBackend`);
* ``"iree"`` or ``"iree:TARGET"`` (``"iree:llvm-cpu"``, ``"iree:vmvx"``): IREE's
  compiler and runtime, in a child process (:class:`~.iree.IreeBackend`; the
  ``iree`` extra); ``options`` are extra compiler flags;
* ``"recorded:FOLDER"``: the answers another backend gave, kept in FOLDER by a
  :class:`~.recorded.RecordingBackend` and played back (:class:`~.recorded.RecordedBackend`:
  a TPU's answers where no TPU is);
* a :class:`~.command.CommandBackend`: any program run as a command, which reads
  the MLIR and ``.npy`` inputs and writes ``.npy`` outputs;
* an :class:`~.interpreter.InterpreterBackend`: this interpreter with some op
  implementations replaced, e.g. a deliberately wrong one in a test;
* any other callable ``(module_text, args) -> arrays`` (your own backend).
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from .command import CommandBackend
from .errors import BackendCompileError, BackendCrash, BackendError
from .interpreter import InterpreterBackend
from .iree import IreeBackend
from .jax import JaxBackend, JaxChildBackend
from .recorded import RecordedBackend, RecordingBackend
from .reference import ReferenceBackend

__all__ = ["Backend", "BackendCompileError", "BackendCrash", "BackendError", "CommandBackend",
           "InterpreterBackend", "IreeBackend", "JaxBackend", "JaxChildBackend", "RecordedBackend", "RecordingBackend",
           "ReferenceBackend", "resolve"]


@runtime_checkable
class Backend(Protocol):
    """What ``conform``, ``compare`` and ``fuzz`` run programs on."""

    name: str

    @property
    def settings(self) -> tuple:
        """Sentences: what in effect changes a program's semantics, and what does not."""

    def __call__(self, module_text: str, args: Sequence) -> list[np.ndarray]:
        """``@main`` of the module run on ``args``: its results, as NumPy arrays."""


def resolve(backend, options: Sequence[str] = ()) -> Backend:
    """The :class:`Backend` for what ``backend=`` accepts (module docstring).
    ``options``: IREE's extra compiler flags; other backends take none."""
    if isinstance(backend, str):
        family, _, target = backend.partition(":")
        if family == "iree":
            return IreeBackend(target or "llvm-cpu", flags=options)
        if family == "recorded" and not options:
            return RecordedBackend(target)
        if backend == "reference" and not options:
            return ReferenceBackend()
        if options:
            raise ValueError(f"backend options are for IREE's compiler; the JAX platform {backend} takes none")
        return JaxBackend(backend)
    if options:
        raise ValueError("backend options go with a backend named by a string ('iree:llvm-cpu')")
    if callable(backend):
        if not hasattr(backend, "name") or not hasattr(backend, "settings"):
            name = getattr(backend, "name", None) or getattr(backend, "__name__", type(backend).__name__)
            return _Named(backend, str(name))
        return backend
    raise TypeError(f"backend must be a JAX platform name, 'iree[:TARGET]' or a callable (module_text, args) "
                    f"-> arrays, not {type(backend).__name__}")


class _Named:
    """A user's callable as a :class:`Backend` (nothing known about its settings)."""

    settings = ()

    def __init__(self, run, name: str):
        self.run, self.name = run, name

    def __call__(self, module_text: str, args) -> list:
        return [np.asarray(value) for value in self.run(module_text, args)]
