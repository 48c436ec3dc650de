"""IREE as a backend (``--backend iree``, ``"iree:llvm-cpu"``): its compiler
(``iree-base-compiler``) and runtime (``iree-base-runtime``), the ``iree`` extra.

Both run in a child process (iree_child.py): the compiler or the runtime may abort
on a program it was not written for, and that is a verdict (:class:`BackendCrash`),
not the end of the tool.

IREE changes some programs' types before compiling them, by flags whose defaults
are IREE's choice. ``--iree-input-demote-f64-to-f32`` is on by default in IREE: an
f64 program silently runs in f32, arguments and results too. A conformance tool
runs the program as written, so this backend turns it off; give
``--iree-input-demote-f64-to-f32=true`` to judge IREE's default. Either way the
backend's ``settings`` say which of these flags are in effect, and every report
prints them. The others (``--iree-input-demote-i64-to-i32``,
``--iree-input-demote-f32-to-f16``, ``--iree-input-promote-bf16-to-f32``,
``--iree-input-promote-f16-to-f32``) are off by default and stay so unless given.
Under a flag that changes a type, arguments are passed in the width the compiled
function takes and results are returned in the module's types (widened back), so
that the comparison shows what the narrower arithmetic did.
"""

from __future__ import annotations

import pickle

import numpy as np

from ..ir.child_process import ERROR, ChildDied, ChildProcess
from .errors import BackendCompileError, BackendCrash, BackendError

# The flags that change a program's types: IREE 3.13's default (read from compiled signatures), what they do.
TYPE_FLAGS = {
    "--iree-input-demote-f64-to-f32": (True, "f64 (and complex<f64>) is computed in f32"),
    "--iree-input-demote-i64-to-i32": (False, "i64 is computed in i32"),
    "--iree-input-demote-f32-to-f16": (False, "f32 is computed in f16"),
    "--iree-input-promote-bf16-to-f32": (False, "bf16 is computed in f32"),
    "--iree-input-promote-f16-to-f32": (False, "f16 is computed in f32"),
}
# Ours where they are not IREE's: the program as written.
DEFAULT_FLAGS = ("--iree-input-demote-f64-to-f32=false",)
# The runtime's driver for each compiler target.
DRIVERS = {"llvm-cpu": "local-task", "vmvx": "local-task", "vulkan-spirv": "vulkan", "cuda": "cuda",
           "rocm": "hip", "hip": "hip", "metal-spirv": "metal"}
TARGET_DEFAULT_FLAGS = {"llvm-cpu": ("--iree-llvmcpu-target-cpu=host",)}

_CHILD = ChildProcess(f"{__package__}.iree_child")
_ERRORS = {"compile": BackendCompileError, "crash": BackendCrash, "run": BackendError}   # iree_child's kinds


class IreeBackend:
    """IREE's compiler for ``target`` (``llvm-cpu``, ``vmvx``, ``cuda`` ...) and its
    runtime's ``driver`` (by default the target's: :data:`DRIVERS`); ``flags``: extra
    ``iree-compile`` flags, which replace this backend's defaults of the same name. A
    compile that takes longer than ``compile_timeout`` seconds is a crash."""

    def __init__(self, target: str = "llvm-cpu", flags=(), driver: str | None = None,
                 compile_timeout: float = 600.0):
        self.target = target
        self.compile_timeout = compile_timeout
        self.driver = driver or DRIVERS.get(target, "local-task")
        given = {_flag_name(flag) for flag in flags}
        defaults = DEFAULT_FLAGS + TARGET_DEFAULT_FLAGS.get(target, ())
        self.flags = tuple(f for f in defaults if _flag_name(f) not in given) + tuple(flags)
        self.name = f"iree:{target}"

    @property
    def settings(self) -> tuple:
        """One sentence per type-changing flag in effect, and the f64 demotion's state always."""
        sentences = []
        for flag, (iree_default, effect) in TYPE_FLAGS.items():
            on = self.flag_value(flag, iree_default)
            if on:
                sentences.append(f"{effect} ({flag}={'true' if on else 'false'}"
                                 f"{', IREE default' if on == iree_default else ''})")
            elif iree_default:
                sentences.append(f"{effect.split(' is ')[0]} runs as written ({flag}=false; IREE's default demotes)")
        return tuple(sentences) + tuple(f"compiler flag {f}" for f in self.flags if _flag_name(f) not in TYPE_FLAGS)

    def flag_value(self, flag: str, default: bool) -> bool:
        """Whether the boolean compiler flag ``flag`` is on under this backend's flags."""
        value = default
        for given in self.flags:
            name, _, text = given.partition("=")
            if name == flag:
                value = text.lower() not in ("false", "0") if text else True
        return value

    def __call__(self, module_text: str, args) -> list:
        request = pickle.dumps((module_text, self.target, self.driver, self.flags,
                                [np.asarray(value) for value in args], self.compile_timeout))
        try:
            status, payload = _CHILD.ask(request)
        except ChildDied as died:
            raise BackendCrash(self.name, str(died)) from None
        if status == ERROR:
            kind, message = payload.decode("utf-8").split(":", 1)   # iree_child.Refused
            raise _ERRORS[kind](self.name, message)
        results = pickle.loads(payload)
        if any(self.flag_value(flag, default) for flag, (default, _) in TYPE_FLAGS.items()):
            results = _in_module_types(results, module_text)
        return results


def _flag_name(flag: str) -> str:
    return flag.partition("=")[0]


def _in_module_types(results: list, module_text: str) -> list:
    """Results widened (or narrowed) back to ``@main``'s result types where a
    type-changing flag changed their width (same kind of number)."""
    from ..ir.declarations import decode_module
    from ..ir.sources import parse
    from ..ir.types import TensorType

    parsed = parse(module_text)
    main = next(f for f in decode_module(parsed.module).functions if f.name == "main")
    converted = []
    for value, declared in zip(results, main.result_types):
        dtype = declared.dtype if isinstance(declared, TensorType) else value.dtype
        same_kind = value.dtype.kind == np.dtype(dtype).kind
        converted.append(value.astype(dtype) if same_kind and value.dtype != dtype else value)
    return converted + results[len(converted):]
