"""A scoreboard of backends against StableHLO's own test files and a fixed generator
campaign (``stablehlo-interp conform --scoreboard OUT.md``; docs/scoreboard.md is one).

For each backend, each test of the files gets one outcome (:data:`OUTCOMES`): the
conformance runner's verdict (conform.py), a backend error split by what the backend
said (it cannot compile the program, it crashed, it failed to run it). The interpreter's
own column is ``stablehlo-interp test``'s verdicts. A file counts under the op family of
its first op that is not a constant, a check or a return (the family is the module of
ops/ that implements the op; ``chlo`` ops under ``chlo``), so a row says how a backend
does on, say, every reduction the files test. Each failure is listed with its finding
in docs/findings.md where one explains it (:data:`FINDINGS`), and the page says which
versions and which commands made it. A backend's results can also come from a JSON
file that ``conform --json`` wrote elsewhere (``NAME=results:FILE``): a TPU's, recorded
where a TPU was lent.

The generator campaign is :func:`~stablehlo_interp.tools.fuzz.campaign.fuzz` with a fixed
seed and count, on each backend: how many programs agree, and the findings by cause.
"""

from __future__ import annotations

import collections
import datetime
import functools
import json
import pathlib
import re
from dataclasses import dataclass, field

from .. import ops
from .conform import CANNOT_PARSE, FAIL, INTERPRETER_ERROR, PASS, ConformReport, ConformResult
from .testfile import DISABLED as TEST_DISABLED
from .testfile import FAILED as TEST_FAILED
from .testfile import PASSED as TEST_PASSED
from .testfile import split_modules

PASSED, FAILED, CANNOT_COMPILE, CRASH, RUN_ERROR, NOT_JUDGED = (
    "pass", "fail", "cannot compile", "crash", "run error", "not judged")
OUTCOMES = (PASSED, FAILED, CANNOT_COMPILE, CRASH, RUN_ERROR, NOT_JUDGED)
# Ops that say nothing of what a test file is about.
_SCAFFOLDING = re.compile(r"^(stablehlo\.constant|check\.\w+|func\.\w+|stablehlo\.return|stablehlo\.custom_call)$")
# Ops that move a test's inputs into place more often than they are what it tests.
_PLUMBING = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.convert", "stablehlo.iota"})
_OP = re.compile(r"(?:^|[\s=(\"])((?:stablehlo|chlo|check|func)\.[a-z_0-9]+)\b")

# Failures explained in docs/: (backend, a pattern searched in "FILE @TEST: MESSAGE", outcome, link).
FINDINGS = (
    ("tpu", r"", CRASH, "findings.md#tpu-compiler"),
    ("tpu|cpu|iree.*", r"unregistered dialect", CANNOT_COMPILE, "findings.md#interpreter-only-tests"),
    ("tpu|cpu", r"quantize|quantized/|!quant", CANNOT_COMPILE, "findings.md#quantized-ops-not-translated"),
    ("tpu", r"X\{64\|128\}|FFT: c128", CANNOT_COMPILE, "findings.md#tpu-compiler"),
    ("tpu", r"float64|complex128|_f64|_c128|f64\b", FAILED, "findings.md#tpu-f64"),
    ("tpu", r"(ceil|floor)", FAILED, "findings.md#tpu-subnormals"),
    ("tpu", r"conv|triangular_solve|dot", FAILED, "findings.md#tpu-matmul-precision"),
    ("tpu", r"cosh|sinh|tanh|exp(?!ect)|log|pow|erf|gamma|asin|acos|atan", FAILED, "findings.md#tpu-transcendentals"),
    ("cpu", r"", FAILED, "conformance.md#xla-cpu-against-stablehlos-test-files"),
    ("cpu|tpu", r"", CANNOT_COMPILE, "conformance.md#xla-cannot-compile"),
    ("iree.*", r"", FAILED, "findings.md#wrong-values"),
    ("iree.*", r"Unsupported VM Buffer", RUN_ERROR, "findings.md#iree-runtime-dtypes"),
    ("iree.*", r"", CANNOT_COMPILE, "findings.md#programs-iree-cannot-compile"),
    ("reference", r"Can't cast unknown element type", CRASH, "findings.md#reference-binding-types"),
    ("reference", r"chlo[./]", CRASH, "findings.md#reference-chlo"),
    ("reference", r"Unsupported op: interpreter\.print", CRASH, "findings.md#reference-print"),
    ("reference", r"rendezvous|replica_id|partition_id", CRASH, "findings.md#reference-collectives"),
)


