"""A fuzzing campaign: ``count`` generated programs checked on a backend, each finding
reduced, deduplicated and written out as a runnable program with its inputs.

    report = si.fuzz(backend="cpu", seed=0, count=200, jobs=2, out="fuzz-out")
    print(report.markdown())

Program ``i`` of a campaign with ``seed`` S is generated from the seed
:func:`program_seed`\\ (S, i): the same programs, findings and report on every
run and machine, with any number of jobs. The campaign runs in two rounds: every
program is checked; the findings are grouped by what they show before reduction
(cause, op, element type, the backend's message), and the first program of each
group is reduced (tools/fuzz/reduce.py); reduced findings showing the same
``(op, element type, cause)`` are one finding, which counts its programs (for a
backend that cannot compile, crashes or fails to run: the same op, cause and
message, whatever the element type).

The programs are checked in ``jobs`` worker processes (or as tasks on the Ray
cluster at ``ray``); a worker killed while checking a program (a backend that
aborts the process: XLA CPU does, on some integer divisions) makes that program
a ``crashed`` finding and the campaign goes on. Reductions run in this process,
``jobs`` at a time, each checking its candidates in a child process of its own.
The interpreter's side never takes the campaign down.

Every check has a deadline of ``timeout`` seconds (tools/fuzz/check.py): a
program still running then (a ``while`` that never ends, on either side) is a
``timed out`` finding, grouped by the side that was running and not reduced (each
candidate would cost the whole deadline). A worker stuck in a backend's native
code, past the deadline by :data:`~.check.GRACE` seconds, ends itself; its
program is checked once more in a child process that is killed at the deadline,
which tells a timeout from a crash. In a reduction, a candidate that times out
does not show the finding.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import pathlib
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...ir.process_pool import ordered_map
from ...backends import resolve
from .check import (COMPILE_FAILURE, CRASH, DEFAULT_TIMEOUT, GRACE, PROCESS_DIED, RUN_FAILURE, TIMEOUT, IsolatedCheck,
    Outcome, Timings, check, message_stem)
from .generate import generate
from .reduce import reduce_finding


# Causes a finding is told apart by the backend's message rather than by element type.
MESSAGE_CAUSES = (COMPILE_FAILURE, CRASH, RUN_FAILURE, TIMEOUT)


def program_seed(seed: int, index: int) -> int:
    """The generator's seed of program ``index`` of a campaign with ``seed``."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1, np.uint64)[0] >> 1)


@dataclass
class Finding:
    """One deduplicated finding: its key ``(op, element type, cause)``, the reduced program
    and arguments that show it, what the check said of them, and the programs of the
    campaign that showed it (their indices)."""

    op: str
    element_type: str
    cause: str
    ours: bool                  # the interpreter's to answer for (an error or an unsupported op)
    text: str                   # the reduced program
    arguments: list
    detail: str
    programs: list = field(default_factory=list)
    original_ops: int = 0
    reduced_ops: int = 0
    checks: int = 0

    @property
    def key(self) -> tuple:
        """``(op, element type, cause)``; for a backend's failure to compile or run, or a
        crash, ``(op, its message's stem, cause)``: one finding however many element
        types meet the same refusal (every quantized type, say)."""
        if self.cause in MESSAGE_CAUSES:
            return (self.op, message_stem(self.detail), self.cause)
        return (self.op, self.element_type, self.cause)

    def summary(self) -> dict:
        return {"op": self.op, "element_type": self.element_type, "cause": self.cause, "ours": self.ours,
                "programs": self.programs, "original_ops": self.original_ops, "reduced_ops": self.reduced_ops,
                "program": self.text, "detail": self.detail,
                "arguments": [f"{np.asarray(a).dtype}{list(np.shape(a))}" for a in self.arguments]}


