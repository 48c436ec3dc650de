"""A deadline for a wait on a child process that serves requests over a pipe."""

from __future__ import annotations

import threading


class Deadline:
    """``with Deadline(process, seconds) as deadline:`` kills ``process`` if the block
    lasts longer than ``seconds`` (a blocked read then ends with EOF); ``expired``
    says whether it did."""

    def __init__(self, process, seconds: float):
        self.seconds = seconds
        self.expired = False
        self._timer = threading.Timer(seconds, self._expire, args=(process,))
        self._timer.daemon = True

    def _expire(self, process) -> None:
        self.expired = True
        process.kill()

    def __enter__(self) -> "Deadline":
        self._timer.start()
        return self

    def __exit__(self, *error) -> None:
        self._timer.cancel()
