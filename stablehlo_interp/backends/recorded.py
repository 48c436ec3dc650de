"""A backend's answers kept on disk, and played back where that backend is absent.

An accelerator is lent for a while; CI never has one. :class:`RecordingBackend` runs
another backend and keeps each program's answer (its results, or its refusal) in a
folder; :class:`RecordedBackend` (``backend="recorded:FOLDER"``) answers the same
programs on the same arguments from that folder, anywhere, and refuses any other
program (``BackendError``: "not recorded"), so a test never sees a value the
backend did not give. What the folder holds:

* ``recording.json``: what recorded it (the platform, the device, the versions of
  JAX, jaxlib and the platform's runtime, the command) and the backend's settings;
* ``<key>.npz`` (the results, ``result_0`` ...) or ``<key>.json`` (the refusal: its
  kind and message) per answer, where ``key`` is a hash of the module's text and the
  arguments' types and bytes (:func:`answer_key`); with ``keep_programs``, also
  ``<key>.mlir`` and ``<key>.arguments.npz``, the module and its arguments, which make
  the folder a set of cases of its own (leave them out for programs kept elsewhere,
  such as StableHLO's test files).

Several processes may record into one folder at once (``conform -j``): each answer
is a file of its own, written whole under a temporary name and then renamed.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys
import tempfile

import ml_dtypes
import numpy as np

from ..ir.types import Token
from ..judge.precision import declared_precision
from .errors import BackendCompileError, BackendCrash, BackendError

RECORDING = "recording.json"
_REFUSALS = {cls.kind: cls for cls in (BackendError, BackendCompileError, BackendCrash)}


def answer_key(module_text: str, args) -> str:
    """The name of a program's answer on ``args``: a hash of the module's text and of each
    argument's dtype name, shape and bytes (a token counts as its kind alone)."""
    digest = hashlib.sha256(module_text.encode("utf-8"))
    for value in args:
        if isinstance(value, Token):
            digest.update(b"\0token")
            continue
        array = np.ascontiguousarray(value)
        digest.update(f"\0{array.dtype.name}{array.shape}".encode())   # (str: '<V1' for i4 and for three f8s)
        digest.update(array.tobytes())
    return digest.hexdigest()[:24]


def describe_platform(platform: str) -> dict:
    """The platform's device kind and the versions that decide its values (JAX, jaxlib,
    and the platform's own runtime where JAX reports one)."""
    import jax
    import jax.extend
    import jaxlib

    device = jax.devices(platform)[0]
    backend = jax.extend.backend.get_backend(platform)
    return {"platform": platform, "device_kind": device.device_kind, "jax": jax.__version__,
            "jaxlib": jaxlib.__version__, "platform_version": str(getattr(backend, "platform_version", ""))}