@dataclass
class FuzzReport:
    backend: str
    settings: tuple
    seed: int
    count: int
    agreed: int
    findings: list
    timings: dict
    seconds: float

    @property
    def programs_per_second(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    def summary(self) -> dict:
        return {"backend": self.backend, "settings": list(self.settings), "seed": self.seed, "count": self.count,
                "agreed": self.agreed, "seconds": round(self.seconds, 3), "timings": self.timings,
                "findings": [finding.summary() for finding in self.findings]}

    def markdown(self) -> str:
        lines = [f"# fuzz: the interpreter and {self.backend}", "",
                 f"{self.count} programs from seed {self.seed}: {self.agreed} agree (bit for bit, or within "
                 f"every op's rounding bound), {self.count - self.agreed} show {len(self.findings)} distinct "
                 f"findings ({self.seconds:.1f} s).", ""]
        if self.settings:
            lines += ["Backend settings that change semantics:", ""] + [f"* {s}" for s in self.settings] + [""]
        phases = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in self.timings.items())
        lines += [f"Time: {phases}.", ""]
        if self.findings:
            lines += ["| # | op | element type | cause | whose | programs | ops before → after |",
                      "|---|---|---|---|---|---|---|"]
            for n, f in enumerate(self.findings):
                lines.append(f"| {n} | `{f.op}` | {f.element_type} | {f.cause} | "
                             f"{'interpreter' if f.ours else self.backend} | {len(f.programs)} | "
                             f"{f.original_ops} → {f.reduced_ops} |")
            for n, f in enumerate(self.findings):
                lines += ["", f"## {n}: `{f.op}` {f.element_type}: {f.cause}", "", "```mlir", f.text.rstrip(), "```",
                          "", "Arguments: " + ", ".join(_argument_text(a) for a in f.arguments), "", "```",
                          f.detail.strip()[:2000], "```"]
        return "\n".join(lines) + "\n"

    def write(self, out) -> pathlib.Path:
        """``out/report.md``, ``out/report.json`` and per finding a folder with
        ``program.mlir``, ``arg0.npy`` ... and ``finding.json``:
        ``stablehlo-interp run program.mlir -i arg0.npy ...`` runs it."""
        out = pathlib.Path(out)
        out.mkdir(parents=True, exist_ok=True)
        for n, finding in enumerate(self.findings):
            folder = out / f"{n:03d}-{_slug(finding.op)}-{_slug(finding.element_type)}-{_slug(finding.cause)}"
            folder.mkdir(exist_ok=True)
            (folder / "program.mlir").write_text(finding.text)
            for i, argument in enumerate(finding.arguments):
                np.save(folder / f"arg{i}.npy", np.asarray(argument))
            (folder / "finding.json").write_text(json.dumps(finding.summary(), indent=1))
        (out / "report.md").write_text(self.markdown())
        (out / "report.json").write_text(json.dumps(self.summary(), indent=1))
        return out


def _argument_text(argument) -> str:
    argument = np.asarray(argument)
    values = np.array2string(argument.reshape(-1)[:8], separator=", ") if argument.size else "[]"
    return f"{argument.dtype}{list(argument.shape)} {values}"


def _slug(text) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", str(text)).strip("_")[:40] or "none"


def fuzz(backend: str | Callable = "cpu", seed: int = 0, count: int = 100, jobs: int = 1,
         out: str | os.PathLike | None = None, max_ops: int = 12,
         ops: tuple | None = None, element_types: tuple | None = None, reduce: bool = True,
         budget: int = 100, ray: str | None = None, timeout: float | None = DEFAULT_TIMEOUT) -> FuzzReport:
    """Run a campaign (module docstring). ``backend``: what
    :func:`~stablehlo_interp.backends.resolve` accepts (with ``jobs > 1`` or
    ``ray``, something that pickles: a name, or a module-level callable); ``ops``,
    ``element_types``: restrict the generator (:func:`~.generate.generate`);
    ``budget``: checks per reduction; ``out``: a folder for the report and the findings;
    ``timeout``: seconds each check of a program may take (None: no deadline)."""
    start = time.perf_counter()
    timings = Timings()
    settings = tuple(getattr(resolve(backend), "settings", ()))
    name = resolve(backend).name
    seeds = [program_seed(seed, i) for i in range(count)]
    generator = functools.partial(generate, max_ops=max_ops, ops=ops, element_types=element_types)
    task = functools.partial(_check_program, backend=backend, generator=generator, timeout=timeout)
    crashed = functools.partial(_crashed, backend=backend, generator=generator, timeout=timeout)
    results = list(_map(task, seeds, jobs, ray, on_crash=crashed))
    groups: dict = {}
    for index, (outcome, spent) in enumerate(results):
        for phase, seconds in spent.items():
            timings.add(phase, seconds)
        if outcome is not None:
            groups.setdefault(_group(outcome), []).append(index)
    reducer = functools.partial(_reduce_program, backend=resolve(backend), generator=generator, reduce=reduce,
                                budget=budget, timeout=timeout)
    representatives = [(seeds[indices[0]], results[indices[0]][0]) for indices in groups.values()]
    findings: dict = {}
    with concurrent.futures.ThreadPoolExecutor(max(jobs, 1)) as threads:
        reduced = list(threads.map(reducer, representatives))
    for indices, (finding, spent) in zip(groups.values(), reduced):
        for phase, seconds in spent.items():
            timings.add(phase, seconds)
        kept = findings.setdefault(finding.key, finding)
        kept.programs = sorted(set(kept.programs) | set(indices))
    report = FuzzReport(name, settings, seed, count, sum(outcome is None for outcome, _ in results),
                        sorted(findings.values(), key=lambda f: f.programs[0]),
                        {phase: round(seconds, 3) for phase, seconds in timings.items()},
                        time.perf_counter() - start)
    if out is not None:
        report.write(out)
    return report


