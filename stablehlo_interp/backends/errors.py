"""What a backend raises when it gives no values: verdicts on the backend, not
errors of the interpreter (backends/__init__.py)."""

from __future__ import annotations


class BackendError(Exception):
    """The backend compiled the program and failed to run it. ``backend``: its
    name; ``message``: what the backend said (its diagnostics, its stderr)."""

    kind = "failed to run"

    def __init__(self, backend: str, message: str):
        super().__init__(f"{backend} {self.kind}: {message}")
        self.backend, self.message = backend, message


class BackendCompileError(BackendError):
    """The backend cannot compile the program (its compiler's diagnostics)."""

    kind = "cannot compile"


class BackendCrash(BackendError):
    """The backend's compiler or runtime died (a signal, an abort, a non-zero exit
    status where its contract has none, a timeout): ``message`` says how, and its
    last words."""

    kind = "crashed"
