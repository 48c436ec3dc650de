"""The child process of :class:`~.jax.JaxChildBackend`: compiles and runs each module it
is sent with one of JAX's platforms, under the ``XLA_FLAGS`` its parent set for it. XLA
reads that variable once, when JAX first initializes its backends, and aborts the process
on a flag it does not know ("Unknown flag in XLA_FLAGS"): only this process dies.

A request is a pickled ``(platform, module_text, arguments, per_device)``; the reply is
OK with the pickled list of results (with ``per_device``, ``arguments`` are each
device's and the results too: :meth:`~.jax.JaxBackend.run_per_device`), or ERROR with
``"compile:"`` or ``"run:"`` and XLA's message.
"""

from __future__ import annotations

import pickle

from ..ir.child_process import serve
from .errors import BackendCompileError, BackendError
from .jax import JaxBackend


class Refused(Exception):
    """XLA gave no values: ``kind`` is ``compile`` or ``run``, the message XLA's."""


def _answer(request: bytes) -> bytes:
    platform, module_text, arguments, per_device = pickle.loads(request)
    backend = JaxBackend(platform)
    try:
        return pickle.dumps(backend.run_per_device(module_text, arguments) if per_device
                            else backend(module_text, arguments))
    except BackendCompileError as error:
        raise Refused(f"compile:{error.message}") from None
    except BackendError as error:
        raise Refused(f"run:{error.message}") from None


if __name__ == "__main__":
    serve(_answer, reported=(Refused,))