def _group(outcome: Outcome) -> tuple:
    return (outcome.cause, outcome.op, outcome.element_type, message_stem(outcome.detail)
            if outcome.op is None else "")


def _check_program(program_seed: int, backend, generator, timeout):
    """Program ``program_seed`` checked in this worker; a check stuck past its deadline
    in native code (no alarm gets through) ends the worker, and ``_crashed`` tells why."""
    timings = Timings()
    start = time.perf_counter()
    generated = generator(program_seed)
    timings.add("generation", time.perf_counter() - start)
    watchdog = None
    if timeout is not None:
        watchdog = threading.Timer(timeout + GRACE, os._exit, (1,))
        watchdog.daemon = True
        watchdog.start()
    try:
        return check(generated.text, generated.arguments, resolve(backend), timings, timeout), dict(timings)
    finally:
        if watchdog is not None:
            watchdog.cancel()


def _crashed(program_seed: int, backend, generator, timeout):
    """The outcome of a program whose worker died: checked again in a child process
    killed at the deadline, ``crashed`` or ``timed out``."""
    generated = generator(program_seed)
    checker = IsolatedCheck(timeout)
    try:
        outcome = checker(generated.text, generated.arguments, resolve(backend))
    finally:
        checker.close()
    return (outcome if outcome is not None and outcome.cause in (CRASH, TIMEOUT)
            else Outcome(CRASH, None, None, PROCESS_DIED)), {}


def _reduce_program(item, backend, generator, reduce, budget, timeout):
    """The finding of program ``item = (seed, outcome)``, reduced with every candidate
    checked in a child process (a candidate may crash the backend, or run past the
    deadline); a timeout is not reduced."""
    program_seed, outcome = item
    generated = generator(program_seed)
    timings = Timings()
    program, arguments, checks = generated.program, generated.arguments, 0
    if reduce and outcome.cause != TIMEOUT:
        checker = IsolatedCheck(timeout)
        try:
            reduced = reduce_finding(program, arguments, outcome, backend, budget, timings, checker)
        finally:
            checker.close()
        program, arguments, outcome, checks = reduced.program, reduced.arguments, reduced.outcome, reduced.checks
    first = program.outputs[0] if program.outputs else None
    maker = program.op_of(first) if first is not None else None
    op = outcome.op or (program.ops[maker].name if maker is not None else "module")
    element_type = outcome.element_type or (program.values[first].element if first is not None else "-")
    finding = Finding(op, element_type, outcome.cause, outcome.ours, program.text(), arguments, outcome.detail,
                      original_ops=len(generated.program.ops), reduced_ops=len(program.ops), checks=checks)
    return finding, dict(timings)


def _map(function, items: list, jobs: int, ray: str | None, on_crash):
    if ray is not None:
        yield from _ray_map(function, items, ray, on_crash)
    else:
        yield from ordered_map(function, items, jobs, on_crash=on_crash)


def _call(function, item):
    return function(item)


def _ray_map(function, items: list, address: str, on_crash):
    """``function`` over ``items`` as Ray tasks on the cluster at ``address`` (``"local"``:
    a Ray instance started here); a task whose worker died yields ``on_crash(item)`` (an
    exception the task raised is raised here). The workers import ``function`` and the
    backend by name: stablehlo_interp and a backend's module must be installed there."""
    import ray

    if not ray.is_initialized():
        ray.init(address=None if address == "local" else address, include_dashboard=False,
                 log_to_driver=False)
    remote = ray.remote(_call)   # (ray.remote takes functions, not a functools.partial)
    futures = [remote.remote(function, item) for item in items]
    for item, future in zip(items, futures):
        try:
            yield ray.get(future)
        except ray.exceptions.WorkerCrashedError:
            yield on_crash(item)
