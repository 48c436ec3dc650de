"""Any toolchain as a backend: a command that reads the MLIR and ``.npy`` inputs
and writes ``.npy`` outputs (``--backend-command``), no Python bindings needed.

The contract, for each program run:

* a fresh temporary directory holds ``program.mlir`` (the module's text, ``@main``
  its entry function) and ``input_0.npy``, ``input_1.npy`` ... (``@main``'s
  arguments, NumPy's format, in order); the command runs without a shell, in
  the caller's working directory (relative paths in it work);
* in the command, ``{mlir}`` is the module's path, ``{inputs}`` (a word of its
  own) the input files, one argument each, and ``{outputs}`` the directory for
  the results (the same temporary directory);
* the command writes ``@main``'s results as ``result_0.npy``, ``result_1.npy`` ...
  in ``{outputs}`` and exits with status 0;
* exit status 3 says "I cannot compile this program" (a verdict, with the
  command's stderr as the message); any other status, a death by a signal, or a
  run longer than ``timeout`` seconds is a crash (its last stderr lines as the
  message).
"""

from __future__ import annotations

import pathlib
import shlex
import subprocess
import tempfile

import numpy as np

from .errors import BackendCompileError, BackendCrash, BackendError

CANNOT_COMPILE = 3   # the exit status that says the tool cannot compile the program


class CommandBackend:
    """Run programs with ``command`` (a string split as a shell would, or a list of
    words) under the contract of the module docstring."""

    def __init__(self, command, name: str | None = None, timeout: float = 600.0, settings: tuple = ()):
        self.words = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.words:
            raise ValueError("the backend command is empty")
        # by default the command's words but its placeholders, without their folders ("python tool.py")
        self.name = name or " ".join(pathlib.Path(word).name for word in self.words if "{" not in word)
        self.timeout = timeout
        self.settings = tuple(settings)

    def __call__(self, module_text: str, args) -> list:
        with tempfile.TemporaryDirectory(prefix="stablehlo-interp-backend-") as directory:
            folder = pathlib.Path(directory)
            mlir = folder / "program.mlir"
            mlir.write_text(module_text, encoding="utf-8")
            inputs = []
            for index, value in enumerate(args):
                inputs.append(folder / f"input_{index}.npy")
                np.save(inputs[-1], np.asarray(value), allow_pickle=False)
            command = self._command_line(mlir, inputs, folder)
            try:
                finished = subprocess.run(command, capture_output=True, timeout=self.timeout)
            except subprocess.TimeoutExpired:
                raise BackendCrash(self.name, f"timed out after {self.timeout:g} s: {shlex.join(command)}") from None
            except OSError as error:   # not found, not executable
                raise BackendCrash(self.name, f"cannot start {shlex.join(command)}: {error}") from None
            said = _last_lines(finished.stderr)
            if finished.returncode == CANNOT_COMPILE:
                raise BackendCompileError(self.name, said or f"exit status {CANNOT_COMPILE}, no message")
            if finished.returncode != 0:
                how = (f"signal {-finished.returncode}" if finished.returncode < 0
                       else f"exit status {finished.returncode}")
                raise BackendCrash(self.name, f"{how}: {said}" if said else how)
            return _results(folder, self.name)

    def _command_line(self, mlir: pathlib.Path, inputs: list, folder: pathlib.Path) -> list:
        words: list[str] = []
        for word in self.words:
            if word == "{inputs}":
                words.extend(str(path) for path in inputs)
            else:
                words.append(word.replace("{mlir}", str(mlir)).replace("{outputs}", str(folder)))
        return words


def _results(folder: pathlib.Path, name: str) -> list:
    results: list[np.ndarray] = []
    while (path := folder / f"result_{len(results)}.npy").exists():
        try:
            results.append(np.load(path, allow_pickle=False))
        except (ValueError, OSError) as error:
            raise BackendError(name, f"cannot read {path.name}: {error}") from None
    return results


def _last_lines(stderr: bytes, count: int = 20) -> str:
    lines = [line.rstrip() for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    return "\n".join(lines[-count:])
