"""XLA's CPU pipeline, pass by pass: the module after every pass that changed it, and
each such module translated back to StableHLO (tools/passes.py runs them).

XLA's compiler and jaxlib's translator may abort their process on a program they
were not written for: both run in a child process (xla_passes_child.py). A compile
that fails is a :class:`BackendCompileError`, a child that dies a :class:`BackendCrash`;
a stage the translator refuses or dies on is a :class:`TranslationError` (the stage
cannot be run, which the tool reports).
"""

from __future__ import annotations

import pickle
import re
from dataclasses import dataclass

import numpy as np

from ..ir.child_process import ERROR, ChildDied, ChildProcess
from ..ir.types import Token
from .errors import BackendCompileError, BackendCrash, BackendError

_CHILD = ChildProcess(f"{__package__}.xla_passes_child", {"JAX_PLATFORMS": "cpu"})   # whatever its parent's lists
NAME = "XLA CPU"


# HLO's collective groups over a mesh whose devices are not in iota order: the translation's
# sdy.mesh keeps the axes and drops device_ids (jaxlib 0.10.2), so its groups would be others;
# they are read from XLA's text instead, by the collective's channel id (reordered_groups).
_REORDERED_MESH = re.compile(r"replica_groups=mesh\[[^\]]*\], device_ids=")
_REORDERED_GROUPS = re.compile(r"channel_id=(?P<channel>\d+), replica_groups=mesh\[(?P<axes>[^\]]*)\], "
                               r"device_ids=\(\[(?P<dims>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?\) \{(?P<over>[^}]*)\}")
_MESH_AXIS = re.compile(r"^'([^']+)'=(\d+)$")


class TranslationError(Exception):
    """jaxlib's HLO → StableHLO translator refused a stage or died on it."""


@dataclass(frozen=True)
class Stage:
    """The module as XLA's pass ``after`` (of ``pipeline``) left it, before ``before``:
    ``hlo`` the HloModuleProto's bytes, ``text`` XLA's text of it. ``after`` is
    ``"pipeline-start"`` for the module as a pipeline found it."""

    order: int
    pipeline: str
    after: str
    before: str
    hlo: bytes
    text: str
    ran: str = ""                 # the pass that ran next after the dump before (that dump's ``before``)

    @property
    def name(self) -> str:
        if self.order == 0:
            return "the program before any pass"
        if self.after == "pipeline-start":
            return f"start of pipeline {self.pipeline}"
        return f"pass {self.after} (pipeline {self.pipeline})"


def compile_pipeline(module_text: str, partitions: int = 1) -> tuple:
    """The stages of ``@main`` of the module compiled by XLA's CPU client for
    ``partitions`` devices, every pass's output dumped (xla_passes_child.py); the
    compiled program runs with :func:`run_compiled`."""
    status, payload = _ask(("compile", (module_text, partitions)), BackendCrash)
    if status == ERROR:
        raise BackendCompileError(NAME, payload.decode("utf-8"))
    stages: list[Stage] = []
    for order, (name, hlo, text) in enumerate(pickle.loads(payload)):
        stages.append(_stage(order, name, hlo, text, stages[-1].before if stages else ""))
    return tuple(stages)


def run_compiled(arguments: list, partitions: int = 1) -> list:
    """The program :func:`compile_pipeline` compiled last, run on ``arguments`` (each
    device's, ``[d][i]``, for more than one device: then the results are each device's)."""
    per_device = [list(arguments)] if partitions == 1 else [list(device) for device in arguments]
    if any(isinstance(argument, Token) for device in per_device for argument in device):
        raise BackendError(NAME, "a program that takes a token is not run here")
    arrays = [[np.asarray(argument) for argument in device] for device in per_device]
    status, payload = _ask(("run", arrays[0] if partitions == 1 else arrays), BackendCrash)
    if status == ERROR:
        raise BackendError(NAME, payload.decode("utf-8"))
    return pickle.loads(payload)


def _ask(request: tuple, died: type[Exception]) -> tuple[bytes, bytes]:
    try:
        return _CHILD.ask(pickle.dumps(request))
    except ChildDied as why:
        raise (BackendCrash(NAME, str(why)) if died is BackendCrash else
               TranslationError(f"jaxlib's translator died on it ({why})")) from None


def translate(stage: Stage, partitions: int = 1) -> str:
    """The stage as StableHLO text with locations (jaxlib's ``hlo_to_stablehlo``); a
    stage the SPMD partitioner made of a program over ``partitions`` devices is each
    device's program, declared for that many (``mhlo.num_partitions``)."""
    status, payload = _ask(("translate", (stage.hlo, partitions, reordered_groups(stage.text))), TranslationError)
    if status == ERROR:
        raise TranslationError(f"jaxlib's translator refused it: {payload.decode('utf-8')}")
    return payload.decode("utf-8")


def reordered_groups(text: str) -> dict:
    """``{channel id: replica groups}`` of XLA's collectives whose groups are a mesh over
    reordered devices (``replica_groups=mesh['a'=4,'b'=2], device_ids=([2,4]T(1,0)) {'a'}``:
    the mesh's devices are an iota of shape ``[2,4]`` transposed, and the devices that
    differ only along the listed axes form a group, in those axes' order). A TranslationError
    where such groups cannot be read (a sub-axis, no channel id)."""
    groups = {}
    for match in _REORDERED_GROUPS.finditer(text):
        axes = [_MESH_AXIS.match(axis.strip()) for axis in match["axes"].split(",")]
        over = [axis.strip().strip("'") for axis in match["over"].split(",")]
        names = [axis.group(1) if axis else None for axis in axes]
        if None in names or any(name not in names for name in over):
            raise TranslationError(f"a collective's groups over mesh axes XLA's text does not name plainly: "
                                   f"{match.group(0)}")
        devices = iota_devices(match["dims"], match["perm"]).reshape([int(axis.group(2)) for axis in axes if axis])
        chosen = [names.index(name) for name in over]
        others = [axis for axis in range(len(names)) if axis not in chosen]
        ordered = devices.transpose(others + chosen)
        size = int(np.prod([devices.shape[axis] for axis in chosen]))
        groups[int(match["channel"])] = ordered.reshape(-1, size).tolist()
    if len(groups) < len(_REORDERED_MESH.findall(text)):
        raise TranslationError("a collective's groups are a mesh over reordered devices that XLA's text does not "
                               "give plainly (jaxlib's translator drops that order)")
    return groups


def iota_devices(dims: str, perm: str | None) -> np.ndarray:
    """XLA's iota list of devices ``[dims]T(perm)`` (``[4,2]T(1,0)``: ``arange(8)`` shaped
    ``[4,2]``, transposed by ``perm`` where given), as the array it names."""
    shape = [int(d) for d in dims.split(",")]
    devices = np.arange(int(np.prod(shape))).reshape(shape)
    return devices.transpose([int(p) for p in perm.split(",")]) if perm else devices


def _stage(order: int, name: str, hlo: bytes, text: str, ran: str) -> Stage:
    """A stage from its dump's name, ``PIPELINE.after_PASS.before_PASS``."""
    pipeline, _, passes = name.partition(".after_")
    after, _, before = passes.partition(".before_")
    return Stage(order, pipeline, after, before, hlo, text, ran)
