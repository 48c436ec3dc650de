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

_CHILD = ChildProcess(f"{__package__}.xla_passes_child")
NAME = "XLA CPU"


# HLO's collective groups over a mesh whose devices are not in iota order: the translation's
# sdy.mesh keeps the axes and drops device_ids (jaxlib 0.10.2), so its groups would be others.
_REORDERED_MESH = re.compile(r"replica_groups=mesh\[[^\]]*\], device_ids=\([^)]*\)")


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
    reordered = _REORDERED_MESH.search(stage.text)
    if reordered:
        raise TranslationError(f"a collective's groups are a mesh over reordered devices ({reordered.group(0)}), "
                               "whose device order jaxlib's translator drops")
    status, payload = _ask(("translate", (stage.hlo, partitions)), TranslationError)
    if status == ERROR:
        raise TranslationError(f"jaxlib's translator refused it: {payload.decode('utf-8')}")
    return payload.decode("utf-8")


def _stage(order: int, name: str, hlo: bytes, text: str, ran: str) -> Stage:
    """A stage from its dump's name, ``PIPELINE.after_PASS.before_PASS``."""
    pipeline, _, passes = name.partition(".after_")
    after, _, before = passes.partition(".before_")
    return Stage(order, pipeline, after, before, hlo, text, ran)
