"""What a tool runs: a loaded program, the function to run and its arguments.

Every tool accepts the same targets as :func:`stablehlo_interp.load` (MLIR
text, a path, bytes, an ``ir.Module``, a ``jax.stages.Lowered``, a
``jax.export.Exported``, a :class:`~stablehlo_interp.Program`) or a Python
function that ``jax.jit`` can trace, followed by its arguments (pytrees are
flattened to the module's arguments, in order).
"""

from __future__ import annotations

import functools
import pathlib
from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentError
from ..program import Program, load


@dataclass
class Subject:
    """A program ready to run: ``program.run(*args, function=function)``.

    ``traced`` is JAX's ``jax.stages.Traced`` when the target was a Python
    function (its ``.jaxpr`` is what :func:`explain` prints), else None.
    """

    program: Program
    args: list
    function: str
    traced: object = None

    def run(self, listeners=()) -> list:
        return self.program.run(*self.args, function=self.function, listeners=listeners)

    @property
    def module_text(self) -> str:
        """The module as MLIR text with locations (what backends compile).

        Text parsed from a file has locations in file ``"-"``; they name the file here.
        """
        text = self.program.module.operation.get_asm(enable_debug_info=True)
        name = self.program.file_name
        if name:
            text = text.replace('loc("-":', 'loc("' + name.replace("\\", "\\\\").replace('"', '\\"') + '":')
        return text


def prepare(target, args, function: str | None = None) -> Subject:
    """Load ``target`` (a module in any form, or a jit-able function) for ``args``."""
    if isinstance(target, Program):
        program, traced = target, None
    elif _is_jax_function(target):
        traced, args = _trace(target, args)
        program = load(traced.lower())
    else:
        program, traced = load(target), None
    return Subject(program, list(args), function or program.entry_name, traced)


def _is_jax_function(target) -> bool:
    if not callable(target):
        return False
    # Lowered/Exported objects are callable (Exported.call) but are modules, not functions.
    return not (hasattr(target, "compiler_ir") or hasattr(target, "mlir_module_serialized"))


def _trace(function, args):
    """``jax.jit`` trace of ``function`` and the flat argument list of its module.

    A plain function is traced with ``keep_unused=True`` so that every leaf is an
    argument; an already jitted function keeps its own options, and the leaves
    its lowering dropped (unused ones) are left out here too.
    """
    import jax

    _hide_our_frames()
    jitted = function if hasattr(function, "trace") else jax.jit(function, keep_unused=True)
    traced = jitted.trace(*args)
    leaves = [_as_argument(leaf) for leaf in jax.tree.leaves(args)]
    lowered = traced.lower()
    kept = getattr(lowered, "_lowering", None) and lowered._lowering.compile_args.get("kept_var_idx")
    if kept is not None and len(kept) != len(leaves):
        leaves = [leaf for index, leaf in enumerate(leaves) if index in kept]
    return traced, leaves


@functools.cache
def _hide_our_frames() -> None:
    """Keep this package's frames out of the source locations JAX records, so an
    op's location is the user's line (as for JAX's own frames). The battery's
    programs are user code: their frames stay."""
    from jax._src import source_info_util

    package = pathlib.Path(__file__).resolve().parent.parent
    for path in sorted(package.rglob("*.py")):
        if path.name != "battery.py" and str(path) not in source_info_util._exclude_paths:
            source_info_util.register_exclusion(str(path))


def _as_argument(leaf):
    """A pytree leaf as the value the module receives: JAX arrays to NumPy, with
    JAX's canonical dtype (float64 becomes float32 unless x64 is on). Python
    scalars are left to Program.run, which converts them to the argument type."""
    import jax

    if isinstance(leaf, (bool, int, float, complex)):
        return leaf
    array = np.asarray(leaf)
    try:
        return array.astype(jax.dtypes.canonicalize_dtype(array.dtype), copy=False)
    except TypeError as error:
        raise ArgumentError(f"cannot pass {type(leaf).__name__} to a jitted function: {error}") from None
