"""Code generation or not: recompile a program on XLA's CPU under each candidate XLA flag,
and name the flags under which its result is the interpreter's again.

    report = si.codegen_options(f, x)
    print(report)        # does XLA CPU's result differ beyond noise; with which flags it does not
    report.differs       # XLA CPU's result (under the default flags) differs beyond noise
    report.restoring     # ("--xla_cpu_max_isa=SSE4_2", ...): the flags under which it equals the interpreter's

When XLA's CPU computes something else than the interpreter, the cause can be a pass that
rewrote the program (tools/passes.py finds which) or how XLA generates machine code for
this host: vector instructions and their approximations of transcendental functions
(``--xla_cpu_max_isa``), fast-math rewrites that assume no NaN or infinity
(``--xla_cpu_enable_fast_math``), min and max that drop NaNs
(``--xla_cpu_enable_fast_min_max``), the fusion emitters, LLVM's optimization level.
Each of :data:`CANDIDATES` undoes one such choice; the last two switch off a pass that
rewrites values (the algebraic simplifier, constant folding), and ``options`` takes any
flag, another pass's switch too. XLA reads ``XLA_FLAGS`` once per
process, when JAX initializes its backends, so each compile runs in a fresh child
process of its own (:class:`~stablehlo_interp.backends.JaxChildBackend`), ``jobs`` of
them at a time. Its ``XLA_FLAGS`` are ``flags`` (by default this process's
``XLA_FLAGS``, the setting the user runs under, but the number of host devices) followed by the candidate, which
overrides an earlier value of its flag. A flag XLA does not know aborts its child
("Unknown flag in XLA_FLAGS"): the report lists it as rejected and goes on.

The judge is the one :func:`~stablehlo_interp.compare` applies to a whole program's
results: a compiled result equals the interpreter's when it is within tolerance
(judge/difference.py), and is noise when it is within the noise estimated for the whole
program, the interpreter's runs with every op's results moved within that op's rounding
bound (judge/bounds.py, ``noise_runs`` and ``spread_allowance``): what another summation
order, a fused multiply-add or excess precision can produce. Only a result beyond that
noise is a difference; the candidates are tried only then.
"""

from __future__ import annotations

import concurrent.futures
import os
import textwrap
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..backends import BackendCrash, BackendError, JaxChildBackend
from ..backends.jax import DEVICE_COUNT_FLAGS
from ..errors import InterpreterError
from ..judge.bounds import noise_runs, spread_allowance, within
from ..judge.difference import Difference, difference, tolerances
from ..ops.host_callback import TARGET as HOST_CALLBACK
from ..program import prepare
from ..program.calls import interpreter_platform
from ..program.signature import is_jax_function
from .compare import module_text

# XLA's CPU flags (jaxlib 0.10.2) that each undo one choice of code generation or
# optimization; each is accepted by that XLA (tests/test_codegen.py). Flags XLA does not
# know there (it aborts on them): --xla_cpu_disable_slp_vectorizer,
# --xla_cpu_disable_loop_unrolling, --xla_cpu_use_multi_output_fusion,
# --xla_cpu_optimize_for_size, --xla_cpu_disable_platform_dependent_math.
CANDIDATES: tuple[str, ...] = (
    "--xla_cpu_max_isa=SSE4_2",             # no AVX: 128-bit vectors, no fused multiply-add
    "--xla_cpu_max_isa=AVX",                # 256-bit vectors, no fused multiply-add
    "--xla_cpu_max_isa=AVX2",               # no AVX-512
    "--xla_cpu_prefer_vector_width=128",
    "--xla_cpu_enable_fast_math=false",
    "--xla_cpu_enable_fast_math=true",
    "--xla_cpu_fast_math_honor_nans=true",
    "--xla_cpu_fast_math_honor_infs=true",
    "--xla_cpu_fast_math_honor_division=true",
    "--xla_cpu_fast_math_honor_functions=true",
    "--xla_cpu_enable_fast_min_max=false",
    "--xla_cpu_enable_fast_min_max=true",
    "--xla_cpu_ftz=false",                  # subnormals kept
    "--xla_cpu_enable_platform_dependent_math=false",
    "--xla_cpu_strict_dot_conv_math=true",
    "--xla_cpu_use_fusion_emitters=false",
    "--xla_cpu_use_thunk_runtime=false",
    "--xla_cpu_use_xnnpack=false",
    "--xla_cpu_use_onednn=false",
    "--xla_cpu_multi_thread_eigen=false",
    "--xla_cpu_enable_concurrency_optimized_scheduler=false",
    "--xla_llvm_disable_expensive_passes=true",
    "--xla_backend_optimization_level=0",
    # Two passes that rewrite values, not code generation: XLA ignores the name of a
    # pass it does not have, so each is one that changes a program of tests/test_codegen.py.
    "--xla_disable_hlo_passes=algsimp",            # the algebraic simplifier: log(x^y) -> y·log|x|
    "--xla_disable_hlo_passes=constant_folding",   # ops on constants evaluated at compile time
)