def outcome(result: ConformResult) -> str:
    """One of :data:`OUTCOMES` for a conformance result."""
    if result.verdict == PASS:
        return PASSED
    if result.verdict == FAIL:
        return FAILED
    if result.verdict in (CANNOT_PARSE, INTERPRETER_ERROR):
        return NOT_JUDGED
    if result.message.startswith("cannot compile"):
        return CANNOT_COMPILE
    if result.message.startswith("crashed") or "process running this file died" in result.message:
        return CRASH
    return RUN_ERROR


def family_of(path: str) -> str:
    """The op family a test file is about: that of the op its name names (``add_float32...``,
    ``interpret/while.mlir``), else of its first op that is not scaffolding or plumbing."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    name = pathlib.PurePath(path).name
    if name.endswith("_chlo.mlir"):
        return "chlo"
    ops_used = [op for _, part in split_modules(text) for op in _OP.findall(part) if not _SCAFFOLDING.match(op)]
    named = [op for op in ops_used if name.startswith(op.split(".", 1)[1] + "_") or name == op.split(".", 1)[1] + ".mlir"]
    useful = [op for op in ops_used if op not in _PLUMBING]
    for candidates in (named, useful, ops_used):
        if candidates:
            return _family_of_op(candidates[0])
    own = _op_families().get(f"stablehlo.{name.split('_')[0].removesuffix('.mlir')}")
    return own or "unknown"


def _family_of_op(name: str) -> str:
    return "chlo" if name.startswith("chlo.") else _op_families().get(name, "other")


@functools.cache
def _op_families() -> dict:
    """``{op name: the module of ops/ that registers it}``, read from the modules' text (an
    element-wise op's builder is made in engine/dtypes.py, registered in its family's module)."""
    found: dict = {}
    for family in ops.FAMILIES:
        text = (pathlib.Path(ops.__file__).parent / f"{family}.py").read_text(encoding="utf-8")
        for registration in re.findall(r"(?<![\w.])op\(([^)]*)\)", text):   # @op(...) and op(...)(builder)
            for name in re.findall(r'"((?:stablehlo|sdy|check|interpreter)\.[a-z_0-9]+)"', registration):
                found.setdefault(name, family)
    return found


@dataclass
class Column:
    """One backend's outcomes: by family, the count of each outcome, and every test that
    did not pass, with its finding."""

    name: str
    description: str
    by_family: dict = field(default_factory=lambda: collections.defaultdict(collections.Counter))
    failures: list = field(default_factory=list)   # (file, test, outcome, message, finding link)
    generator: str | None = None                   # the campaign's line, where one ran
    files: set = field(default_factory=set)        # the test files it ran

    def add(self, file: str, test: str | None, result_outcome: str, message: str, family: str) -> None:
        self.by_family[family][result_outcome] += 1
        if result_outcome != PASSED:
            self.failures.append((file, test, result_outcome, message,
                                  finding_for(self.name, f"{file} @{test}: {message}", result_outcome)))

    def totals(self) -> collections.Counter:
        total: collections.Counter = collections.Counter()
        for counts in self.by_family.values():
            total.update(counts)
        return total


def finding_for(backend: str, failure: str, result_outcome: str) -> str | None:
    """The link (in docs/) to the finding that explains a failure (``FILE @TEST: MESSAGE``), or None."""
    for backend_pattern, pattern, finding_outcome, link in FINDINGS:
        if finding_outcome == result_outcome and re.fullmatch(backend_pattern, backend) and re.search(pattern, failure):
            return link
    return None


def column_from_conform(name: str, report: ConformReport | dict, description: str, families: "Families") -> Column:
    """A column from a conformance report (or its JSON, as ``conform --json`` writes it), of
    the files ``families`` knows (results written elsewhere may cover others)."""
    column = Column(name, description)
    results = report["results"] if isinstance(report, dict) else [r.__dict__ for r in report.results]
    for entry in results:
        result = ConformResult(**{key: value for key, value in entry.items() if key in ConformResult.__dataclass_fields__})
        file = _relative(result.file)
        if file in families.paths:
            column.files.add(file)
            column.add(file, result.test, outcome(result), result.message, families.of(file))
    return column


class Families:
    """The op family of each test file, by its name in its suite (``testdata/...``), found
    once from the file itself (``paths``: those names to the files read)."""

    def __init__(self, paths: dict):
        self.paths: dict = paths
        self._found: dict = {}

    def of(self, file: str) -> str:
        if file not in self._found:
            self._found[file] = family_of(self.paths.get(file, file))
        return self._found[file]


def column_from_testfile(file_results: list, families: Families) -> Column:
    """The interpreter's own column, from ``stablehlo-interp test``'s outcomes (testfile.py;
    files upstream disabled left out, as conform leaves them out)."""
    column = Column("interpreter", "this interpreter, `stablehlo-interp test`")
    for file_result in file_results:
        file = _relative(file_result.file)
        column.files.add(file)
        for result in file_result.outcomes:
            if result.verdict == TEST_DISABLED:
                continue
            status = {TEST_PASSED: PASSED, TEST_FAILED: FAILED}.get(result.verdict, NOT_JUDGED)
            column.add(file, result.test, status, result.message or "", families.of(file))
    return column


def _relative(path: str) -> str:
    """A test file's path from its suite's folder (``interpret/add.mlir``, ``testdata/...``)."""
    parts = pathlib.PurePath(path).parts
    for anchor in ("interpret", "testdata"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor):])
    return pathlib.PurePath(path).name


def markdown(columns: list[Column], commands: list[str], versions: list[str], files: int) -> str:
    """The scoreboard page."""
    families = sorted({family for column in columns for family in column.by_family})
    lines = ["# Scoreboard: backends against StableHLO's test files", "",
             f"Each test of {files} of StableHLO's interpreter test files (`interpret/` and `testdata/`), "
             "run on each backend with its checks turned into results and judged by the same checks "
             "(docs/conformance.md). Generated by `stablehlo-interp conform --scoreboard` "
             f"on {datetime.date.today().isoformat()}; the commands and versions are at the end.", "",
             "## Totals", "",
             "| backend | " + " | ".join(OUTCOMES) + " | tests | files |", "|---|" + "---:|" * (len(OUTCOMES) + 2)]
    for column in columns:
        totals = column.totals()
        lines.append(f"| {column.name} | " + " | ".join(str(totals[o]) for o in OUTCOMES)
                     + f" | {sum(totals.values())} | {len(column.files)} |")
    lines += ["", "Outcomes: **pass** (the backend's values pass the file's checks), **fail** (they do not), "
              "**cannot compile** (the backend refuses the program), **crash** (its compiler or runtime died), "
              "**run error** (it compiled the program and failed to run it), **not judged** (the interpreter could "
              "not load or run the test, so there is no verdict on the backend).", ""]
    if any(column.generator for column in columns):
        lines += ["## A fixed generator campaign", ""]
        lines += [f"* **{column.name}**: {column.generator}" for column in columns if column.generator]
        lines.append("")
    lines += ["## By op family", "", "pass / tests for each backend; a family is the module of ops/ that "
              "implements the first op each file tests.", "",
              "| family | " + " | ".join(column.name for column in columns) + " |",
              "|---|" + "---:|" * len(columns)]
    for family in families:
        cells = []
        for column in columns:
            counts = column.by_family.get(family)
            cells.append(f"{counts[PASSED]} / {sum(counts.values())}" if counts else "")
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    lines += ["", "## What did not pass", ""]
    for column in columns:
        lines += [f"### {column.name}", "", column.description, ""]
        if not column.failures:
            lines += ["Everything passed.", ""]
            continue
        grouped: dict = collections.defaultdict(list)
        for file, test, result_outcome, message, anchor in column.failures:
            grouped[(result_outcome, anchor)].append((file, test, message))
        for (result_outcome, anchor), entries in sorted(grouped.items(), key=lambda item: (item[0][0], item[0][1] or "")):
            where = f" — [finding]({anchor})" if anchor else " — no finding yet"
            lines.append(f"* **{result_outcome}**, {len(entries)} test(s){where}:")
            for file, test, message in entries[:12]:
                short = " ".join(message.split())[:160]
                lines.append(f"  * `{file}`{' @' + test if test else ''}: {short}")
            if len(entries) > 12:
                lines.append(f"  * … and {len(entries) - 12} more")
        lines.append("")
    lines += ["## How it was made", "", "Versions:", ""] + [f"* {v}" for v in versions]
    # a bash block: shown, not run by the documentation's tests (it takes an hour)
    lines += ["", "Commands:", "", "```bash"] + commands + ["```", ""]
    return "\n".join(lines)


def build(files: list, against: list, campaign: int = 0, command: str = "", jobs: int = 1) -> str:
    """The scoreboard page of ``files`` (test files) on the interpreter and on each of
    ``against``: ``(name, spec)`` with ``spec`` a backend as ``--backend`` takes it, or
    ``results:FILE``, a ``conform --json`` file written elsewhere (a TPU's, where one was
    lent). ``campaign``: programs of the generator campaign (seed 0) on each live backend.
    ``jobs``: worker processes for each backend's files and programs."""
    import jax
    import jaxlib

    from ..backends import resolve
    from ..tools.fuzz.campaign import fuzz
    from .conform import conform
    from .testfile import run_files

    families = Families({_relative(str(f)): str(f) for f in files})
    columns = [column_from_testfile(run_files(files), families)]
    versions = [f"jax {jax.__version__}, jaxlib {jaxlib.__version__} (XLA's CPU; the MLIR bindings this interpreter "
                "parses with; the C++ reference interpreter)"]
    commands = [command] if command else []
    for name, spec in against:
        if spec.startswith("results:"):
            recorded = load_results(spec.removeprefix("results:"))
            columns.append(column_from_conform(name, recorded, recorded.get("recorded", f"results of {spec}"), families))
            if recorded.get("recorded"):
                versions.append(f"{name}: {recorded['recorded']}")
            continue
        backend = resolve(spec)
        report = conform(files, backend, jobs=jobs)
        column = column_from_conform(name, report, _describe(backend), families)
        if campaign:
            found = fuzz(backend, seed=0, count=campaign, jobs=jobs, reduce=False)
            causes = collections.Counter(finding.cause for finding in found.findings)
            column.generator = (f"{found.agreed} of {found.count} programs agree (seed 0); findings: "
                                + (", ".join(f"{n} {cause}" for cause, n in causes.most_common()) or "none"))
        columns.append(column)
        versions += [f"{name}: {sentence}" for sentence in backend.settings] + _backend_version(spec)
    return markdown(columns, commands, versions, len(files))


def _describe(backend) -> str:
    return {"reference": "StableHLO's C++ reference interpreter in jaxlib (`stablehlo.eval_module`)",
            "cpu": "XLA's CPU backend through JAX"}.get(backend.name, f"`--backend {backend.name}`")


def _backend_version(spec: str) -> list:
    if spec.startswith("iree"):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return [f"{spec}: iree-base-compiler {version('iree-base-compiler')}, iree-base-runtime "
                    f"{version('iree-base-runtime')}"]
        except PackageNotFoundError:
            return []
    return []


def load_results(path) -> dict:
    """A ``conform --json`` file's contents."""
    return json.loads(pathlib.Path(path).read_text())