class RecordingBackend:
    """``backend`` (any :class:`~stablehlo_interp.backends.Backend`) whose answers
    are kept in ``folder`` (module docstring); it answers as ``backend`` does."""

    def __init__(self, backend, folder, keep_programs: bool = True, command: str | None = None):
        self.backend = backend
        self.folder = pathlib.Path(folder)
        self.keep_programs = keep_programs
        self.command = command or " ".join(sys.argv)
        self.name = backend.name
        self.settings = tuple(backend.settings)
        self.platform = getattr(backend, "platform", None)
        self.precision = getattr(backend, "precision", None)
        self._described = False

    def _describe(self) -> None:
        """Write ``recording.json`` (at the first answer: asking the platform opens its
        device, which a worker process is to hold, not the one that made this backend)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        description = {"backend": self.name, "settings": list(self.settings), "command": self.command}
        if self.platform is not None:
            description.update(describe_platform(self.platform))
        _write_whole(self.folder / RECORDING, json.dumps(description, indent=1).encode())
        self._described = True

    def __call__(self, module_text: str, args, **options) -> list:
        if not self._described:
            self._describe()
        key = answer_key(module_text, args)
        if self.keep_programs:
            _write_whole(self.folder / f"{key}.mlir", module_text.encode("utf-8"))
            _save_whole(self.folder / f"{key}.arguments.npz", args)
        try:
            results = self.backend(module_text, args, **options)
        except BackendError as refusal:
            _write_whole(self.folder / f"{key}.json",
                         json.dumps({"kind": refusal.kind, "message": refusal.message}).encode())
            raise
        _save_whole(self.folder / f"{key}.npz", results)
        return results

    def lower(self, traced):
        """The backend's own lowering (a JAX platform's), for programs with host callbacks."""
        return self.backend.lower(traced)


class RecordedBackend:
    """The answers a :class:`RecordingBackend` kept in ``folder``, played back: the
    recorded results of a program on the same arguments, the recorded refusal, or
    ``BackendError`` for a program it did not see."""

    def __init__(self, folder):
        self.folder = pathlib.Path(folder)
        try:
            self.recording = json.loads((self.folder / RECORDING).read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"{self.folder} holds no recording of a backend ({RECORDING}: {error})") from None
        self.name = self.recording["backend"]
        self.platform = self.recording.get("platform")
        self.precision = declared_precision(self.platform, self.recording.get("device_kind"))
        versions = ", ".join(f"{k} {' '.join(str(self.recording[k]).split())}"
                             for k in ("jax", "jaxlib", "platform_version") if self.recording.get(k))
        self.settings = (*self.recording.get("settings", ()),
                         f"answers recorded on {self.recording.get('device_kind') or self.name}"
                         + (f" ({versions})" if versions else "") + f", played back from {self.folder}")

    def __call__(self, module_text: str, args, **options) -> list:
        key = answer_key(module_text, args)
        results = self.folder / f"{key}.npz"
        if results.exists():
            return load_values(results)
        refusal = self.folder / f"{key}.json"
        if refusal.exists():
            said = json.loads(refusal.read_text())
            raise _REFUSALS.get(said["kind"], BackendError)(self.name, said["message"])
        raise BackendError(self.name, f"this program on these arguments was not recorded in {self.folder} "
                                      f"(answer {key}): record it where {self.name} runs")


def load_values(path) -> list:
    """The arrays a recording saved, in order (``result_0`` ... or ``argument_0`` ...), each
    of its own dtype (bf16 and the other types of ml_dtypes, which NumPy's format keeps as
    raw bytes, are saved as unsigned integers of their width with the dtype in the name)."""
    with np.load(path, allow_pickle=False) as archive:
        named = [(name, *_index_and_dtype(name)) for name in archive.files]
        return [archive[name] if dtype is None else archive[name].view(dtype) for name, _, dtype in sorted(
            named, key=lambda entry: entry[1])]


def _index_and_dtype(name: str) -> tuple:
    """``result_3`` -> (3, None); ``result_3.bfloat16`` -> (3, bfloat16)."""
    stem, _, dtype = name.partition(".")
    return int(stem.rpartition("_")[2]), (np.dtype(getattr(ml_dtypes, dtype)) if dtype else None)


def _save_whole(path: pathlib.Path, values) -> None:
    stem = "argument" if path.name.endswith(".arguments.npz") else "result"
    arrays = {}
    for index, value in enumerate(values):
        array = np.asarray(value)
        if array.dtype.type.__module__ == "ml_dtypes":   # NumPy's format cannot name it: its bits, its name
            arrays[f"{stem}_{index}.{array.dtype.name}"] = array.view(f"u{array.dtype.itemsize}")
        else:
            arrays[f"{stem}_{index}"] = array
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz", delete=False) as file:
        np.savez_compressed(file, **arrays)
    os.replace(file.name, path)


def _write_whole(path: pathlib.Path, data: bytes) -> None:
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as file:
        file.write(data)
    os.replace(file.name, path)