# What a compile under some flags gave, against the interpreter's results.
EQUAL = "equals the interpreter's"
NOISE = "is within the noise of the interpreter's"
DIFFERS = "differs from the interpreter's beyond noise"
REJECTED = "rejected: XLA does not know the flag"
FAILED = "gave no value"
UNKNOWN_FLAG = "Unknown flag in XLA_FLAGS"
# Equinox's runtime checks (eqx.error_if: every Optimistix, Diffrax, Lineax program) are host
# callbacks unless EQX_ON_ERROR says otherwise when the program is traced.
EQUINOX_CHECKS = "Equinox's runtime checks are host callbacks: EQX_ON_ERROR=nan makes them NaN values instead"
WIDTH = 120   # of the report's lists of flags


@dataclass
class FlagRun:
    """One compile on XLA's CPU under ``flags`` (the candidate ``flag`` added to the
    default flags; ``flag`` is empty for the default compile), judged: ``status`` one of
    EQUAL, NOISE, DIFFERS, REJECTED, FAILED; ``differences`` per result, None where it
    is within tolerance; ``message``: XLA's words where it gave no value."""

    flag: str
    flags: str
    status: str
    differences: list = field(default_factory=list)
    message: str = ""

    @property
    def restores(self) -> bool:
        return self.status in (EQUAL, NOISE)


@dataclass
class CodegenReport:
    """The outcome of :func:`codegen_options`: the default compile and, when it differs
    beyond noise, each candidate flag's."""

    flags: str                  # the XLA flags every compile starts from
    default: FlagRun
    options: list               # a FlagRun per candidate flag tried
    result_names: tuple = ()

    @property
    def ok(self) -> bool:
        """XLA CPU's result under the default flags equals the interpreter's (within noise)."""
        return self.default.restores

    @property
    def differs(self) -> bool:
        """XLA CPU's result under the default flags differs from the interpreter's beyond noise."""
        return self.default.status == DIFFERS

    @property
    def restoring(self) -> tuple[str, ...]:
        """The candidate flags under which the compiled result equals the interpreter's
        (within noise)."""
        return tuple(run.flag for run in self.options if run.restores)

    @property
    def rejected(self) -> tuple[str, ...]:
        """The candidate flags XLA does not know (it aborted on them)."""
        return tuple(run.flag for run in self.options if run.status == REJECTED)

    def __str__(self) -> str:
        under = f" (XLA_FLAGS={self.flags})" if self.flags else ""
        if self.default.status in (FAILED, REJECTED):
            return f"XLA CPU{under} {self.default.status}: {self.default.message}"
        if not self.differs:
            return f"XLA CPU's compiled result{under} {self.default.status}: no flag to look for"
        lines = [f"XLA CPU's compiled result{under} {DIFFERS}"]
        lines += [f"  {self._name(i)}: {d.describe('cpu')}" for i, d in enumerate(self.default.differences)
                  if d is not None]
        lines += [f"with {run.flag} the compiled result {run.status}" for run in self.options if run.restores]
        if not self.options:
            lines.append("no candidate flag tried")
            return "\n".join(lines)
        if all(run.status == DIFFERS for run in self.options):
            tried = "the one flag" if len(self.options) == 1 else f"each of the {len(self.options)} flags"
            lines.append(f"no candidate flag restores the interpreter's result: under {tried} tried it differs "
                         "beyond noise (not a choice these flags control: another pass?)")
            return "\n".join(lines)
        if not self.restoring:
            lines.append("no candidate flag restores the interpreter's result")
        lines.append("each flag's compile:")
        for status in (EQUAL, NOISE, DIFFERS, FAILED, REJECTED):
            runs = [run for run in self.options if run.status == status]
            quiet = [run.flag for run in runs if not run.message]
            if quiet:
                lines.append(textwrap.fill(", ".join(quiet), WIDTH, initial_indent=f"  {status}: ",
                                           subsequent_indent="      ", break_on_hyphens=False))
            lines += [f"  {status}: {run.flag} ({run.message})" for run in runs if run.message]
        return "\n".join(lines)

    def _name(self, index: int) -> str:
        return self.result_names[index] if index < len(self.result_names) else f"result #{index}"


