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
from dataclasses import dataclass

import numpy as np

from ..ir.child_process import ERROR, ChildDied, ChildProcess
from ..ir.types import Token
from .errors import BackendCompileError, BackendCrash

_CHILD = ChildProcess(f"{__package__}.xla_passes_child")
NAME = "XLA CPU"


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

    @property
    def name(self) -> str:
        if self.order == 0:
            return "the program before any pass"
        if self.after == "pipeline-start":
            return f"start of pipeline {self.pipeline}"
        return f"pass {self.after} (pipeline {self.pipeline})"


@dataclass(frozen=True)
class CompiledPipeline:
    """Every stage of XLA's CPU pipeline for a module, and the compiled program's results."""

    stages: tuple
    results: list


def compile_pipeline(module_text: str, arguments, partitions: int = 1) -> CompiledPipeline:
    """``@main`` of the module compiled by XLA's CPU client for ``partitions`` devices
    with every pass's output dumped (xla_passes_child.py), and run on ``arguments``
    (each device's, ``[d][i]``, for more than one: then the results are each device's)."""
    per_device = [list(arguments)] if partitions == 1 else [list(device) for device in arguments]
    if any(isinstance(argument, Token) for device in per_device for argument in device):
        raise BackendCompileError(NAME, "a program that takes a token is not compiled pass by pass")
    arrays = [[np.asarray(argument) for argument in device] for device in per_device]
    request = pickle.dumps(("compile", (module_text, arrays[0] if partitions == 1 else arrays, partitions)))
    try:
        status, payload = _CHILD.ask(request)
    except ChildDied as died:
        raise BackendCrash(NAME, str(died)) from None
    if status == ERROR:
        raise BackendCompileError(NAME, payload.decode("utf-8"))
    dumped, results = pickle.loads(payload)
    return CompiledPipeline(tuple(_stage(order, *entry) for order, entry in enumerate(dumped)), results)


def translate(stage: Stage, partitions: int = 1) -> str:
    """The stage as StableHLO text with locations (jaxlib's ``hlo_to_stablehlo``); a
    stage the SPMD partitioner made of a program over ``partitions`` devices is each
    device's program, declared for that many (``mhlo.num_partitions``)."""
    try:
        status, payload = _CHILD.ask(pickle.dumps(("translate", (stage.hlo, partitions))))
    except ChildDied as died:
        raise TranslationError(f"jaxlib's translator died on it ({died})") from None
    if status == ERROR:
        raise TranslationError(f"jaxlib's translator refused it: {payload.decode('utf-8')}")
    return payload.decode("utf-8")


def _stage(order: int, name: str, hlo: bytes, text: str) -> Stage:
    """A stage from its dump's name, ``PIPELINE.after_PASS.before_PASS``."""
    pipeline, _, passes = name.partition(".after_")
    after, _, before = passes.partition(".before_")
    return Stage(order, pipeline, after, before, hlo, text)
