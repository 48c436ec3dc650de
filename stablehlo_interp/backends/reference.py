"""StableHLO's C++ reference interpreter as a backend (``--backend reference``): the one
``stablehlo-translate --interpret`` runs, bundled in jaxlib (``stablehlo.eval_module``).

It follows the spec as this interpreter does, and aborts its process on what it does
not implement (CHLO ops, ``check`` failures): it runs in a child process
(reference_child.py), where an abort is a :class:`BackendCrash` and the next program
gets a fresh child. A module it refuses is a :class:`BackendError` with its message.
"""

from __future__ import annotations

import pickle

import numpy as np

from ..ir.child_process import ERROR, ChildDied, ChildProcess
from .errors import BackendCrash, BackendError
from .reference_child import encode_argument

_CHILD = ChildProcess(f"{__package__}.reference_child")


class ReferenceBackend:
    """The C++ StableHLO reference interpreter in jaxlib (module docstring)."""

    name = "reference"
    settings = ()

    def __call__(self, module_text: str, args) -> list:
        from ..ir.decode import parse_elements_text

        request = pickle.dumps((module_text, [encode_argument(np.asarray(value)) for value in args]))
        try:
            status, payload = _CHILD.ask(request)
        except ChildDied as died:
            raise BackendCrash(self.name, str(died)) from None
        if status == ERROR:
            raise BackendError(self.name, payload.decode("utf-8"))
        return [parse_elements_text(text) for text in pickle.loads(payload)]
