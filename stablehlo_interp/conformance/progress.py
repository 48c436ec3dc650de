"""The progress line of a run over many files (``test`` and ``conform``)."""

from __future__ import annotations


class ProgressLine:
    """``[files done/total] counts ...`` rewritten in place while ``out`` is a terminal;
    nothing at all otherwise (a pipe or a file gets the report alone)."""

    def __init__(self, out, total_files: int):
        self.out = out
        self.total_files = total_files
        self.files_done = 0
        self.shown = out.isatty()

    def clear(self) -> None:
        """Erase the line (before a report line is written, and at the end)."""
        if self.shown:
            self.out.write("\r\033[K")

    def file_done(self, counts: str) -> None:
        """One more file is done; ``counts`` says how the run stands."""
        self.files_done += 1
        if self.shown:
            self.out.write(f"[{self.files_done}/{self.total_files}] {counts} ...")
            self.out.flush()