def codegen_options(target: Any, *args: Any, options: Sequence[str] | None = None, flags: str | None = None,
                    tolerance: Any = None, jobs: int = 2, timeout: float = 600.0, function: str | None = None,
                    **kwargs: Any) -> CodegenReport:
    """Whether XLA CPU's compiled result of ``target`` on ``args`` (what :func:`si.run`
    takes: a JAX function, a ``Lowered``, a module with ``@main``'s arguments) differs
    from the interpreter's beyond noise, and if so, under which of ``options`` (default
    :data:`CANDIDATES`) it does not (module docstring). ``flags``: the XLA flags every
    compile starts from (default: this process's ``XLA_FLAGS``); ``tolerance`` as
    :func:`si.compare` takes it; ``jobs``: child processes at a time; ``timeout``: seconds
    a compile and run may take (longer: it gave no value)."""
    platform = interpreter_platform() if is_jax_function(target) else None
    call = prepare(target, args, kwargs, function, platform=platform)
    if call.function != "main":
        raise InterpreterError(f"codegen_options compiles a module's @main, not @{call.function}")
    text = module_text(call.program)
    if HOST_CALLBACK in text or call.program.host_callbacks:
        raise InterpreterError("this program calls host callbacks, which XLA compiled in a child process cannot "
                               f"call: codegen_options needs a program without them ({EQUINOX_CHECKS})")
    base = _environment_flags() if flags is None else " ".join(flags.split())
    ours = call.run()
    judge = _Judge(call, ours, tolerances(tolerance))
    default = judge(_compile("", base, text, call.arguments, timeout))
    report = CodegenReport(base, default, [], tuple(call.program.function("main").result_name(i)
                                                    for i in range(len(ours))))
    if report.differs:
        candidates = CANDIDATES if options is None else tuple(options)
        with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
            compiled = list(pool.map(lambda flag: _compile(flag, f"{base} {flag}".strip(), text, call.arguments,
                                                           timeout), candidates))
        report.options = [judge(run) for run in compiled]
    return report


def _compile(flag: str, flags: str, text: str, arguments: list, timeout: float) -> tuple[FlagRun, list | None]:
    """``text``'s ``@main`` compiled and run on XLA's CPU in a fresh child whose
    ``XLA_FLAGS`` are ``flags`` (within ``timeout`` seconds): the run (its status
    REJECTED or FAILED where it gave no values) and the results."""
    backend = JaxChildBackend("cpu", flags, timeout)
    try:
        return FlagRun(flag, flags, DIFFERS), backend(text, arguments)
    except BackendCrash as crash:
        if UNKNOWN_FLAG in crash.message:
            return FlagRun(flag, flags, REJECTED, message=_last_line(crash.message[crash.message.index(UNKNOWN_FLAG):])), None
        return FlagRun(flag, flags, FAILED, message=f"crashed: {_last_line(crash.message)}"), None
    except BackendError as error:
        return FlagRun(flag, flags, FAILED, message=f"{error.kind}: {_last_line(error.message)}"), None
    finally:
        backend.close()


class _Judge:
    """Judges a compile's results against the interpreter's ``ours``: within tolerance,
    within the noise estimated for the whole program (estimated once, when first
    needed), or beyond it (module docstring)."""

    def __init__(self, call, ours: list, table: dict):
        self.call, self.ours, self.table = call, ours, table
        self._runs: list | None = None

    def __call__(self, compiled: tuple[FlagRun, list | None]) -> FlagRun:
        run, theirs = compiled
        if theirs is None:
            return run
        if len(theirs) != len(self.ours):
            run.differences = [Difference(problem=f"XLA CPU returned {len(theirs)} results, the interpreter "
                                                  f"{len(self.ours)}")]
            return run
        run.differences = [difference(o, t, self.table) for o, t in zip(self.ours, theirs)]
        if all(d is None for d in run.differences):
            run.status = EQUAL
        elif all(d is None or (d.problem is None and self._within_noise(i, t))
                 for i, (d, t) in enumerate(zip(run.differences, theirs))):
            run.status = NOISE
        return run

    def _within_noise(self, index: int, theirs) -> bool:
        if self._runs is None:
            self._runs = noise_runs(lambda listener: self.call.run(listeners=[listener]),
                                    self.call.program.semantics, self.ours)
        bound, alternatives = spread_allowance(self.ours[index], [run[index] for run in self._runs])
        return bool(within(np.asarray(self.ours[index]), np.asarray(theirs), bound, alternatives).all())


def _environment_flags() -> str:
    """This process's ``XLA_FLAGS`` but the number of host devices (which changes no value)."""
    return " ".join(flag for flag in os.environ.get("XLA_FLAGS", "").split()
                    if flag.partition("=")[0] not in DEVICE_COUNT_FLAGS)


def _last_line(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[-1] if lines else message
